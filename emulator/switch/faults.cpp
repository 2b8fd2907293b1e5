#include "switch/faults.h"

#include <cstdlib>
#include <sstream>

namespace ulnic::sw {

namespace {
constexpr double kMaxDelayUs = 3600e6;  // an hour: far from overflowing a release time
}  // namespace

Result<FaultSpec> parse_faults(const std::string& spec) {
  FaultSpec f;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) return fail("fault '" + item + "': expected name=value");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    std::string unit = end ? end : "";
    if (end == v.c_str()) return fail("fault '" + item + "': not a number");
    // The range checks are written to fail for NaN too, and keep the
    // conversions to integers below defined (tests/fuzz: "drop=nan" passed as
    // a probability, "delay=1e308" and "seed=-1" overflowed uint64_t).
    auto probability = [&](double& out) -> Result<void> {
      if (!unit.empty() || !(x >= 0 && x <= 1)) return fail("fault '" + item + "': a probability 0..1");
      out = x;
      return {};
    };
    Result<void> r;
    if (k == "drop") r = probability(f.drop);
    else if (k == "corrupt") r = probability(f.corrupt);
    else if (k == "dup" || k == "duplicate") r = probability(f.duplicate);
    else if (k == "reorder") r = probability(f.reorder);
    else if (k == "delay") {
      double us = unit == "ms" ? x * 1000 : x;
      if (!(us >= 0 && us <= kMaxDelayUs) || (unit != "us" && unit != "ms" && !unit.empty()))
        return fail("fault '" + item + "': e.g. delay=200us (at most an hour)");
      f.delay_us = uint64_t(us);
    } else if (k == "seed") {
      if (!(x >= 0 && x < 18446744073709551616.0)) return fail("fault '" + item + "': a seed 0..2^64-1");
      f.seed = uint64_t(x);
    } else {
      return fail("unknown fault '" + k + "' (drop, corrupt, dup, reorder, delay, seed)");
    }
    if (!r) return std::unexpected(r.error());
  }
  return f;
}

void LinkFaults::seed(uint64_t seed, uint32_t src, uint32_t dst) {
  state_ = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(src) << 32 | dst) ^ 0xD1B54A32D192ED03ull;
}

double LinkFaults::uniform() {
  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

Verdict LinkFaults::decide(const FaultSpec& s) {
  Verdict v;
  // One draw per fault kind, always, so each kind's stream is stable.
  double d = uniform(), c = uniform(), at = uniform(), u = uniform(), r = uniform();
  v.drop = d < s.drop;
  v.corrupt = c < s.corrupt;
  v.corrupt_at = uint32_t(at * 4096.0 * 16);
  v.duplicate = u < s.duplicate;
  v.reorder = r < s.reorder;
  return v;
}

}  // namespace ulnic::sw
