// Packet capture in the classic libpcap format (readable by tcpdump,
// tshark, Wireshark): link type DLT_USER0 (147); each record is one fabric
// packet, wire header and payload. emulator/switch/ulnic.lua dissects it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "ulnic/util/result.h"

namespace ulnic::sw {

constexpr uint32_t kDltUser0 = 147;

class PcapWriter {
 public:
  ~PcapWriter();
  // Records are cut at `snaplen` bytes (the wire header is 64; payloads are
  // rarely worth keeping whole, and captures under load grow fast).
  Result<void> open(const std::string& path, uint32_t snaplen = 128);
  void write(const void* data, uint32_t len);
  void flush();
  bool is_open() const { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
  uint32_t snaplen_ = 128;
};

}  // namespace ulnic::sw
