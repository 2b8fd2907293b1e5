// Split-C style global memory over FM 2.x's public API (fm_gm.h; the
// protocol: host/fm/LAYERS.md).
//
// Every remote operation is one FM message to the owner's REQUEST handler:
// a header (operation, request id, address, bytes) and, for writes, puts
// and stores, the bytes, which the handler FM_receive's straight into place
// once the range checks out against what the owner exposed. Reads are
// answered with a REPLY carrying the bytes (FM_receive'd straight into the
// reader's buffer); writes and puts with a bodyless REPLY; stores with
// nothing but a cumulative count in a STORE_ACK every kStoreAckBatch stores
// (or when the storer asks, in gm_all_store_sync).
//
// A handler cannot wait for FM credits: a reply it cannot send at once
// waits in `deferred`, which the main program's gm_* calls send (they are
// where a Split-C process serves its memory, as on Active Messages).
#include "fm_gm.h"
#include "fm_layer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "fm.h"

namespace {

enum : FM_ULONG { kHRequest = GM_FIRST_HANDLER, kHReply, kHStoreAck, kHGather };
enum Op : uint32_t { kRead = 1, kWrite, kPut, kStore, kFlush };
constexpr uint32_t kMagic = 0x474d4631;  // "GMF1"
constexpr uint64_t kStoreAckBatch = 32;  // a store acknowledgement per this many stores
constexpr FM_ULONG kWaitUs = 10000;

struct Request {
  uint32_t magic, op;
  uint64_t id;     // the requester's (0 for stores and flushes)
  uint64_t addr;   // in the owner
  uint64_t bytes;  // that follow (writes, puts, stores) or are wanted (reads)
};
struct Reply {
  uint32_t magic;
  int32_t error;  // 0 or an errno
  uint64_t id;
  uint64_t bytes;  // that follow (reads)
};
struct StoreAck {
  uint32_t magic, pad;
  uint64_t landed;   // stores from the addressee that landed here (cumulative)
  uint64_t refused;  // of those, refused (cumulative)
};
struct Gather {
  uint32_t magic, pad;
  uint64_t epoch, value;
};

struct Pending {  // an operation of ours that waits for its REPLY
  uint32_t op = 0;
  unsigned node = 0;
  void* dst = nullptr;  // reads
  uint64_t bytes = 0;
  bool done = false;
  int error = 0;
};

struct Deferred {  // what a handler could not send
  uint32_t kind;   // kRead (a reply with bytes), kWrite (a bodyless reply), kStore (a store ack)
  unsigned dest;
  Reply reply;
  const void* from;  // kRead: the bytes (read when it is sent)
};

struct Peer {
  uint64_t stores_issued = 0, stores_acked = 0, stores_refused = 0;  // ours to it
  uint64_t stores_landed = 0, stores_bad = 0, stores_reported = 0;   // its to us
  bool ack_deferred = false;
};

struct State {
  bool up = false;
  unsigned me = 0, n = 0;
  std::vector<std::pair<uintptr_t, size_t>> regions;
  std::vector<Peer> peers;
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_id = 1;
  uint64_t split_outstanding = 0;  // gets and puts since the last gm_sync
  int split_error = 0;
  uint64_t stores_refused_seen = 0;  // at the last gm_all_store_sync
  uint64_t stored_bytes = 0, store_synced = 0;
  std::deque<Deferred> deferred;
  uint64_t epoch = 0;
  std::map<uint64_t, std::vector<std::pair<bool, uint64_t>>> gathered;  // epoch -> per rank
  gm_stats stats{};
};
State g;

// Is [addr, addr + bytes) inside one exposed region? (Wire input.)
bool exposed(uint64_t addr, uint64_t bytes) {
  for (auto [base, len] : g.regions)
    if (addr >= base && addr - base <= len && bytes <= len - (addr - base)) return true;
  return false;
}

void bad(const char* what, unsigned sender) {
  std::fprintf(stderr, "GM: %s from node %u: dropped\n", what, sender);
}

bool send_now(unsigned dest, FM_ULONG handler, const void* head, size_t head_bytes, const void* data, size_t bytes) {
  FM_stream* s = FM_begin_message(dest, head_bytes + bytes, handler);
  if (!s) return false;
  bool ok = FM_send_piece(s, head, head_bytes) == 0 && (!bytes || FM_send_piece(s, data, bytes) == 0);
  return FM_end_message(s) == 0 && ok;
}

StoreAck store_ack(unsigned dest) {
  Peer& p = g.peers[dest];
  p.stores_reported = p.stores_landed;
  return StoreAck{kMagic, 0, p.stores_landed, p.stores_bad};
}

// From a handler: now if FM has the credits, else from the main program.
void reply_from_handler(const Deferred& d) {
  bool sent = false;
  if (d.kind == kStore) {
    if (g.peers[d.dest].ack_deferred) return;  // the one waiting will carry the newest count
    StoreAck a = store_ack(d.dest);
    sent = send_now(d.dest, kHStoreAck, &a, sizeof a, nullptr, 0);
    if (sent) g.stats.store_acks_sent++;
    else g.peers[d.dest].ack_deferred = true;
  } else {
    sent = send_now(d.dest, kHReply, &d.reply, sizeof d.reply, d.from, d.kind == kRead ? d.reply.bytes : 0);
  }
  if (!sent) {
    g.stats.deferred++;
    g.deferred.push_back(d);
  }
}

// ---- handlers

void store_landed(unsigned src, bool ok, uint64_t bytes, bool flush) {
  Peer& p = g.peers[src];
  if (!flush) {
    p.stores_landed++;
    if (ok) g.stored_bytes += bytes;
    else p.stores_bad++;
  }
  if (flush || p.stores_landed - p.stores_reported >= kStoreAckBatch)
    reply_from_handler(Deferred{kStore, src, {}, nullptr});
}

int request_handler(FM_stream* s, unsigned sender) {
  Request q;
  if (FM_receive(&q, s, sizeof q) != sizeof q || q.magic != kMagic || q.bytes > GM_MAX_BYTES) {
    bad("a broken request", sender);
    return FM_CONTINUE;
  }
  if (q.op == kFlush) {
    store_landed(sender, true, 0, true);
    return FM_CONTINUE;
  }
  if (q.op < kRead || q.op > kStore) {
    bad("an unknown request", sender);
    return FM_CONTINUE;
  }
  bool ok = exposed(q.addr, q.bytes);
  if (ok) g.stats.served++;
  else g.stats.refused++;
  void* at = reinterpret_cast<void*>(uintptr_t(q.addr));
  if (ok && q.op != kRead && q.bytes && FM_receive(at, s, q.bytes) != q.bytes) {
    bad("a request shorter than it said", sender);  // the bytes that came are in place
    ok = false;
  }
  if (q.op == kStore) {
    store_landed(sender, ok, q.bytes, false);
    return FM_CONTINUE;
  }
  Reply r{kMagic, ok ? 0 : EFAULT, q.id, q.op == kRead && ok ? q.bytes : 0};
  reply_from_handler(Deferred{q.op == kRead && ok ? uint32_t(kRead) : uint32_t(kWrite), sender, r, at});
  return FM_CONTINUE;
}

int reply_handler(FM_stream* s, unsigned sender) {
  Reply r;
  if (FM_receive(&r, s, sizeof r) != sizeof r || r.magic != kMagic) {
    bad("a broken reply", sender);
    return FM_CONTINUE;
  }
  auto it = g.pending.find(r.id);
  if (it == g.pending.end() || it->second.node != sender || it->second.done ||
      (r.error == 0 && it->second.op == kRead && r.bytes != it->second.bytes) || (it->second.op != kRead && r.bytes)) {
    bad("a reply to no request of ours", sender);
    return FM_CONTINUE;
  }
  Pending& p = it->second;
  if (r.error == 0 && p.op == kRead && p.bytes && FM_receive(p.dst, s, p.bytes) != p.bytes) r.error = EIO;
  p.error = r.error;
  p.done = true;
  return FM_CONTINUE;
}

int store_ack_handler(FM_stream* s, unsigned sender) {
  StoreAck a;
  Peer& p = g.peers[sender];
  // Counts only move forward, and not past what we stored there.
  if (FM_receive(&a, s, sizeof a) != sizeof a || a.magic != kMagic || a.landed < p.stores_acked ||
      a.landed > p.stores_issued || a.refused < p.stores_refused || a.refused > a.landed) {
    bad("a broken store acknowledgement", sender);
    return FM_CONTINUE;
  }
  p.stores_acked = a.landed;
  p.stores_refused = a.refused;
  g.stats.store_acks_received++;
  return FM_CONTINUE;
}

int gather_handler(FM_stream* s, unsigned sender) {
  Gather m;
  // A rank is at most one collective ahead of us.
  if (FM_receive(&m, s, sizeof m) != sizeof m || m.magic != kMagic || m.epoch < g.epoch || m.epoch > g.epoch + 1) {
    bad("a broken collective message", sender);
    return FM_CONTINUE;
  }
  auto& v = g.gathered[m.epoch];
  v.resize(g.n);
  if (v[sender].first) {
    bad("a second collective message", sender);
    return FM_CONTINUE;
  }
  v[sender] = {true, m.value};
  return FM_CONTINUE;
}

// ---- the main program's side

void send_deferred() {
  while (!g.deferred.empty()) {
    Deferred d = g.deferred.front();
    g.deferred.pop_front();
    bool ok;
    if (d.kind == kStore) {
      g.peers[d.dest].ack_deferred = false;
      StoreAck a = store_ack(d.dest);
      ok = send_now(d.dest, kHStoreAck, &a, sizeof a, nullptr, 0);
      if (ok) g.stats.store_acks_sent++;
    } else {
      ok = send_now(d.dest, kHReply, &d.reply, sizeof d.reply, d.from, d.kind == kRead ? d.reply.bytes : 0);
    }
    if (!ok) std::fprintf(stderr, "GM: a reply to node %u failed\n", d.dest);
  }
}

// Extracts and sends the deferred replies; true if anything came or went.
// Quietly (fm_layer.h): GM's own extracts are no program polling.
bool poll() {
  bool any = ulnic_fm_extract_quiet(~FM_ULONG(0)) > 0;
  while (!g.deferred.empty()) {
    any = true;
    send_deferred();
    ulnic_fm_extract_quiet(~FM_ULONG(0));
  }
  return any;
}

template <class Done>
void wait_until(Done done) {
  poll();
  while (!done()) {
    FM_wait(kWaitUs);
    poll();
  }
}

bool valid(gm_ptr p, size_t bytes, bool has_buffer) {
  if (!g.up || p.node >= g.n || bytes > GM_MAX_BYTES || (bytes && !has_buffer)) {
    errno = g.up ? EINVAL : EPERM;
    return false;
  }
  return true;
}

// Issues a remote operation; returns its id (0 on failure, errno set).
uint64_t issue(uint32_t op, gm_ptr p, void* dst, const void* src, size_t bytes) {
  uint64_t id = op == kStore ? 0 : g.next_id++;
  if (id) g.pending[id] = Pending{op, p.node, dst, bytes, false, 0};
  Request q{kMagic, op, id, uint64_t(reinterpret_cast<uintptr_t>(p.addr)), bytes};
  if (!send_now(p.node, kHRequest, &q, sizeof q, src, op == kRead ? 0 : bytes)) {
    if (id) g.pending.erase(id);
    errno = EIO;
    return 0;
  }
  return id ? id : 1;
}

// A local operation: the same checks as a remote owner makes.
int local(gm_ptr p, void* dst, const void* src, size_t bytes) {
  if (!exposed(reinterpret_cast<uintptr_t>(p.addr), bytes)) {
    g.stats.refused++;
    errno = EFAULT;
    return -1;
  }
  if (bytes) std::memmove(dst ? dst : p.addr, src ? src : p.addr, bytes);
  return 0;
}

// Waits for operation `id` and forgets it: 0, or -1 with its errno.
int finish(uint64_t id) {
  wait_until([&] { return g.pending[id].done; });
  int e = g.pending[id].error;
  g.pending.erase(id);
  if (e) errno = e;
  return e ? -1 : 0;
}

int split(uint32_t op, gm_ptr p, void* dst, const void* src, size_t bytes) {
  if (p.node == g.me) {
    if (local(p, dst, src, bytes) != 0) g.split_error = EFAULT;
    return 0;
  }
  uint64_t id = issue(op, p, dst, src, bytes);
  if (!id) return -1;
  g.split_outstanding++;
  return 0;
}

}  // namespace

extern "C" {

int gm_init(void) {
  if (g.up) {
    errno = EBUSY;
    return -1;
  }
  FM_handler* hs[] = {request_handler, reply_handler, store_ack_handler, gather_handler};
  for (FM_ULONG k = 0; k < 4; ++k)
    if (FM_register_handler(GM_FIRST_HANDLER + k, hs[k]) != GM_FIRST_HANDLER + k) return -1;
  if (FM_initialize() != 0) return -1;
  g.me = unsigned(FM_nodeid);
  g.n = unsigned(FM_numnodes);
  g.peers.resize(g.n);
  g.up = true;
  return 0;
}

int gm_finalize(void) {
  if (!g.up) {
    errno = EPERM;
    return -1;
  }
  int rc = gm_sync();
  if (gm_all_store_sync() != 0) rc = -1;
  if (FM_finalize() != 0) rc = -1;
  g = State{};
  return rc;
}

unsigned gm_mynode(void) { return g.me; }
unsigned gm_nodes(void) { return g.n; }

int gm_expose(void* base, size_t bytes) {
  uintptr_t b = reinterpret_cast<uintptr_t>(base);
  if (!base || !bytes || b + bytes < b) {
    errno = EINVAL;
    return -1;
  }
  if (g.regions.size() >= GM_MAX_REGIONS) {
    errno = ENOSPC;
    return -1;
  }
  g.regions.push_back({b, bytes});
  return 0;
}

int gm_allgather(uint64_t mine, uint64_t* all) {
  if (!g.up || !all) {
    errno = g.up ? EINVAL : EPERM;
    return -1;
  }
  uint64_t e = g.epoch;
  Gather m{kMagic, 0, e, mine};
  for (unsigned r = 0; r < g.n; ++r)
    if (r != g.me && !send_now(r, kHGather, &m, sizeof m, nullptr, 0)) {
      errno = EIO;
      return -1;
    }
  auto& v = g.gathered[e];
  v.resize(g.n);
  v[g.me] = {true, mine};
  wait_until([&] {
    auto& w = g.gathered[e];
    return std::all_of(w.begin(), w.end(), [](const auto& x) { return x.first; });
  });
  for (unsigned r = 0; r < g.n; ++r) all[r] = g.gathered[e][r].second;
  g.gathered.erase(e);
  g.epoch++;
  return 0;
}

int gm_barrier(void) {
  std::vector<uint64_t> all(g.n ? g.n : 1);
  return gm_allgather(0, all.data());
}

int gm_read(void* dst, gm_ptr src, size_t bytes) {
  if (!valid(src, bytes, dst != nullptr)) return -1;
  g.stats.reads++;
  if (src.node == g.me) return local(src, dst, nullptr, bytes);
  uint64_t id = issue(kRead, src, dst, nullptr, bytes);
  return id ? finish(id) : -1;
}

int gm_write(gm_ptr dst, const void* src, size_t bytes) {
  if (!valid(dst, bytes, src != nullptr)) return -1;
  g.stats.writes++;
  if (dst.node == g.me) return local(dst, nullptr, src, bytes);
  uint64_t id = issue(kWrite, dst, nullptr, src, bytes);
  return id ? finish(id) : -1;
}

int gm_get(void* dst, gm_ptr src, size_t bytes) {
  if (!valid(src, bytes, dst != nullptr)) return -1;
  g.stats.gets++;
  return split(kRead, src, dst, nullptr, bytes);
}

int gm_put(gm_ptr dst, const void* src, size_t bytes) {
  if (!valid(dst, bytes, src != nullptr)) return -1;
  g.stats.puts++;
  return split(kPut, dst, nullptr, src, bytes);
}

int gm_sync(void) {
  if (!g.up) {
    errno = EPERM;
    return -1;
  }
  // Every pending get and put (blocking reads and writes are never left pending).
  wait_until([] {
    return std::all_of(g.pending.begin(), g.pending.end(), [](const auto& kv) { return kv.second.done; });
  });
  int e = g.split_error;
  for (auto& [id, p] : g.pending)
    if (p.error) e = p.error;
  g.pending.clear();
  g.split_outstanding = 0;
  g.split_error = 0;
  if (e) errno = e;
  return e ? -1 : 0;
}

int gm_store(gm_ptr dst, const void* src, size_t bytes) {
  if (!valid(dst, bytes, src != nullptr)) return -1;
  g.stats.stores++;
  if (dst.node == g.me) {
    Peer& p = g.peers[g.me];
    p.stores_issued++;
    p.stores_acked++;
    if (local(dst, nullptr, src, bytes) == 0) g.stored_bytes += bytes;
    else p.stores_refused++;
    return 0;
  }
  g.peers[dst.node].stores_issued++;
  if (!issue(kStore, dst, nullptr, src, bytes)) {
    g.peers[dst.node].stores_issued--;
    return -1;
  }
  return 0;
}

int gm_store_sync(size_t bytes) {
  if (!g.up) {
    errno = EPERM;
    return -1;
  }
  uint64_t want = g.store_synced + bytes;
  wait_until([&] { return g.stored_bytes >= want; });
  g.store_synced = want;
  return 0;
}

int gm_all_store_sync(void) {
  if (!g.up) {
    errno = EPERM;
    return -1;
  }
  // The owners report the tail of every batch when asked.
  for (unsigned r = 0; r < g.n; ++r) {
    Peer& p = g.peers[r];
    if (r == g.me || p.stores_acked == p.stores_issued) continue;
    Request q{kMagic, kFlush, 0, 0, 0};
    if (!send_now(r, kHRequest, &q, sizeof q, nullptr, 0)) {
      errno = EIO;
      return -1;
    }
  }
  wait_until([] {
    return std::all_of(g.peers.begin(), g.peers.end(), [](const Peer& p) { return p.stores_acked == p.stores_issued; });
  });
  if (gm_barrier() != 0) return -1;
  uint64_t refused = 0;
  for (const Peer& p : g.peers) refused += p.stores_refused;
  bool lost = refused != g.stores_refused_seen;
  g.stores_refused_seen = refused;
  if (lost) errno = EFAULT;
  return lost ? -1 : 0;
}

void gm_poll(void) {
  if (g.up) ulnic_fm_polled(poll());  // a program that keeps polling in vain hands its core over
}

int32_t gm_read_i32(gm_ptr p) {
  int32_t v = 0;
  return gm_read(&v, p, sizeof v) == 0 ? v : 0;
}
int64_t gm_read_i64(gm_ptr p) {
  int64_t v = 0;
  return gm_read(&v, p, sizeof v) == 0 ? v : 0;
}
double gm_read_f64(gm_ptr p) {
  double v = 0;
  return gm_read(&v, p, sizeof v) == 0 ? v : 0;
}
void gm_write_i32(gm_ptr p, int32_t v) { (void)gm_write(p, &v, sizeof v); }
void gm_write_i64(gm_ptr p, int64_t v) { (void)gm_write(p, &v, sizeof v); }
void gm_write_f64(gm_ptr p, double v) { (void)gm_write(p, &v, sizeof v); }
void gm_get_i64(int64_t* dst, gm_ptr p) { (void)gm_get(dst, p, sizeof *dst); }
void gm_put_i64(gm_ptr p, int64_t v) { (void)gm_put(p, &v, sizeof v); }
void gm_store_i64(gm_ptr p, int64_t v) { (void)gm_store(p, &v, sizeof v); }

void gm_get_stats(gm_stats* out) {
  if (out) *out = g.stats;
}

}  // extern "C"
