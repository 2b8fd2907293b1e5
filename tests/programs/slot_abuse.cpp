// slot_abuse: a host program that misbehaves on purpose, for the slots
// integration tests (tests/integration/test_slots.py). Every subcommand prints
// one JSON line with what it saw and exits 0 only if everything it checked held.
//
//   slot_abuse bad-descriptors [--idle-slot K]
//       one descriptor per error case, each completion's status checked; then
//       a valid copy still works and verifies
//   slot_abuse cross-slot
//       two slots in one process: copies into another slot's RemoteWrite
//       region and out of its RemoteRead region, verified
//   slot_abuse dereg-race
//       a long cross-slot copy into a region its owner deregisters meanwhile:
//       no byte of the region may change after the deregistration completed
//   slot_abuse scribble [--seed S] [--writes N] [--reattach R]
//       random 4/8-byte writes into its own SQ and CQ (control words and
//       entries) interleaved with posts and submits; reports the slot state
//   slot_abuse hold [--copies | --export]
//       attaches, prints {"slot": k}, then sleeps (or copies, verified) until
//       killed; --export registers a zeroed 1 MiB RemoteWrite region, prints
//       its key and address, and on SIGTERM reports whether it is still zero
//   slot_abuse remote-copy --slot S --key K --addr A --len L [--seconds T]
//       copies into another process's exported region in a loop; once a copy
//       fails (its owner died), no later copy may succeed
//   slot_abuse fork-hold [--close-fds]
//       attaches, forks; the child keeps the slot mapped (optionally closing
//       every inherited fd, the daemon connection too) and sleeps until killed;
//       the parent prints {"slot": k, "child": pid} and exits
//   slot_abuse raw-attach-version V
//       speaks the attach protocol by hand with ABI version V; prints the reply
//   slot_abuse random-descriptors [--count N] [--seed S] [--nodes K]
//       N (10^6) descriptors of random content -- opcodes (valid ones
//       mostly, and any byte), flags, nodes, slots, keys, addresses at and
//       around its own registrations, lengths -- posted as fast as the SQ
//       takes them; four registered regions of its slot heap sit between
//       canary pages. Checks: every descriptor completed exactly once, the
//       slot is still active, no canary byte changed, a copy still works
//
// Exit: 0 all checks held, 1 a check failed (details in the JSON and on
// stderr), 2 usage.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/abi/attach.h"
#include "ulnic/abi/vi.h"
#include "ulnic/abi/vmmc.h"
#include "ulnic/nic.h"
#include "ulnic/util/json.h"
#include "ulnic/util/unix_socket.h"

namespace abi = ulnic::abi;
using ulnic::Nic;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------- reporting

std::string quote(const std::string& s) { return "\"" + ulnic::json_escape(s) + "\""; }

struct Report {
  explicit Report(std::string m) : mode(std::move(m)) {}
  std::string mode;
  std::vector<std::string> fields;    // "name": value
  std::vector<std::string> failures;  // names (+ details) of failed checks
  uint32_t checks = 0;
  uint32_t expected_bad = 0;          // descriptors that should count as bad_descriptors

  void field(const std::string& name, const std::string& json) { fields.push_back(quote(name) + ": " + json); }
  void field(const std::string& name, uint64_t v) { field(name, std::to_string(v)); }
  void field_str(const std::string& name, const std::string& v) { field(name, quote(v)); }

  bool check(bool ok, const std::string& name, const std::string& detail = "") {
    ++checks;
    if (!ok) {
      std::string f = detail.empty() ? name : name + ": " + detail;
      failures.push_back(f);
      std::fprintf(stderr, "slot_abuse %s: FAILED %s\n", mode.c_str(), f.c_str());
    }
    return ok;
  }

  int finish() {
    std::string out = "{\"mode\": " + quote(mode) + ", \"ok\": " + (failures.empty() ? "true" : "false") +
                      ", \"checks\": " + std::to_string(checks) + ", \"expected_bad\": " + std::to_string(expected_bad);
    for (const auto& f : fields) out += ", " + f;
    out += ", \"failures\": [";
    for (size_t i = 0; i < failures.size(); ++i) out += (i ? ", " : "") + quote(failures[i]);
    out += "]}";
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
    return failures.empty() ? 0 : 1;
  }
};

[[noreturn]] void die(const std::string& mode, const std::string& why) {
  std::fprintf(stderr, "slot_abuse %s: %s\n", mode.c_str(), why.c_str());
  std::printf("{\"mode\": %s, \"ok\": false, \"error\": %s}\n", quote(mode).c_str(), quote(why).c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::unique_ptr<Nic> open_nic(const std::string& mode) {
  auto n = Nic::open();
  if (!n) die(mode, n.error().message);
  return std::move(*n);
}

const char* status_name(int s) {
  static const char* const names[] = {"ok",        "bad_opcode",   "bad_length", "bad_address", "bad_key",
                                      "protection", "bad_slot",    "no_resources", "flushed"};
  if (s < 0) return "no_completion";
  return s < int(sizeof names / sizeof names[0]) ? names[s] : "unknown";
}

// Posts one descriptor and waits for its completion: its status, or -1.
int run_status(Nic& n, const abi::SqEntry& e, abi::CqEntry* out = nullptr, std::string* err = nullptr) {
  auto c = n.run(e, std::chrono::milliseconds(10000));
  if (!c) {
    if (err) *err = c.error().message;
    return -1;
  }
  if (out) *out = *c;
  return c->status;
}

// One error case: the descriptor must complete with `want`.
void expect(Report& r, Nic& n, const std::string& name, const abi::SqEntry& e, int want) {
  abi::CqEntry c{};
  std::string err;
  int got = run_status(n, e, &c, &err);
  if (want != abi::kCqOk) ++r.expected_bad;
  r.check(got == want, name,
          std::string("want ") + status_name(want) + ", got " + status_name(got) + (err.empty() ? "" : " (" + err + ")"));
  if (got >= 0) r.check(c.user_data == e.user_data && c.opcode == e.opcode, name + "/cqe_echo",
                        "user_data or opcode not echoed");
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

abi::SqEntry copy_sqe(const Nic& src_nic, uint32_t src_key, const void* src, const Nic& dst_nic, uint32_t dst_key,
                      const void* dst, uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpCopy;
  e.length = len;
  e.src_slot = src_nic.slot();
  e.src_key = src_key;
  e.src_addr = addr(src);
  e.dst_slot = uint16_t(dst_nic.slot());
  e.dst_key = dst_key;
  e.dst_addr = addr(dst);
  return e;
}

abi::SqEntry register_sqe(const Nic& n, const void* p, uint32_t len, uint32_t access) {
  abi::SqEntry e{};
  e.opcode = abi::kOpRegister;
  e.src_addr = addr(p);
  e.length = len;
  e.access = access;
  e.reg_offset = addr(p) - addr(n.slot_base());
  return e;
}

void fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = uint8_t(x);
  }
}

// Index of the first byte where a and b differ, or -1.
int64_t first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return int64_t(i);
  return -1;
}

std::string diff_detail(const uint8_t* got, const uint8_t* want, size_t n) {
  int64_t d = first_diff(got, want, n);
  if (d < 0) return "";
  char b[96];
  std::snprintf(b, sizeof b, "first difference at byte %" PRId64 " of %zu (got 0x%02x, want 0x%02x)", d, n, got[d],
                want[d]);
  return b;
}

// ----------------------------------------------------------- bad-descriptors

int bad_descriptors(int argc, char** argv) {
  Report r("bad-descriptors");
  int idle_slot = 7;
  for (int i = 0; i < argc; ++i)
    if (std::string(argv[i]) == "--idle-slot" && i + 1 < argc) idle_slot = std::atoi(argv[++i]);
  auto A = open_nic(r.mode), B = open_nic(r.mode);
  Nic& a = *A;
  Nic& b = *B;
  r.field("slot", a.slot());
  r.field("other_slot", b.slot());

  constexpr uint32_t kBuf = 1 << 20;
  auto* src = static_cast<uint8_t*>(a.alloc(kBuf, 4096));
  auto* dst = static_cast<uint8_t*>(a.alloc(kBuf, 4096));
  auto* rw_only = static_cast<uint8_t*>(a.alloc(4096, 4096));
  auto* bbuf = static_cast<uint8_t*>(b.alloc(65536, 4096));
  if (!src || !dst || !rw_only || !bbuf) die(r.mode, "slot heap exhausted");
  auto src_mr = a.register_memory(src, kBuf, abi::kAccessLocal);
  auto dst_mr = a.register_memory(dst, kBuf, abi::kAccessLocal);
  auto rw_mr = a.register_memory(rw_only, 4096, abi::kAccessRemoteWrite);  // no Local
  auto b_mr = b.register_memory(bbuf, 65536, abi::kAccessLocal);           // no Remote*
  if (!src_mr || !dst_mr || !rw_mr || !b_mr) die(r.mode, "register failed");
  const uint32_t ks = src_mr->key, kd = dst_mr->key;
  r.check(ks && kd && ks != kd && rw_mr->key && b_mr->key, "keys_nonzero_distinct");
  fill(src, kBuf, 7);
  std::memset(dst, 0, kBuf);

  auto good = [&](uint32_t len = 4096) { return copy_sqe(a, ks, src, a, kd, dst, len); };
  uint64_t ud = 1000;
  auto with = [&](abi::SqEntry e) {
    e.user_data = ++ud;
    return e;
  };

  // ---- opcode and reserved fields
  {
    abi::SqEntry e{};
    e.opcode = abi::kOpcodeCount;
    expect(r, a, "opcode_count", with(e), abi::kCqBadOpcode);
    e.opcode = 0xff;
    expect(r, a, "opcode_255", with(e), abi::kCqBadOpcode);
    e = abi::SqEntry{};
    e.opcode = abi::kOpNop;
    e.flags = 1;
    expect(r, a, "nop_nonzero_flags", with(e), abi::kCqBadOpcode);
    e = good();
    e.flags = 0x80;
    expect(r, a, "copy_nonzero_flags", with(e), abi::kCqBadOpcode);
    // Informational: the trailing `reserved` word (slot.h documents bad_opcode
    // for "nonzero reserved fields" but names only `flags` as reserved, 0).
    e = abi::SqEntry{};
    e.opcode = abi::kOpNop;
    e.reserved = 1;
    int st = run_status(a, with(e));
    r.field_str("nop_with_reserved_word_status", status_name(st));
    if (st > 0) ++r.expected_bad;
    r.check(dst[0] == 0 && dst[4095] == 0, "copy_nonzero_flags_moved_nothing");
  }
  // ---- keys
  {
    abi::SqEntry e = good();
    e.src_key = 0;
    expect(r, a, "copy_src_key0", with(e), abi::kCqBadKey);
    e = good();
    e.dst_key = 0;
    expect(r, a, "copy_dst_key0", with(e), abi::kCqBadKey);
    e = good();
    e.src_key = ks ^ 0x00a5a500;  // right table index, wrong tag
    expect(r, a, "copy_madeup_key_same_index", with(e), abi::kCqBadKey);
    e = good();
    e.dst_key = (kd & ~0xffu) | 0xee;  // an index nobody registered
    expect(r, a, "copy_madeup_key_free_index", with(e), abi::kCqBadKey);
    e = good();
    e.dst_key = b_mr->key;  // another slot's key used on our own slot
    expect(r, a, "copy_other_slots_key_on_own_slot", with(e), abi::kCqBadKey);
  }
  // ---- lengths and addresses
  {
    abi::SqEntry e = good(200);
    e.src_addr = addr(src + kBuf - 100);
    expect(r, a, "copy_src_past_end", with(e), abi::kCqBadLength);
    e = good(200);
    e.dst_addr = addr(dst + kBuf - 199);
    expect(r, a, "copy_dst_past_end", with(e), abi::kCqBadLength);
    e = good(64);
    e.src_addr = addr(src) - 64;
    expect(r, a, "copy_src_before_start", with(e), abi::kCqBadLength);
    e = good(4096);
    e.src_addr = UINT64_MAX - 100;  // wraps around
    expect(r, a, "copy_src_addr_wraps", with(e), abi::kCqBadLength);
    e = good(0);
    expect(r, a, "copy_length0", with(e), abi::kCqBadLength);
    e = good(abi::kMaxCopyBytes + 1);
    expect(r, a, "copy_length_over_max", with(e), abi::kCqBadLength);
    e = good(0xffffffffu);
    expect(r, a, "copy_length_u32_max", with(e), abi::kCqBadLength);
    e = good(kBuf + 1);  // within kMaxCopyBytes, longer than the region
    expect(r, a, "copy_length_over_region", with(e), abi::kCqBadLength);
  }
  // ---- slots
  {
    abi::SqEntry e = good();
    e.dst_slot = 99;
    expect(r, a, "copy_dst_slot_99", with(e), abi::kCqBadSlot);
    e = good();
    e.src_slot = 99;
    expect(r, a, "copy_src_slot_99", with(e), abi::kCqBadSlot);
    e = good();
    e.dst_slot = 0xffff;
    expect(r, a, "copy_dst_slot_65535", with(e), abi::kCqBadSlot);
    e = good();
    e.src_slot = 0x80000000u;
    expect(r, a, "copy_src_slot_2^31", with(e), abi::kCqBadSlot);
    if (idle_slot >= 0 && uint32_t(idle_slot) != a.slot() && uint32_t(idle_slot) != b.slot()) {
      e = good();
      e.dst_slot = uint16_t(idle_slot);
      expect(r, a, "copy_dst_slot_unattached", with(e), abi::kCqBadSlot);
      e = good();
      e.src_slot = uint32_t(idle_slot);
      expect(r, a, "copy_src_slot_unattached", with(e), abi::kCqBadSlot);
    }
  }
  // ---- protection
  {
    abi::SqEntry e = copy_sqe(a, ks, src, b, b_mr->key, bbuf, 4096);
    expect(r, a, "copy_into_other_slot_without_remote_write", with(e), abi::kCqProtection);
    e = copy_sqe(b, b_mr->key, bbuf, a, kd, dst, 4096);
    expect(r, a, "copy_from_other_slot_without_remote_read", with(e), abi::kCqProtection);
    e = copy_sqe(a, ks, src, a, rw_mr->key, rw_only, 64);
    expect(r, a, "copy_own_region_without_local", with(e), abi::kCqProtection);
    bool untouched = true;
    for (uint32_t i = 0; i < 4096; ++i) untouched &= bbuf[i] == 0;
    r.check(untouched, "other_slot_untouched_after_refused_copies");
  }
  // ---- registration
  {
    uint8_t* heap_page = static_cast<uint8_t*>(a.alloc(8192, 4096));
    if (!heap_page) die(r.mode, "slot heap exhausted");
    abi::SqEntry e = register_sqe(a, heap_page, 4096, abi::kAccessLocal);
    e.reg_offset = 0;  // the slot header
    expect(r, a, "register_offset0_header", with(e), abi::kCqBadAddress);
    e.reg_offset = a.layout().sq_offset;  // the send queue itself
    expect(r, a, "register_send_queue", with(e), abi::kCqBadAddress);
    e.reg_offset = a.layout().cq_offset;
    expect(r, a, "register_completion_queue", with(e), abi::kCqBadAddress);
    e.reg_offset = a.layout().heap_offset - 64;  // straddles the heap start
    e.length = 128;
    expect(r, a, "register_straddles_heap_start", with(e), abi::kCqBadAddress);
    e.reg_offset = a.layout().slot_size - 4096;  // runs past the end of the slot
    e.length = 8192;
    expect(r, a, "register_past_slot_end", with(e), abi::kCqBadAddress);
    e.reg_offset = a.layout().slot_size;
    e.length = 64;
    expect(r, a, "register_at_slot_end", with(e), abi::kCqBadAddress);
    e.reg_offset = UINT64_MAX - 63;
    expect(r, a, "register_offset_wraps", with(e), abi::kCqBadAddress);
    e = register_sqe(a, heap_page, 4096, abi::kAccessLocal);
    e.src_addr = UINT64_MAX - 100;  // the region's virtual address wraps
    expect(r, a, "register_va_wraps", with(e), abi::kCqBadAddress);
    e = register_sqe(a, heap_page, 0, abi::kAccessLocal);
    expect(r, a, "register_length0", with(e), abi::kCqBadLength);
    e = register_sqe(a, heap_page, 4096, 0);
    expect(r, a, "register_access0", with(e), abi::kCqBadOpcode);
    e = register_sqe(a, heap_page, 4096, abi::kAccessLocal | (1u << 7));
    expect(r, a, "register_unknown_access_bit", with(e), abi::kCqBadOpcode);
    abi::SqEntry d{};
    d.opcode = abi::kOpDeregister;
    d.src_key = 0;
    expect(r, a, "deregister_key0", with(d), abi::kCqBadKey);
    d.src_key = 0x13572400 | 0xfd;
    expect(r, a, "deregister_unknown_key", with(d), abi::kCqBadKey);
    d.src_key = ks ^ 0x01000000;  // live index, wrong tag: must not drop the live registration
    expect(r, a, "deregister_wrong_tag", with(d), abi::kCqBadKey);
    // Register, deregister, then the stale key is refused everywhere.
    abi::CqEntry c{};
    int st = run_status(a, with(register_sqe(a, heap_page, 4096, abi::kAccessLocal)), &c);
    r.check(st == abi::kCqOk && c.result != 0, "register_heap_page", status_name(st));
    uint32_t stale = c.result;
    d.src_key = stale;
    expect(r, a, "deregister_live_key", with(d), abi::kCqOk);
    expect(r, a, "deregister_twice", with(d), abi::kCqBadKey);
    abi::SqEntry cp = copy_sqe(a, ks, src, a, stale, heap_page, 64);
    expect(r, a, "copy_with_stale_key", with(cp), abi::kCqBadKey);
  }
  // ---- the registration table: 256 per slot, the 257th is refused
  uint32_t third_slot = 0;
  {
    auto C = open_nic(r.mode);
    Nic& c = *C;
    third_slot = c.slot();
    auto* regions = static_cast<uint8_t*>(c.alloc(64 * 257, 4096));
    if (!regions) die(r.mode, "slot heap exhausted");
    std::vector<uint32_t> keys;
    int first_refusal = -1;
    for (uint32_t i = 0; i < 257; ++i) {
      abi::CqEntry ce{};
      int st = run_status(c, with(register_sqe(c, regions + 64 * i, 64, abi::kAccessLocal)), &ce);
      if (st == abi::kCqOk) keys.push_back(ce.result);
      else if (first_refusal < 0) {
        first_refusal = int(i);
        r.check(st == abi::kCqNoResources, "registration_257_status",
                std::string("want no_resources, got ") + status_name(st));
      }
    }
    ++r.expected_bad;
    r.field("registrations_accepted", keys.size());
    r.check(keys.size() == abi::kMaxRegistrations && first_refusal == int(abi::kMaxRegistrations),
            "registration_table_holds_256",
            std::to_string(keys.size()) + " accepted, first refusal at " + std::to_string(first_refusal));
    std::vector<uint32_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    r.check(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
                std::find(sorted.begin(), sorted.end(), 0u) == sorted.end(),
            "registration_keys_unique_nonzero");
    if (keys.size() > 100) {
      abi::SqEntry d{};
      d.opcode = abi::kOpDeregister;
      d.src_key = keys[100];
      expect(r, c, "deregister_one_of_256", with(d), abi::kCqOk);
      abi::CqEntry ce{};
      int st = run_status(c, with(register_sqe(c, regions + 64 * 256, 64, abi::kAccessLocal)), &ce);
      r.check(st == abi::kCqOk, "register_after_freeing_one", status_name(st));
      r.check(st != abi::kCqOk || ce.result != keys[100], "reused_entry_gets_a_new_key");
      st = run_status(c, with(register_sqe(c, regions, 64, abi::kAccessLocal)), &ce);
      r.check(st == abi::kCqNoResources, "full_again", status_name(st));
      ++r.expected_bad;
    }
  }  // C detaches: its slot now has nobody attached
  {
    // The daemon detaches the slot when it sees the connection close; until
    // then the firmware may still serve it (a made-up key: bad_key).
    abi::SqEntry e = good();
    e.dst_slot = uint16_t(third_slot);
    e.dst_key = 0x42424200;
    int st = -1;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    int tries = 0;
    do {
      st = run_status(a, with(e));
      ++tries;
      if (st == abi::kCqBadKey) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (st == abi::kCqBadKey && Clock::now() < deadline);
    r.expected_bad += tries;
    r.check(st == abi::kCqBadSlot, "copy_to_detached_slot", std::string("got ") + status_name(st));
    r.field("detached_slot", third_slot);
  }
  // ---- statistics word: one completion per CQE?
  {
    uint64_t before = __atomic_load_n(&reinterpret_cast<abi::SlotHeader*>(a.slot_base())->nic.completions,
                                      __ATOMIC_ACQUIRE);
    for (int i = 0; i < 16; ++i) a.next_sqe()->opcode = abi::kOpNop;
    a.submit();
    int oks = 0;
    for (int i = 0; i < 16; ++i) {
      auto c = a.wait(std::chrono::milliseconds(10000));
      oks += c && c->status == abi::kCqOk;
    }
    r.check(oks == 16, "batch_of_16_nops");
    uint64_t after = __atomic_load_n(&reinterpret_cast<abi::SlotHeader*>(a.slot_base())->nic.completions,
                                     __ATOMIC_ACQUIRE);
    r.field("header_completions_for_16_cqes", after - before);  // informational: see the report
  }
  // ---- after all that, the slots still work
  {
    r.check(a.state() == abi::SlotState::kActive && a.fault() == abi::kFaultNone, "slot_still_active");
    r.check(b.state() == abi::SlotState::kActive, "other_slot_still_active");
    constexpr uint32_t kLen = 300000;  // several firmware copy chunks
    std::memset(dst, 0, kBuf);
    abi::SqEntry e = copy_sqe(a, ks, src + 3, a, kd, dst + 5, kLen);
    expect(r, a, "valid_copy_after_abuse", with(e), abi::kCqOk);
    r.check(std::memcmp(dst + 5, src + 3, kLen) == 0, "valid_copy_data", diff_detail(dst + 5, src + 3, kLen));
    bool edges = dst[4] == 0 && dst[5 + kLen] == 0;
    r.check(edges, "valid_copy_wrote_nothing_outside");
    abi::SqEntry nop{};
    expect(r, b, "other_slot_nop", with(nop), abi::kCqOk);
  }
  return r.finish();
}

// ---------------------------------------------------------------- cross-slot

int cross_slot() {
  Report r("cross-slot");
  auto A = open_nic(r.mode), B = open_nic(r.mode);
  Nic& a = *A;
  Nic& b = *B;
  r.field("slot", a.slot());
  r.field("other_slot", b.slot());
  constexpr uint32_t kLen = 3u << 20;  // 48 firmware copy chunks

  auto* a_src = static_cast<uint8_t*>(a.alloc(kLen, 4096));
  auto* a_dst = static_cast<uint8_t*>(a.alloc(kLen, 4096));
  auto* b_w = static_cast<uint8_t*>(b.alloc(kLen, 4096));
  auto* b_r = static_cast<uint8_t*>(b.alloc(kLen, 4096));
  if (!a_src || !a_dst || !b_w || !b_r) die(r.mode, "slot heap exhausted");
  auto a_src_mr = a.register_memory(a_src, kLen, abi::kAccessLocal);
  auto a_dst_mr = a.register_memory(a_dst, kLen, abi::kAccessLocal);
  auto b_w_mr = b.register_memory(b_w, kLen, abi::kAccessRemoteWrite);
  auto b_r_mr = b.register_memory(b_r, kLen, abi::kAccessRemoteRead);
  if (!a_src_mr || !a_dst_mr || !b_w_mr || !b_r_mr) die(r.mode, "register failed");
  fill(a_src, kLen, 11);
  fill(b_r, kLen, 13);
  std::memset(b_w, 0, kLen);
  std::memset(a_dst, 0, kLen);

  // A writes into B's RemoteWrite region.
  expect(r, a, "remote_write", copy_sqe(a, a_src_mr->key, a_src, b, b_w_mr->key, b_w, kLen), abi::kCqOk);
  r.check(std::memcmp(b_w, a_src, kLen) == 0, "remote_write_data", diff_detail(b_w, a_src, kLen));
  // Unaligned, odd length, at the very end of B's region.
  std::memset(b_w, 0, kLen);
  expect(r, a, "remote_write_tail", copy_sqe(a, a_src_mr->key, a_src + 1, b, b_w_mr->key, b_w + kLen - 4097, 4097),
         abi::kCqOk);
  r.check(std::memcmp(b_w + kLen - 4097, a_src + 1, 4097) == 0 && b_w[kLen - 4098] == 0, "remote_write_tail_data");
  // A reads from B's RemoteRead region.
  expect(r, a, "remote_read", copy_sqe(b, b_r_mr->key, b_r, a, a_dst_mr->key, a_dst, kLen), abi::kCqOk);
  r.check(std::memcmp(a_dst, b_r, kLen) == 0, "remote_read_data", diff_detail(a_dst, b_r, kLen));
  // A moves bytes from B's RemoteRead region into B's RemoteWrite region.
  std::memset(b_w, 0, kLen);
  expect(r, a, "remote_to_remote", copy_sqe(b, b_r_mr->key, b_r + 7, b, b_w_mr->key, b_w + 9, 100000), abi::kCqOk);
  r.check(std::memcmp(b_w + 9, b_r + 7, 100000) == 0, "remote_to_remote_data");
  // Each region allows only what it was registered for.
  expect(r, a, "write_into_remote_read_region", copy_sqe(a, a_src_mr->key, a_src, b, b_r_mr->key, b_r, 64),
         abi::kCqProtection);
  expect(r, a, "read_from_remote_write_region", copy_sqe(b, b_w_mr->key, b_w, a, a_dst_mr->key, a_dst, 64),
         abi::kCqProtection);
  expect(r, a, "remote_write_past_end", copy_sqe(a, a_src_mr->key, a_src, b, b_w_mr->key, b_w + kLen - 10, 11),
         abi::kCqBadLength);
  // B's owner cannot use its RemoteWrite-only region locally (no kAccessLocal).
  expect(r, b, "owner_without_local", copy_sqe(b, b_r_mr->key, b_r, b, b_w_mr->key, b_w, 64), abi::kCqProtection);
  {
    uint8_t ref[16];
    fill(ref, sizeof ref, 13);
    r.check(std::memcmp(b_r, ref, sizeof ref) == 0, "remote_read_region_untouched");
  }

  // Memory from the ordinary heap, moved into B's slot by registration.
  {
    std::vector<uint8_t> v(200000, 0);
    auto v_mr = b.register_memory(v.data(), v.size(), abi::kAccessRemoteWrite | abi::kAccessLocal);
    if (!r.check(bool(v_mr), "register_moved_memory", v_mr ? "" : v_mr.error().message)) return r.finish();
    expect(r, a, "remote_write_moved_memory",
           copy_sqe(a, a_src_mr->key, a_src + 100, b, v_mr->key, v.data() + 1, 199999), abi::kCqOk);
    r.check(std::memcmp(v.data() + 1, a_src + 100, 199999) == 0 && v[0] == 0, "remote_write_moved_memory_data",
            diff_detail(v.data() + 1, a_src + 100, 199999));
    r.check(bool(b.deregister(*v_mr)), "deregister_moved_memory");
    r.check(std::memcmp(v.data() + 1, a_src + 100, 199999) == 0, "moved_memory_kept_after_deregister");
  }

  // The other direction: B writes into a RemoteWrite region of A.
  {
    auto* a_w = static_cast<uint8_t*>(a.alloc(65536, 4096));
    auto* b_src = static_cast<uint8_t*>(b.alloc(65536, 4096));
    if (!a_w || !b_src) die(r.mode, "slot heap exhausted");
    auto a_w_mr = a.register_memory(a_w, 65536, abi::kAccessRemoteWrite);
    auto b_src_mr = b.register_memory(b_src, 65536, abi::kAccessLocal);
    if (!a_w_mr || !b_src_mr) die(r.mode, "register failed");
    fill(b_src, 65536, 17);
    std::memset(a_w, 0, 65536);
    expect(r, b, "reverse_remote_write", copy_sqe(b, b_src_mr->key, b_src, a, a_w_mr->key, a_w, 65536), abi::kCqOk);
    r.check(std::memcmp(a_w, b_src, 65536) == 0, "reverse_remote_write_data");
  }

  // Informational: an overlapping copy inside one region (dst = src + 4 KiB,
  // longer than one firmware chunk). Is the result memmove's?
  {
    std::vector<uint8_t> want(a_src, a_src + kLen);
    constexpr uint32_t kOverlapLen = 256 << 10, kShift = 4096;
    std::memmove(want.data() + kShift, want.data(), kOverlapLen);
    abi::SqEntry e = copy_sqe(a, a_src_mr->key, a_src, a, a_src_mr->key, a_src + kShift, kOverlapLen);
    int st = run_status(a, e);
    bool same = st == abi::kCqOk && std::memcmp(a_src, want.data(), kLen) == 0;
    r.field("overlap_copy_status", std::string(quote(status_name(st))));
    r.field("overlap_copy_is_memmove", same ? "true" : "false");
  }
  r.check(a.state() == abi::SlotState::kActive && b.state() == abi::SlotState::kActive, "slots_still_active");
  return r.finish();
}

// ---------------------------------------------------------------- dereg-race

// B registers a RemoteWrite region; A starts a long copy into it; as soon as
// the first bytes land, B deregisters the region and waits for the
// completion. From then on the NIC must not touch the region: B counts the
// bytes written so far, waits for A's copy to finish, and counts again.
int dereg_race() {
  Report r("dereg-race");
  auto A = open_nic(r.mode), B = open_nic(r.mode);
  Nic& a = *A;
  Nic& b = *B;
  constexpr uint32_t kLen = 12u << 20;  // 192 firmware copy chunks
  auto* src = static_cast<uint8_t*>(a.alloc(kLen, 4096));
  auto* dst = static_cast<uint8_t*>(b.alloc(kLen, 4096));
  if (!src || !dst) die(r.mode, "slot heap exhausted");
  auto src_mr = a.register_memory(src, kLen, abi::kAccessLocal);
  auto dst_mr = b.register_memory(dst, kLen, abi::kAccessRemoteWrite);
  if (!src_mr || !dst_mr) die(r.mode, "register failed");
  std::memset(src, 0xab, kLen);
  std::memset(dst, 0, kLen);
  auto written = [&] {
    uint64_t n = 0;
    for (uint32_t i = 0; i < kLen; i += 4096) n += dst[i] != 0;
    return n;
  };
  abi::SqEntry* e = a.next_sqe();
  *e = copy_sqe(a, src_mr->key, src, b, dst_mr->key, dst, kLen);
  e->user_data = 1;
  a.submit();
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (__atomic_load_n(&dst[0], __ATOMIC_RELAXED) == 0 && Clock::now() < deadline) {
  }
  abi::SqEntry d{};
  d.opcode = abi::kOpDeregister;
  d.src_key = dst_mr->key;
  auto dc = b.run(d);
  uint64_t at_dereg = written();
  r.check(dc && dc->status == abi::kCqOk, "deregister_ok");
  auto cc = a.wait(std::chrono::milliseconds(20000));
  uint64_t at_end = written();
  r.field("pages", kLen / 4096);
  r.field("pages_written_when_deregistered", at_dereg);
  r.field("pages_written_in_the_end", at_end);
  r.field_str("copy_status", cc ? status_name(cc->status) : "no_completion");
  r.field("copy_result", cc ? cc->result : 0);
  r.check(at_end == at_dereg, "no_writes_after_deregister",
          std::to_string(at_end - at_dereg) + " pages written after the deregistration completed");
  return r.finish();
}

// ------------------------------------------------------------------ scribble

// The slot's doorbell eventfd. Nic keeps it private and rings it only from
// submit(), which stops posting once scribbled CQ indices confuse its
// accounting; the scribbler rings it directly so that the NIC keeps looking
// at the slot. With one Nic open the process holds two eventfds, received in
// this order: the doorbell, then the completion fd.
int find_doorbell_fd() {
  std::vector<int> eventfds;
  for (int fd = 3; fd < 1024; ++fd) {
    char link[64], path[32];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = ::readlink(path, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (std::strcmp(link, "anon_inode:[eventfd]") == 0) eventfds.push_back(fd);
  }
  return eventfds.size() == 2 ? eventfds[0] : -1;
}

int scribble(int argc, char** argv) {
  Report r("scribble");
  uint64_t seed = 1, writes = 100000, reattach = 0;
  for (int i = 0; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoull(argv[++i], nullptr, 0) : 0ull; };
    if (s == "--seed") seed = next();
    else if (s == "--writes") writes = next();
    else if (s == "--reattach") reattach = next();
    else {
      std::fprintf(stderr, "usage: slot_abuse scribble [--seed S] [--writes N] [--reattach R]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  auto nic = open_nic(r.mode);
  int doorbell = find_doorbell_fd();
  std::vector<uint32_t> slots_used{nic->slot()};
  uint64_t posts = 0, submits = 0, completions = 0, bad_completions = 0, cutoffs_seen = 0, reattached = 0;
  uint64_t doorbells = 0, writes_while_cut_off = 0;
  bool episode_cut = false;  // this attachment was seen cut off
  uint64_t writes_while_active = 0;
  std::string faults;
  for (uint64_t w = 0; w < writes; ++w) {
    Nic& n = *nic;
    const abi::SlotLayout& l = n.layout();
    // The two ring regions: control words + entries.
    const uint64_t sq_len = abi::ring_bytes<abi::SqEntry>(l.sq_capacity);
    const uint64_t cq_len = abi::ring_bytes<abi::CqEntry>(l.cq_capacity);
    const uint32_t size = rng() & 1 ? 8 : 4;
    uint64_t off;
    uint64_t value = rng();
    uint32_t pick = uint32_t(rng() % 32);
    if (pick == 0) {
      // An index word, set near its current value: plausible-looking lies
      // (within capacity) as well as impossible ones.
      bool sq = rng() & 1;
      uint64_t base = sq ? l.sq_offset : l.cq_offset;
      off = base + (rng() & 1 ? 0 : 64);  // tail or head
      uint32_t cur;
      std::memcpy(&cur, n.slot_base() + off, 4);
      int32_t delta = int32_t(rng() % 601) - 300;
      value = uint32_t(cur + uint32_t(delta));
      uint32_t v32 = uint32_t(value);
      __atomic_store_n(reinterpret_cast<uint32_t*>(n.slot_base() + off), v32, __ATOMIC_RELEASE);
    } else {
      bool sq = rng() % (sq_len + cq_len) < sq_len;
      uint64_t base = sq ? l.sq_offset : l.cq_offset, len = sq ? sq_len : cq_len;
      off = base + rng() % (len - size + 1);
      if (size == 4) {
        uint32_t v = uint32_t(value);
        std::memcpy(n.slot_base() + off, &v, 4);
      } else {
        std::memcpy(n.slot_base() + off, &value, 8);
      }
    }
    if (n.state() == abi::SlotState::kActive) ++writes_while_active;
    // Interleave ordinary use of the queues.
    uint32_t act = uint32_t(rng() % 16);
    if (act < 2) {
      if (abi::SqEntry* e = n.next_sqe()) {
        if (rng() & 1) e->opcode = abi::kOpNop;
        else std::memcpy(e, &value, sizeof value);  // garbage opcode etc.
        e->user_data = w;
        ++posts;
      }
      submits += n.submit() ? 1 : 0;  // rings the doorbell if the NIC went dormant
    } else if (act == 2 && doorbell >= 0) {
      uint64_t one = 1;
      doorbells += ::write(doorbell, &one, sizeof one) == sizeof one;
    } else if (act < 5) {
      abi::CqEntry c;
      for (int k = 0; k < 64 && n.poll(c); ++k) {
        ++completions;
        bad_completions += c.status != abi::kCqOk;
      }
    }
    if (w % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (n.state() == abi::SlotState::kCutOff) {
      ++writes_while_cut_off;
      if (!episode_cut) {
        episode_cut = true;
        ++cutoffs_seen;
        faults += (faults.empty() ? "" : ",") + std::to_string(uint32_t(n.fault()));
      }
      if (reattached < reattach) {
        // Give this slot back and take a fresh one.
        nic.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(150));  // let the daemon reclaim it
        auto again = Nic::open();
        if (!again) die(r.mode, "reattach: " + again.error().message);
        nic = std::move(*again);
        doorbell = find_doorbell_fd();
        episode_cut = false;
        slots_used.push_back(nic->slot());
        ++reattached;
      }  // else keep scribbling on the dead slot: the NIC must ignore it
    }
  }
  Nic& n = *nic;
  // Give the firmware a moment to look at the last writes.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  abi::SlotState st = n.state();
  abi::SlotFault f = n.fault();
  if (st == abi::SlotState::kCutOff && !episode_cut) {
    ++cutoffs_seen;
    faults += (faults.empty() ? "" : ",") + std::to_string(uint32_t(f));
  }
  r.field("slot", n.slot());
  std::string su;
  for (uint32_t s : slots_used) su += (su.empty() ? "" : ", ") + std::to_string(s);
  r.field("slots_used", "[" + su + "]");
  r.field("writes", writes);
  r.field("writes_while_active", writes_while_active);
  r.field("posts", posts);
  r.field("submits", submits);
  r.field("doorbells", doorbells);
  r.field("completions", completions);
  r.field("bad_completions", bad_completions);
  r.field("reattached", reattached);
  r.field("cutoffs", cutoffs_seen);  // attachments that ended cut off
  r.field("writes_while_cut_off", writes_while_cut_off);
  r.field("faults_seen", "[" + faults + "]");
  r.field("state", uint32_t(st));
  r.field("fault", uint32_t(f));
  r.field_str("state_name", st == abi::SlotState::kActive   ? "active"
                            : st == abi::SlotState::kCutOff ? "cut_off"
                            : st == abi::SlotState::kFree   ? "free"
                                                            : "flushed");
  r.check(st == abi::SlotState::kActive || st == abi::SlotState::kCutOff, "state_active_or_cut_off",
          "state " + std::to_string(uint32_t(st)));
  if (st == abi::SlotState::kActive) r.check(f == abi::kFaultNone, "active_without_fault");
  if (st == abi::SlotState::kCutOff)
    r.check(f == abi::kFaultSqCorrupt || f == abi::kFaultCqCorrupt, "cut_off_with_a_ring_fault",
            "fault " + std::to_string(uint32_t(f)));
  return r.finish();
}

// ---------------------------------------------------------------- hold modes

void sleep_forever() {
  for (;;) ::pause();
}

int hold(int argc, char** argv) {
  bool copies = false, export_region = false;
  uint64_t fill_mib = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--copies") copies = true;
    else if (a == "--export") export_region = true;
    else if (a == "--fill" && i + 1 < argc) fill_mib = std::strtoull(argv[++i], nullptr, 0);
    else {
      std::fprintf(stderr, "usage: slot_abuse hold [--copies | --export] [--fill MIB]\n");
      return 2;
    }
  }
  auto nic = open_nic("hold");
  Nic& n = *nic;
  if (fill_mib) {  // that much of the slot heap written (not zero), before anything else
    auto* p = static_cast<uint8_t*>(n.alloc(fill_mib << 20, 4096));
    if (!p) die("hold", "slot heap exhausted");
    std::memset(p, 0xa5, fill_mib << 20);
  }
  if (export_region) {
    // A zeroed region others may write into; on SIGTERM, report whether it
    // is still all zeros.
    constexpr uint32_t kLen = 1 << 20;
    auto* buf = static_cast<uint8_t*>(n.alloc(kLen, 4096));
    if (!buf) die("hold", "slot heap exhausted");
    std::memset(buf, 0, kLen);
    auto mr = n.register_memory(buf, kLen, abi::kAccessLocal | abi::kAccessRemoteWrite);
    if (!mr) die("hold", mr.error().message);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    std::printf("{\"slot\": %u, \"pid\": %d, \"key\": %u, \"addr\": %llu, \"len\": %u}\n", n.slot(), int(::getpid()),
                mr->key, static_cast<unsigned long long>(addr(buf)), kLen);
    std::fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    uint64_t nonzero = 0;
    for (uint32_t i = 0; i < kLen; ++i) nonzero += buf[i] != 0;
    std::printf("{\"slot\": %u, \"nonzero_bytes\": %llu}\n", n.slot(), static_cast<unsigned long long>(nonzero));
    std::fflush(stdout);
    return nonzero ? 1 : 0;
  }
  std::printf("{\"slot\": %u, \"pid\": %d}\n", n.slot(), int(::getpid()));
  std::fflush(stdout);
  if (!copies) sleep_forever();
  constexpr uint32_t kLen = 256 << 10;
  auto* src = static_cast<uint8_t*>(n.alloc(kLen, 4096));
  auto* dst = static_cast<uint8_t*>(n.alloc(kLen, 4096));
  if (!src || !dst) die("hold", "slot heap exhausted");
  auto s_mr = n.register_memory(src, kLen, abi::kAccessLocal);
  auto d_mr = n.register_memory(dst, kLen, abi::kAccessLocal);
  if (!s_mr || !d_mr) die("hold", "register failed");
  std::mt19937 rng(n.slot());
  for (uint64_t i = 0;; ++i) {
    uint32_t len = 1 + rng() % kLen;
    fill(src, len, uint32_t(i));
    std::memset(dst, 0, len);
    auto c = n.run(copy_sqe(n, s_mr->key, src, n, d_mr->key, dst, len));
    if (!c || c->status != abi::kCqOk || std::memcmp(src, dst, len) != 0)
      die("hold", "copy " + std::to_string(i) + " failed: " + (c ? status_name(c->status) : c.error().message));
  }
}

// Copies into another process's exported region (hold --export) for a while.
// Once a copy fails (the other process died), no later copy may succeed: the
// slot's next owner must be out of reach of the old key.
int remote_copy(int argc, char** argv) {
  Report r("remote-copy");
  uint64_t slot = 0, key = 0, dst = 0, len = 0, seconds = 5;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoull(argv[++i], nullptr, 0) : 0ull; };
    if (a == "--slot") slot = next();
    else if (a == "--key") key = next();
    else if (a == "--addr") dst = next();
    else if (a == "--len") len = next();
    else if (a == "--seconds") seconds = next();
    else {
      std::fprintf(stderr, "usage: slot_abuse remote-copy --slot S --key K --addr A --len L [--seconds T]\n");
      return 2;
    }
  }
  auto nic = open_nic(r.mode);
  Nic& n = *nic;
  auto* src = static_cast<uint8_t*>(n.alloc(len, 4096));
  if (!src || len == 0) die(r.mode, "bad length or slot heap exhausted");
  std::memset(src, 0xee, len);
  auto mr = n.register_memory(src, len, abi::kAccessLocal);
  if (!mr) die(r.mode, mr.error().message);
  std::printf("{\"slot\": %u, \"pid\": %d}\n", n.slot(), int(::getpid()));
  std::fflush(stdout);
  uint64_t by_status[16] = {}, ok_after_failure = 0, copies = 0;
  int first_failure = -1;
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    abi::SqEntry e{};
    e.opcode = abi::kOpCopy;
    e.length = uint32_t(len);
    e.src_slot = n.slot();
    e.src_key = mr->key;
    e.src_addr = addr(src);
    e.dst_slot = uint16_t(slot);
    e.dst_key = uint32_t(key);
    e.dst_addr = dst;
    int st = run_status(n, e);
    if (st < 0) die(r.mode, "no completion");
    ++copies;
    ++by_status[st & 15];
    if (st != abi::kCqOk && first_failure < 0) first_failure = st;
    if (st == abi::kCqOk && first_failure >= 0) ++ok_after_failure;
    if (first_failure >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.field("copies", copies);
  r.field("ok", by_status[abi::kCqOk]);
  r.field("bad_slot", by_status[abi::kCqBadSlot]);
  r.field("bad_key", by_status[abi::kCqBadKey]);
  r.field_str("first_failure", status_name(first_failure));
  r.field("ok_after_failure", ok_after_failure);
  r.check(ok_after_failure == 0, "no_copy_succeeds_after_the_owner_died");
  uint64_t other = copies - by_status[abi::kCqOk] - by_status[abi::kCqBadSlot] - by_status[abi::kCqBadKey];
  r.check(other == 0, "only_ok_bad_slot_or_bad_key", std::to_string(other) + " other statuses");
  return r.finish();
}

int fork_hold(int argc, char** argv) {
  bool close_fds = argc > 0 && std::string(argv[0]) == "--close-fds";
  auto nic = open_nic("fork-hold");
  // The child must not share our stdout pipe's buffered data.
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child < 0) die("fork-hold", "fork failed");
  if (child == 0) {
    // Let go of the caller's pipes: whoever waits for the parent's output
    // must not wait for the child as well.
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > 2) ::close(null);
    if (close_fds) {
      // Everything but stdin/out/err: the daemon connection and the slot fd
      // go; the slot mapping stays.
      for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    }
    // Touch the slot now and then so the mapping is really in use.
    volatile uint8_t* heap = nic->slot_base() + nic->layout().heap_offset;
    for (uint8_t i = 0;; ++i) {
      heap[0] = i;
      ::sleep(1);
    }
  }
  std::printf("{\"slot\": %u, \"pid\": %d, \"child\": %d}\n", nic->slot(), int(::getpid()), int(child));
  std::fflush(stdout);
  // Exit without unmapping or detaching explicitly: as a crash would.
  ::_exit(0);
}

// The attach protocol by hand, with any ABI version: prints the reply.
int raw_attach(int argc, char** argv) {
  if (argc < 1) return 2;
  uint32_t version = uint32_t(std::strtoul(argv[0], nullptr, 0));
  const char* cl = std::getenv("ULNIC_CLUSTER");
  auto conn = ulnic::connect_unix(ulnic::daemon_socket_path(cl && *cl ? cl : "default", 0));
  if (!conn) die("raw-attach", conn.error().message);
  abi::AttachRequest req{abi::kAttachMagic, version, 0, 0};
  if (auto s = ulnic::send_with_fds(conn->get(), &req, sizeof req, nullptr, 0); !s) die("raw-attach", s.error().message);
  abi::AttachReply reply{};
  std::vector<ulnic::UniqueFd> fds;
  if (auto g = ulnic::recv_with_fds(conn->get(), &reply, sizeof reply, fds, 3, 10000); !g)
    die("raw-attach", g.error().message);
  reply.message[sizeof reply.message - 1] = 0;
  std::printf("{\"magic_ok\": %s, \"status\": %u, \"fds\": %zu, \"message\": %s}\n",
              reply.magic == abi::kAttachMagic ? "true" : "false", reply.status, fds.size(),
              quote(reply.message).c_str());
  return 0;
}

// --------------------------------------------------------- random-descriptors

// Bytes of SQ entries a descriptor takes after itself as its payload (the
// firmware's rule, slots.cpp take_inline: a short VMMC or U-Net send of
// 1..kMaxInline bytes with good flags; a VI connect or listen's discriminator of at most
// kViMaxDiscriminator bytes, even when refused).
size_t payload_bytes(const abi::SqEntry& e) {
  if (e.opcode == abi::kOpViConnect || e.opcode == abi::kOpViListen)
    return e.access <= abi::kViMaxDiscriminator ? e.access : 0;
  if (e.opcode == abi::kOpSendInline && (e.flags & ~(abi::kSqNotify | abi::kSqTrace)) == 0 && e.reserved == 0)
    return e.length >= 1 && e.length <= abi::kMaxInline ? e.length : 0;
  if (e.opcode == abi::kOpUnetSendInline && (e.flags & ~abi::kSqTrace) == 0 && e.reserved == 0)
    return e.length >= 1 && e.length <= abi::kMaxInline ? e.length : 0;
  return 0;
}

// Half the descriptors zero the fields their opcode does not read (one with
// any of those set is refused before anything else is looked at), so that
// the deeper checks -- translation, the link, the receiving NIC's verdicts --
// see random values too.
void plausible(abi::SqEntry& e) {
  e.reserved = 0;
  switch (e.opcode) {
    case abi::kOpSend:
    case abi::kOpSendInline:
    case abi::kOpRedirect:
      e.dst_slot = 0, e.access = 0, e.src_slot = 0, e.reg_offset = 0, e.dst_node = 0;
      e.flags &= abi::kSqNotify;
      if (e.opcode != abi::kOpRedirect) e.src_key = 0, e.dst_key = 0;
      if (e.opcode == abi::kOpSendInline) e.src_addr = 0;
      break;
    case abi::kOpPut:
    case abi::kOpAmSend:
      e.access = 0, e.src_slot = 0, e.reg_offset = 0, e.flags = 0;
      if (e.opcode == abi::kOpAmSend) e.dst_key = 0, e.dst_addr = 0;
      break;
    case abi::kOpCopy:
      e.dst_node = 0, e.access = 0, e.reg_offset = 0, e.flags = 0;
      break;
    default:
      e.flags = 0;
  }
}

// A region of the slot heap the hostile process registered, between two
// canary pages that nothing may write.
struct Granted {
  uint8_t* at = nullptr;
  uint32_t len = 0, key = 0;
};
constexpr size_t kCanary = 4096, kGranted = 64 << 10, kGrantedRegions = 4;

uint8_t canary_byte(size_t i) { return uint8_t(0xa5 ^ (i * 131) ^ (i >> 9)); }

int random_descriptors(int argc, char** argv) {
  Report r("random-descriptors");
  uint64_t seed = 1, count = 1000000;
  uint32_t nodes = 2;
  for (int i = 0; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoull(argv[++i], nullptr, 0) : 0ull; };
    if (s == "--seed") seed = next();
    else if (s == "--count") count = next();
    else if (s == "--nodes") nodes = uint32_t(next());
    else {
      std::fprintf(stderr, "usage: slot_abuse random-descriptors [--count N] [--seed S] [--nodes K]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  auto nic = open_nic(r.mode);
  Nic& n = *nic;
  // kGrantedRegions regions, each between canaries: [canary][region][canary]...
  const size_t block = kCanary + kGranted, total = kGrantedRegions * block + kCanary;
  auto* heap = static_cast<uint8_t*>(n.alloc(total, 4096));
  if (!heap) die(r.mode, "no slot heap for the regions");
  for (size_t i = 0; i < total; ++i) heap[i] = canary_byte(i);
  const uint32_t accesses[kGrantedRegions] = {abi::kAccessLocal, abi::kAccessLocal | abi::kAccessRemoteWrite,
                                              abi::kAccessLocal | abi::kAccessRemoteRead,
                                              abi::kAccessLocal | abi::kAccessRemoteWrite | abi::kAccessRemoteRead};
  std::vector<Granted> granted;
  for (size_t k = 0; k < kGrantedRegions; ++k) {
    Granted g{heap + kCanary + k * block, uint32_t(kGranted), 0};
    auto reg = n.register_memory(g.at, g.len, accesses[k]);
    if (!reg) die(r.mode, reg.error().message);
    g.key = reg->key;
    granted.push_back(g);
  }
  auto pick = [&](uint64_t m) { return m ? rng() % m : 0; };
  // An address: mostly in or at the edges of a granted region, sometimes anything.
  auto any_addr = [&]() -> uint64_t {
    const Granted& g = granted[pick(granted.size())];
    switch (pick(6)) {
      case 0: return rng();
      case 1: return addr(g.at) - pick(kCanary);                 // just before it
      case 2: return addr(g.at) + g.len - pick(64);              // its last bytes
      default: return addr(g.at) + pick(g.len);
    }
  };
  auto any_len = [&]() -> uint32_t {
    switch (pick(8)) {
      case 0: return uint32_t(rng());
      case 1: return 0;
      case 2: return uint32_t(pick(kGranted + 8192));
      default: return uint32_t(1 + pick(512));
    }
  };
  auto any_key = [&]() -> uint32_t { return pick(4) ? granted[pick(granted.size())].key : uint32_t(rng()); };
  // Opcodes whose completion waits on a peer by design (a VI's receive, connect,
  // listen, accept) are left out: their descriptors could wait for ever.
  const uint8_t ops[] = {abi::kOpNop,      abi::kOpCopy,       abi::kOpRegister,   abi::kOpDeregister,
                         abi::kOpPut,      abi::kOpSend,       abi::kOpSendInline, abi::kOpRedirect,
                         abi::kOpViCreate, abi::kOpViDestroy,  abi::kOpViPostSend, abi::kOpViReject,
                         abi::kOpViCancel, abi::kOpViDisconnect, abi::kOpAmEndpoint, abi::kOpAmSend,
                         abi::kOpUnetEndpoint, abi::kOpUnetSend, abi::kOpUnetSendInline};
  std::vector<uint8_t> payload(256);
  std::vector<uint8_t> seen((count + 7) / 8, 0);
  uint64_t posted = 0, completed = 0, unknown = 0, twice = 0, reregistered = 0;
  uint64_t by_status[48] = {};
  uint64_t posted_op[256] = {}, completed_op[256] = {};
  std::map<int, std::map<int, uint64_t>> status_by_op;  // the valid opcodes' outcomes
  std::vector<uint8_t> op_of(count + 1, 0);
  std::vector<abi::SqEntry> sent;  // the descriptors, for the report of one that never completed
  sent.reserve(count);
  auto take = [&](const abi::CqEntry& c) {
      ++completed;
      ++by_status[c.status < 47 ? c.status : 47];
      if (c.user_data == 0 || c.user_data > posted) {
        if (unknown++ == 0)
          std::fprintf(stderr, "slot_abuse random-descriptors: a completion for no descriptor: user_data %" PRIu64
                       ", opcode %u, status %u\n", c.user_data, c.opcode, c.status);
        return;
      }
      ++completed_op[op_of[c.user_data]];
      if (op_of[c.user_data] < abi::kOpcodeCount) ++status_by_op[op_of[c.user_data]][c.status];
      if (op_of[c.user_data] == abi::kOpDeregister && c.status == abi::kCqOk)
        for (Granted& g : granted)  // one of ours went: registered again below
          if (g.key == sent[c.user_data - 1].src_key) g.key = 0, ++reregistered;
      uint64_t k = c.user_data - 1;
      if (seen[k / 8] & (1u << (k % 8))) ++twice;
      seen[k / 8] |= uint8_t(1u << (k % 8));
  };
  // Reaps what is there; else waits a little for one (which it takes too).
  auto reap = [&](std::chrono::milliseconds wait) {
    bool any = false;
    abi::CqEntry c;
    while (n.poll(c)) take(c), any = true;
    if (!any)
      if (auto w = n.wait(wait)) take(*w);
  };
  auto t0 = Clock::now();
  while (posted < count && n.state() == abi::SlotState::kActive) {
    for (size_t k = 0; k < granted.size(); ++k)
      if (!granted[k].key) {
        auto reg = n.register_memory(granted[k].at, granted[k].len, accesses[k]);
        if (reg) granted[k].key = reg->key;
      }
    abi::SqEntry e{};
    e.opcode = pick(64) ? ops[pick(sizeof ops)] : uint8_t(rng());
    if (e.opcode == abi::kOpViPostRecv || e.opcode == abi::kOpViConnect || e.opcode == abi::kOpViListen ||
        e.opcode == abi::kOpViAccept)
      e.opcode = abi::kOpNop;  // (see ops)
    e.flags = pick(8) ? 0 : uint8_t(rng());
    e.dst_node = pick(32) ? uint32_t(pick(nodes)) : uint32_t(rng());
    e.src_slot = pick(8) ? n.slot() : uint32_t(pick(12));
    e.dst_slot = uint16_t(pick(12));
    e.length = any_len();
    e.src_addr = any_addr();
    e.dst_addr = any_addr();
    e.src_key = any_key();
    e.dst_key = any_key();
    e.access = pick(4) ? uint32_t(pick(16)) : uint32_t(rng());
    e.reserved = pick(16) ? 0 : uint32_t(rng());
    if (e.opcode == abi::kOpRegister) {
      // Only within a granted region, or plainly outside the slot: a new
      // registration of other slot memory would grant what the canaries guard.
      const Granted& g = granted[pick(granted.size())];
      uint64_t off = pick(g.len);
      e.reg_offset = pick(4) ? uint64_t(g.at - n.slot_base()) + off : n.layout().slot_size + pick(1ull << 40);
      e.length = uint32_t(pick(g.len - off) + 1);
    } else {
      e.reg_offset = rng();
    }
    if (pick(2)) plausible(e);
    e.user_data = posted + 1;
    const size_t bytes = payload_bytes(e);
    for (size_t i = 0; i < bytes; ++i) payload[i] = uint8_t(rng());
    if (n.post(e, payload.data(), bytes)) {
      ++posted;
      ++posted_op[e.opcode];
      op_of[posted] = e.opcode;
      sent.push_back(e);
      continue;
    }
    reap(std::chrono::milliseconds(5));  // SQ or CQ full: let the NIC catch up
  }
  // Drain: remote operations end within the link's verdict deadline (5 s).
  auto until = Clock::now() + std::chrono::seconds(30);
  while (completed < posted && Clock::now() < until && n.state() == abi::SlotState::kActive)
    reap(std::chrono::milliseconds(20));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  r.field("posted", posted);
  r.field("regions_registered_again", reregistered);
  r.field("completed", completed);
  r.field("seconds", std::to_string(secs));
  std::string st = "{";
  for (int k = 0; k < 48; ++k)
    if (by_status[k]) st += (st.size() > 1 ? ", " : "") + quote(std::to_string(k)) + ": " + std::to_string(by_status[k]);
  r.field("statuses", st + "}");
  std::string so = "{";
  for (auto& [op, m] : status_by_op) {
    so += (so.size() > 1 ? ", " : "") + quote(std::to_string(op)) + ": {";
    bool first = true;
    for (auto& [k, v] : m) so += (first ? "" : ", ") + quote(std::to_string(k)) + ": " + std::to_string(v), first = false;
    so += "}";
  }
  r.field("statuses_by_opcode", so + "}");
  std::string missing = "{";  // opcode: descriptors without a completion
  for (int k = 0; k < 256; ++k)
    if (posted_op[k] != completed_op[k])
      missing += (missing.size() > 1 ? ", " : "") + quote(std::to_string(k)) + ": " +
                 std::to_string(posted_op[k] - completed_op[k]);
  r.field("uncompleted_by_opcode", missing + "}");
  for (uint64_t k = 0; k < posted; ++k) {  // the first descriptor with no completion, in full
    if (seen[k / 8] & (1u << (k % 8))) continue;
    const abi::SqEntry& e = sent[k];
    char b[320];
    std::snprintf(b, sizeof b,
                  "{\"user_data\": %" PRIu64 ", \"opcode\": %u, \"flags\": %u, \"length\": %u, \"dst_node\": %u, "
                  "\"src_slot\": %u, \"dst_slot\": %u, \"src_key\": %u, \"dst_key\": %u, \"access\": %u, "
                  "\"reserved\": %u, \"src_addr\": %" PRIu64 ", \"dst_addr\": %" PRIu64 "}",
                  e.user_data, e.opcode, e.flags, e.length, e.dst_node, e.src_slot, e.dst_slot, e.src_key, e.dst_key,
                  e.access, e.reserved, e.src_addr, e.dst_addr);
    r.field("first_uncompleted", b);
    break;
  }
  r.check(n.state() == abi::SlotState::kActive, "slot_still_active", "the NIC cut the slot off");
  r.check(posted == count, "all_posted", std::to_string(posted) + " of " + std::to_string(count));
  r.check(completed == posted, "every_descriptor_completed",
          std::to_string(completed) + " completions for " + std::to_string(posted) + " descriptors");
  r.check(unknown == 0 && twice == 0, "completions_name_each_descriptor_once",
          std::to_string(unknown) + " unknown, " + std::to_string(twice) + " twice");
  // The canaries: no byte outside the granted regions changed.
  uint64_t changed = 0;
  int64_t first = -1;
  for (size_t i = 0; i < total; ++i) {
    const bool in_region = (i % block) >= kCanary && i < kGrantedRegions * block;
    if (!in_region && heap[i] != canary_byte(i)) {
      ++changed;
      if (first < 0) first = int64_t(i);
    }
  }
  r.field("canary_bytes_changed", changed);
  r.check(changed == 0, "canaries_intact", "first changed canary byte at heap offset " + std::to_string(first));
  // And the slot still does ordinary work: a copy between two granted regions
  // (registered anew: the random descriptors deregistered keys of theirs), verified.
  uint8_t *from = granted[0].at, *to = granted[3].at;
  auto ka = n.register_memory(from, 4096, abi::kAccessLocal), kb = n.register_memory(to, 4096, abi::kAccessLocal);
  fill(from, 4096, uint32_t(seed));
  std::memset(to, 0, 4096);
  int st_copy = ka && kb ? run_status(n, copy_sqe(n, ka->key, from, n, kb->key, to, 4096)) : -1;
  r.check(st_copy == abi::kCqOk && first_diff(from, to, 4096) < 0, "a_copy_still_works",
          std::string("status ") + status_name(st_copy));
  return r.finish();
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int rest = argc > 2 ? argc - 2 : 0;
  char** args = argv + 2;
  if (mode == "bad-descriptors") return bad_descriptors(rest, args);
  if (mode == "cross-slot") return cross_slot();
  if (mode == "dereg-race") return dereg_race();
  if (mode == "scribble") return scribble(rest, args);
  if (mode == "hold") return hold(rest, args);
  if (mode == "fork-hold") return fork_hold(rest, args);
  if (mode == "remote-copy") return remote_copy(rest, args);
  if (mode == "raw-attach-version") return raw_attach(rest, args);
  if (mode == "random-descriptors") return random_descriptors(rest, args);
  std::fprintf(stderr,
               "usage: slot_abuse bad-descriptors [--idle-slot K] | cross-slot | dereg-race |\n"
               "       scribble [--seed S] [--writes N] [--reattach R] | hold [--copies | --export] |\n"
               "       remote-copy --slot S --key K --addr A --len L [--seconds T] |\n"
               "       fork-hold [--close-fds] | raw-attach-version V |\n"
               "       random-descriptors [--count N] [--seed S] [--nodes K]\n");
  return 2;
}
