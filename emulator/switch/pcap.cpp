#include "switch/pcap.h"

#include <sys/time.h>

#include <cerrno>

namespace ulnic::sw {

namespace {
struct GlobalHeader {
  uint32_t magic = 0xa1b2c3d4;  // microsecond timestamps, our byte order
  uint16_t major = 2, minor = 4;
  int32_t thiszone = 0;
  uint32_t sigfigs = 0;
  uint32_t snaplen = 65535;
  uint32_t linktype = kDltUser0;
};
struct RecordHeader {
  uint32_t sec, usec, caplen, len;
};
}  // namespace

PcapWriter::~PcapWriter() {
  if (f_) std::fclose(f_);
}

Result<void> PcapWriter::open(const std::string& path, uint32_t snaplen) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) return fail_errno("cannot write " + path, errno);
  snaplen_ = snaplen < 64 ? 64 : snaplen;
  GlobalHeader h;
  h.snaplen = snaplen_;
  std::fwrite(&h, sizeof h, 1, f_);
  return {};
}

void PcapWriter::write(const void* data, uint32_t len) {
  if (!f_) return;
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  uint32_t cap = len < snaplen_ ? len : snaplen_;
  RecordHeader r{uint32_t(tv.tv_sec), uint32_t(tv.tv_usec), cap, len};
  std::fwrite(&r, sizeof r, 1, f_);
  std::fwrite(data, 1, cap, f_);
}

void PcapWriter::flush() {
  if (f_) std::fflush(f_);
}

}  // namespace ulnic::sw
