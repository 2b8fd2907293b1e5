#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>

#include "ulnic/util/fd.h"
#include "ulnic/util/mapping.h"
#include "ulnic/util/result.h"

namespace ulnic {

std::unexpected<Error> fail_errno(const std::string& what, int err) {
  return fail(what + ": " + std::strerror(err));
}

Mapping::Mapping(Mapping&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    this->~Mapping();
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Mapping::~Mapping() {
  if (addr_) ::munmap(addr_, size_);
  addr_ = nullptr;
}

Result<Mapping> Mapping::map_file(const std::string& path, size_t size, bool writable) {
  UniqueFd fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  if (!fd) return fail_errno("cannot open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno("cannot stat " + path, errno);
  if (size_t(st.st_size) < size)
    return fail(path + " is " + std::to_string(st.st_size) + " bytes, expected at least " + std::to_string(size));
  void* a = ::mmap(nullptr, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd.get(), 0);
  if (a == MAP_FAILED) return fail_errno("cannot map " + path, errno);
  Mapping m;
  m.addr_ = a;
  m.size_ = size;
  return m;
}

}  // namespace ulnic
