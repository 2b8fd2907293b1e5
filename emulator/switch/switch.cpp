#include "switch/switch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "fabric/fabric_server.h"
#include "ulnic/abi/slot.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic::sw {

namespace {

constexpr size_t kMaxQueued = 256;         // per downlink: beyond this, uplinks wait (back-pressure)
// ... unless that downlink has taken nothing for this long (its NIC is dead,
// rebooting or starved): then packets for it are dropped (the senders'
// links retransmit or give up), so that one stuck port does not block every
// uplink with a packet for it at its head, and with it all their other
// traffic (Myrinet's switches time a blocked packet out the same way). A
// soak lost a job between two live nodes while a third restarted: their
// link went 5 s without an ACK behind the dead node's packets.
constexpr uint64_t kStalledUs = 50'000;
constexpr uint64_t kIdleSpinUs = 200;      // keep polling this long after the last packet
constexpr uint32_t kBudget = 32;           // packets per uplink per pass

uint64_t now_us() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
inline void full_barrier() { std::atomic_thread_fence(std::memory_order_seq_cst); }

}  // namespace

namespace {
// The decimal number that is all of `s`, if it is at most `max`. Not
// std::stoul: it throws on a word (tests/fuzz found "IP:PORT=0-d" ending the
// switch with an uncaught exception, not a usage message), and takes signs,
// spaces and trailing junk, and numbers past the field's width.
std::optional<uint64_t> parse_uint(const std::string& s, uint64_t max) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
  if (v > max) return std::nullopt;
  return v;
}

}  // namespace

Result<sockaddr_in> parse_addr(const std::string& s) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos) return fail("'" + s + "': expected IP:PORT");
  auto port = parse_uint(s.substr(colon + 1), 0xffff);
  if (!port) return fail("'" + s + "': bad port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(*port));
  if (::inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1) return fail("'" + s + "': bad IPv4 address");
  return a;
}

Result<BridgePeer> parse_bridge_peer(const std::string& spec) {
  size_t eq = spec.find('='), dash = spec.find('-', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || dash == std::string::npos) return fail("'" + spec + "': expected IP:PORT=FIRST-LAST");
  auto a = parse_addr(spec.substr(0, eq));
  if (!a) return std::unexpected(a.error());
  BridgePeer p;
  p.host = spec.substr(0, spec.rfind(':', eq));
  p.port = ntohs(a->sin_port);
  auto first = parse_uint(spec.substr(eq + 1, dash - eq - 1), UINT32_MAX);
  auto last = parse_uint(spec.substr(dash + 1), UINT32_MAX);
  if (!first || !last) return fail("'" + spec + "': expected IP:PORT=FIRST-LAST (node numbers)");
  p.first = uint32_t(*first);
  p.last = uint32_t(*last);
  if (p.last < p.first) return fail("'" + spec + "': empty node range");
  return p;
}

int Switch::peer_for(uint32_t node) const {
  for (size_t i = 0; i < opts_.bridge_peers.size(); ++i)
    if (node >= opts_.bridge_peers[i].first && node <= opts_.bridge_peers[i].last) return int(i);
  return -1;
}

abi::RingControl* Switch::ring(uint32_t src, uint32_t dst) const {
  return reinterpret_cast<abi::RingControl*>(mem_.data() +
                                             abi::ring_offset(geo_.ports, geo_.ring_capacity, src, dst));
}
abi::PortArea& Switch::port(uint32_t p) const {
  return reinterpret_cast<abi::PortArea*>(mem_.data() + abi::kPortAreaOffset)[p];
}

Result<void> Switch::init(const Options& opts) {
  opts_ = opts;
  // Join the fabric as an anonymous peer: the shared memory, every NIC's
  // mailbox (to ring them), our own (to be rung).
  auto s = connect_unix(fabric::Paths::host_socket(opts.fabric_dir));
  if (!s) return fail("cannot reach the fabric server: " + s.error().message);
  fabric_sock_ = std::move(*s);
  UniqueFd fd;
  auto v = recv_i64_with_fd(fabric_sock_.get(), fd, 5000);
  auto id = recv_i64_with_fd(fabric_sock_.get(), fd, 5000);
  auto m = recv_i64_with_fd(fabric_sock_.get(), mem_fd_, 5000);
  if (!v || *v != 0 || !id || !m || *m != -1 || !mem_fd_) return fail("fabric server: bad greeting");
  peer_id_ = *id;
  if (::pread(mem_fd_.get(), &geo_, sizeof geo_, 0) != ssize_t(sizeof geo_) || geo_.magic != abi::kFabricMagic)
    return fail("the fabric has no geometry");
  if (geo_.switch_port == abi::kNoSwitch) return fail("the fabric was made without a switch port");
  self_ = geo_.switch_port;
  nodes_ = geo_.ports - 1;
  auto map = Mapping::map_file(fabric::Paths::memory(opts.fabric_dir), geo_.size, true);
  if (!map) return std::unexpected(map.error());
  mem_ = std::move(*map);
  nic_vectors_.resize(nodes_);
  up_.resize(nodes_);
  down_.resize(nodes_);
  out_.resize(nodes_);
  took_at_.assign(nodes_, now_us());
  faults_.assign(nodes_, std::vector<LinkFaults>(nodes_));
  stats_.assign(nodes_, std::vector<LinkStats>(nodes_));
  reorder_pending_.assign(nodes_, std::vector<bool>(nodes_, false));
  for (uint32_t i = 0; i < nodes_; ++i) {
    abi::RingControl* u = ring(i, self_);
    abi::RingControl* d = ring(self_, i);
    up_[i].attach(u, reinterpret_cast<abi::Packet*>(u + 1), geo_.ring_capacity);
    down_[i].attach(d, reinterpret_cast<abi::Packet*>(d + 1), geo_.ring_capacity);
    for (uint32_t j = 0; j < nodes_; ++j) faults_[i][j].seed(opts.faults.seed, i, j);
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return fail_errno("pipe", errno);
  wake_rd_.reset(p[0]);
  wake_wr_.reset(p[1]);
  if (!opts.pcap.empty())
    if (auto r = pcap_.open(opts.pcap); !r) return r;
  if (!opts.bridge_listen.empty()) {
    // UDP bridging: the link protocol above tolerates UDP's loss and
    // reordering the same way it tolerates our fault injection.
    auto a = parse_addr(opts.bridge_listen);
    if (!a) return std::unexpected(a.error());
    udp_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!udp_) return fail_errno("socket", errno);
    int buf = 8 << 20;
    ::setsockopt(udp_.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(udp_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    if (::bind(udp_.get(), reinterpret_cast<sockaddr*>(&*a), sizeof *a) != 0)
      return fail_errno("cannot bind " + opts.bridge_listen, errno);
    for (const BridgePeer& p : opts.bridge_peers) {
      auto pa = parse_addr(p.host + ":" + std::to_string(p.port));
      if (!pa) return std::unexpected(pa.error());
      std::vector<uint8_t> raw(sizeof(sockaddr_in));
      std::memcpy(raw.data(), &*pa, sizeof *pa);
      peer_addrs_.push_back(raw);
    }
  }
  __atomic_store_n(&port(self_).peer_id, uint32_t(peer_id_), __ATOMIC_RELAXED);
  return {};
}

void Switch::wake() {
  char c = 1;
  ssize_t ignored = ::write(wake_wr_.get(), &c, 1);
  (void)ignored;
}

// Fabric notices: NIC mailboxes (fds) and our own vectors arrive here.
static void read_notices(int sock, int64_t self, std::vector<UniqueFd>& own,
                         std::vector<std::vector<UniqueFd>>& nics) {
  for (;;) {
    UniqueFd fd;
    auto who = recv_i64_with_fd(sock, fd, 0);
    if (!who) return;
    // NIC mailboxes persist across their restarts, so each arrives once and
    // no departure is ever announced for them (fabric_server.h).
    if (!fd) continue;
    if (*who == self) own.push_back(std::move(fd));
    else if (*who >= 0 && size_t(*who) < nics.size()) nics[*who].push_back(std::move(fd));
  }
}

void Switch::ring_nic(uint32_t dst) {
  full_barrier();  // our tail before their flag: pairs with the NIC's prepare_sleep()
  if (!__atomic_load_n(&port(dst).rx_asleep, __ATOMIC_RELAXED)) return;
  if (nic_vectors_[dst].empty()) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(nic_vectors_[dst][abi::kVectorFabric].get(), &one, sizeof one);
  (void)ignored;
}

void Switch::enqueue(uint32_t src, uint32_t dst, const abi::Packet& pkt, uint32_t len, uint64_t now) {
  LinkStats& st = stats_[src][dst];
  Verdict v = faults_[src][dst].decide(opts_.faults);
  if (v.drop) {
    ++st.dropped;
    return;
  }
  Held h;
  std::memcpy(&h.pkt, &pkt, len);
  h.len = len;
  h.release_us = now + opts_.faults.delay_us;
  if (opts_.faults.delay_us) ++st.delayed;
  if (v.corrupt) {
    reinterpret_cast<uint8_t*>(&h.pkt)[v.corrupt_at % len] ^= 0x5a;
    ++st.corrupted;
  }
  std::deque<Held>& q = out_[dst];
  if (reorder_pending_[src][dst]) {
    // Let this one overtake the packet held back on this link.
    for (auto it = q.rbegin(); it != q.rend(); ++it)
      if (it->pkt.h.src == src) {
        q.insert(it.base() - 1, h);
        break;
      }
    reorder_pending_[src][dst] = false;
  } else {
    q.push_back(h);
    if (v.reorder) reorder_pending_[src][dst] = true, ++st.reordered;
  }
  if (v.duplicate) q.push_back(h), ++st.duplicated;
  ++st.forwarded;
}

bool Switch::pump_uplink(uint32_t src, uint64_t now) {
  abi::RingConsumer<abi::Packet>& up = up_[src];
  bool worked = false;
  for (uint32_t n = 0; n < kBudget; ++n) {
    const abi::Packet* p = up.peek();
    if (!p) break;
    abi::WireHeader h;
    std::memcpy(&h, &p->h, sizeof h);
    uint32_t dst = h.dst;
    if (h.payload_len > abi::kMtu || dst >= nodes_) {
      ++bad_packets_;  // not a packet we can forward: counted and dropped
    } else {
      if (out_[dst].size() >= kMaxQueued && now - took_at_[dst] >= kStalledUs)
        drain(dst, now);  // its NIC may have made room since the last pass
      if (out_[dst].size() >= kMaxQueued) {
        if (now - took_at_[dst] < kStalledUs) break;  // back-pressure: leave it in the uplink
        ++stats_[src][dst].stalled;                     // a stuck port: drop it
      } else {
        uint32_t len = uint32_t(sizeof h) + h.payload_len;
        if (pcap_.is_open()) pcap_.write(p, len);
        enqueue(src, dst, *p, len, now);
      }
    }
    up.pop();
    worked = true;
  }
  if (worked) up.release();
  if (up.corrupt()) {
    ++bad_packets_;
    abi::RingControl* u = ring(src, self_);
    __atomic_store_n(&u->head, __atomic_load_n(&u->tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    up.attach(u, reinterpret_cast<abi::Packet*>(u + 1), geo_.ring_capacity);
  }
  return worked;
}

bool Switch::drain(uint32_t dst, uint64_t now) {
  std::deque<Held>& q = out_[dst];
  bool worked = false;
  if (int peer = peer_for(dst); peer >= 0 && udp_) {
    // A node on another machine: one datagram per packet.
    while (!q.empty() && q.front().release_us <= now) {
      const auto* to = reinterpret_cast<const sockaddr*>(peer_addrs_[size_t(peer)].data());
      if (::sendto(udp_.get(), &q.front().pkt, q.front().len, 0, to, sizeof(sockaddr_in)) < 0 && errno == EAGAIN) break;
      q.pop_front();
      ++bridged_out_;
      worked = true;
    }
    if (worked || q.size() < kMaxQueued) took_at_[dst] = now;
    return worked;
  }
  while (!q.empty() && q.front().release_us <= now) {
    abi::Packet* slot = down_[dst].reserve();
    if (!slot) break;  // the NIC is behind: link-level back-pressure
    std::memcpy(slot, &q.front().pkt, q.front().len);
    down_[dst].push();
    q.pop_front();
    worked = true;
  }
  if (worked) {
    down_[dst].publish();
    ring_nic(dst);
  }
  if (worked || q.size() < kMaxQueued) took_at_[dst] = now;
  return worked;
}

bool Switch::sleep_until(uint64_t deadline_us) {
  __atomic_store_n(&port(self_).rx_asleep, 1u, __ATOMIC_RELAXED);
  full_barrier();  // our flag before their tails
  for (uint32_t i = 0; i < nodes_; ++i)
    if (peer_for(i) < 0 && up_[i].available()) {
      __atomic_store_n(&port(self_).rx_asleep, 0u, __ATOMIC_RELAXED);
      return false;
    }
  std::vector<pollfd> fds = {{fabric_sock_.get(), POLLIN, 0}, {wake_rd_.get(), POLLIN, 0}};
  if (udp_) fds.push_back({udp_.get(), POLLIN, 0});
  if (!own_vectors_.empty()) fds.push_back({own_vectors_[abi::kVectorFabric].get(), POLLIN, 0});
  uint64_t now = now_us();
  int ms = deadline_us > now ? int(std::min<uint64_t>((deadline_us - now + 999) / 1000, 1000)) : 0;
  ::poll(fds.data(), fds.size(), ms);
  uint64_t drained;
  if (!own_vectors_.empty()) {
    ssize_t ignored = ::read(own_vectors_[abi::kVectorFabric].get(), &drained, sizeof drained);
    (void)ignored;
  }
  char buf[64];
  while (::read(wake_rd_.get(), buf, sizeof buf) > 0) {
  }
  __atomic_store_n(&port(self_).rx_asleep, 0u, __ATOMIC_RELAXED);
  return true;
}

bool Switch::receive_bridged() {
  if (!udp_) return false;
  bool worked = false;
  for (int n = 0; n < 64; ++n) {
    Held h;
    ssize_t got = ::recv(udp_.get(), &h.pkt, sizeof h.pkt, 0);
    if (got < 0) break;
    // Untrusted input from the network: a packet must describe itself
    // consistently and be for one of our nodes, or it is counted and dropped.
    if (size_t(got) < sizeof(abi::WireHeader) || h.pkt.h.magic != abi::kWireMagic ||
        size_t(got) != sizeof(abi::WireHeader) + h.pkt.h.payload_len || h.pkt.h.dst >= nodes_ ||
        peer_for(h.pkt.h.dst) >= 0) {
      ++bad_packets_;
      continue;
    }
    if (out_[h.pkt.h.dst].size() >= kMaxQueued) continue;  // like a full link: the sender retransmits
    h.len = uint32_t(got);
    h.release_us = 0;
    out_[h.pkt.h.dst].push_back(h);
    ++bridged_in_;
    worked = true;
  }
  return worked;
}

void Switch::write_stats() {
  if (opts_.stats_path.empty()) return;
  std::ofstream f(opts_.stats_path + ".tmp");
  f << "{\"bad_packets\": " << bad_packets_ << ", \"bridged_out\": " << bridged_out_ << ", \"bridged_in\": "
    << bridged_in_ << ", \"links\": [";
  bool first = true;
  for (uint32_t i = 0; i < nodes_; ++i)
    for (uint32_t j = 0; j < nodes_; ++j) {
      const LinkStats& s = stats_[i][j];
      if (!s.forwarded && !s.dropped && !s.stalled) continue;
      f << (first ? "" : ", ") << "{\"src\": " << i << ", \"dst\": " << j << ", \"forwarded\": " << s.forwarded
        << ", \"dropped\": " << s.dropped << ", \"corrupted\": " << s.corrupted << ", \"duplicated\": "
        << s.duplicated << ", \"reordered\": " << s.reordered << ", \"delayed\": " << s.delayed << ", \"stalled\": " << s.stalled << "}";
      first = false;
    }
  f << "]}\n";
  f.close();
  std::rename((opts_.stats_path + ".tmp").c_str(), opts_.stats_path.c_str());
}

Result<void> Switch::run(volatile const bool* stop) {
  uint64_t last_work = now_us(), last_stats = 0;
  while (!*stop) {
    read_notices(fabric_sock_.get(), peer_id_, own_vectors_, nic_vectors_);
    uint64_t now = now_us();
    bool worked = false;
    for (uint32_t i = 0; i < nodes_; ++i)
      if (peer_for(i) < 0) worked |= pump_uplink(i, now);
    worked |= receive_bridged();
    uint64_t next_release = ~0ull;
    for (uint32_t d = 0; d < nodes_; ++d) {
      worked |= drain(d, now);
      if (!out_[d].empty()) next_release = std::min(next_release, out_[d].front().release_us);
    }
    if (now - last_stats > 1'000'000) {
      write_stats();
      pcap_.flush();
      last_stats = now;
    }
    if (worked) {
      last_work = now;
      continue;
    }
    if (now - last_work < kIdleSpinUs) continue;
    // Nothing to move: sleep until rung, until a held packet is due, or a second.
    uint64_t deadline = std::min(next_release, now + 1'000'000);
    bool queued = next_release != ~0ull;
    if (queued && deadline <= now + 50) continue;  // due very soon: keep spinning
    sleep_until(deadline);
    last_work = now_us() - kIdleSpinUs;  // after a wake, poll once, then sleep again if idle
  }
  write_stats();
  pcap_.flush();
  return {};
}

}  // namespace ulnic::sw
