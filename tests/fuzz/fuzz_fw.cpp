// Fuzz target: the NIC firmware's input-facing code, built for the host
// against a fake HAL (fw_host/): the real link (firmware/link) and control
// program (firmware/lcp) -- event loop, slots, control queue, puts, VMMC,
// VIs, AM, mail -- with SRAM mapped at kSramBase, two host slots and a
// fabric in host memory, and a clock the input moves.
//
// The input plays everything outside the NIC that may lie to it: the
// processes on two slots (SQ entries of any opcode, inline continuations,
// heap bytes such as VI descriptors and AM prefixes, wild ring indices),
// the daemon (control commands), and node 1 of the fabric (packets of every
// protocol; direct, or through a switch where packets carry checksums). A
// command may ask the target to fill in what the fuzzer cannot guess --
// addressing, sequence numbers, checksums, keys the NIC handed out -- so
// that its bytes reach the protocols rather than the first check.
//
// Invariants checked besides ASan/UBSan: every packet the NIC puts on the
// fabric is well-formed (magic, addressing, a payload within the MTU, a
// valid checksum through a switch), every completion and control response
// carries a status the ABI defines, a slot is free, active, cut off or
// flushed, and an active slot never owes more completions than its CQ holds.
//
// Input: one mode byte (bit 0: through a switch; bit 1: the slots are not
// attached up front), then commands of one byte -- kind in the low 3 bits,
// argument above -- each followed by its bytes; after each the NIC's loop
// runs two passes. A short input is padded with zeros.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/board.h"
#include "core/boot_config.h"
#include "core/status.h"
#include "fuzz_check.h"
#include "fw_host.h"
#include "hal/clint.h"
#include "lcp/am.h"
#include "lcp/control.h"
#include "lcp/loop.h"
#include "lcp/mail.h"
#include "lcp/remote.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"
#include "link/link.h"
#include "ulnic/abi/ctrl.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/crc32c.h"
#include "ulnic/wire_sum.h"

namespace {

namespace abi = ulnic::abi;

constexpr uint32_t kSlots = 2;
constexpr uint64_t kSlotSize = 256u << 10;
constexpr uint32_t kSq = 64, kCq = 256, kEq = 64;  // the slots' rings
constexpr uint32_t kRingCapacity = 16;              // the fabric's
constexpr uint32_t kPeer = 1;                       // the node the input plays
constexpr uint32_t kPeerIncarnation = 0x5eed1234;
constexpr uint32_t kResults = 16;                   // values the NIC handed out, kept for fixups

enum Kind : uint8_t {
  kSqEntries = 0,  // arg: bit 0 slot, bits 1-2 entries - 1, bit 3 key fixup; then 64 bytes each
  kPacket = 1,     // arg: bit 0 fixup, bit 1 key fixup, bit 2 an ACK, bit 3 from beyond a gap; then u16 length,
                   // header, payload
  kCtrlRaw = 2,    // arg: bit 0 key fixup; then 128 bytes: any control command
  kAttach = 3,     // arg: bit 0 slot, bit 1 detach instead: the daemon's commands
  kTime = 4,       // arg: the clock moves 2^arg ticks
  kRingIndex = 5,  // arg: bit 0 slot, bits 1-2 which index; then u32: a wild ring index
  kHeap = 6,       // arg: bit 0 slot; then u32 offset, u8 length, bytes: the process writes its memory
  kPasses = 7,     // arg: more passes of the loop
};

struct Input {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  // `size` bytes into out; zeros past the end of the input.
  void take(void* out, size_t size) {
    size_t k = size < n ? size : n;
    memcpy(out, p, k);
    memset(static_cast<uint8_t*>(out) + k, 0, size - k);
    p += k, n -= k;
  }
  void skip(size_t size) {
    size_t k = size < n ? size : n;
    p += k, n -= k;
  }
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
};

// A process's side of a slot.
struct Proc {
  abi::RingProducer<abi::SqEntry> sq;
  abi::RingConsumer<abi::CqEntry> cq;
  abi::RingConsumer<abi::EqEntry> eq;
  abi::SlotLayout layout;  // as the daemon gave it (slot_size 0: never attached)
  uint64_t generation;
  // The process wrote over its own completion queue (heap_write may write
  // anywhere in its slot): what the CQ holds since is not all the NIC's, so
  // its entries are not checked (a run found status 256 that the process,
  // not the NIC, had put there; regression seed corpus/fw/crash-scribbled-cq-status).
  bool cq_scribbled = false;
};

struct World {
  uint8_t* slot_mem[kSlots];
  uint8_t* fabric;
  uint64_t fabric_size;
  uint32_t regs[4];  // the fabric's BAR0: doorbell writes land here
  core::board::Board board;
  core::boot_config::Config cfg;
  lcp::SlotTable slots;
  lcp::Control control;
  lcp::LoopState loop;
  Proc procs[kSlots];
  abi::RingProducer<abi::CtrlCommand> ctrl;  // the daemon's ends of the control queue
  abi::RingConsumer<abi::CtrlResponse> ctrl_rsp;
  uint64_t ctrl_seq;
  // Node 1: its ends of the rings (through the switch port, or direct).
  bool switched;
  abi::RingProducer<abi::Packet> to_nic;
  abi::RingConsumer<abi::Packet> from_nic;
  uint32_t nic_incarnation;  // learnt from the NIC's packets
  uint32_t next_seq;         // node 1's next data sequence number
  bool ahead;                // a packet with next_seq + 1 went (held by a switched NIC: the next in order skips it)
  uint32_t heard;            // the NIC's data packets node 1 took in order
  // Keys, handles, VI numbers... from completions and control responses.
  uint32_t results[kResults];
  uint32_t num_results;
};

World w;
// FUZZ_FW_TRACE=1 in the environment: print what the NIC answers (to see
// where a seed goes).
bool g_trace;

abi::RingControl* fabric_ring(uint32_t src, uint32_t dst) {
  return reinterpret_cast<abi::RingControl*>(w.fabric +
                                             abi::ring_offset(w.cfg.fabric_ports, kRingCapacity, src, dst));
}

uint32_t checksum(const abi::WireHeader& h, const uint8_t* payload) {
  abi::WireHeader copy = h;
  copy.checksum = 0;
  ulnic::WireSum sum = ulnic::wire_sum(payload, h.payload_len);
  return ulnic::crc32c(ulnic::crc32c(0, &copy, sizeof copy), &sum, sizeof sum);
}

void note_result(uint32_t v) { w.results[w.num_results++ % kResults] = v; }
uint32_t result(uint32_t i) { return w.num_results ? w.results[i % (w.num_results < kResults ? w.num_results : kResults)] : i; }

// What the NIC wrote for the outside, taken as its readers would, checked.
void take_outputs() {
  while (const abi::Packet* p = w.from_nic.peek()) {
    abi::WireHeader h = p->h;
    FUZZ_CHECK(h.magic == abi::kWireMagic && h.src == 0 && h.dst == kPeer);
    FUZZ_CHECK(h.type == abi::kPktData || h.type == abi::kPktAck);
    FUZZ_CHECK(h.payload_len <= abi::kMtu && (h.type == abi::kPktData || h.payload_len == 0));
    FUZZ_CHECK(h.src_incarnation != 0);
    if (w.switched) FUZZ_CHECK(h.checksum == checksum(h, p->payload));
    if (g_trace)
      fprintf(stderr, "fw: packet type %u op %u flags %#x seq %u ack %u len %u status %u op_id %#llx\n", h.type,
              h.op, h.flags, h.seq, h.ack, h.payload_len, h.status, (unsigned long long)h.op_id);
    w.nic_incarnation = h.src_incarnation;
    if (h.type == abi::kPktData && h.seq == w.heard + 1) ++w.heard;
    w.from_nic.pop();
  }
  w.from_nic.release();
  for (uint32_t k = 0; k < kSlots; ++k) {
    Proc& pr = w.procs[k];
    if (pr.layout.slot_size == 0) continue;  // no process yet
    while (const abi::CqEntry* c = pr.cq.peek()) {
      if (g_trace)
        fprintf(stderr, "fw: slot %u cqe opcode %u status %u result %#x\n", k, c->opcode, c->status, c->result);
      FUZZ_CHECK(pr.cq_scribbled || c->status <= abi::kCqLastStatus);
      if (c->status == abi::kCqOk) note_result(c->result);
      pr.cq.pop();
    }
    pr.cq.release();
    while (pr.eq.peek()) pr.eq.pop();
    pr.eq.release();
  }
  // The NIC's own view of the slots (the header's copy is the process's to
  // scribble on).
  for (const lcp::Slot& s : w.slots.slots) {
    FUZZ_CHECK(s.state <= abi::SlotState::kFlushed);
    FUZZ_CHECK(s.state != abi::SlotState::kActive || s.cq_reserved <= s.layout.cq_capacity);
  }
  while (const abi::CtrlResponse* r = w.ctrl_rsp.peek()) {
    FUZZ_CHECK(r->status <= abi::kCtrlLastStatus);
    if (g_trace)
      fprintf(stderr, "fw: ctrl opcode %u status %u value %#llx\n", r->opcode, r->status,
              (unsigned long long)r->value);
    if (r->status == abi::kCtrlOk && r->value) note_result(uint32_t(r->value));
    w.ctrl_rsp.pop();
  }
  w.ctrl_rsp.release();
}

void pass(uint32_t n = 1) {
  for (uint32_t i = 0; i < n; ++i) {
    fw_host::g_mtime += 10;  // a microsecond a pass
    lcp::loop_pass(w.loop, fw_host::g_mtime);
    take_outputs();
  }
}

void send_ctrl(const abi::CtrlCommand& c) {
  if (abi::CtrlCommand* e = w.ctrl.reserve()) {
    *e = c;
    w.ctrl.push();
    w.ctrl.publish();
  }
}

// The daemon attaches slot k as it does every process's (daemon.cpp make_layout).
void attach(uint32_t k) {
  abi::CtrlCommand c{};
  c.opcode = abi::kCtrlAttachSlot;
  c.slot = k;
  c.seq = ++w.ctrl_seq;
  c.generation = ++w.procs[k].generation;
  c.host_peer = 99;
  abi::SlotLayout& l = c.layout;
  l.sq_offset = abi::kSlotHeaderSize;
  l.sq_capacity = kSq;
  l.cq_offset = uint32_t(l.sq_offset + ((abi::ring_bytes<abi::SqEntry>(kSq) + 63) & ~63ull));
  l.cq_capacity = kCq;
  l.eq_offset = uint32_t(l.cq_offset + ((abi::ring_bytes<abi::CqEntry>(kCq) + 63) & ~63ull));
  l.eq_capacity = kEq;
  l.heap_offset = (l.eq_offset + abi::ring_bytes<abi::EqEntry>(kEq) + 0xffff) & ~0xffffull;
  l.heap_size = kSlotSize - l.heap_offset;
  l.slot_size = kSlotSize;
  // The slot's header and the process's ends of the rings, as a fresh
  // process finds them.
  uint8_t* base = w.slot_mem[k];
  memset(base, 0, l.heap_offset);
  auto* hdr = reinterpret_cast<abi::SlotHeader*>(base);
  hdr->magic = abi::kSlotMagic;
  hdr->slot_index = k;
  hdr->generation = c.generation;
  hdr->layout = l;
  auto* sq = reinterpret_cast<abi::RingControl*>(base + l.sq_offset);
  auto* cq = reinterpret_cast<abi::RingControl*>(base + l.cq_offset);
  auto* eq = reinterpret_cast<abi::RingControl*>(base + l.eq_offset);
  Proc& pr = w.procs[k];
  pr.cq_scribbled = false;
  pr.sq = {};
  pr.cq = {};
  pr.eq = {};
  pr.sq.attach(sq, reinterpret_cast<abi::SqEntry*>(sq + 1), kSq);
  pr.cq.attach(cq, reinterpret_cast<abi::CqEntry*>(cq + 1), kCq);
  pr.eq.attach(eq, reinterpret_cast<abi::EqEntry*>(eq + 1), kEq);
  pr.layout = l;
  send_ctrl(c);
}

void reset(uint8_t mode) {
  fw_host::g_mtime = 1;
  w.switched = mode & 1;
  for (uint32_t k = 0; k < kSlots; ++k) memset(w.slot_mem[k], 0, kSlotSize);
  memset(w.fabric, 0, w.fabric_size);
  w.cfg = {};
  w.cfg.node_id = 0;
  w.cfg.num_nodes = 2;
  w.cfg.heartbeat_us = core::boot_config::kDefaultHeartbeatUs;
  w.cfg.fabric_ports = w.switched ? 3 : 2;
  w.cfg.switch_port = w.switched ? 2 : abi::kNoSwitch;
  w.cfg.ring_capacity = kRingCapacity;
  lcp::slots_init(w.slots, w.board, fw_host::g_mtime);
  lcp::control_init(w.control);
  lcp::remote_init(w.slots);
  lcp::vmmc_init(w.slots);
  lcp::vi_init(w.slots);
  lcp::am_init(w.slots);
  lcp::unet_init(w.slots);
  lcp::mail_init(w.board);
  link::init(w.board, w.cfg, lcp::remote_upcalls(), fw_host::g_mtime);
  FUZZ_CHECK(link::enabled());
  w.loop = {};
  lcp::loop_init(w.loop, w.cfg, fw_host::g_mtime);
  w.loop.slots = &w.slots;
  w.loop.control = &w.control;
  auto& area = *reinterpret_cast<abi::CtrlArea*>(abi::kSramBase + abi::kCtrlOffset);
  w.ctrl = {};
  w.ctrl_rsp = {};
  w.ctrl.attach(&area.cmd_ring, area.cmds, abi::kCtrlCapacity);
  w.ctrl_rsp.attach(&area.rsp_ring, area.rsps, abi::kCtrlCapacity);
  w.ctrl_seq = 0;
  for (Proc& pr : w.procs) pr = {};
  uint32_t via = w.switched ? w.cfg.switch_port : kPeer;
  abi::RingControl* in = fabric_ring(via, 0);
  abi::RingControl* out = fabric_ring(0, via);
  w.to_nic = {};
  w.from_nic = {};
  w.to_nic.attach(in, reinterpret_cast<abi::Packet*>(in + 1), kRingCapacity);
  w.from_nic.attach(out, reinterpret_cast<abi::Packet*>(out + 1), kRingCapacity);
  w.nic_incarnation = 0;
  w.next_seq = 1;
  w.ahead = false;
  w.heard = 0;
  w.num_results = 0;
  if (!(mode & 2)) {
    for (uint32_t k = 0; k < kSlots; ++k) attach(k);
    pass(2);
  }
}

void sq_entries(Input& in, uint8_t arg) {
  Proc& pr = w.procs[arg & 1];
  uint32_t count = 1 + ((arg >> 1) & 3);
  if (pr.layout.slot_size == 0) return in.skip(count * sizeof(abi::SqEntry));  // no process yet
  for (uint32_t i = 0; i < count; ++i) {
    abi::SqEntry e = in.get<abi::SqEntry>();
    if (i == 0 && (arg & 8)) {
      e.src_key = result(e.src_key);
      e.dst_key = result(e.dst_key);
    }
    abi::SqEntry* slot = pr.sq.reserve();
    if (!slot) break;
    *slot = e;
    pr.sq.push();
  }
  pr.sq.publish();
}

void packet(Input& in, uint8_t arg) {
  uint32_t len = in.get<uint16_t>() % (abi::kMtu + 1);
  abi::Packet* p = w.to_nic.reserve();
  abi::Packet scratch;
  if (!p) p = &scratch;  // ring full: the bytes are consumed all the same
  p->h = in.get<abi::WireHeader>();
  if (arg & 4) len = 0;
  in.take(p->payload, len);
  if (arg & 1) {
    abi::WireHeader& h = p->h;
    h.magic = abi::kWireMagic;
    h.type = (arg & 4) ? abi::kPktAck : abi::kPktData;
    h.payload_len = uint16_t(len);
    h.src = kPeer;
    h.dst = 0;
    if (arg & 4) {
      h.seq = 0;
    } else if (arg & 8) {
      h.seq = w.next_seq + 1;  // beyond a gap: a switched NIC holds it until the gap fills
      w.ahead = w.switched;
    } else {
      h.seq = w.next_seq++;
      if (w.ahead) ++w.next_seq, w.ahead = false;  // the packet after it was held and is now delivered
    }
    h.ack = w.heard;
    h.src_incarnation = kPeerIncarnation;
    h.dst_incarnation = w.nic_incarnation;
    if (arg & 2) {
      h.dst_slot = uint16_t(h.dst_slot % kSlots);
      h.dst_key = result(h.dst_key);
    }
    h.checksum = w.switched ? checksum(h, p->payload) : 0;
  }
  if (p == &scratch) return;
  w.to_nic.push();
  w.to_nic.publish();
}

void ring_index(Input& in, uint8_t arg) {
  uint32_t k = arg & 1, v = in.get<uint32_t>();
  const abi::SlotLayout& l = w.procs[k].layout;
  // The process's words: the SQ's tail, the CQ's and EQ's heads; or node
  // 1's tail of the ring into the NIC.
  abi::RingControl* c = nullptr;
  bool tail = false;
  switch ((arg >> 1) & 3) {
    case 0: c = reinterpret_cast<abi::RingControl*>(w.slot_mem[k] + l.sq_offset), tail = true; break;
    case 1: c = reinterpret_cast<abi::RingControl*>(w.slot_mem[k] + l.cq_offset); break;
    case 2: c = reinterpret_cast<abi::RingControl*>(w.slot_mem[k] + l.eq_offset); break;
    case 3: c = fabric_ring(w.switched ? w.cfg.switch_port : kPeer, 0), tail = true; break;
  }
  if (l.slot_size == 0 && ((arg >> 1) & 3) != 3) return;  // never attached: no rings
  __atomic_store_n(tail ? &c->tail : &c->head, v, __ATOMIC_RELEASE);
}

void heap_write(Input& in, uint8_t arg) {
  uint32_t off = in.get<uint32_t>() % kSlotSize;
  uint32_t len = in.get<uint8_t>();
  if (len > kSlotSize - off) len = uint32_t(kSlotSize - off);
  Proc& pr = w.procs[arg & 1];
  const abi::SlotLayout& l = pr.layout;
  if (l.slot_size && off < l.cq_offset + abi::ring_bytes<abi::CqEntry>(l.cq_capacity) && off + len > l.cq_offset)
    pr.cq_scribbled = true;
  in.take(w.slot_mem[arg & 1] + off, len);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  void* sram = mmap(reinterpret_cast<void*>(abi::kSramBase), abi::kSramSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  FUZZ_CHECK(sram == reinterpret_cast<void*>(abi::kSramBase));
  core::status::begin_boot(1, "fuzz");
  g_trace = getenv("FUZZ_FW_TRACE") != nullptr;
  w.fabric_size = abi::fabric_bytes(3, kRingCapacity);
  w.fabric = static_cast<uint8_t*>(aligned_alloc(4096, (w.fabric_size + 4095) & ~4095ull));
  w.board = {};
  w.board.fabric.present = true;
  w.board.fabric.mem = reinterpret_cast<uint64_t>(w.fabric);
  w.board.fabric.size = w.fabric_size;
  w.board.fabric.regs = reinterpret_cast<uint64_t>(w.regs);
  for (uint32_t k = 0; k < kSlots; ++k) {
    w.slot_mem[k] = static_cast<uint8_t*>(aligned_alloc(4096, kSlotSize));
    w.board.slots[k] = {true, reinterpret_cast<uint64_t>(w.slot_mem[k]), kSlotSize};
  }
  w.board.num_slots = kSlots;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Input in{data + 1, size - 1};
  reset(data[0]);
  while (!in.empty()) {
    uint8_t op = in.get<uint8_t>();
    uint8_t arg = op >> 3;
    switch (Kind(op & 7)) {
      case kSqEntries: sq_entries(in, arg); break;
      case kPacket: packet(in, arg); break;
      case kCtrlRaw: {
        abi::CtrlCommand c = in.get<abi::CtrlCommand>();
        if (arg & 1) {
          c.vmmc.handle = result(c.vmmc.handle);
          c.vmmc.key = result(c.vmmc.key);
        }
        send_ctrl(c);
        break;
      }
      case kAttach:
        if (arg & 2) {
          abi::CtrlCommand c{};
          c.opcode = abi::kCtrlDetachSlot;
          c.slot = arg & 1;
          c.seq = ++w.ctrl_seq;
          send_ctrl(c);
        } else {
          attach(arg & 1);
        }
        break;
      case kTime: fw_host::g_mtime += 1ull << arg; break;
      case kRingIndex: ring_index(in, arg); break;
      case kHeap: heap_write(in, arg); break;
      case kPasses: pass(arg); break;
    }
    pass(2);
  }
  // Then the timers: retransmissions, ACKs, keepalives, unreachable peers.
  for (int i = 0; i < 4; ++i) {
    fw_host::g_mtime += hal::clint::us_to_ticks(2'000'000);
    pass(2);
  }
  return 0;
}
