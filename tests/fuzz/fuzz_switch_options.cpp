// Fuzz target: the switch's option parsers (emulator/switch/faults.*,
// switch.*): fault specs and UDP bridge peers, as given on ulnic-switch's
// command line. The input is "SPEC\nPEER". Invariants: a parser answers
// with a value or an error (never an exception), probabilities are within
// 0..1, and a peer's node range is not empty.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "switch/faults.h"
#include "switch/switch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  std::string spec = in.substr(0, nl), peer = nl == std::string::npos ? "" : in.substr(nl + 1);
  if (auto f = ulnic::sw::parse_faults(spec); f) {
    for (double p : {f->drop, f->corrupt, f->duplicate, f->reorder}) FUZZ_CHECK(p >= 0 && p <= 1);
    // The per-link decisions a spec drives stay in their ranges.
    ulnic::sw::LinkFaults link;
    link.seed(f->seed, 0, 1);
    ulnic::sw::Verdict v = link.decide(*f);
    FUZZ_CHECK(v.corrupt_at < 4096 * 16);
  }
  if (auto p = ulnic::sw::parse_bridge_peer(peer); p) FUZZ_CHECK(p->first <= p->last);
  return 0;
}
