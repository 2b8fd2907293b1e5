// AM-2's objects: init, bundles, endpoints, segments, tags, translation and
// handler tables, events, message queries, AM_Poll. The request/reply
// protocol is reqrep.cpp; the wires are transport_*.cpp. What each call
// returns in each case is host/am/SEMANTICS.md.
#include <amudp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "am_internal.h"

namespace ulnic::am {

Library& lib() {
  static Library l;
  return l;
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
  while (!eb->endpoints.empty()) free_endpoint(eb->endpoints.back());
  auto& bs = lib().bundles;
  bs.erase(std::remove_if(bs.begin(), bs.end(), [eb](auto& b) { return b.get() == eb; }), bs.end());
  return AM_OK;
}

}  // namespace

}  // namespace ulnic::am

using namespace ulnic::am;

// Locks the bundle of an AM_PAR endpoint for the call (AM_SEQ callers
// promise one thread).
#define AM_CHECK_INIT() \
  do {                   \
    if (!ready()) return AM_ERR_NOT_INIT; \
  } while (0)

extern "C" {

int AMX_SetTransport(const char* name) {
  if (ready()) return AM_ERR_IN_USE;
  const Transport* t = transport_named(name);
  if (!t) return AM_ERR_BAD_ARG;
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
      return AM_ERR_BAD_ARG;
    }
  }
  int rc = t->start();
  if (rc != AM_OK) return rc;
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
  if (!nbytes) return AM_ERR_BAD_ARG;
  *nbytes = AMUDP_MAX_SEGLENGTH;
  return AM_OK;
}

// ---- bundles and endpoints

int AM_AllocateBundle(int type, eb_t* endb) {
  AM_CHECK_INIT();
  if ((type != AM_SEQ && type != AM_PAR) || !endb) return AM_ERR_BAD_ARG;
  if (lib().bundles.size() >= AMUDP_MAX_BUNDLES) return AM_ERR_RESOURCE;
  auto b = std::make_unique<Bundle>();
  b->mode = type;
  *endb = b.get();
  lib().bundles.push_back(std::move(b));
  return AM_OK;
}

int AM_FreeBundle(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) return AM_ERR_BAD_ARG;
  return free_bundle(eb);
}

int AM_AllocateEndpoint(eb_t eb, ep_t* endp, en_t* endpoint_name) {
  AM_CHECK_INIT();
  if (!valid(eb) || !endp || !endpoint_name) return AM_ERR_BAD_ARG;
  auto& slots = lib().endpoints;
  auto it = std::find(slots.begin(), slots.end(), nullptr);
  if (it == slots.end()) return AM_ERR_RESOURCE;
  auto* ep = new Endpoint;
  ep->bundle = eb;
  ep->index = int(it - slots.begin());
  ep->handlers[0] = reinterpret_cast<amudp_handler_fn_t>(&default_returned);
  int rc = lib().transport->open(*ep, ep->name);
  if (rc != AM_OK) {
    delete ep;
    return rc;
  }
  *it = ep;
  ep->bundle->endpoints.push_back(ep);
  *endp = ep;
  *endpoint_name = ep->name;
  return AM_OK;
}

int AM_FreeEndpoint(ep_t ea) {
  AM_CHECK_INIT();
  if (!valid(ea)) return AM_ERR_BAD_ARG;
  free_endpoint(ea);
  return AM_OK;
}

int AM_MoveEndpoint(ep_t ea, eb_t from, eb_t to) {
  AM_CHECK_INIT();
  if (!valid(ea) || !valid(from) || !valid(to)) return AM_ERR_BAD_ARG;
  auto* ep = ea;
  auto* f = from;
  if (ep->bundle != f) return AM_ERR_BAD_ARG;
  f->endpoints.erase(std::remove(f->endpoints.begin(), f->endpoints.end(), ep), f->endpoints.end());
  ep->bundle = to;
  ep->bundle->endpoints.push_back(ep);
  return AM_OK;
}

// ---- segment and tag

int AM_GetSeg(ep_t ea, void** addr, uintptr_t* nbytes) {
  AM_CHECK_INIT();
  if (!valid(ea) || !addr || !nbytes) return AM_ERR_BAD_ARG;
  *addr = ea->seg;
  *nbytes = ea->seg_len;
  return AM_OK;
}

int AM_SetSeg(ep_t ea, void* addr, uintptr_t nbytes) {
  AM_CHECK_INIT();
  if (!valid(ea) || nbytes > AMUDP_MAX_SEGLENGTH || (!addr && nbytes)) return AM_ERR_BAD_ARG;
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
      return rc;
    }
  }
  return AM_OK;
}

int AM_GetTag(ep_t ea, tag_t* tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || !tag) return AM_ERR_BAD_ARG;
  *tag = ea->tag;
  return AM_OK;
}

int AM_SetTag(ep_t ea, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea)) return AM_ERR_BAD_ARG;
  tag_t old = ea->tag;
  ea->tag = tag;
  if (lib().transport->endpoint_changed) {
    int rc = lib().transport->endpoint_changed(*ea);
    if (rc != AM_OK) {
      ea->tag = old;
      return rc;
    }
  }
  return AM_OK;
}

// ---- translation table

int AM_Map(ep_t ea, int index, en_t name, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || index < 0 || index >= AMUDP_MAX_NUMTRANSLATIONS) return AM_ERR_BAD_ARG;
  if (name.transport != lib().transport->id) return AM_ERR_BAD_ARG;
  Translation& t = ea->table[index];
  if (t.inuse) return AM_ERR_RESOURCE;
  t = Translation{true, name, tag};
  return AM_OK;
}

int AM_MapAny(ep_t ea, int* index, en_t name, tag_t tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || !index) return AM_ERR_BAD_ARG;
  for (int i = 0; i < AMUDP_MAX_NUMTRANSLATIONS; i++) {
    if (ea->table[i].inuse) continue;
    int rc = AM_Map(ea, i, name, tag);
    if (rc == AM_OK) *index = i;
    return rc;
  }
  return AM_ERR_RESOURCE;
}

int AM_UnMap(ep_t ea, int index) {
  AM_CHECK_INIT();
  if (!valid(ea) || index < 0 || index >= AMUDP_MAX_NUMTRANSLATIONS || !ea->table[index].inuse)
    return AM_ERR_BAD_ARG;
  auto it = ea->peers.find(ea->table[index].name);
  if (it != ea->peers.end() && it->second->outstanding > 0) return AM_ERR_IN_USE;
  ea->table[index] = Translation{};
  return AM_OK;
}

int AM_GetTranslationInuse(ep_t ea, int i) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS) return AM_ERR_BAD_ARG;
  return ea->table[i].inuse ? AM_OK : AM_ERR_RESOURCE;
}

int AM_GetTranslationTag(ep_t ea, int i, tag_t* tag) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS || !tag) return AM_ERR_BAD_ARG;
  if (!ea->table[i].inuse) return AM_ERR_RESOURCE;
  *tag = ea->table[i].tag;
  return AM_OK;
}

int AM_GetTranslationName(ep_t ea, int i, en_t* gan) {
  AM_CHECK_INIT();
  if (!valid(ea) || i < 0 || i >= AMUDP_MAX_NUMTRANSLATIONS || !gan) return AM_ERR_BAD_ARG;
  if (!ea->table[i].inuse) return AM_ERR_RESOURCE;
  *gan = ea->table[i].name;
  return AM_OK;
}

int AM_GetNumTranslations(ep_t ea, int* ntrans) {
  AM_CHECK_INIT();
  if (!valid(ea) || !ntrans) return AM_ERR_BAD_ARG;
  *ntrans = AMUDP_MAX_NUMTRANSLATIONS;
  return AM_OK;
}

int AM_SetNumTranslations(ep_t ea, int ntrans) {
  AM_CHECK_INIT();
  if (!valid(ea)) return AM_ERR_BAD_ARG;
  return ntrans == AMUDP_MAX_NUMTRANSLATIONS ? AM_OK : AM_ERR_RESOURCE;
}

int AM_SetExpectedResources(ep_t ea, int n_endpoints, int n_outstanding_requests) {
  AM_CHECK_INIT();
  if (!valid(ea) || n_endpoints < 1 || n_endpoints > AMUDP_MAX_NUMTRANSLATIONS || n_outstanding_requests < 1 ||
      n_outstanding_requests > AMUDP_MAX_NETWORKDEPTH)
    return AM_ERR_BAD_ARG;
  if (ea->depth != 0 || n_outstanding_requests > lib().transport->max_depth) return AM_ERR_RESOURCE;
  ea->depth = n_outstanding_requests;
  ea->expected_peers = n_endpoints;
  return AM_OK;
}

// ---- handler table

int _AM_SetHandler(ep_t ea, handler_t handler, amudp_handler_fn_t function) {
  AM_CHECK_INIT();
  if (!valid(ea) || !function) return AM_ERR_BAD_ARG;
  ea->handlers[handler] = function;
  return AM_OK;
}

int _AM_SetHandlerAny(ep_t ea, handler_t* handler, amudp_handler_fn_t function) {
  AM_CHECK_INIT();
  if (!valid(ea) || !handler || !function) return AM_ERR_BAD_ARG;
  for (int h = 1; h < AMUDP_MAX_NUMHANDLERS; h++) {
    if (ea->handlers[h]) continue;
    ea->handlers[h] = function;
    *handler = handler_t(h);
    return AM_OK;
  }
  return AM_ERR_RESOURCE;
}

// ---- events

int AM_GetEventMask(eb_t eb, int* mask) {
  AM_CHECK_INIT();
  if (!valid(eb) || !mask) return AM_ERR_BAD_ARG;
  *mask = eb->event_mask;
  return AM_OK;
}

int AM_SetEventMask(eb_t eb, int mask) {
  AM_CHECK_INIT();
  if (!valid(eb) || (mask != AM_NOEVENTS && mask != AM_NOTEMPTY)) return AM_ERR_BAD_ARG;
  eb->event_mask = mask;
  return AM_OK;
}

// Blocks until an endpoint of the bundle has a message; runs no handler.
// Retransmissions due meanwhile still go out, so a peer waiting on us is not
// stranded.
int AM_WaitSema(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) return AM_ERR_BAD_ARG;
  if (eb->event_mask != AM_NOTEMPTY) return AM_ERR_BAD_ARG;
  std::lock_guard<std::recursive_mutex> hold(eb->lock);
  for (;;) {
    if (lib().transport->wait(*eb, 0)) break;
    Clock::time_point due = Clock::time_point::max();
    for (Endpoint* ep : eb->endpoints) due = std::min(due, next_deadline(*ep));
    int timeout = -1;
    if (due != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
      timeout = int(std::max<long long>(0, left) + 1);
    }
    if (lib().transport->wait(*eb, timeout)) break;
    for (Endpoint* ep : eb->endpoints) retransmit_due(*ep);
  }
  eb->event_mask = AM_NOEVENTS;
  return AM_OK;
}

// ---- message queries

int AM_GetSourceEndpoint(void* token, en_t* gan) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !gan) return AM_ERR_BAD_ARG;
  *gan = t->source;
  return AM_OK;
}

int AM_GetDestEndpoint(void* token, ep_t* endp) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !endp) return AM_ERR_BAD_ARG;
  *endp = t->ep;
  return AM_OK;
}

int AM_GetMsgTag(void* token, tag_t* tagp) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !tagp) return AM_ERR_BAD_ARG;
  *tagp = t->tag;
  return AM_OK;
}

int AMUDP_GetSourceId(void* token, int* srcid) {
  AM_CHECK_INIT();
  Token* t = live_token(token);
  if (!t || !srcid) return AM_ERR_BAD_ARG;
  for (int i = 0; i < AMUDP_MAX_NUMTRANSLATIONS; i++)
    if (t->ep->table[i].inuse && t->ep->table[i].name == t->source) {
      *srcid = i;
      return AM_OK;
    }
  return AM_ERR_RESOURCE;
}

// ---- poll

int AM_Poll(eb_t eb) {
  AM_CHECK_INIT();
  if (!valid(eb)) return AM_ERR_BAD_ARG;
  if (lib().handler_depth > 0) return AM_ERR_RESOURCE;  // a handler's buffer is the one a poll refills
  int found;
  {
    std::lock_guard<std::recursive_mutex> hold(eb->lock);
    found = poll_bundle(*eb);
  }
  if (lib().transport->polled) lib().transport->polled(found > 0);
  return AM_OK;
}

}  // extern "C"
