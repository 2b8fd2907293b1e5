// AM-2 on ulnic, inside: the objects behind eb_t/ep_t, the packet every
// transport carries, the per-peer request instances (the HPAM/AMUDP static
// buffer design) and the transport ops table.
//
// Layers: am.cpp (the API's objects and tables) and reqrep.cpp (the
// request/reply protocol) call down into one Transport; transports call back
// only into deliver(). Nothing here is shared with another process except
// through a transport.
#pragma once

#include <amudp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// Endpoint names compare byte for byte (std::map keys, lookups).
inline bool operator<(const en_t& a, const en_t& b) { return std::memcmp(&a, &b, sizeof a) < 0; }
inline bool operator==(const en_t& a, const en_t& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

namespace ulnic::am {

using Clock = std::chrono::steady_clock;

constexpr int kMaxEndpoints = 64;
constexpr int kMaxArgs = AMUDP_MAX_SHORT;
constexpr int kPollBudget = 256;  // messages per endpoint per AM_Poll (SEMANTICS.md)


// ---- the packet (little-endian; the same on every transport)
enum class Kind : uint8_t {
  kRequest = 1,
  kReply = 2,      // a reply that runs a handler
  kAck = 3,        // the empty reply of a request handler that did not reply
  kReturn = 4,     // the request was refused: status says why
  kPieceAck = 5,   // unreliable transports: pieces of a multi-packet message received (bitmap)
  kReplyRefused = 6,  // the requester refused a reply: status, back to the replier's handler 0
  kProbe = 7,      // Transport::probes: is the peer's endpoint still there? (ignored on arrival)
};
enum class Category : uint8_t { kShort = 0, kMedium = 1, kLong = 2 };

struct PacketHeader {
  uint8_t magic;      // kMagic
  Kind kind;
  Category category;
  uint8_t nargs;      // 0..16 int32 arguments follow the header
  uint8_t handler;
  uint8_t status;     // kReturn / kReplyRefused: EBAD..., else 0
  uint16_t instance;  // the request instance (credit) at (requester, responder)
  uint32_t seq;       // serial of the request on that instance (replies echo it)
  uint32_t nbytes;    // the whole message's payload
  uint32_t offset;    // Long: destination segment offset of the payload
  uint32_t piece;     // offset of this packet's payload within the message
  uint64_t tag;       // requests: the tag the sender has for the destination
  uint64_t bitmap;    // kPieceAck: pieces received so far
  // Long on a transport that places payloads itself (RDMA): the generation
  // of the destination's segment the payload was written into (kNotPlaced:
  // the sender knew it would not fit and wrote nothing); 0: in the packets.
  uint32_t placed;
  uint32_t reserved;
};
static_assert(sizeof(PacketHeader) == 48);
constexpr uint32_t kNotPlaced = 0xFFFFFFFFu;
// The NIC wrote the payload into the segment it had when the message
// arrived, after checking its bounds (native transport).
constexpr uint32_t kPlacedByNic = 0xFFFFFFFEu;
constexpr uint8_t kMagic = 0xA2;

// ---- transports (rdma-core style: one constant ops table per backend)
// eb_t and ep_t point at these (defined below, outside the namespace, under
// the names amudp.h declares).
using Bundle = ::amx_bundle;
using Endpoint = ::amx_endpoint;

struct Transport {
  const char* name;
  uint8_t id;              // AMX_TRANSPORT_*
  bool reliable;           // delivers each packet once and intact: the core never retransmits
  uint32_t max_packet;     // largest packet (header + args + payload piece) the core hands send()
  uint32_t window;         // unreliable: pieces of one message in flight
  int max_depth;           // credits per peer pair it can carry
  bool places_long;        // send() writes Long payloads into the destination's
                           // segment itself and sets PacketHeader::placed
  bool probes;             // reliable, but a dead peer shows only to a message sent
                           // to it (native: requests a killed process had received
                           // are answered by nobody): the core sends a kProbe to a
                           // peer whose requests have been out kProbeAfter; the
                           // transport hands send_failed() a probe only when the
                           // destination said nobody is there, and that returns them
  // Process-wide start/stop (AM_Init / last AM_Terminate): 0 or AM_ERR_*.
  int (*start)();
  void (*stop)();
  // An endpoint's transport state and name.
  int (*open)(Endpoint& ep, en_t& name);
  void (*close)(Endpoint& ep);
  // Sends one packet (gathered) to `dest`: 0 when sent (or, unreliable,
  // dropped on the way); -1 if it cannot now (unreliable only: the core's
  // retransmission sends it later; a reliable transport waits for room
  // itself); a returned-message status (EUNREACHABLE...) if it never will.
  int (*send)(Endpoint& ep, const en_t& dest, void* head, size_t head_len, const void* payload,
              size_t payload_len);
  // Hands every packet that has arrived (at most `budget`) to deliver();
  // returns how many.
  int (*poll)(Endpoint& ep, int budget);
  // Blocks until a packet has arrived at an endpoint of the bundle (true) or
  // `timeout_ms` passed (false; -1: no limit). Takes nothing.
  bool (*wait)(Bundle& eb, int timeout_ms);
  // AM_SetSeg or AM_SetTag happened (ep.seg, seg_len, seg_gen, tag are
  // new): 0 or AM_ERR_*. nullptr: nothing to do.
  int (*endpoint_changed)(Endpoint& ep);
  // AM_Poll ran every endpoint of a bundle and `found` messages or not,
  // and holds no lock: a NIC transport may hand the core to its NIC when
  // the process keeps polling and finding nothing (Nic::poll_found).
  // nullptr: nothing to do.
  void (*polled)(bool found);
};

const Transport* udp_transport();
const Transport* vipl_transport();
const Transport* native_transport();

// ---- request instances
// One message on the wire: the header and arguments, the payload, and (on
// unreliable transports) which of its pieces the other side has confirmed.
struct Transfer {
  std::vector<uint8_t> head;      // PacketHeader + args (piece field rewritten per piece)
  std::vector<uint8_t> payload;   // a copy: kept for retransmission (unreliable only)
  uint32_t npieces = 1;
  uint64_t sent = 0, acked = 0;   // piece bitmaps (multi-packet messages)
  Clock::time_point next_try{}, give_up{};
  std::chrono::milliseconds backoff{0};
  bool active = false;            // retransmissions pending
  bool tried_late = false;        // retransmitted once at or after give_up (reqrep.cpp retransmit)
};

// My request on instance i to one peer: busy from send to reply/return.
struct OutInstance {
  bool busy = false;
  uint32_t seq = 0;               // of the current (or last) request
  Transfer request;
  uint64_t reply_pieces = 0;      // a multi-packet reply being gathered
  std::vector<uint8_t> reply_medium;  // ... its medium payload
  Clock::time_point sent_at{};    // the request's first transmission (latency)
};

// The responder's side of instance i of one peer: the last request served
// and what answered it, kept to answer a duplicate (unreliable transports).
struct InInstance {
  uint32_t seq_done = 0;          // last request answered (0: none)
  uint32_t seq_assembling = 0;    // multi-packet request being received
  uint64_t pieces = 0;
  std::vector<uint8_t> medium;    // a multi-packet medium request being gathered
  Transfer reply;                 // the reply, ack or return sent for seq_done
};

struct Peer {
  en_t name{};
  std::vector<OutInstance> out;   // size: my depth
  std::vector<InInstance> in;     // size: my depth (what I accept from this peer)
  int outstanding = 0;
  uint32_t next_seq = 1;
  uint32_t last_request_in = 0;   // the newest request serial seen from the peer
  uint32_t last_reply_in = 0;     // the newest reply serial seen from the peer
  Clock::time_point next_probe{};  // Transport::probes: not before then
};

// A returned message found where no handler may run (inside a handler, or
// AM_WaitSema): handler 0 gets it at the endpoint's next poll.
struct Deferred {
  PacketHeader header;
  en_t to;
  int status;
  bool request;
};

struct Translation {
  bool inuse = false;
  en_t name{};
  tag_t tag = 0;
};

}  // namespace ulnic::am

struct amx_bundle {
  int mode = AM_SEQ;
  std::vector<amx_endpoint*> endpoints;
  int event_mask = AM_NOEVENTS;
  std::recursive_mutex lock;      // AM_PAR: one caller at a time
  // Callers waiting for `lock` (BundleLock): AM_WaitSema, which blocks in
  // slices, lets them have it between two slices instead of sitting on it.
  std::atomic<int> contenders{0};
  // AM_PAR: threads inside AM_WaitSema, and AM_FreeBundle / AM_Terminate
  // freeing the bundle: they wait for those threads to leave (each returns
  // AM_ERR_RESOURCE within a slice) before anything is freed.
  std::atomic<int> waiters{0};
  std::atomic<bool> closing{false};
};

struct amx_endpoint {
  amx_bundle* bundle = nullptr;
  en_t name{};
  tag_t tag = AM_NONE;
  void* seg = nullptr;
  uintptr_t seg_len = 0;
  uint32_t seg_gen = 1;           // counts AM_SetSeg calls (placed Long payloads name one)
  ulnic::am::Translation table[AMUDP_MAX_NUMTRANSLATIONS];
  amudp_handler_fn_t handlers[AMUDP_MAX_NUMHANDLERS] = {};
  int depth = 0;                  // 0 until AM_SetExpectedResources
  int expected_peers = 0;
  std::map<en_t, std::unique_ptr<ulnic::am::Peer>> peers;
  void* transport_state = nullptr;
  int index = 0;                  // endpoint number in this process
  amudp_stats_t stats = AMUDP_initial_stats;
  AMUDP_preHandlerCallback_t pre_handler = nullptr;
  AMUDP_postHandlerCallback_t post_handler = nullptr;
  std::vector<ulnic::am::Deferred> deferred;
};

namespace ulnic::am {

// A handler's token: what AM_Reply* and the queries need. Tokens live in a
// fixed ring so a stale one (used after its handler returned) is recognized.
struct Token {
  bool live = false;              // its handler is running
  bool is_request = false;        // a request handler (may reply)
  bool returned = false;          // handler 0 of a returned message
  bool replied = false;
  Endpoint* ep = nullptr;
  Peer* peer = nullptr;
  en_t source{};                  // sender (returned: the endpoint it was sent to)
  tag_t tag = 0;
  PacketHeader hdr{};             // the message's header
};

// ---- library state (am.cpp)
struct Library {
  std::atomic<int> init_count{0};  // read by calls in other threads while AM_Terminate runs
  const Transport* transport = nullptr;
  uint32_t udp_interface = 0;     // AMUDP_SetUDPInterface (host order); 0: none
  std::vector<std::unique_ptr<Bundle>> bundles;
  std::vector<Endpoint*> endpoints;  // index = Endpoint::index, nullptr = free
};
Library& lib();
// > 0 while this thread runs a handler (each thread its own: another
// thread's handler does not stop this one's AM_Poll).
int& handler_depth();

// Takes a bundle's lock, counted as a contender while it waits for it.
class BundleLock {
 public:
  explicit BundleLock(amx_bundle& eb) : eb_(eb) {
    eb_.contenders.fetch_add(1);
    eb_.lock.lock();
    eb_.contenders.fetch_sub(1);
  }
  ~BundleLock() { eb_.lock.unlock(); }
  BundleLock(const BundleLock&) = delete;
  BundleLock& operator=(const BundleLock&) = delete;

 private:
  amx_bundle& eb_;
};

// ---- protocol (reqrep.cpp)
// The token of a running handler, or nullptr (not a token, or stale).
Token* live_token(void* token);
// Called by transports for every packet that arrives.
void deliver(Endpoint& ep, const en_t& source, const uint8_t* data, size_t len);
// The packets a message takes on the transport in use (one if it places a
// Long itself); piece i carries its payload from i * (that transport's piece).
uint32_t message_pieces(const PacketHeader& h);
// Runs handlers for what has arrived, retransmits what is due; returns how
// many messages it handed to handlers (returned ones included).
int poll_endpoint(Endpoint& ep);
// poll_endpoint() for every endpoint of the bundle (AM_Poll, request calls).
int poll_bundle(Bundle& eb);
// Retransmits what is due without running handlers (AM_WaitSema): requests
// given up on go to the endpoint's `deferred`.
void retransmit_due(Endpoint& ep);
// The earliest retransmission deadline of the endpoint (Clock::time_point::max() if none).
Clock::time_point next_deadline(const Endpoint& ep);
// Transports (from poll): the peer is gone for good (its connection broke):
// requests outstanding to it come back to handler 0 with EUNREACHABLE --
// now, or (`defer`) at the endpoint's next poll.
void peer_unreachable(Endpoint& ep, const en_t& peer, bool defer = false);
// Transports (from poll or send): a message the transport sent came back
// refused with `status` (EBAD..., ECONGESTION, EUNREACHABLE): a request
// gives its credit back and goes to handler 0, as does a reply.
void send_failed(Endpoint& ep, const en_t& dest, const PacketHeader& sent, int status);
// Forgets everything owed to or by the endpoint (AM_FreeEndpoint).
void drop_endpoint_state(Endpoint& ep);
// Transports: they sent (part of) `sent` again (a NIC that had no room
// took it the second time): the endpoint's retransmission counters.
void count_resend(Endpoint& ep, const PacketHeader& sent);
// AMUDP_VerboseErrors: says on stderr that `fn` returns `rc`; returns rc.
int verbose_error(int rc, const char* fn);
// The label of this process's messages (AMUDP_ProcessLabel), or "".
const char* process_label();

}  // namespace ulnic::am
