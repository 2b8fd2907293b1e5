// unet_abuse: U-Net descriptors and queue words that libunet never writes,
// straight on libulnic's core (tests/integration/test_unet.py): every
// refusal of kOpUnetEndpoint and kOpUnetSend*, channel tables filled up,
// and a receiver whose queue words and free buffers lie -- with two slots of
// one process on one node, which also takes the NIC's same-node path.
// Prints one JSON line: {"ok": bool, "checks": n, "failures": [...]}; exit 0
// only if every check held.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ulnic/abi/unet.h"
#include "ulnic/nic.h"

namespace abi = ulnic::abi;

namespace {

uint32_t checks = 0;
std::vector<std::string> failures;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) failures.push_back(what);
}

struct Side {
  std::unique_ptr<ulnic::Nic> nic;
  uint8_t* seg = nullptr;
  uint8_t* area = nullptr;
  ulnic::MemRegion seg_mr, seg_local_mr, area_mr;
};

constexpr uint32_t kRx = 4, kFree = 4;
constexpr size_t kSeg = 64 << 10;

uint16_t run(ulnic::Nic& nic, abi::SqEntry e, const void* payload = nullptr, size_t bytes = 0) {
  auto r = payload ? nic.run(e, payload, bytes) : nic.run(e);
  return r ? r->status : 0xffff;
}

abi::SqEntry endpoint(const Side& s) {
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetEndpoint;
  e.src_key = s.area_mr.key;
  e.src_addr = reinterpret_cast<uint64_t>(s.area);
  e.length = kRx;
  e.access = kFree;
  e.dst_key = s.seg_mr.key;
  e.dst_addr = reinterpret_cast<uint64_t>(s.seg);
  e.reg_offset = kSeg;
  return e;
}

bool open_side(Side& s) {
  auto nic = ulnic::Nic::open();
  if (!nic) return false;
  s.nic = std::move(*nic);
  s.seg = static_cast<uint8_t*>(s.nic->alloc(2 * kSeg, 4096));
  s.area = static_cast<uint8_t*>(s.nic->alloc(8192, 64));
  if (!s.seg || !s.area) return false;
  std::memset(s.area, 0, 8192);
  auto seg = s.nic->register_memory(s.seg, kSeg, abi::kAccessLocal | abi::kAccessRemoteWrite);
  auto local = s.nic->register_memory(s.seg + kSeg, kSeg, abi::kAccessLocal);
  auto area = s.nic->register_memory(s.area, 8192, abi::kAccessLocal);
  if (!seg || !local || !area) return false;
  s.seg_mr = *seg, s.seg_local_mr = *local, s.area_mr = *area;
  return true;
}

// kOpUnetEndpoint: each bad field alone.
void bad_endpoints(Side& s) {
  struct Case {
    const char* name;
    void (*spoil)(abi::SqEntry&, const Side&);
    uint16_t want;
  } cases[] = {
      {"rx 0", [](abi::SqEntry& e, const Side&) { e.length = 0; }, abi::kCqBadLength},
      {"rx 3", [](abi::SqEntry& e, const Side&) { e.length = 3; }, abi::kCqBadLength},
      {"rx 8192", [](abi::SqEntry& e, const Side&) { e.length = 8192; }, abi::kCqBadLength},
      {"free 0", [](abi::SqEntry& e, const Side&) { e.access = 0; }, abi::kCqBadLength},
      {"free 6", [](abi::SqEntry& e, const Side&) { e.access = 6; }, abi::kCqBadLength},
      {"no segment", [](abi::SqEntry& e, const Side&) { e.reg_offset = 0; }, abi::kCqBadLength},
      {"segment >4G", [](abi::SqEntry& e, const Side&) { e.reg_offset = 1ull << 32; }, abi::kCqBadLength},
      {"segment past its registration", [](abi::SqEntry& e, const Side&) { e.reg_offset = kSeg + 1; },
       abi::kCqBadLength},
      {"area key", [](abi::SqEntry& e, const Side&) { e.src_key ^= 0x100; }, abi::kCqBadKey},
      {"area too small", [](abi::SqEntry& e, const Side&) { e.length = 128; }, abi::kCqBadLength},
      {"area misaligned", [](abi::SqEntry& e, const Side&) { e.src_addr += 4; }, abi::kCqBadAddress},
      {"segment key", [](abi::SqEntry& e, const Side&) { e.dst_key = 0; }, abi::kCqBadKey},
      {"segment without remote write",
       [](abi::SqEntry& e, const Side& s) {
         e.dst_key = s.seg_local_mr.key;
         e.dst_addr = reinterpret_cast<uint64_t>(s.seg + kSeg);
       },
       abi::kCqProtection},
      {"dst_slot", [](abi::SqEntry& e, const Side&) { e.dst_slot = 1; }, abi::kCqBadOpcode},
      {"dst_node", [](abi::SqEntry& e, const Side&) { e.dst_node = 1; }, abi::kCqBadOpcode},
      {"flags", [](abi::SqEntry& e, const Side&) { e.flags = abi::kSqNotify; }, abi::kCqBadOpcode},
  };
  for (const Case& c : cases) {
    abi::SqEntry e = endpoint(s);
    c.spoil(e, s);
    uint16_t st = run(*s.nic, e);
    check(st == c.want, std::string("endpoint ") + c.name + ": status " + std::to_string(st));
  }
}

abi::SqEntry send(uint32_t ch, uint64_t off, uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetSend;
  e.dst_key = ch;
  e.src_addr = off;
  e.length = len;
  return e;
}

void bad_sends(Side& s, uint32_t ch) {
  uint8_t data[abi::kMaxInline + 64] = {};
  abi::SqEntry inl = send(ch, 0, 8);
  inl.opcode = abi::kOpUnetSendInline;
  struct Case {
    const char* name;
    abi::SqEntry e;
    size_t payload;
    uint16_t want;
  } cases[] = {
      {"channel 64", send(64, 0, 8), 0, abi::kCqUnetBadChannel},
      {"an unused channel", send(abi::kMaxUnetChannels - 1, 0, 8), 0, abi::kCqUnetBadChannel},
      {"length 0", send(ch, 0, 0), 0, abi::kCqBadLength},
      {"length 65537", send(ch, 0, abi::kUnetMaxMessage + 1), 0, abi::kCqBadLength},
      {"past the segment", send(ch, kSeg - 4, 8), 0, abi::kCqBadLength},
      {"offset past the segment", send(ch, 1ull << 40, 8), 0, abi::kCqBadLength},
  };
  for (const Case& c : cases) {
    uint16_t st = run(*s.nic, c.e);
    check(st == c.want, std::string("send ") + c.name + ": status " + std::to_string(st));
  }
  abi::SqEntry e = send(ch, 0, 8);
  e.src_key = 1;
  check(run(*s.nic, e) == abi::kCqBadOpcode, "send with a key");
  e = inl;
  e.src_addr = 64;
  check(run(*s.nic, e, data, 8) == abi::kCqBadOpcode, "inline send with an address");
  // Too long to carry: refused without taking entries after it (there are
  // none: which entries would be its payload is what the length says).
  e = inl;
  e.length = abi::kMaxInline + 1;
  check(run(*s.nic, e) == abi::kCqBadLength, "inline send of 129 bytes");
}

int channel(ulnic::Nic& nic, uint32_t node, uint32_t slot, uint32_t tx, uint32_t rx, uint32_t& id) {
  abi::OwnerRequest q{};
  q.magic = abi::kOwnerMagic;
  q.type = abi::kReqUnetChannel;
  q.unet.remote_node = node;
  q.unet.remote_slot = slot;
  q.unet.tx_tag = tx;
  q.unet.rx_tag = rx;
  auto r = nic.call_daemon(q);
  if (!r) return -1;
  id = r->handle;
  return int(r->status);
}

int unchannel(ulnic::Nic& nic, uint32_t id) {
  abi::OwnerRequest q{};
  q.magic = abi::kOwnerMagic;
  q.type = abi::kReqUnetUnchannel;
  q.unet.channel = id;
  auto r = nic.call_daemon(q);
  return r ? int(r->status) : -1;
}

// Channels from slot `s` with rx tags from `tag` on until the daemon refuses
// one: their ids, and the refusal.
std::vector<uint32_t> channels_until_refused(Side& s, uint32_t tag, int& st) {
  std::vector<uint32_t> ids;
  for (st = 0; st == 0 && ids.size() <= abi::kMaxUnetChannels; ++tag) {
    uint32_t id = 0;
    st = channel(*s.nic, s.nic->node(), s.nic->slot(), tag, tag, id);
    if (st == 0) ids.push_back(id);
  }
  return ids;
}

// A slot holds at most kMaxUnetChannelsPerSlot channels (a and b hold one
// each already), the NIC kMaxUnetChannels: a third slot then gets none;
// dropping them makes room again.
void fill_channels(Side& a, Side& b) {
  int st_a = 0, st_b = 0, st_c = 0;
  std::vector<uint32_t> ids_a = channels_until_refused(a, 90000, st_a);
  std::vector<uint32_t> ids_b = channels_until_refused(b, 91000, st_b);
  check(st_a == abi::kVmmcNoResources && ids_a.size() == abi::kMaxUnetChannelsPerSlot - 1,
        "a slot's channels: status " + std::to_string(st_a) + " after " + std::to_string(ids_a.size()));
  check(st_b == abi::kVmmcNoResources && ids_b.size() == abi::kMaxUnetChannelsPerSlot - 1, "the other slot's");
  Side c;
  check(open_side(c), "a third slot");
  if (c.nic) check(channels_until_refused(c, 92000, st_c).empty() && st_c == abi::kVmmcNoResources,
                   "a full table: status " + std::to_string(st_c));
  bool all = true;
  for (uint32_t id : ids_a) all = all && unchannel(*a.nic, id) == 0;
  for (uint32_t id : ids_b) all = all && unchannel(*b.nic, id) == 0;
  check(all, "channels dropped");
}

abi::UnetHostWords& host_words(Side& s) { return *reinterpret_cast<abi::UnetHostWords*>(s.area); }
const abi::UnetNicWords& nic_words(Side& s) { return *reinterpret_cast<const abi::UnetNicWords*>(s.area + 64); }
abi::UnetRxDesc& rx_desc(Side& s, uint64_t n) { return reinterpret_cast<abi::UnetRxDesc*>(s.area + 128)[n % kRx]; }
abi::UnetFreeDesc& free_desc(Side& s, uint64_t n) {
  return reinterpret_cast<abi::UnetFreeDesc*>(s.area + 128 + kRx * sizeof(abi::UnetRxDesc))[n % kFree];
}
void store(uint64_t& w, uint64_t v) { std::atomic_ref<uint64_t>(w).store(v, std::memory_order_release); }
uint64_t load(const uint64_t& w) { return std::atomic_ref<const uint64_t>(w).load(std::memory_order_acquire); }
uint32_t seq(Side& s, uint64_t n) {
  return std::atomic_ref<uint32_t>(rx_desc(s, n).seq).load(std::memory_order_acquire);
}

// A receiver whose words lie, fed from a slot of the same NIC.
void lying_receiver(Side& tx, uint32_t ch, Side& rx) {
  for (uint32_t i = 0; i < 1000; ++i) tx.seg[i] = uint8_t(i * 13);
  // A free index no process could have written reads as an empty queue.
  store(host_words(rx).free_produced, 1ull << 40);
  check(run(*tx.nic, send(ch, 0, 1000)) == abi::kCqOk, "send 1");
  check(load(nic_words(rx).drops_free_empty) == 1, "a lying free index drops the message");
  store(host_words(rx).free_produced, 0);
  // A buffer outside the segment comes back unused, in a dropped descriptor.
  free_desc(rx, 0) = abi::UnetFreeDesc{uint32_t(kSeg - 512), 4096};
  store(host_words(rx).free_produced, 1);
  check(run(*tx.nic, send(ch, 0, 1000)) == abi::kCqOk, "send 2");
  check(load(nic_words(rx).drops_too_long) == 1 && seq(rx, 0) == 1 &&
            (rx_desc(rx, 0).flags & abi::kUnetRxDropped) && rx_desc(rx, 0).offset == kSeg - 512,
        "a buffer past the segment comes back");
  store(host_words(rx).rx_consumed, 1);
  // A good buffer: the bytes arrive, through the same-node path.
  free_desc(rx, 1) = abi::UnetFreeDesc{8192, 4096};
  store(host_words(rx).free_produced, 2);
  check(run(*tx.nic, send(ch, 0, 1000)) == abi::kCqOk, "send 3");
  const abi::UnetRxDesc& d = rx_desc(rx, 1);
  check(seq(rx, 1) == 2 && d.flags == 0 && d.length == 1000 && d.offset == 8192 &&
            std::memcmp(rx.seg + 8192, tx.seg, 1000) == 0,
        "same-node delivery");
  store(host_words(rx).rx_consumed, 2);
  // A consumed count beyond what was produced reads as a full queue.
  store(host_words(rx).rx_consumed, 1ull << 40);
  check(run(*tx.nic, send(ch, 0, 8)) == abi::kCqOk, "send 4");
  check(load(nic_words(rx).drops_rx_full) == 1 && load(nic_words(rx).delivered) == 1,
        "a lying consumed count drops the message");
}

}  // namespace

int main() {
  Side a, b;
  if (!open_side(a) || !open_side(b)) {
    std::printf("{\"ok\": false, \"failures\": [\"open\"]}\n");
    return 1;
  }
  uint32_t ab = 0, ba = 0;
  check(channel(*a.nic, b.nic->node(), b.nic->slot(), 80002, 80001, ab) == 0, "channel a->b");
  check(channel(*b.nic, a.nic->node(), a.nic->slot(), 80001, 80002, ba) == 0, "channel b->a");
  check(run(*a.nic, send(ab, 0, 8)) == abi::kCqUnetNoEndpoint, "a send before the endpoint");
  bad_endpoints(a);
  check(run(*a.nic, endpoint(a)) == abi::kCqOk, "endpoint a");
  check(run(*b.nic, endpoint(b)) == abi::kCqOk, "endpoint b");
  bad_sends(a, ab);
  check(run(*a.nic, send(ba, 0, 8)) == abi::kCqUnetBadChannel, "a send on b's channel");
  fill_channels(a, b);
  lying_receiver(a, ab, b);
  abi::SqEntry close = endpoint(a);
  close.flags = abi::kSqUnetClose;
  check(run(*a.nic, close) == abi::kCqOk, "close");
  check(run(*a.nic, send(ab, 0, 8)) == abi::kCqUnetNoEndpoint, "a send after close");
  std::string out = "{\"ok\": " + std::string(failures.empty() ? "true" : "false") +
                    ", \"checks\": " + std::to_string(checks) + ", \"failures\": [";
  for (size_t i = 0; i < failures.size(); ++i) out += (i ? ", \"" : "\"") + failures[i] + "\"";
  std::printf("%s]}\n", out.c_str());
  return failures.empty() ? 0 : 1;
}
