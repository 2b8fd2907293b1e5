// The cluster's fabric server: an ivshmem server (QEMU docs/specs/
// ivshmem-spec.txt, protocol version 0) that hands every NIC the fabric's
// shared memory and the eventfds behind each peer's MSI-X doorbell vectors.
//
// Peer ids are fixed, not first-come: NIC k connects to <dir>/nic<k>.sock and
// always gets id k, so NIC i can ring NIC j by id whatever the start order and
// after restarts. The daemon of node k connects to <dir>/daemon<k>.sock and
// gets id kDaemonIdBase + k. Anything else (tools, tests) connects to
// <dir>/host.sock and gets the lowest free id >= kAnonymousIdBase.
//
// A peer id's eventfds (its "mailbox") are created on its first connection.
// For NICs and daemons they persist across reconnections and nobody is told
// of a departure (QEMU 7.2 cannot take a peer id coming back, see
// drop_peer()); anonymous peers are announced when they leave and their ids
// are never handed out again.
//
// NIC k's wake plugin (emulator/wake/wake_plugin.cpp, in NIC k's QEMU)
// connects to <dir>/wake<k>.sock before the NIC does and receives the
// NIC's own eventfds: while that connection is open, the NIC's ivshmem
// device is given eventfds nobody rings for its own vectors, so only the
// plugin reads the real ones (shared/include/ulnic/abi/wake.h).
//
// Who learns whose eventfds is topology-aware, so fd counts stay small in
// big clusters (a QEMU keeps every fd it is sent): a NIC gets the other NICs'
// first `nic_peer_vectors` vectors (enough to ring their fabric vector) and
// all of its own daemon's; a daemon gets all of its own NIC's and nobody
// else's; anonymous peers get, and are given to, everyone in full.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ulnic/util/fd.h"
#include "ulnic/util/result.h"

namespace ulnic::fabric {

constexpr int64_t kDaemonIdBase = 64;      // = abi::kMaxNodes
constexpr int64_t kAnonymousIdBase = 128;  // = 2 * abi::kMaxNodes

struct Options {
  std::string dir;               // sockets, memory file, pid and log live here
  uint64_t size = 64ull << 20;   // fabric memory; a power of two (it is a PCI BAR)
  uint32_t vectors = 4;          // eventfds per peer = MSI-X vectors per device
  uint32_t max_nodes = 64;       // nic<k>.sock and daemon<k>.sock listeners for k < max_nodes
  uint32_t nic_peer_vectors = 0; // vectors a NIC is given of another NIC (0 = all)
  uint32_t ports = 0;            // ring-matrix ports (nodes, +1 with a switch); 0 = no rings
  bool with_switch = false;      // the last port is the switch's
  uint32_t ring_capacity = 16;   // packets per ring
};

struct Paths {
  static std::string memory(const std::string& dir) { return dir + "/fabric.mem"; }
  static std::string nic_socket(const std::string& dir, uint32_t k) { return dir + "/nic" + std::to_string(k) + ".sock"; }
  static std::string daemon_socket(const std::string& dir, uint32_t k) {
    return dir + "/daemon" + std::to_string(k) + ".sock";
  }
  static std::string wake_socket(const std::string& dir, uint32_t k) { return dir + "/wake" + std::to_string(k) + ".sock"; }
  static std::string host_socket(const std::string& dir) { return dir + "/host.sock"; }
  static std::string pid_file(const std::string& dir) { return dir + "/fabricd.pid"; }
  static std::string log_file(const std::string& dir) { return dir + "/fabricd.log"; }
};

class Server {
 public:
  Result<void> init(const Options& opts);
  // Serves until `stop_flag` becomes true and wake() is called (the signal
  // handler of ulnic-fabricd does both, a test's other thread too: an atomic,
  // not a volatile bool, which TSan rightly calls a race); removes its
  // sockets and pid file on the way out.
  Result<void> run(const std::atomic<bool>* stop_flag);
  // Interrupts run()'s wait so it rechecks the stop flag. Async-signal-safe.
  void wake();
  size_t peer_count() const { return peers_.size(); }

 private:
  struct Peer {
    UniqueFd sock;
    uint64_t serial = 0;  // which connection this is (run's poll snapshot must not outlive it)
  };
  // How many of `peer`'s vectors `receiver` is given (0: not announced).
  uint32_t shared_vectors(int64_t receiver, int64_t peer) const;
  Result<void> accept_peer(int listener, int64_t id);
  Result<void> accept_waker(int listener, uint32_t node);
  // Is node's wake plugin still connected? (Forgets it if not.)
  bool waker_alive(uint32_t node);
  // Id `id`'s eventfds, made on first use.
  Result<const std::vector<UniqueFd>*> mailbox(int64_t id);
  void drop_peer(int64_t id);
  bool hung_up(int64_t id);
  // Sends one message; a peer whose socket is full or broken is marked stuck.
  void send_or_mark(int64_t to, int64_t value, int fd);
  void drop_stuck();
  int64_t free_host_id();
  void cleanup();

  Options opts_;
  UniqueFd mem_;
  UniqueFd wake_rd_, wake_wr_;  // self-pipe: run() sleeps without a timeout
  std::vector<UniqueFd> nic_listeners_;     // index = node id
  std::vector<UniqueFd> daemon_listeners_;  // index = node id
  std::vector<UniqueFd> wake_listeners_;    // index = node id
  std::map<uint32_t, UniqueFd> wakers_;     // node -> its wake plugin's connection
  UniqueFd host_listener_;
  std::map<int64_t, Peer> peers_;                        // connected
  uint64_t next_serial_ = 0;
  std::map<int64_t, std::vector<UniqueFd>> mailboxes_;   // eventfds per id: ring vector v
  std::set<int64_t> announced_;  // ids whose mailbox went to everyone at their first connection
  int64_t next_anonymous_ = kAnonymousIdBase;
  std::vector<int64_t> stuck_;
};

}  // namespace ulnic::fabric
