// AM-2's objects: init, bundles, endpoints, segments, tags, translation and
// handler tables, events, message queries, AM_Poll; and AMUDP's own calls
// (knobs, statistics, handler callbacks, the AMUDP_ names of the AM_ calls).
// The request/reply protocol is reqrep.cpp; the wires are transport_*.cpp.
// What each call returns in each case is host/am/SEMANTICS.md.
#include <amudp.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "am_internal.h"

namespace ulnic::am {

Library& lib() {
  static Library l;
  return l;
}

int& handler_depth() {
  thread_local int depth = 0;
  return depth;
}

const char* process_label() { return AMUDP_ProcessLabel ? AMUDP_ProcessLabel : ""; }

int verbose_error(int rc, const char* fn) {
  static const char* const names[] = {"AM_OK", "AM_ERR_NOT_INIT", "AM_ERR_BAD_ARG", "AM_ERR_RESOURCE",
                                      "AM_ERR_NOT_SENT", "AM_ERR_IN_USE"};
  if (rc != AM_OK && AMUDP_VerboseErrors) {
    std::fprintf(stderr, "%s%sAMUDP %s returning an error code: %s (%d)\n", process_label(),
                 *process_label() ? ": " : "", fn, rc >= 0 && rc <= 5 ? names[rc] : "?", rc);
    std::fflush(stderr);
  }
  return rc;
}

namespace {

const Transport* chosen = nullptr;  // AMX_SetTransport, before AM_Init

const Transport* transport_named(const char* name) {
  if (!name) return nullptr;
  if (std::strcmp(name, "udp") == 0) return udp_transport();
  if (std::strcmp(name, "vipl") == 0) return vipl_transport();
  if (std::strcmp(name, "native") == 0) return native_transport();
  return nullptr;
}

bool ready() { return lib().init_count > 0; }

bool valid(eb_t eb) {
  for (auto& b : lib().bundles)
    if (b.get() == eb) return true;
  return false;
}

bool valid(ep_t ep) {
  return ep && std::find(lib().endpoints.begin(), lib().endpoints.end(), ep) != lib().endpoints.end();
}

// The default handler 0: a returned message nobody asked for is a bug in the
// program; say what it was and stop (AMUDP does the same).
void default_returned(int status, op_t opcode, void* token) {
  auto* t = static_cast<Token*>(token);
  std::fprintf(stderr, "AM: message returned with status %d (opcode %d, handler %u, to host %08x port %u) and "
               "no handler 0 set: aborting\n", status, opcode, t->hdr.handler, t->source.host, t->source.port);
  std::abort();
}

void free_endpoint(Endpoint* ep) {
  drop_endpoint_state(*ep);
  lib().transport->close(*ep);
  auto& eps = ep->bundle->endpoints;
  eps.erase(std::remove(eps.begin(), eps.end(), ep), eps.end());
  lib().endpoints[ep->index] = nullptr;
  delete ep;
}

int free_bundle(Bundle* eb) {
  // A thread blocked in AM_WaitSema on an AM_PAR bundle looks at `closing`
  // every slice (10 ms) and leaves; nothing is freed under it.
  eb->closing.store(true);
  while (eb->mode == AM_PAR && eb->waiters.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  while (!eb->endpoints.empty()) free_endpoint(eb->endpoints.back());
  auto& bs = lib().bundles;
  bs.erase(std::remove_if(bs.begin(), bs.end(), [eb](auto& b) { return b.get() == eb; }), bs.end());
  return AM_OK;
}

}  // namespace

}  // namespace ulnic::am

using namespace ulnic::am;

// Every error a call returns goes through verbose_error (AMUDP_VerboseErrors).
#define RETURN_ERR(code) return verbose_error((code), __func__)
#define AM_CHECK_INIT() \
  do {                   \
    if (!ready()) RETURN_ERR(AM_ERR_NOT_INIT); \
  } while (0)

extern "C" {

int AMUDP_VerboseErrors = 0;
int AMUDP_PoliteSync = 0;
int AMUDP_SilentMode = 0;
const char* AMUDP_ProcessLabel = nullptr;
int AMUDP_ExpectedBandwidth = 1220;

void AMUDP_FatalErr(const char* msg, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "*** %s%sFATAL ERROR: ", process_label(), *process_label() ? " " : "");
  va_list ap;
  va_start(ap, msg);
  std::vfprintf(stderr, msg, ap);
  va_end(ap);
  if (!*msg || msg[std::strlen(msg) - 1] != '\n') std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

int AMX_SetTransport(const char* name) {
  if (ready()) RETURN_ERR(AM_ERR_IN_USE);
  const Transport* t = transport_named(name);
  if (!t) RETURN_ERR(AM_ERR_BAD_ARG);
  chosen = t;
  return AM_OK;
}

const char* AMX_TransportName(void) { return ready() ? lib().transport->name : nullptr; }

int AM_Init(void) {
  Library& l = lib();
  if (l.init_count > 0) {
    l.init_count++;
    return AM_OK;
  }
  const Transport* t = chosen;
  if (!t) {
    const char* env = std::getenv("ULNIC_AM_TRANSPORT");
    t = transport_named(env && *env ? env : "udp");
    if (!t) {
      std::fprintf(stderr, "AM_Init: ULNIC_AM_TRANSPORT=%s is not udp, vipl or native\n", env);
      RETURN_ERR(AM_ERR_BAD_ARG);
    }
  }
  int rc = t->start();
  if (rc != AM_OK) RETURN_ERR(rc);
  l.transport = t;
  l.init_count = 1;
  l.endpoints.assign(kMaxEndpoints, nullptr);
  return AM_OK;
}

int AM_Terminate(void) {
  Library& l = lib();
  AM_CHECK_INIT();
  if (--l.init_count > 0) return AM_OK;
  while (!l.bundles.empty()) free_bundle(l.bundles.back().get());
  l.transport->stop();
  l.transport = nullptr;
  return AM_OK;
}

int AM_MaxSegLength(uintptr_t* nbytes) {
  if (!nbytes) RETURN_ERR(AM_ERR_BAD_ARG);
  *nbytes = AMUDP_MAX_SEGLENGTH;
  return AM_OK;
}

// ---- bundles and endpoints

int AM_AllocateBundle(int type, eb_t* endb) {
  AM_CHECK_INIT();
  if ((type != AM_SEQ && type != AM_PAR) || !endb) RETURN_ERR(AM_ERR_BAD_ARG);
  if (lib().bundles.size() >= AMUDP_MAX_BUNDLES) RETURN_ERR(AM_ERR_RESOURCE);
  auto b = std::make_unique<Bundle>();
  b->mode = type;
  *endb = b.get();
  lib().bundles.push_back(std::move(b));
  return AM_OK;
}

int AM_FreeBundle(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) RETURN_ERR(AM_ERR_BAD_ARG);
  return free_bundle(eb);
}

int AM_AllocateEndpoint(eb_t eb, ep_t* endp, en_t* endpoint_name) {
  AM_CHECK_INIT();
  if (!valid(eb) || !endp || !endpoint_name) RETURN_ERR(AM_ERR_BAD_ARG);
  auto& slots = lib().endpoints;
  auto it = std::find(slots.begin(), slots.end(), nullptr);
  if (it == slots.end()) RETURN_ERR(AM_ERR_RESOURCE);
  auto* ep = new Endpoint;
  ep->bundle = eb;
  ep->index = int(it - slots.begin());
  ep->handlers[0] = reinterpret_cast<amudp_handler_fn_t>(&default_returned);
  int rc = lib().transport->open(*ep, ep->name);
  if (rc != AM_OK) {
    delete ep;
    RETURN_ERR(rc);
  }
  *it = ep;
  ep->bundle->endpoints.push_back(ep);
  *endp = ep;
  *endpoint_name = ep->name;
  return AM_OK;
}

int AM_FreeEndpoint(ep_t ea) {
  AM_CHECK_INIT();
  if (!valid(ea)) RETURN_ERR(AM_ERR_BAD_ARG);
  free_endpoint(ea);
  return AM_OK;
}

int AM_MoveEndpoint(ep_t ea, eb_t from, eb_t to) {
  AM_CHECK_INIT();
  if (!valid(ea) || !valid(from) || !valid(to)) RETURN_ERR(AM_ERR_BAD_ARG);
  auto* ep = ea;
  auto* f = from;
  if (ep->bundle != f) RETURN_ERR(AM_ERR_BAD_ARG);
  f->endpoints.erase(std::remove(f->endpoints.begin(), f->endpoints.end(), ep), f->endpoints.end());
  ep->bundle = to;
  ep->bundle->endpoints.push_back(ep);
  return AM_OK;
}

// ---- segment and tag

int AM_GetSeg(ep_t ea, void** addr, uintptr_t* nbytes) {
  AM_CHECK_INIT();
  if (!valid(ea) || !addr || !nbytes) RETURN_ERR(AM_ERR_BAD_ARG);
  *addr = ea->seg;
  *nbytes = ea->seg_len;
  return AM_OK;
}

int AM_SetSeg(ep_t ea, void* addr, uintptr_t nbytes) {
  AM_CHECK_INIT();
  if (!valid(ea) || nbytes > AMUDP_MAX_SEGLENGTH || (!addr && nbytes)) RETURN_ERR(AM_ERR_BAD_ARG);
  void* old = ea->seg;
  uintptr_t old_len = ea->seg_len;
  uint32_t old_gen = ea->seg_gen;
  ea->seg = addr;
  ea->seg_len = nbytes;
  ea->seg_gen++;
  if (lib().transport->endpoint_changed) {
    int rc = lib().transport->endpoint_changed(*ea);
    if (rc != AM_OK) {
      ea->seg = old;
      ea->seg_len = old_len;
      ea->seg_gen = old_gen;
      RETURN_ERR(rc);
    }
  }
  return AM_OK;
}

int AM_GetTag(ep_t ea, tag_t* tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || !tag) RETURN_ERR(AM_ERR_BAD_ARG);
  *tag = ea->tag;
  return AM_OK;
}

int AM_SetTag(ep_t ea, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea)) RETURN_ERR(AM_ERR_BAD_ARG);
  tag_t old = ea->tag;
  ea->tag = tag;
  if (lib().transport->endpoint_changed) {
    int rc = lib().transport->endpoint_changed(*ea);
    if (rc != AM_OK) {
      ea->tag = old;
      RETURN_ERR(rc);
    }
  }
  return AM_OK;
}

// ---- translation table

int AM_Map(ep_t ea, int index, en_t name, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || index < 0 || index >= AMUDP_MAX_NUMTRANSLATIONS) RETURN_ERR(AM_ERR_BAD_ARG);
  if (name.transport != lib().transport->id) RETURN_ERR(AM_ERR_BAD_ARG);
  Translation& t = ea->table[index];
  if (t.inuse) RETURN_ERR(AM_ERR_RESOURCE);
  t = Translation{true, name, tag};
  return AM_OK;
}

int AM_MapAny(ep_t ea, int* index, en_t name, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || !index) RETURN_ERR(AM_ERR_BAD_ARG);
  for (int i = 0; i < AMUDP_MAX_NUMTRANSLATIONS; i++) {
    if (ea->table[i].inuse) continue;
    int rc = AM_Map(ea, i, name, tag);
    if (rc == AM_OK) *index = i;
    return rc;
  }
  RETURN_ERR(AM_ERR_RESOURCE);
}

int AM_UnMap(ep_t ea, int index) {
  AM_CHECK_INIT();
  if (!valid(ea) || index < 0 || index >= AMUDP_MAX_NUMTRANSLATIONS || !ea->table[index].inuse)
    RETURN_ERR(AM_ERR_BAD_ARG);
  auto it = ea->peers.find(ea->table[index].name);
  if (it != ea->peers.end() && it->second->outstanding > 0) RETURN_ERR(AM_ERR_IN_USE);
  ea->table[index] = Translation{};
  return AM_OK;
}

int AM_GetTranslationInuse(ep_t ea, int i) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS) RETURN_ERR(AM_ERR_BAD_ARG);
  return ea->table[i].inuse ? AM_OK : AM_ERR_RESOURCE;
}

int AM_GetTranslationTag(ep_t ea, int i, tag_t* tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS || !tag) RETURN_ERR(AM_ERR_BAD_ARG);
  if (!ea->table[i].inuse) RETURN_ERR(AM_ERR_RESOURCE);
  *tag = ea->table[i].tag;
  return AM_OK;
}

int AM_GetTranslationName(ep_t ea, int i, en_t* gan) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS || !gan) RETURN_ERR(AM_ERR_BAD_ARG);
  if (!ea->table[i].inuse) RETURN_ERR(AM_ERR_RESOURCE);
  *gan = ea->table[i].name;
  return AM_OK;
}

int AM_GetNumTranslations(ep_t ea, int* ntrans) {
  AM_CHECK_INIT();
  if (!valid(ea) || !ntrans) RETURN_ERR(AM_ERR_BAD_ARG);
  *ntrans = AMUDP_MAX_NUMTRANSLATIONS;
  return AM_OK;
}

int AM_SetNumTranslations(ep_t ea, int ntrans) {
  AM_CHECK_INIT();
  if (!valid(ea)) RETURN_ERR(AM_ERR_BAD_ARG);
  return ntrans == AMUDP_MAX_NUMTRANSLATIONS ? AM_OK : AM_ERR_RESOURCE;
}

int AM_SetExpectedResources(ep_t ea, int n_endpoints, int n_outstanding_requests) {
  AM_CHECK_INIT();
  if (!valid(ea) || n_endpoints < 1 || n_endpoints > AMUDP_MAX_NUMTRANSLATIONS || n_outstanding_requests < 1 ||
      n_outstanding_requests > AMUDP_MAX_NETWORKDEPTH)
    RETURN_ERR(AM_ERR_BAD_ARG);
  if (ea->depth != 0 || n_outstanding_requests > lib().transport->max_depth) RETURN_ERR(AM_ERR_RESOURCE);
  ea->depth = n_outstanding_requests;
  ea->expected_peers = n_endpoints;
  return AM_OK;
}

// ---- handler table

int _AM_SetHandler(ep_t ea, handler_t handler, amudp_handler_fn_t function) {
  AM_CHECK_INIT();
  if (!valid(ea) || !function) RETURN_ERR(AM_ERR_BAD_ARG);
  ea->handlers[handler] = function;
  return AM_OK;
}

int _AM_SetHandlerAny(ep_t ea, handler_t* handler, amudp_handler_fn_t function) {
  AM_CHECK_INIT();
  if (!valid(ea) || !handler || !function) RETURN_ERR(AM_ERR_BAD_ARG);
  for (int h = 1; h < AMUDP_MAX_NUMHANDLERS; h++) {
    if (ea->handlers[h]) continue;
    ea->handlers[h] = function;
    *handler = handler_t(h);
    return AM_OK;
  }
  RETURN_ERR(AM_ERR_RESOURCE);
}

// ---- events

int AM_GetEventMask(eb_t eb, int* mask) {
  AM_CHECK_INIT();
  if (!valid(eb) || !mask) RETURN_ERR(AM_ERR_BAD_ARG);
  *mask = eb->event_mask;
  return AM_OK;
}

int AM_SetEventMask(eb_t eb, int mask) {
  AM_CHECK_INIT();
  if (!valid(eb) || (mask != AM_NOEVENTS && mask != AM_NOTEMPTY)) RETURN_ERR(AM_ERR_BAD_ARG);
  eb->event_mask = mask;
  return AM_OK;
}

// Blocks until an endpoint of the bundle has a message; runs no handler.
// Retransmissions due meanwhile still go out, so a peer waiting on us is not
// stranded.
int AM_WaitSema(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) RETURN_ERR(AM_ERR_BAD_ARG);
  if (eb->event_mask != AM_NOTEMPTY) RETURN_ERR(AM_ERR_BAD_ARG);
  // An AM_PAR bundle is held in slices: between two, a thread that wants it
  // (AM_Poll, a request call: BundleLock) takes it first, so a thread
  // blocked here never stops the thread whose message would wake it.
  constexpr int kParSliceMs = 10;
  // Counted inside until after `hold` lets go (free_bundle waits for it).
  struct Inside {
    std::atomic<int>& n;
    explicit Inside(std::atomic<int>& w) : n(w) { n.fetch_add(1); }
    ~Inside() { n.fetch_sub(1); }
  } inside(eb->waiters);
  std::unique_lock<std::recursive_mutex> hold(eb->lock);
  for (;;) {
    if (eb->closing.load()) RETURN_ERR(AM_ERR_RESOURCE);  // AM_FreeBundle / AM_Terminate in another thread
    // A returned message waiting for handler 0 is work for AM_Poll too.
    if (std::any_of(eb->endpoints.begin(), eb->endpoints.end(), [](Endpoint* ep) { return !ep->deferred.empty(); }))
      break;
    if (lib().transport->wait(*eb, 0)) break;
    Clock::time_point due = Clock::time_point::max();
    for (Endpoint* ep : eb->endpoints) due = std::min(due, next_deadline(*ep));
    int timeout = -1;
    if (due != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
      timeout = int(std::max<long long>(0, left) + 1);
    }
    if (eb->mode == AM_PAR) timeout = timeout < 0 ? kParSliceMs : std::min(timeout, kParSliceMs);
    if (lib().transport->wait(*eb, timeout)) break;
    for (Endpoint* ep : eb->endpoints) retransmit_due(*ep);
    if (eb->contenders.load() > 0) {
      hold.unlock();
      while (eb->contenders.load() > 0 && !eb->closing.load())
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      hold.lock();
    }
  }
  eb->event_mask = AM_NOEVENTS;
  return AM_OK;
}

// ---- message queries

int AM_GetSourceEndpoint(void* token, en_t* gan) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !gan) RETURN_ERR(AM_ERR_BAD_ARG);
  *gan = t->source;
  return AM_OK;
}

int AM_GetDestEndpoint(void* token, ep_t* endp) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !endp) RETURN_ERR(AM_ERR_BAD_ARG);
  *endp = t->ep;
  return AM_OK;
}

int AM_GetMsgTag(void* token, tag_t* tagp) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !tagp) RETURN_ERR(AM_ERR_BAD_ARG);
  *tagp = t->tag;
  return AM_OK;
}

int AMUDP_GetSourceId(void* token, int* srcid) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !srcid) RETURN_ERR(AM_ERR_BAD_ARG);
  for (int i = 0; i < AMUDP_MAX_NUMTRANSLATIONS; i++)
    if (t->ep->table[i].inuse && t->ep->table[i].name == t->source) {
      *srcid = i;
      return AM_OK;
    }
  RETURN_ERR(AM_ERR_RESOURCE);
}

// ---- poll

int AM_Poll(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) RETURN_ERR(AM_ERR_BAD_ARG);
  if (handler_depth() > 0) RETURN_ERR(AM_ERR_RESOURCE);  // a handler's buffer is the one a poll refills
  int found;
  {
    BundleLock hold(*eb);
    found = poll_bundle(*eb);
  }
  if (lib().transport->polled) lib().transport->polled(found > 0);
  return AM_OK;
}

// ---- AMUDP's extensions

int AMUDP_SetUDPInterface(uint32_t IPAddress) {
  lib().udp_interface = IPAddress;
  return AM_OK;
}

int AMUDP_SetTranslationTag(ep_t ea, int index, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || index < 0 || index >= AMUDP_MAX_NUMTRANSLATIONS) RETURN_ERR(AM_ERR_BAD_ARG);
  if (!ea->table[index].inuse) RETURN_ERR(AM_ERR_RESOURCE);
  ea->table[index].tag = tag;
  return AM_OK;
}

int AMUDP_enEqual(en_t en1, en_t en2) { return en1 == en2 ? 1 : 0; }

int AMUDP_SetHandlerCallbacks(ep_t ep, AMUDP_preHandlerCallback_t pre, AMUDP_postHandlerCallback_t post) {
  AM_CHECK_INIT();
  if (!valid(ep)) RETURN_ERR(AM_ERR_BAD_ARG);
  ep->pre_handler = pre;
  ep->post_handler = post;
  return AM_OK;
}

// ---- statistics

const amudp_stats_t AMUDP_initial_stats = {
    {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, 0, 0, 0,
    ~amx_tick_t(0), 0, 0, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, 0};

int AMUDP_GetEndpointStatistics(ep_t ep, amudp_stats_t* stats) {
  AM_CHECK_INIT();
  if (!valid(ep) || !stats) RETURN_ERR(AM_ERR_BAD_ARG);
  *stats = ep->stats;
  return AM_OK;
}

int AMUDP_ResetEndpointStatistics(ep_t ep) {
  AM_CHECK_INIT();
  if (!valid(ep)) RETURN_ERR(AM_ERR_BAD_ARG);
  ep->stats = AMUDP_initial_stats;
  return AM_OK;
}

int AMUDP_AggregateStatistics(amudp_stats_t* sum, amudp_stats_t* more) {
  if (!sum || !more) RETURN_ERR(AM_ERR_BAD_ARG);
  for (int c = 0; c < amudp_NumCategories; c++) {
    sum->RequestsSent[c] += more->RequestsSent[c];
    sum->RepliesSent[c] += more->RepliesSent[c];
    sum->RequestsRetransmitted[c] += more->RequestsRetransmitted[c];
    sum->RepliesRetransmitted[c] += more->RepliesRetransmitted[c];
    sum->RepliesSquashed[c] += more->RepliesSquashed[c];
    sum->RequestsReceived[c] += more->RequestsReceived[c];
    sum->RepliesReceived[c] += more->RepliesReceived[c];
    sum->RequestDataBytesSent[c] += more->RequestDataBytesSent[c];
    sum->ReplyDataBytesSent[c] += more->ReplyDataBytesSent[c];
    sum->RequestTotalBytesSent[c] += more->RequestTotalBytesSent[c];
    sum->ReplyTotalBytesSent[c] += more->ReplyTotalBytesSent[c];
  }
  sum->ReturnedMessages += more->ReturnedMessages;
  sum->OutOfOrderRequests += more->OutOfOrderRequests;
  sum->OutOfOrderReplies += more->OutOfOrderReplies;
  sum->RequestMinLatency = std::min(sum->RequestMinLatency, more->RequestMinLatency);
  sum->RequestMaxLatency = std::max(sum->RequestMaxLatency, more->RequestMaxLatency);
  sum->RequestSumLatency += more->RequestSumLatency;
  sum->TotalBytesSent += more->TotalBytesSent;
  return AM_OK;
}

const char* AMUDP_DumpStatistics(void* fp, amudp_stats_t* stats, int globalAnalysis) {
  static std::string text;
  text.clear();
  if (!stats) return "";
  const amudp_stats_t& s = *stats;
  auto line = [](const char* fmt, auto... v) {
    char b[256];
    std::snprintf(b, sizeof b, fmt, v...);
    text += b;
  };
  auto total = [](const uint64_t* a) { return a[0] + a[1] + a[2]; };
  auto row = [&](const char* what, const uint64_t* a) {
    line("  %-24s %12" PRIu64 " (short %" PRIu64 ", medium %" PRIu64 ", long %" PRIu64 ")\n", what, total(a), a[0],
         a[1], a[2]);
  };
  line("AM statistics%s%s (%s transport):\n", *process_label() ? " of " : "", process_label(),
       ready() ? lib().transport->name : "no");
  row("Requests sent", s.RequestsSent);
  row("Replies sent", s.RepliesSent);
  row("Requests received", s.RequestsReceived);
  row("Replies received", s.RepliesReceived);
  row("Requests retransmitted", s.RequestsRetransmitted);
  row("Replies retransmitted", s.RepliesRetransmitted);
  row("Replies squashed", s.RepliesSquashed);
  line("  %-24s %12" PRIu64 "\n", "Returned messages", s.ReturnedMessages);
  line("  %-24s %12" PRIu64 " requests, %" PRIu64 " replies\n", "Out of order", s.OutOfOrderRequests,
       s.OutOfOrderReplies);
  row("Request data bytes", s.RequestDataBytesSent);
  row("Reply data bytes", s.ReplyDataBytesSent);
  row("Request packet bytes", s.RequestTotalBytesSent);
  row("Reply packet bytes", s.ReplyTotalBytesSent);
  uint64_t data = total(s.RequestDataBytesSent) + total(s.ReplyDataBytesSent);
  line("  %-24s %12" PRIu64 " (%.1f%% of it arguments and payload)\n", "Total bytes sent", s.TotalBytesSent,
       s.TotalBytesSent ? 100.0 * double(data) / double(s.TotalBytesSent) : 0.0);
  // Every request that came back answered (reply or empty reply) has a round trip.
  uint64_t answered = total(s.RepliesReceived) - total(s.RepliesSquashed);
  if (answered && s.RequestMinLatency != ~amx_tick_t(0))
    line("  %-24s min %.3f us, average %.3f us, max %.3f us\n", "Request round trip", double(s.RequestMinLatency) / 1e3,
         double(s.RequestSumLatency) / 1e3 / double(answered), double(s.RequestMaxLatency) / 1e3);
  if (globalAnalysis) {
    // Across every endpoint of a job, whatever was sent was received: the
    // difference is what never arrived (or, over UDP, arrived twice).
    line("  %-24s requests %" PRId64 ", replies %" PRId64 " (sent minus received, retransmissions included)\n",
         "Lost (job-wide)",
         int64_t(total(s.RequestsSent) + total(s.RequestsRetransmitted)) - int64_t(total(s.RequestsReceived)),
         int64_t(total(s.RepliesSent) + total(s.RepliesRetransmitted)) - int64_t(total(s.RepliesReceived)));
  }
  if (fp) {
    std::fputs(text.c_str(), static_cast<FILE*>(fp));
    std::fflush(static_cast<FILE*>(fp));
  }
  return text.c_str();
}

// ---- the AMUDP_ names of the AM_ calls (amudp.h, AMUDP_COEXIST_WITH_AM)

int AMUDP_Init(void) { return AM_Init(); }
int AMUDP_Terminate(void) { return AM_Terminate(); }
int AMUDP_AllocateBundle(int type, eb_t* endb) { return AM_AllocateBundle(type, endb); }
int AMUDP_AllocateEndpoint(eb_t eb, ep_t* endp, en_t* name) { return AM_AllocateEndpoint(eb, endp, name); }
int AMUDP_FreeBundle(eb_t eb) { return AM_FreeBundle(eb); }
int AMUDP_FreeEndpoint(ep_t ea) { return AM_FreeEndpoint(ea); }
int AMUDP_MoveEndpoint(ep_t ea, eb_t from, eb_t to) { return AM_MoveEndpoint(ea, from, to); }
int AMUDP_GetSeg(ep_t ea, void** addr, uintptr_t* nbytes) { return AM_GetSeg(ea, addr, nbytes); }
int AMUDP_SetSeg(ep_t ea, void* addr, uintptr_t nbytes) { return AM_SetSeg(ea, addr, nbytes); }
int AMUDP_MaxSegLength(uintptr_t* nbytes) { return AM_MaxSegLength(nbytes); }
int AMUDP_GetTag(ep_t ea, tag_t* tag) { return AM_GetTag(ea, tag); }
int AMUDP_SetTag(ep_t ea, tag_t tag) { return AM_SetTag(ea, tag); }
int AMUDP_Map(ep_t ea, int index, en_t name, tag_t tag) { return AM_Map(ea, index, name, tag); }
int AMUDP_MapAny(ep_t ea, int* index, en_t name, tag_t tag) { return AM_MapAny(ea, index, name, tag); }
int AMUDP_UnMap(ep_t ea, int index) { return AM_UnMap(ea, index); }
int AMUDP_GetNumTranslations(ep_t ea, int* ntrans) { return AM_GetNumTranslations(ea, ntrans); }
int AMUDP_SetNumTranslations(ep_t ea, int ntrans) { return AM_SetNumTranslations(ea, ntrans); }
int AMUDP_GetTranslationInuse(ep_t ea, int i) { return AM_GetTranslationInuse(ea, i); }
int AMUDP_GetTranslationTag(ep_t ea, int i, tag_t* tag) { return AM_GetTranslationTag(ea, i, tag); }
int AMUDP_GetTranslationName(ep_t ea, int i, en_t* gan) { return AM_GetTranslationName(ea, i, gan); }
int AMUDP_SetExpectedResources(ep_t ea, int n_endpoints, int n_outstanding) {
  return AM_SetExpectedResources(ea, n_endpoints, n_outstanding);
}
int AMUDP_SetHandler(ep_t ea, handler_t h, amudp_handler_fn_t fn) { return _AM_SetHandler(ea, h, fn); }
int AMUDP_SetHandlerAny(ep_t ea, handler_t* h, amudp_handler_fn_t fn) { return _AM_SetHandlerAny(ea, h, fn); }
int AMUDP_GetEventMask(eb_t eb, int* mask) { return AM_GetEventMask(eb, mask); }
int AMUDP_SetEventMask(eb_t eb, int mask) { return AM_SetEventMask(eb, mask); }
int AMUDP_WaitSema(eb_t eb) { return AM_WaitSema(eb); }
int AMUDP_GetSourceEndpoint(void* token, en_t* gan) { return AM_GetSourceEndpoint(token, gan); }
int AMUDP_GetDestEndpoint(void* token, ep_t* endp) { return AM_GetDestEndpoint(token, endp); }
int AMUDP_GetMsgTag(void* token, tag_t* tagp) { return AM_GetMsgTag(token, tagp); }
int AMUDP_Poll(eb_t eb) { return AM_Poll(eb); }

}  // extern "C"
