// ulnic-switch (DESIGN §6): the fabric in switch mode. NIC i sends every
// packet on its uplink ring[i][S] and receives on its downlink ring[S][i];
// the switch moves packets from uplinks to downlinks, and on the way it can
// drop, corrupt, duplicate, reorder and delay them (seeded, per link), write
// a pcap capture, and count everything. It is a fabric peer like the NICs:
// it rings a sleeping NIC after filling its downlink, and sleeps itself,
// to be rung by the NICs, when there is nothing to move.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "switch/faults.h"
#include "switch/pcap.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/mapping.h"
#include "ulnic/util/result.h"

namespace ulnic::sw {

// Another machine's switch: packets for nodes [first, last] go to it by UDP.
struct BridgePeer {
  std::string host;
  uint16_t port = 0;
  uint32_t first = 0, last = 0;
};

struct Options {
  std::string fabric_dir;   // the cluster's fabric directory
  FaultSpec faults;
  std::string pcap;         // "" = no capture
  std::string stats_path;   // JSON counters, rewritten every second
  std::string bridge_listen;            // "IP:PORT" to receive bridged packets on
  std::vector<BridgePeer> bridge_peers; // where remote nodes live
};

// "IP:PORT=FIRST-LAST"
Result<BridgePeer> parse_bridge_peer(const std::string& spec);
// "IP:PORT" (IPv4), as --bridge-listen takes it.
Result<sockaddr_in> parse_addr(const std::string& s);

struct LinkStats {
  uint64_t forwarded = 0, dropped = 0, corrupted = 0, duplicated = 0, reordered = 0, delayed = 0;
  uint64_t stalled = 0;  // dropped because the destination's port took nothing for kStalledUs (switch.cpp)
};

class Switch {
 public:
  Result<void> init(const Options& opts);
  Result<void> run(volatile const bool* stop);
  void wake();

 private:
  struct Held {
    abi::Packet pkt;
    uint32_t len;            // bytes of pkt in use
    uint64_t release_us;     // not before (delay)
  };
  bool pump_uplink(uint32_t src, uint64_t now_us);
  void enqueue(uint32_t src, uint32_t dst, const abi::Packet& pkt, uint32_t len, uint64_t now_us);
  bool drain(uint32_t dst, uint64_t now_us);
  bool receive_bridged();
  int peer_for(uint32_t node) const;  // index into bridge addresses, -1 = local
  void ring_nic(uint32_t dst);
  bool sleep_until(uint64_t deadline_us);
  void write_stats();
  abi::RingControl* ring(uint32_t src, uint32_t dst) const;
  abi::PortArea& port(uint32_t p) const;

  Options opts_;
  UniqueFd fabric_sock_, mem_fd_, wake_rd_, wake_wr_;
  Mapping mem_;
  abi::FabricHeader geo_{};
  uint32_t nodes_ = 0, self_ = 0;
  int64_t peer_id_ = -1;
  std::vector<UniqueFd> own_vectors_;
  std::vector<std::vector<UniqueFd>> nic_vectors_;   // by node: its mailbox
  std::vector<abi::RingConsumer<abi::Packet>> up_;   // by source NIC
  std::vector<abi::RingProducer<abi::Packet>> down_; // by destination NIC
  std::vector<std::deque<Held>> out_;                // by destination NIC
  std::vector<uint64_t> took_at_;                    // by destination NIC: when its ring last took a packet
  std::vector<std::vector<LinkFaults>> faults_;      // [src][dst]
  std::vector<std::vector<LinkStats>> stats_;        // [src][dst]
  std::vector<std::vector<bool>> reorder_pending_;   // [src][dst]: a packet is held for reorder
  uint64_t bad_packets_ = 0;
  UniqueFd udp_;
  std::vector<std::vector<uint8_t>> peer_addrs_;  // sockaddr_in per bridge peer
  uint64_t bridged_out_ = 0, bridged_in_ = 0;
  PcapWriter pcap_;
};

}  // namespace ulnic::sw
