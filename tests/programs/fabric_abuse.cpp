// fabric_abuse: a hostile fabric peer (issue 20 item 3, the wire side). It
// joins the cluster's fabric as an anonymous peer (as ulnic-switch does:
// the shared memory and every NIC's doorbell), takes the port of a node
// that is down, and sends the live NICs random and mutated packets from it:
//
//   fabric_abuse --fabric DIR --as K --count N [--seed S]
//
// It plays the link well enough for most packets to get past it: it learns
// each NIC's incarnation from the packets the NIC sends it, numbers its data
// packets in order and acknowledges the NIC's, so the protocol layer above
// (puts, VMMC sends, VI messages and connections, mail, AM) sees random
// operation fields, lengths, addresses, keys and payloads -- while a share
// of packets is garbage for the link itself (random bytes, wrong magic,
// lengths, types, stale or wild sequence numbers, a new incarnation now and
// then) and, twice a run, a wild ring index. It never reads the rings
// between other nodes: keys travel there, and a peer is hostile, not root.
// Prints one JSON line: packets sent by kind, the NICs' packets it took.
// Exit 0 when all N went out, 1 otherwise (a NIC that stopped taking them).
//
//   fabric_abuse --fabric DIR --as K --count N --to D
//
// On a fabric with a switch: N packets from port K (a node that is down)
// to node D, through K's uplink to the switch, as a sender that never stops
// would send them (well formed, the link's first data packet, no protocol
// operation). To a dead D they stall that port: the switch must drop them
// once it has taken nothing for a while, or everything behind them in K's
// uplink waits for ever. It does not read the rings toward K. Exit 0 when
// all N went into the uplink (none waited 30 s for room), 1 otherwise.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/abi/fabric.h"
#include "ulnic/abi/ring.h"
#include "ulnic/abi/slot.h"
#include "ulnic/util/mapping.h"
#include "ulnic/util/unix_socket.h"

namespace abi = ulnic::abi;
using Clock = std::chrono::steady_clock;

namespace {

struct Peer {  // one live NIC, as port K sees it
  abi::RingProducer<abi::Packet> out;  // ring[K -> j]
  abi::RingConsumer<abi::Packet> in;   // ring[j -> K]
  abi::RingControl* out_ctl = nullptr;
  std::vector<ulnic::UniqueFd> doorbells;
  uint32_t their_incarnation = 0;
  uint32_t next_seq = 1;   // our next data packet to it
  uint32_t their_seq = 0;  // its data packets we took, in order
  uint32_t their_ack = 0;  // ours it took, in order (its acknowledgements)
  uint64_t taken = 0;      // its packets we read
};

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "fabric_abuse: %s\n", why.c_str());
  std::printf("{\"ok\": false, \"error\": \"%s\"}\n", why.c_str());
  std::exit(1);
}

// --to: `count` packets from port `as` to node `to`, through the uplink
// ring[as -> switch]; the switch's mailbox comes as a notice (its peer id is
// in its port area), to ring it when it sleeps.
int flood_through_switch(const ulnic::UniqueFd& sock, const abi::FabricHeader& geo, abi::RingControl* up_ctl,
                         abi::PortArea& sw, uint32_t as, uint32_t to, uint64_t count) {
  if (to >= geo.switch_port) die("--to names no node");
  abi::RingProducer<abi::Packet> up;
  if (!up.attach(up_ctl, reinterpret_cast<abi::Packet*>(up_ctl + 1), geo.ring_capacity))
    die("the uplink of port " + std::to_string(as) + " is corrupt already");
  std::vector<ulnic::UniqueFd> mailbox;
  auto ring_switch = [&] {
    for (;;) {  // notices: (peer id, one eventfd of its mailbox), a mailbox's vectors in order
      ulnic::UniqueFd f;
      auto who = ulnic::recv_i64_with_fd(sock.get(), f, 0);
      if (!who) break;
      if (f && *who == int64_t(__atomic_load_n(&sw.peer_id, __ATOMIC_RELAXED))) mailbox.push_back(std::move(f));
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our tail before its flag
    if (mailbox.size() <= abi::kVectorFabric || !__atomic_load_n(&sw.rx_asleep, __ATOMIC_RELAXED)) return;
    uint64_t one = 1;
    ssize_t ignored = ::write(mailbox[abi::kVectorFabric].get(), &one, sizeof one);
    (void)ignored;
  };
  const uint32_t incarnation = 0x5eed0001;
  uint64_t sent = 0, waits = 0;
  auto last_progress = Clock::now();
  while (sent < count) {
    abi::Packet* pkt = up.reserve();
    if (!pkt) {  // full: the switch has not taken the head yet
      ring_switch();
      if (Clock::now() - last_progress > std::chrono::seconds(30)) break;
      ++waits;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    last_progress = Clock::now();
    abi::WireHeader& h = pkt->h;
    std::memset(&h, 0, sizeof h);
    h.magic = abi::kWireMagic;
    h.type = abi::kPktData;
    h.src = uint16_t(as);
    h.dst = uint16_t(to);
    h.src_incarnation = incarnation;
    h.seq = 1;
    h.op = abi::kWireOpNone;
    up.push();
    up.publish();
    if (++sent % 16 == 0) ring_switch();
  }
  ring_switch();
  std::printf("{\"ok\": %s, \"sent\": %" PRIu64 ", \"waits\": %" PRIu64 "}\n", sent == count ? "true" : "false",
              sent, waits);
  return sent == count ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint32_t as = 0;
  uint64_t count = 1000000, seed = 1;
  long to = -1;  // --to: flood node `to` through the switch
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--fabric") dir = v;
    else if (a == "--as") as = uint32_t(std::strtoul(v.c_str(), nullptr, 0));
    else if (a == "--count") count = std::strtoull(v.c_str(), nullptr, 0);
    else if (a == "--seed") seed = std::strtoull(v.c_str(), nullptr, 0);
    else if (a == "--to") to = std::strtol(v.c_str(), nullptr, 0);
    else dir.clear(), i = argc;
  }
  if (dir.empty() || argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: fabric_abuse --fabric DIR --as K --count N [--seed S]\n"
                 "       fabric_abuse --fabric DIR --as K --count N --to D   (a fabric with a switch)\n");
    return 2;
  }
  // Join as an anonymous peer (emulator/fabric/fabric_server.h: host.sock;
  // greeting: version 0, our id, the memory's fd with id -1).
  auto sock = ulnic::connect_unix(dir + "/host.sock");
  if (!sock) die("cannot reach the fabric server: " + sock.error().message);
  ulnic::UniqueFd fd, mem_fd;
  auto v = ulnic::recv_i64_with_fd(sock->get(), fd, 5000);
  auto id = ulnic::recv_i64_with_fd(sock->get(), fd, 5000);
  auto m = ulnic::recv_i64_with_fd(sock->get(), mem_fd, 5000);
  if (!v || *v != 0 || !id || !m || *m != -1 || !mem_fd) die("bad greeting from the fabric server");
  abi::FabricHeader geo{};
  if (::pread(mem_fd.get(), &geo, sizeof geo, 0) != ssize_t(sizeof geo) || geo.magic != abi::kFabricMagic)
    die("the fabric has no geometry");
  if ((geo.switch_port != abi::kNoSwitch) != (to >= 0))
    die(to >= 0 ? "--to: the fabric has no switch" : "a fabric with a switch: use its fault injection, or --to");
  if (as >= geo.ports || as == geo.switch_port) die("--as names no node's port");
  auto map = ulnic::Mapping::map_file(dir + "/fabric.mem", geo.size, true);
  if (!map) die(map.error().message);
  uint8_t* mem = map->data();
  auto ring = [&](uint32_t src, uint32_t dst) {
    return reinterpret_cast<abi::RingControl*>(mem + abi::ring_offset(geo.ports, geo.ring_capacity, src, dst));
  };
  auto port = [&](uint32_t p) -> abi::PortArea& {
    return reinterpret_cast<abi::PortArea*>(mem + abi::kPortAreaOffset)[p];
  };
  if (to >= 0) return flood_through_switch(*sock, geo, ring(as, geo.switch_port), port(geo.switch_port), as,
                                           uint32_t(to), count);
  std::vector<Peer> peers(geo.ports);
  std::vector<uint32_t> live;
  for (uint32_t j = 0; j < geo.ports; ++j) {
    if (j == as) continue;
    Peer& p = peers[j];
    p.out_ctl = ring(as, j);
    if (!p.out.attach(p.out_ctl, reinterpret_cast<abi::Packet*>(p.out_ctl + 1), geo.ring_capacity))
      die("ring " + std::to_string(as) + "->" + std::to_string(j) + " is corrupt already");
    abi::RingControl* in = ring(j, as);
    p.in.attach(in, reinterpret_cast<abi::Packet*>(in + 1), geo.ring_capacity);
    live.push_back(j);
  }
  // The NICs' mailboxes come as notices (peer id k < ports: NIC k).
  auto read_notices = [&] {
    for (;;) {
      ulnic::UniqueFd f;
      auto who = ulnic::recv_i64_with_fd(sock->get(), f, 0);
      if (!who) return;
      if (f && *who >= 0 && uint64_t(*who) < geo.ports) peers[*who].doorbells.push_back(std::move(f));
    }
  };
  read_notices();
  auto ring_nic = [&](uint32_t j) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our tail before their flag (the NIC's prepare_sleep)
    if (!__atomic_load_n(&port(j).rx_asleep, __ATOMIC_RELAXED) || peers[j].doorbells.empty()) return;
    uint64_t one = 1;
    ssize_t ignored = ::write(peers[j].doorbells[abi::kVectorFabric].get(), &one, sizeof one);
    (void)ignored;
  };
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return n ? rng() % n : 0; };
  uint32_t incarnation = uint32_t(rng()) | 1;
  // What the NICs send us: their incarnation and data (acknowledged in ours).
  auto drain = [&](Peer& p) {
    for (uint32_t n = p.in.available(); n; n = p.in.available()) {
      for (; n; --n) {
        abi::WireHeader h;
        std::memcpy(&h, &p.in.front()->h, sizeof h);
        ++p.taken;
        if (h.magic == abi::kWireMagic && h.dst == as) {
          if (h.src_incarnation != p.their_incarnation) p.their_incarnation = h.src_incarnation, p.their_seq = 0;
          if (h.type == abi::kPktData && h.seq == p.their_seq + 1) p.their_seq = h.seq;
          if (h.dst_incarnation == incarnation && h.ack + 1 <= p.next_seq) p.their_ack = h.ack;
        }
        p.in.pop();
      }
      p.in.release();
    }
  };
  const uint8_t ops[] = {abi::kWireOpNone,  abi::kWireOpPut,     abi::kWireOpResult,   abi::kWireOpSend,
                         abi::kWireOpMail,  abi::kWireOpViSend,  abi::kWireOpViWrite,  abi::kWireOpViReadReq,
                         abi::kWireOpViReadResp, abi::kWireOpViConn, abi::kWireOpAm, abi::kWireOpUnet,
                         abi::kWireOpOkThrough};
  enum Kind { kGarbage, kLinkNoise, kInOrder, kAck, kKinds };
  const char* names[kKinds] = {"garbage", "link_noise", "in_order", "ack"};
  uint64_t sent[kKinds] = {}, wild = 0;
  uint64_t total = 0, stalls = 0;
  auto last_progress = Clock::now();
  while (total < count) {
    uint32_t j = live[pick(live.size())];
    Peer& p = peers[j];
    drain(p);
    abi::Packet* pkt = p.out.reserve();
    if (!pkt) {  // full: the NIC takes them when it gets to it
      ring_nic(j);
      read_notices();
      if (Clock::now() - last_progress > std::chrono::seconds(30)) break;
      ++stalls;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    last_progress = Clock::now();
    abi::WireHeader& h = pkt->h;
    uint32_t roll = uint32_t(pick(100));
    Kind kind = roll < 5 ? kGarbage : roll < 20 ? kLinkNoise : roll < 90 ? kInOrder : kAck;
    uint16_t len = uint16_t(pick(4) ? pick(257) : pick(abi::kMtu + 1));
    if (kind == kGarbage) {
      auto* w = reinterpret_cast<uint64_t*>(pkt);
      for (size_t k = 0; k < (sizeof h + len) / 8; ++k) w[k] = rng();
      if (pick(2)) h.magic = abi::kWireMagic, h.dst = uint16_t(j), h.src = uint16_t(as);
    } else {
      std::memset(&h, 0, sizeof h);
      h.magic = abi::kWireMagic;
      h.src = uint16_t(as);
      h.dst = uint16_t(j);
      h.src_incarnation = incarnation;
      h.dst_incarnation = pick(16) ? p.their_incarnation : uint32_t(rng());
      h.ack = p.their_seq;
      h.type = kind == kAck ? abi::kPktAck : abi::kPktData;
      h.payload_len = kind == kAck ? 0 : len;
      // A peer that never sends again what the NIC did not take would stay
      // out of order for ever: go on from the NIC's acknowledgement when it
      // lags far behind (a go-back-N of sorts, with new random packets).
      if (kind != kAck && p.next_seq > p.their_ack + 64) p.next_seq = p.their_ack + 1;
      h.seq = kind == kAck ? 0 : p.next_seq;
      h.op = pick(8) ? ops[pick(sizeof ops)] : uint8_t(rng());
      h.flags = uint8_t(pick(4) ? pick(1u << 7) : rng());
      h.status = uint8_t(pick(4) ? 0 : rng());
      h.dst_slot = uint16_t(pick(8) ? pick(10) : rng());
      h.dst_key = pick(2) ? uint32_t(rng()) : uint32_t(pick(64));
      h.dst_addr = pick(2) ? rng() : pick(1u << 20);
      h.op_id = rng();
      h.op_length = pick(2) ? len : uint32_t(pick(4) ? pick(1u << 20) : rng());
      h.src_slot = uint16_t(pick(10));
      h.vi = uint16_t(pick(4) ? pick(8) : rng());
      for (uint16_t k = 0; k < h.payload_len; ++k) pkt->payload[k] = uint8_t(rng());
      if (kind == kLinkNoise) {  // sense for the link to refuse, or odd but legal
        switch (pick(8)) {
          case 0: h.magic ^= 1u << pick(32); break;
          case 1: h.payload_len = uint16_t(abi::kMtu + 1 + pick(60000)); break;
          case 2: h.type = uint8_t(rng()); break;
          case 3: h.seq = p.next_seq + 1 + uint32_t(pick(1000)); break;             // ahead
          case 4: h.seq = p.next_seq - 1 - uint32_t(pick(p.next_seq)); break;        // a duplicate
          case 5: h.src_incarnation = 0; break;
          case 6: h.ack = uint32_t(rng()); break;
          default: h.dst = uint16_t(pick(geo.ports + 2)); break;
        }
      } else if (kind == kInOrder) {
        ++p.next_seq;
      }
    }
    p.out.push();
    p.out.publish();
    ++sent[kind];
    ++total;
    if (total % 16 == 0 || p.out.free_space() == 0) ring_nic(j);
    if (pick(50000) == 0) {  // now and then a new incarnation: the NICs start our conversation over
      incarnation = uint32_t(rng()) | 1;
      for (uint32_t k : live) peers[k].next_seq = 1, peers[k].their_ack = 0;
    }
    if (total % (count / 2 + 1) == count / 4) {  // twice a run: a wild tail index
      __atomic_store_n(&p.out_ctl->tail, p.out.tail() + geo.ring_capacity * 7 + 3, __ATOMIC_RELEASE);
      ring_nic(j);
      auto until = Clock::now() + std::chrono::seconds(5);  // the NIC starts the ring over: head = our tail
      while (__atomic_load_n(&p.out_ctl->head, __ATOMIC_ACQUIRE) != __atomic_load_n(&p.out_ctl->tail,
                                                                                       __ATOMIC_ACQUIRE) &&
             Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      p.out.attach(p.out_ctl, reinterpret_cast<abi::Packet*>(p.out_ctl + 1), geo.ring_capacity);
      ++wild;
    }
  }
  std::string out = "{\"ok\": " + std::string(total == count ? "true" : "false") + ", \"sent\": " +
                    std::to_string(total) + ", \"wild_indices\": " + std::to_string(wild) +
                    ", \"stalls\": " + std::to_string(stalls);
  for (int k = 0; k < kKinds; ++k) out += ", \"" + std::string(names[k]) + "\": " + std::to_string(sent[k]);
  for (uint32_t j : live)
    out += ", \"from_nic" + std::to_string(j) + "\": " + std::to_string(peers[j].taken) + ", \"in_order_to_nic" +
           std::to_string(j) + "\": " + std::to_string(peers[j].next_seq - 1);
  std::printf("%s}\n", out.c_str());
  return total == count ? 0 : 1;
}
