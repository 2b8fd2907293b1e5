// A small JSON reader for the tools' own needs (QMP replies, status files):
// parses one complete value into a tree. Not for large documents. And the
// one string escape the tools' JSON writers share.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ulnic/util/result.h"

namespace ulnic {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  // Defined out of line: clang (the fuzz build, tests/fuzz) otherwise checks
  // the implicit one while `object`'s pair<string, Json> is still incomplete.
  Json() noexcept;
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;  // in document order

  // Member `key` of an object, or nullptr.
  const Json* get(std::string_view key) const;
  // First string-valued member named `key`, searching depth-first; nullptr if none.
  const Json* find_string(std::string_view key) const;
};

// Parses exactly one JSON value (surrounding whitespace allowed).
Result<Json> parse_json(std::string_view text);

// The inside of a JSON string holding `s`, for the tools' writers (status
// --json, reports, benchmark results): quotes and backslashes escaped,
// control characters written as spaces.
std::string json_escape(std::string_view s);

}  // namespace ulnic
