// An MPI-like message-passing layer over FM 2.x's public API (fm_mp.h;
// protocols: host/fm/LAYERS.md).
//
// Four FM handlers carry it: EAGER (envelope + data), RTS (envelope of a
// rendezvous message), CTS (the receiver's go-ahead: which request of the
// sender, which of the receiver, how many bytes) and DATA (a rendezvous
// message's bytes). Matching happens in the handler, on the envelope, when
// the message's first packet arrives: FM starts one sender's handlers in
// the order its messages left, so matching order is send order. A matched
// message is FM_receive'd straight into the posted buffer; an unmatched one
// is queued (an eager one with its bytes staged as they arrive).
//
// Handlers cannot wait for credits, so what they cannot send at once (a CTS
// when FM_begin_message says NULL) and what is too big to send from a
// handler (rendezvous data) waits in queues that the main program's calls
// drain (progress()).
#include "fm_mp.h"
#include "fm_layer.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fm.h"

namespace {

enum : FM_ULONG { kHEager = MP_FIRST_HANDLER, kHRts, kHCts, kHData };
constexpr uint32_t kMagic = 0x4d504631;                 // "MPF1"
constexpr size_t kMaxBytes = 0xffffffffu - 64;          // an FM message's bound, less the envelope
constexpr size_t kStageChunk = 64 << 10;                // staging grows with the bytes that came
constexpr FM_ULONG kWaitUs = 10000;                     // one FM_wait while a call waits

struct Envelope {  // first in EAGER and RTS messages
  uint32_t magic;
  int32_t tag;
  uint64_t length;  // the message's bytes
  uint64_t cookie;  // RTS: the sender's request
};
struct Cts {
  uint32_t magic, pad;
  uint64_t send_cookie, recv_cookie;
  uint64_t grant;  // bytes the receiver takes (min of length and its buffer)
};
struct DataHeader {
  uint32_t magic, pad;
  uint64_t recv_cookie, length;
};

}  // namespace

struct mp_request {
  bool send = false;
  bool done = false;
  uint64_t cookie = 0;
  // send: the bytes and where they go; receive: the buffer and what it takes
  const uint8_t* sbuf = nullptr;
  uint8_t* rbuf = nullptr;
  size_t bytes = 0;
  int peer = 0, tag = 0;  // receive: may be MP_ANY_SOURCE / MP_ANY_TAG
  // rendezvous
  uint64_t peer_cookie = 0;  // send: the receiver's request; receive: the sender's
  size_t grant = 0;
  bool awaiting = false;     // send: a CTS; receive: DATA
  MP_Status status{};
};

namespace {

struct Unexpected {
  int source = 0, tag = 0;
  size_t length = 0;
  bool rendezvous = false;
  uint64_t cookie = 0;         // rendezvous: the sender's request
  std::vector<uint8_t> data;   // eager: the bytes staged so far
  bool complete = false;       // eager: all its bytes are in
  mp_request* claimed = nullptr;  // a receive matched it while its bytes were still arriving
};

struct PendingCts {
  int dest;
  Cts cts;
};

struct State {
  bool up = false;
  int rank = 0, size = 0;
  size_t eager_limit = MP_EAGER_LIMIT_DEFAULT;
  uint64_t next_cookie = 1;
  std::list<mp_request*> posted;                     // receives not yet matched, in posting order
  std::list<std::unique_ptr<Unexpected>> unexpected; // messages not yet matched, in arrival order
  std::unordered_map<uint64_t, mp_request*> rendezvous;  // cookie -> request waiting for CTS / DATA
  std::deque<PendingCts> cts_out;                    // CTS a handler could not send
  std::deque<mp_request*> data_out;                  // sends cleared to send, for the main program
  MP_Stats stats{};
};
State g;

bool matches(int want_source, int want_tag, int source, int tag) {
  return (want_source == MP_ANY_SOURCE || want_source == source) && (want_tag == MP_ANY_TAG || want_tag == tag);
}

void finish_receive(mp_request* r, int source, int tag, size_t length, size_t count) {
  r->status.source = source;
  r->status.tag = tag;
  r->status.length = length;
  r->status.count = count;
  r->status.error = length > r->bytes ? MP_ERR_TRUNCATE : MP_SUCCESS;
  if (r->status.error == MP_ERR_TRUNCATE) g.stats.truncated++;
  r->done = true;
}

// A message's envelope arrived short or broken: its sender is a member of
// the job (FM checked that) but not speaking this protocol.
int bad(const char* what, unsigned sender) {
  g.stats.bad_packets++;
  std::fprintf(stderr, "MP: %s from rank %u: dropped\n", what, sender);
  return FM_CONTINUE;
}

mp_request* take_posted(int source, int tag) {
  for (auto it = g.posted.begin(); it != g.posted.end(); ++it)
    if (matches((*it)->peer, (*it)->tag, source, tag)) {
      mp_request* r = *it;
      g.posted.erase(it);
      return r;
    }
  return nullptr;
}

bool read_envelope(FM_stream* s, unsigned sender, Envelope& e) {
  if (FM_receive(&e, s, sizeof e) != sizeof e || e.magic != kMagic || e.tag < 0 || e.length > kMaxBytes) {
    bad("a broken envelope", sender);
    return false;
  }
  return true;
}

// Sends a CTS now if FM has the credits, else leaves it for the main program.
void send_cts(int dest, const Cts& c, bool in_handler) {
  if (!in_handler) {
    // The main program may wait for credits (FM extracts meanwhile).
    FM_stream* s = FM_begin_message(FM_ULONG(dest), sizeof c, kHCts);
    if (s && FM_send_piece(s, &c, sizeof c) == 0 && FM_end_message(s) == 0) return;
    std::fprintf(stderr, "MP: a clear-to-send to rank %d failed\n", dest);
    return;
  }
  if (FM_stream* s = FM_begin_message(FM_ULONG(dest), sizeof c, kHCts)) {
    FM_send_piece(s, &c, sizeof c);
    FM_end_message(s);
    return;
  }
  g.cts_out.push_back({dest, c});
}

// The receive `r` takes rendezvous message `cookie` of `length` bytes.
void clear_to_send(mp_request* r, int source, int tag, size_t length, uint64_t cookie, bool in_handler) {
  r->status.source = source;
  r->status.tag = tag;
  r->status.length = length;
  r->peer_cookie = cookie;
  r->grant = std::min(length, r->bytes);
  r->awaiting = true;
  r->peer = source;  // DATA must come from there
  g.rendezvous[r->cookie] = r;
  send_cts(source, Cts{kMagic, 0, cookie, r->cookie, r->grant}, in_handler);
}

// ---- handlers

int eager_handler(FM_stream* s, unsigned sender) {
  Envelope e;
  if (!read_envelope(s, sender, e)) return FM_CONTINUE;
  int src = int(sender);
  if (mp_request* r = take_posted(src, e.tag)) {
    size_t want = std::min<size_t>(e.length, r->bytes);
    size_t got = want ? FM_receive(r->rbuf, s, want) : 0;
    g.stats.direct++;
    finish_receive(r, src, e.tag, e.length, got);
    if (got != want) {
      r->status.error = MP_ERR_INTERN;
      bad("a message shorter than its envelope", sender);
    }
    return FM_CONTINUE;
  }
  // Queued first (its place in the order is now), then staged as it comes.
  g.stats.unexpected++;
  auto owned = std::make_unique<Unexpected>();
  Unexpected* u = owned.get();
  u->source = src;
  u->tag = e.tag;
  u->length = e.length;
  g.unexpected.push_back(std::move(owned));
  while (u->data.size() < u->length) {
    size_t at = u->data.size();
    size_t n = std::min(kStageChunk, u->length - at);
    u->data.resize(at + n);
    size_t got = FM_receive(u->data.data() + at, s, n);
    if (got != n) {
      u->data.resize(at + got);
      u->length = u->data.size();
      bad("a message shorter than its envelope", sender);
      break;
    }
  }
  u->complete = true;
  if (mp_request* r = u->claimed) {  // a receive matched it meanwhile
    size_t n = std::min(u->length, r->bytes);
    if (n) std::memcpy(r->rbuf, u->data.data(), n);
    g.stats.staged_bytes += n;
    finish_receive(r, u->source, u->tag, e.length, n);
    g.unexpected.remove_if([u](const std::unique_ptr<Unexpected>& p) { return p.get() == u; });
  }
  return FM_CONTINUE;
}

int rts_handler(FM_stream* s, unsigned sender) {
  Envelope e;
  if (!read_envelope(s, sender, e)) return FM_CONTINUE;
  int src = int(sender);
  if (mp_request* r = take_posted(src, e.tag)) {
    clear_to_send(r, src, e.tag, e.length, e.cookie, true);
    return FM_CONTINUE;
  }
  g.stats.unexpected++;
  auto u = std::make_unique<Unexpected>();
  u->source = src;
  u->tag = e.tag;
  u->length = e.length;
  u->rendezvous = true;
  u->cookie = e.cookie;
  u->complete = true;
  g.unexpected.push_back(std::move(u));
  return FM_CONTINUE;
}

int cts_handler(FM_stream* s, unsigned sender) {
  Cts c;
  if (FM_receive(&c, s, sizeof c) != sizeof c || c.magic != kMagic) return bad("a broken clear-to-send", sender);
  auto it = g.rendezvous.find(c.send_cookie);
  mp_request* r = it == g.rendezvous.end() ? nullptr : it->second;
  if (!r || !r->send || !r->awaiting || r->peer != int(sender) || c.grant > r->bytes)
    return bad("a clear-to-send for no send of ours", sender);
  g.rendezvous.erase(it);
  r->awaiting = false;
  r->peer_cookie = c.recv_cookie;
  r->grant = c.grant;
  g.data_out.push_back(r);
  return FM_CONTINUE;
}

int data_handler(FM_stream* s, unsigned sender) {
  DataHeader d;
  if (FM_receive(&d, s, sizeof d) != sizeof d || d.magic != kMagic) return bad("a broken data header", sender);
  auto it = g.rendezvous.find(d.recv_cookie);
  mp_request* r = it == g.rendezvous.end() ? nullptr : it->second;
  if (!r || r->send || !r->awaiting || r->peer != int(sender) || d.length != r->grant)
    return bad("data for no receive of ours", sender);
  g.rendezvous.erase(it);
  r->awaiting = false;
  g.stats.direct++;  // rendezvous data always has its buffer
  size_t got = r->grant ? FM_receive(r->rbuf, s, r->grant) : 0;
  finish_receive(r, r->status.source, r->status.tag, r->status.length, got);
  if (got != r->grant) {
    r->status.error = MP_ERR_INTERN;
    bad("rendezvous data shorter than granted", sender);
  }
  return FM_CONTINUE;
}

// ---- the main program's side

// One FM message of `head` then `bytes` at `data`, from the main program
// (FM_begin_message may wait for credits, extracting meanwhile).
bool send_message(int dest, FM_ULONG handler, const void* head, size_t head_bytes, const void* data, size_t bytes) {
  FM_stream* s = FM_begin_message(FM_ULONG(dest), head_bytes + bytes, handler);
  if (!s) return false;
  bool ok = FM_send_piece(s, head, head_bytes) == 0 && (!bytes || FM_send_piece(s, data, bytes) == 0);
  return FM_end_message(s) == 0 && ok;
}

// What handlers left for the main program: CTS that found no credits and
// rendezvous data cleared to go.
bool drain_queues() {
  bool any = false;
  while (!g.cts_out.empty()) {
    PendingCts p = g.cts_out.front();
    g.cts_out.pop_front();
    send_cts(p.dest, p.cts, false);
    any = true;
  }
  while (!g.data_out.empty()) {
    mp_request* r = g.data_out.front();
    g.data_out.pop_front();
    DataHeader d{kMagic, 0, r->peer_cookie, r->grant};
    if (!send_message(r->peer, kHData, &d, sizeof d, r->sbuf, r->grant)) {
      std::fprintf(stderr, "MP: rendezvous data to rank %d failed\n", r->peer);
      r->status.error = MP_ERR_INTERN;
    }
    r->status.count = r->grant;
    r->done = true;
    any = true;
  }
  return any;
}

// Extracts and sends what handlers queued; true if anything came or went.
// Quietly (fm_layer.h): MP's own extracts are no program polling.
bool progress() {
  bool any = ulnic_fm_extract_quiet(~FM_ULONG(0)) > 0;
  while (drain_queues()) {
    any = true;
    ulnic_fm_extract_quiet(~FM_ULONG(0));
  }
  return any;
}

// Until `r` is done: progress, sleeping in FM_wait when there is nothing to do.
void wait_for(mp_request* r) {
  progress();
  while (!r->done) {
    FM_wait(kWaitUs);
    progress();
  }
}

int check_up() { return g.up ? MP_SUCCESS : MP_ERR_INIT; }

bool valid_rank(int r) { return r >= 0 && r < g.size; }

mp_request* new_request(bool send, size_t bytes, int peer, int tag) {
  auto* r = new mp_request();
  r->send = send;
  r->bytes = bytes;
  r->peer = peer;
  r->tag = tag;
  r->cookie = g.next_cookie++;
  return r;
}

}  // namespace

extern "C" {

int MP_Init(void) {
  if (g.up) return MP_ERR_INIT;
  FM_handler* hs[] = {eager_handler, rts_handler, cts_handler, data_handler};
  for (FM_ULONG k = 0; k < 4; ++k)
    if (FM_register_handler(MP_FIRST_HANDLER + k, hs[k]) != MP_FIRST_HANDLER + k) return MP_ERR_INTERN;
  if (const char* v = std::getenv("ULNIC_MP_EAGER_LIMIT")) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (!*v || *end || n > (1ull << 30)) {
      std::fprintf(stderr, "MP_Init: ULNIC_MP_EAGER_LIMIT=%s is not a byte count up to 1 GiB\n", v);
      return MP_ERR_ARG;
    }
    g.eager_limit = size_t(n);
  }
  if (FM_initialize() != 0) return MP_ERR_INTERN;
  g.rank = int(FM_nodeid);
  g.size = int(FM_numnodes);
  g.up = true;
  return MP_SUCCESS;
}

int MP_Finalize(void) {
  if (!g.up) return MP_ERR_INIT;
  // Sends cleared to go still go (their receivers wait for them).
  progress();
  int rc = FM_finalize() == 0 ? MP_SUCCESS : MP_ERR_INTERN;
  for (mp_request* r : g.posted) delete r;
  g = State{};
  return rc;
}

int MP_Comm_rank(int* rank) {
  if (!g.up) return MP_ERR_INIT;
  if (!rank) return MP_ERR_ARG;
  *rank = g.rank;
  return MP_SUCCESS;
}

int MP_Comm_size(int* size) {
  if (!g.up) return MP_ERR_INIT;
  if (!size) return MP_ERR_ARG;
  *size = g.size;
  return MP_SUCCESS;
}

size_t MP_Eager_limit(void) { return g.eager_limit; }

int MP_Isend(const void* buf, size_t bytes, int dest, int tag, MP_Request* req) {
  if (int rc = check_up()) return rc;
  if (!req || !valid_rank(dest) || tag < 0 || (bytes && !buf) || bytes > kMaxBytes) return MP_ERR_ARG;
  *req = MP_REQUEST_NULL;
  mp_request* r = new_request(true, bytes, dest, tag);
  r->sbuf = static_cast<const uint8_t*>(buf);
  Envelope e{kMagic, tag, bytes, r->cookie};
  if (bytes <= g.eager_limit) {
    g.stats.eager_sent++;
    bool ok = send_message(dest, kHEager, &e, sizeof e, buf, bytes);
    r->status.count = bytes;
    r->status.error = ok ? MP_SUCCESS : MP_ERR_INTERN;
    r->done = true;
  } else {
    g.stats.rendezvous_sent++;
    r->awaiting = true;
    g.rendezvous[r->cookie] = r;
    if (!send_message(dest, kHRts, &e, sizeof e, nullptr, 0)) {
      g.rendezvous.erase(r->cookie);
      delete r;
      return MP_ERR_INTERN;
    }
  }
  r->status.source = g.rank;
  r->status.tag = tag;
  r->status.length = bytes;
  *req = r;
  return MP_SUCCESS;
}

int MP_Irecv(void* buf, size_t bytes, int source, int tag, MP_Request* req) {
  if (int rc = check_up()) return rc;
  if (!req || !(source == MP_ANY_SOURCE || valid_rank(source)) || !(tag == MP_ANY_TAG || tag >= 0) ||
      (bytes && !buf))
    return MP_ERR_ARG;
  *req = MP_REQUEST_NULL;
  mp_request* r = new_request(false, bytes, source, tag);
  r->rbuf = static_cast<uint8_t*>(buf);
  *req = r;
  for (auto it = g.unexpected.begin(); it != g.unexpected.end(); ++it) {
    Unexpected* u = it->get();
    if (u->claimed || !matches(source, tag, u->source, u->tag)) continue;
    if (u->rendezvous) {
      clear_to_send(r, u->source, u->tag, u->length, u->cookie, false);
      g.unexpected.erase(it);
    } else if (u->complete) {
      size_t n = std::min(u->length, bytes);
      if (n) std::memcpy(buf, u->data.data(), n);
      g.stats.staged_bytes += n;
      finish_receive(r, u->source, u->tag, u->length, n);
      g.unexpected.erase(it);
    } else {
      u->claimed = r;  // its handler finishes it when the last bytes are in
    }
    return MP_SUCCESS;
  }
  g.posted.push_back(r);
  return MP_SUCCESS;
}

int MP_Test(MP_Request* req, int* done, MP_Status* status) {
  if (int rc = check_up()) return rc;
  if (!req || !done) return MP_ERR_ARG;
  if (!*req) {  // MPI: a null request is complete, with an empty status
    *done = 1;
    if (status) *status = MP_Status{MP_ANY_SOURCE, MP_ANY_TAG, MP_SUCCESS, 0, 0};
    return MP_SUCCESS;
  }
  mp_request* r = *req;
  // A program that keeps testing a request that is not done hands its core
  // to the NIC (fm_layer.h), as FM_extract does.
  if (!r->done) ulnic_fm_polled(progress() || r->done);
  *done = r->done;
  if (!r->done) return MP_SUCCESS;
  if (status) *status = r->status;
  int rc = r->status.error;
  delete r;
  *req = MP_REQUEST_NULL;
  return rc;
}

int MP_Wait(MP_Request* req, MP_Status* status) {
  if (int rc = check_up()) return rc;
  if (!req) return MP_ERR_ARG;
  if (*req) wait_for(*req);
  int done = 0;
  return MP_Test(req, &done, status);
}

int MP_Waitall(int n, MP_Request* reqs, MP_Status* statuses) {
  if (int rc = check_up()) return rc;
  if (n < 0 || (n && !reqs)) return MP_ERR_ARG;
  int rc = MP_SUCCESS;
  for (int i = 0; i < n; ++i) {
    int r = MP_Wait(&reqs[i], statuses ? &statuses[i] : nullptr);
    if (r != MP_SUCCESS && rc == MP_SUCCESS) rc = r;
  }
  return rc;
}

int MP_Send(const void* buf, size_t bytes, int dest, int tag) {
  MP_Request r;
  int rc = MP_Isend(buf, bytes, dest, tag, &r);
  return rc ? rc : MP_Wait(&r, nullptr);
}

int MP_Recv(void* buf, size_t bytes, int source, int tag, MP_Status* status) {
  MP_Request r;
  int rc = MP_Irecv(buf, bytes, source, tag, &r);
  return rc ? rc : MP_Wait(&r, status);
}

int MP_Iprobe(int source, int tag, int* found, MP_Status* status) {
  if (int rc = check_up()) return rc;
  if (!found || !(source == MP_ANY_SOURCE || valid_rank(source)) || !(tag == MP_ANY_TAG || tag >= 0))
    return MP_ERR_ARG;
  const bool moved = progress();
  *found = 0;
  for (auto& u : g.unexpected) {
    if (u->claimed || !matches(source, tag, u->source, u->tag)) continue;
    *found = 1;
    if (status) *status = MP_Status{u->source, u->tag, MP_SUCCESS, u->length, u->length};
    break;
  }
  ulnic_fm_polled(moved || *found);
  return MP_SUCCESS;
}

void MP_Get_stats(MP_Stats* out) {
  if (out) *out = g.stats;
}

}  // extern "C"
