// Result type for setup code that can fail: a value or a human-readable
// error that says what failed and, where it knows, what to do about it.
#pragma once

#include <expected>
#include <string>
#include <utility>

namespace ulnic {

struct Error {
  std::string message;
};

template <class T = void>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(std::string message) { return std::unexpected(Error{std::move(message)}); }

// "what: strerror(err)"
std::unexpected<Error> fail_errno(const std::string& what, int err);

}  // namespace ulnic
