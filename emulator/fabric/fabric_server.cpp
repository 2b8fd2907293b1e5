#include "fabric/fabric_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "ulnic/abi/fabric.h"
#include "ulnic/util/process.h"
#include "ulnic/abi/sram.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic::fabric {

namespace {
constexpr int64_t kProtocolVersion = 0;
constexpr int64_t kMaxPeerId = 65535;  // the Doorbell register has 16 bits for it
}  // namespace

Result<void> Server::init(const Options& opts) {
  opts_ = opts;
  if (opts.size == 0 || (opts.size & (opts.size - 1)) != 0)
    return fail("fabric size must be a power of two (it becomes a PCI BAR), got " + std::to_string(opts.size));
  if (opts.vectors == 0 || opts.vectors > 64) return fail("fabric vectors must be 1..64");
  if (opts.max_nodes > ulnic::abi::kMaxNodes) return fail("at most " + std::to_string(ulnic::abi::kMaxNodes) + " nodes");
  ::mkdir(opts.dir.c_str(), 0700);
  mem_.reset(::open(Paths::memory(opts.dir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!mem_) return fail_errno("cannot create " + Paths::memory(opts.dir), errno);
  if (opts.ports) {
    if (opts.ports > ulnic::abi::kMaxPorts || (opts.with_switch && opts.ports < 2))
      return fail("fabric ports must be 1.." + std::to_string(ulnic::abi::kMaxPorts));
    if (!ulnic::abi::is_ring_capacity(opts.ring_capacity)) return fail("ring capacity must be a power of two");
    uint64_t need = ulnic::abi::fabric_bar_size(opts.ports, opts.ring_capacity);
    if (opts_.size < need) opts_.size = need;
  }
  if (::ftruncate(mem_.get(), off_t(opts_.size)) != 0) return fail_errno("cannot size fabric memory", errno);
  if (opts.ports) {
    // The geometry, written once before any NIC connects (then read-only).
    ulnic::abi::FabricHeader h{};
    h.magic = ulnic::abi::kFabricMagic;
    h.abi_version = ULNIC_ABI_VERSION;
    h.ports = opts.ports;
    h.switch_port = opts.with_switch ? opts.ports - 1 : ulnic::abi::kNoSwitch;
    h.ring_capacity = opts.ring_capacity;
    h.ring_stride = ulnic::abi::ring_stride(opts.ring_capacity);
    h.rings_offset = ulnic::abi::rings_offset(opts.ports);
    h.size = ulnic::abi::fabric_bytes(opts.ports, opts.ring_capacity);
    if (::pwrite(mem_.get(), &h, sizeof h, 0) != ssize_t(sizeof h)) return fail_errno("cannot write fabric header", errno);
  }
  for (uint32_t k = 0; k < opts.max_nodes; ++k) {
    auto l = listen_unix(Paths::nic_socket(opts.dir, k));
    if (!l) return std::unexpected(l.error());
    nic_listeners_.push_back(std::move(*l));
    auto d = listen_unix(Paths::daemon_socket(opts.dir, k));
    if (!d) return std::unexpected(d.error());
    daemon_listeners_.push_back(std::move(*d));
    auto w = listen_unix(Paths::wake_socket(opts.dir, k));
    if (!w) return std::unexpected(w.error());
    wake_listeners_.push_back(std::move(*w));
  }
  auto h = listen_unix(Paths::host_socket(opts.dir));
  if (!h) return std::unexpected(h.error());
  host_listener_ = std::move(*h);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return fail_errno("pipe", errno);
  wake_rd_.reset(pipe_fds[0]);
  wake_wr_.reset(pipe_fds[1]);
  if (!write_pid_file(Paths::pid_file(opts.dir), ::getpid())) return fail("cannot write " + Paths::pid_file(opts.dir));
  return {};
}

void Server::wake() {
  char c = 1;
  ssize_t ignored = ::write(wake_wr_.get(), &c, 1);
  (void)ignored;
}

uint32_t Server::shared_vectors(int64_t receiver, int64_t peer) const {
  auto is_nic = [](int64_t id) { return id < kDaemonIdBase; };
  auto is_daemon = [](int64_t id) { return id >= kDaemonIdBase && id < kAnonymousIdBase; };
  uint32_t all = opts_.vectors;
  if (!is_nic(receiver) && !is_daemon(receiver)) return all;  // anonymous: everything
  if (!is_nic(peer) && !is_daemon(peer)) return all;
  if (is_nic(receiver) && is_nic(peer))
    return opts_.nic_peer_vectors && opts_.nic_peer_vectors < all ? opts_.nic_peer_vectors : all;
  int64_t rnode = is_nic(receiver) ? receiver : receiver - kDaemonIdBase;
  int64_t pnode = is_nic(peer) ? peer : peer - kDaemonIdBase;
  return rnode == pnode && is_nic(receiver) != is_nic(peer) ? all : 0;  // a node's NIC and its daemon
}

int64_t Server::free_host_id() {
  // Never reused (see drop_peer).
  return next_anonymous_ <= kMaxPeerId ? next_anonymous_++ : -1;
}

bool Server::hung_up(int64_t id) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return true;
  pollfd p{it->second.sock.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return (p.revents & (POLLHUP | POLLERR)) || ::recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void Server::send_or_mark(int64_t to, int64_t value, int fd) {
  auto it = peers_.find(to);
  if (it == peers_.end()) return;
  // Client sockets are non-blocking: a peer that stops reading (a stuck
  // process, a wedged QEMU) is dropped rather than allowed to stall us.
  if (!send_i64_with_fd(it->second.sock.get(), value, fd)) stuck_.push_back(to);
}

void Server::drop_stuck() {
  while (!stuck_.empty()) {
    int64_t id = stuck_.back();
    stuck_.pop_back();
    if (peers_.count(id)) drop_peer(id);
  }
}

Result<const std::vector<UniqueFd>*> Server::mailbox(int64_t id) {
  auto it = mailboxes_.find(id);
  if (it != mailboxes_.end()) return &it->second;
  std::vector<UniqueFd> box;
  for (uint32_t v = 0; v < opts_.vectors; ++v) {
    UniqueFd e(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!e) return fail_errno("eventfd", errno);
    box.push_back(std::move(e));
  }
  return &mailboxes_.emplace(id, std::move(box)).first->second;
}

// NIC `node`'s wake plugin: the count of its vectors, then each vector's
// eventfd. Its connection stays registered until it closes (a restarted
// QEMU's plugin replaces it).
Result<void> Server::accept_waker(int listener, uint32_t node) {
  UniqueFd s(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!s) return fail_errno("accept", errno);
  auto box = mailbox(node);
  if (!box) return std::unexpected(box.error());
  bool sent = send_i64_with_fd(s.get(), int64_t((*box)->size()), -1).has_value();
  for (uint32_t v = 0; sent && v < (*box)->size(); ++v) sent = send_i64_with_fd(s.get(), v, (**box)[v].get()).has_value();
  if (sent) wakers_[node] = std::move(s);
  return {};
}

bool Server::waker_alive(uint32_t node) {
  auto it = wakers_.find(node);
  if (it == wakers_.end()) return false;
  // The plugin never writes: 0 is its QEMU gone, EAGAIN a live connection.
  char junk[64];
  const ssize_t n = ::recv(it->second.get(), junk, sizeof junk, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    wakers_.erase(it);
    return false;
  }
  return true;
}

Result<void> Server::accept_peer(int listener, int64_t id) {
  UniqueFd s(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!s) return fail_errno("accept", errno);
  // A restarted NIC may connect before we noticed its old connection close.
  if (id >= 0 && peers_.count(id) && hung_up(id)) drop_peer(id);
  if (id < 0 || peers_.count(id)) return {};  // id really taken: refuse by closing
  // A fixed id keeps its mailbox (eventfds) across reconnections; everyone
  // who was given them once keeps ringing the right place. (A NIC's wake
  // plugin may have made it before the NIC's first connection.)
  const bool fresh = announced_.insert(id).second;
  auto own = mailbox(id);
  if (!own) return std::unexpected(own.error());
  Peer p;
  p.sock = std::move(s);
  p.serial = ++next_serial_;
  peers_.emplace(id, std::move(p));
  const std::vector<UniqueFd>& mine = **own;
  // Steps 1-3 of the protocol: version, id, shared memory.
  send_or_mark(id, kProtocolVersion, -1);
  send_or_mark(id, id, -1);
  send_or_mark(id, -1, mem_.get());
  // Step 4: every mailbox the newcomer may ring (fixed ids even while their
  // owner is away), and -- on a first connection only -- the newcomer's
  // mailbox to everyone connected.
  for (auto& [other_id, box] : mailboxes_) {
    // (Not a mailbox only a wake plugin has asked for yet: its NIC announces it.)
    if (other_id == id || (other_id >= kAnonymousIdBase && !peers_.count(other_id)) || !announced_.count(other_id))
      continue;
    for (uint32_t v = 0; v < shared_vectors(id, other_id); ++v) send_or_mark(id, other_id, box[v].get());
    if (fresh && peers_.count(other_id))
      for (uint32_t v = 0; v < shared_vectors(other_id, id); ++v) send_or_mark(other_id, id, mine[v].get());
  }
  // Step 5: the newcomer's own vectors, for receiving -- a NIC whose wake
  // plugin holds the real ones gets eventfds nobody rings.
  const bool woken_by_plugin = id < kDaemonIdBase && waker_alive(uint32_t(id));
  for (uint32_t v = 0; v < opts_.vectors; ++v) {
    UniqueFd unrung(woken_by_plugin ? ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1);
    if (woken_by_plugin && !unrung) return fail_errno("eventfd", errno);
    send_or_mark(id, id, woken_by_plugin ? unrung.get() : mine[v].get());
  }
  drop_stuck();
  return {};
}

// QEMU 7.2's ivshmem frees a peer's eventfd array on a disconnect notice and
// reuses the freed array if the same id connects again (heap corruption seen
// here: a NIC crashed when its peer restarted). So: fixed ids are never
// announced as gone (their mailboxes persist), and anonymous ids, which are
// announced, are never reused.
void Server::drop_peer(int64_t id) {
  peers_.erase(id);
  if (id < kAnonymousIdBase) return;
  announced_.erase(id);
  auto box = mailboxes_.find(id);
  for (auto& [other_id, other] : peers_)
    if (box != mailboxes_.end() && shared_vectors(other_id, id) > 0) send_or_mark(other_id, id, -1);
  if (box != mailboxes_.end()) mailboxes_.erase(box);
}

void Server::cleanup() {
  for (uint32_t k = 0; k < nic_listeners_.size(); ++k) {
    ::unlink(Paths::nic_socket(opts_.dir, k).c_str());
    ::unlink(Paths::daemon_socket(opts_.dir, k).c_str());
    ::unlink(Paths::wake_socket(opts_.dir, k).c_str());
  }
  ::unlink(Paths::host_socket(opts_.dir).c_str());
  ::unlink(Paths::pid_file(opts_.dir).c_str());
}

Result<void> Server::run(const std::atomic<bool>* stop_flag) {
  while (!stop_flag->load()) {
    std::vector<pollfd> fds;
    // Per pollfd: >= 0 peer id; -1-id a listener handing out that fixed id;
    // -1000 the anonymous listener; -2000 the wake pipe; -3000-k node k's
    // wake listener; -5000-k node k's wake plugin.
    std::vector<int64_t> ids;
    std::vector<uint64_t> serials;  // per pollfd: the peer connection's serial (0: not a peer)
    for (uint32_t k = 0; k < nic_listeners_.size(); ++k) {
      fds.push_back({nic_listeners_[k].get(), POLLIN, 0});
      ids.push_back(-1 - int64_t(k));
      fds.push_back({daemon_listeners_[k].get(), POLLIN, 0});
      ids.push_back(-1 - (kDaemonIdBase + int64_t(k)));
      fds.push_back({wake_listeners_[k].get(), POLLIN, 0});
      ids.push_back(-3000 - int64_t(k));
    }
    for (auto& [node, sock] : wakers_) {  // readable: closed (its QEMU went)
      fds.push_back({sock.get(), POLLIN, 0});
      ids.push_back(-5000 - int64_t(node));
    }
    fds.push_back({host_listener_.get(), POLLIN, 0});
    ids.push_back(-1000);
    fds.push_back({wake_rd_.get(), POLLIN, 0});
    ids.push_back(-2000);
    for (auto& [id, p] : peers_) {
      fds.push_back({p.sock.get(), POLLIN, 0});
      ids.push_back(id);
      serials.resize(fds.size());
      serials.back() = p.serial;
    }
    // No timeout: an idle fabric server costs nothing. Stop requests arrive
    // through the self-pipe, so one that lands just before poll is not lost.
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0 && errno != EINTR) {
      cleanup();
      return fail_errno("poll", errno);
    }
    for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (ids[i] == -2000) {
        char drain[64];
        while (::read(wake_rd_.get(), drain, sizeof drain) > 0) {
        }
      } else if (ids[i] <= -5000) {
        (void)waker_alive(uint32_t(-5000 - ids[i]));
      } else if (ids[i] <= -3000) {
        (void)accept_waker(fds[i].fd, uint32_t(-3000 - ids[i]));
      } else if (ids[i] == -1000) {
        (void)accept_peer(fds[i].fd, free_host_id());
      } else if (ids[i] < 0) {
        (void)accept_peer(fds[i].fd, -1 - ids[i]);
      } else {
        // Clients never send; readable means closed (or junk, which we drop).
        // Only the connection polled: a reconnecting NIC accepted earlier in
        // this round replaced it, closing its fd (whose number a new socket
        // may already have), and TSan saw the stale recv race in a CI run.
        auto it = peers_.find(ids[i]);
        char junk[64];
        if (it != peers_.end() && it->second.serial == serials[i] &&
            (::recv(fds[i].fd, junk, sizeof junk, MSG_DONTWAIT) <= 0 || (fds[i].revents & (POLLHUP | POLLERR))))
          drop_peer(ids[i]);
        drop_stuck();
      }
    }
  }
  cleanup();
  return {};
}

}  // namespace ulnic::fabric
