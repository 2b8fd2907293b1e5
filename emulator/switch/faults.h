// Fault injection on switch links: seeded, per link, reproducible. The
// decision stream of link (src, dst) depends only on the seed and the
// packets that crossed that link, never on other links' traffic.
#pragma once

#include <cstdint>
#include <string>

#include "ulnic/util/result.h"

namespace ulnic::sw {

struct FaultSpec {
  double drop = 0, corrupt = 0, duplicate = 0, reorder = 0;
  uint64_t delay_us = 0;   // every packet held this long
  uint64_t seed = 1;
  bool any() const { return drop > 0 || corrupt > 0 || duplicate > 0 || reorder > 0 || delay_us > 0; }
};

// "drop=0.3,corrupt=0.01,dup=0.01,reorder=0.01,delay=200us,seed=7" (any subset).
Result<FaultSpec> parse_faults(const std::string& spec);

struct Verdict {
  bool drop = false;
  bool corrupt = false;
  uint32_t corrupt_at = 0;   // byte to flip (mod the packet length)
  bool duplicate = false;
  bool reorder = false;      // hold until the next packet on the link has passed
};

class LinkFaults {
 public:
  void seed(uint64_t seed, uint32_t src, uint32_t dst);
  Verdict decide(const FaultSpec& spec);

 private:
  double uniform();
  uint64_t state_ = 0;
};

}  // namespace ulnic::sw
