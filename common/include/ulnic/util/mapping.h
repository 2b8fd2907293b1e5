// Move-only shared mapping of a file (SRAM, slot and fabric files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ulnic/util/result.h"

namespace ulnic {

class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& o) noexcept;
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  // Maps `size` bytes of the file at `path` MAP_SHARED. The file must be at
  // least that large.
  static Result<Mapping> map_file(const std::string& path, size_t size, bool writable);

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }
  explicit operator bool() const { return addr_ != nullptr; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ulnic
