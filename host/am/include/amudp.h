/* amudp.h: Active Messages AM-2 on ulnic, with the names AMUDP gives them.
 *
 * AM-2 programs written for AMUDP 3.x (Berkeley's AM-2 over UDP) compile
 * against this header as they are: every public name of AMUDP's amudp.h
 * (and the AMX_* names its AM-2 extensions go by) is here, with AMUDP's
 * types, constants and meaning. The API sits on a transport chosen per
 * process before AM_Init (AMX_SetTransport(), else $ULNIC_AM_TRANSPORT,
 * else "udp"):
 *   "udp"     AM over UDP sockets (the AMUDP design); needs no emulator
 *   "vipl"    AM over VIPL on the emulated NIC (the AMVIA design): one VI
 *             per pair of endpoints, Long payloads by RDMA write
 *   "native"  AM on the emulated NIC: the firmware checks tags and ring
 *             room, delivers into the endpoint's receive ring in host
 *             memory and writes Long payloads straight into the segment
 * What each call does, and the provider's choices where AM-2 leaves room,
 * are in host/am/SEMANTICS.md (which also lists every AMUDP name and what
 * ulnic does with it).
 */
#ifndef ULNIC_AMUDP_H
#define ULNIC_AMUDP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define AMUDP_BEGIN_EXTERNC extern "C" {
#define AMUDP_END_EXTERNC }
#define AMUDP_EXTERNC extern "C"
#else
#define AMUDP_BEGIN_EXTERNC
#define AMUDP_END_EXTERNC
#define AMUDP_EXTERNC extern
#endif

AMUDP_BEGIN_EXTERNC

#ifndef AMUDP
#define AMUDP 1
#endif

/* ---- macro helpers (AMUDP's; the unprefixed pair only if nobody has them) */
#define _AMUDP_STRINGIFY_HELPER(x) #x
#define AMUDP_STRINGIFY(x) _AMUDP_STRINGIFY_HELPER(x)
#define _AMUDP_CONCAT_HELPER(a, b) a##b
#define AMUDP_CONCAT(a, b) _AMUDP_CONCAT_HELPER(a, b)
#ifndef _STRINGIFY
#define _STRINGIFY(x) AMUDP_STRINGIFY(x)
#endif
#ifndef _CONCAT
#define _CONCAT(a, b) AMUDP_CONCAT(a, b)
#endif

/* The AMUDP release whose interface this is, and ulnic's own version. */
#define AMUDP_LIBRARY_VERSION 3.14
#define AMUDP_LIBRARY_VERSION_STR AMUDP_STRINGIFY(AMUDP_LIBRARY_VERSION)
#define ULNIC_AM_LIBRARY_VERSION_STR "ulnic-am-2"

/* Debug or not: AMUDP's configuration macros (ulnic has one build of the
 * library; these only say which the program asked for). */
#if !defined(AMUDP_DEBUG) && !defined(AMUDP_NDEBUG)
#if defined(GASNET_DEBUG) || defined(AMX_DEBUG)
#define AMUDP_DEBUG 1
#else
#define AMUDP_NDEBUG 1
#endif
#endif
#undef AMX_DEBUG
#undef AMX_NDEBUG
#ifdef AMUDP_DEBUG
#define AMX_DEBUG AMUDP_DEBUG
#define AMUDP_DEBUG_CONFIG _DEBUG
#else
#define AMX_NDEBUG AMUDP_NDEBUG
#define AMUDP_DEBUG_CONFIG _NDEBUG
#endif

/* ---- implementation constants */
#define AMUDP_MAX_SHORT 16             /* handler arguments */
#define AMUDP_MAX_MEDIUM 65000         /* AM_RequestI / AM_ReplyI payload (AMUDP's UDP datagram) */
#define AMUDP_MAX_LONG (1024 * 1024)   /* AM_RequestXfer / AM_ReplyXfer payload, fragmented on the wire */
#define AMUDP_MAX_NUMHANDLERS 256
#define AMUDP_INIT_NUMTRANSLATIONS 256
#define AMUDP_MAX_NUMTRANSLATIONS 256
#define AMUDP_MAX_SEGLENGTH ((uintptr_t)0xFFFFFFFFu) /* offsets travel as 32 bits */
#define AMUDP_MAX_BUNDLES 255
#define AMUDP_MAX_NETWORKDEPTH 64      /* request credits per peer pair */
#define AMUDP_MAX_RECVDEPTH 65534      /* AMUDP's receive-queue bound (nothing here asks for one) */
#define AMUDP_MAX_SPMDPROCS AMUDP_MAX_NUMTRANSLATIONS
#define AMUDP_PROCID_NEXT -1           /* a worker that asks the master for the next rank */
#define AMUDP_PROCID_ALLOC -2          /* a spawner that asks for a rank and does not join */
#ifndef AMUDP_COLLECT_STATS
#define AMUDP_COLLECT_STATS 1
#endif
#ifndef AMUDP_COLLECT_LATENCY_STATS
#define AMUDP_COLLECT_LATENCY_STATS 1
#endif

/* ---- user-visible types */
typedef uint64_t tag_t;
typedef uint8_t handler_t;
#define AMUDP_BADHANDLERVAL(h) (0)
typedef uint32_t amudp_node_t; /* a translation index (a request's destination) */
typedef int op_t;

/* An endpoint's name: 16 bytes of plain old data (AMUDP's is a struct
 * sockaddr_in, as large), compared byte for byte (AMUDP_enEqual). The
 * meaning of the words depends on the transport that made it. */
typedef struct {
  uint32_t host;      /* udp: IPv4 address (network order); NIC transports: node */
  uint32_t port;      /* udp: port (host order); NIC transports: slot */
  uint32_t id;        /* NIC transports: the owning process's id */
  uint16_t index;     /* NIC transports: endpoint number in that process */
  uint8_t transport;  /* AMX_TRANSPORT_* */
  uint8_t reserved;   /* 0 */
} en_t;

#define AMX_TRANSPORT_UDP 1
#define AMX_TRANSPORT_VIPL 2
#define AMX_TRANSPORT_NATIVE 3

struct amx_bundle;
struct amx_endpoint;
typedef struct amx_bundle *eb_t;
typedef struct amx_endpoint *ep_t;

typedef void (*amudp_handler_fn_t)(); /* a handler: its arguments depend on its category */

/* Statistics ticks: nanoseconds of a monotonic clock. */
#define _AMX_TICK_T
typedef uint64_t amx_tick_t;
typedef amx_tick_t amudp_cputick_t;

typedef enum { amudp_Short = 0, amudp_Medium = 1, amudp_Long = 2, amudp_NumCategories = 3 } amudp_category_t;

/* An endpoint's counters (AMUDP_GetEndpointStatistics; SEMANTICS.md says
 * what each counts on each transport). Begin at AMUDP_initial_stats. */
typedef struct {
  uint64_t RequestsSent[amudp_NumCategories];          /* requests sent (each once) */
  uint64_t RepliesSent[amudp_NumCategories];           /* replies sent, the empty reply of a handler that did not reply as a Short */
  uint64_t RequestsRetransmitted[amudp_NumCategories]; /* transmissions of a request after its first */
  uint64_t RepliesRetransmitted[amudp_NumCategories];  /* transmissions of a reply after its first */
  uint64_t RepliesSquashed[amudp_NumCategories];       /* reply copies that arrived after their request was answered */
  uint64_t RequestsReceived[amudp_NumCategories];      /* requests that arrived, duplicates included */
  uint64_t RepliesReceived[amudp_NumCategories];       /* replies that arrived, duplicates included */
  uint64_t ReturnedMessages;                           /* messages handed to handler 0 */
  uint64_t OutOfOrderRequests;                         /* requests that arrived after a later one from that peer */
  uint64_t OutOfOrderReplies;                          /* replies that arrived after a later one from that peer */
  amx_tick_t RequestMinLatency;                        /* request sent -> its reply back (ticks) */
  amx_tick_t RequestMaxLatency;
  amx_tick_t RequestSumLatency;
  uint64_t RequestDataBytesSent[amudp_NumCategories];  /* arguments + payload of the requests sent */
  uint64_t ReplyDataBytesSent[amudp_NumCategories];    /* arguments + payload of the replies sent */
  uint64_t RequestTotalBytesSent[amudp_NumCategories]; /* every packet of the requests, headers and retransmissions included */
  uint64_t ReplyTotalBytesSent[amudp_NumCategories];   /* every packet of the replies, likewise */
  uint64_t TotalBytesSent;                             /* every packet this endpoint sent, control packets included */
} amudp_stats_t;

/* Called around every request and reply handler (not handler 0); they may
 * make no AM call. */
typedef void (*AMUDP_preHandlerCallback_t)(amudp_category_t cat, int isReq, int handlerId, void *token, void *buf,
                                           size_t nbytes, int numargs, uint32_t *args);
typedef void (*AMUDP_postHandlerCallback_t)(amudp_category_t cat, int isReq);

/* ---- constants */
#define AM_ALL 1  /* endpoint tag: accept every tag */
#define AM_NONE 0 /* endpoint tag: accept none */

typedef enum {
  AM_NOEVENTS, /* no event */
  AM_NOTEMPTY, /* a message arrived at an endpoint of the bundle */
  AM_NUMEVENTMASKS
} amudp_eventmask_t;

typedef enum {
  AM_SEQ, /* one thread uses the bundle */
  AM_PAR, /* several threads may use it */
  AM_NUM_BUNDLE_MODES
} amudp_bundle_mode_t;

#define AM_OK 0
#define AM_ERR_NOT_INIT 1
#define AM_ERR_BAD_ARG 2
#define AM_ERR_RESOURCE 3
#define AM_ERR_NOT_SENT 4
#define AM_ERR_IN_USE 5

/* returned-message status, passed to handler 0 */
#define EBADARGS 1
#define EBADENTRY 2
#define EBADTAG 3
#define EBADHANDLER 4
#define EBADSEGOFF 5
#define EBADLENGTH 6
#define EBADENDPOINT 7
#define ECONGESTION 8
#define EUNREACHABLE 9
#define EREPLYREJECTED 10

/* returned-message opcode */
#define AM_REQUEST_M 1
#define AM_REQUEST_IM 2
#define AM_REQUEST_XFER_M 3
#define AM_REPLY_M 4
#define AM_REPLY_IM 5
#define AM_REPLY_XFER_M 6

/* ---- AMUDP's own entry points and knobs */
extern int AMUDP_VerboseErrors;      /* non-zero: every call that fails says so on stderr */
extern int AMUDP_PoliteSync;         /* non-zero: block politely while waiting for a credit (ulnic always does) */
extern int AMUDP_SilentMode;         /* non-zero: no output but errors (ulnic prints no other) */
extern const char *AMUDP_ProcessLabel; /* prefixes this process's messages ("Node R" in SPMD jobs) */
extern int AMUDP_ExpectedBandwidth;  /* AMUDP 3.1's retransmission hint, KB/s: read by nothing here */

#ifdef __GNUC__
__attribute__((__format__(__printf__, 1, 2), __noreturn__))
#endif
extern void AMUDP_FatalErr(const char *msg, ...); /* prints "*** FATAL ERROR: msg" and aborts */

/* The IPv4 address (host byte order) the udp transport binds new endpoints
 * to; 0 (INADDR_ANY): $ULNIC_AM_UDP_HOST, else 127.0.0.1. */
extern int AMUDP_SetUDPInterface(uint32_t IPAddress);

extern int AMUDP_GetEndpointStatistics(ep_t ep, amudp_stats_t *stats);
extern int AMUDP_ResetEndpointStatistics(ep_t ep);
extern int AMUDP_AggregateStatistics(amudp_stats_t *runningsum, amudp_stats_t *newvalues);
/* Writes the statistics to fp (a FILE *) if not NULL, and returns the same
 * text (a static buffer, rewritten by the next call). */
extern const char *AMUDP_DumpStatistics(void *fp, amudp_stats_t *stats, int globalAnalysis);
extern const amudp_stats_t AMUDP_initial_stats;

extern int AMUDP_SetHandlerCallbacks(ep_t ep, AMUDP_preHandlerCallback_t preHandlerCallback,
                                     AMUDP_postHandlerCallback_t postHandlerCallback);
/* SPMD control traffic is served by a thread of the library: nothing to do
 * here (*controlMessagesServiced = 0). */
extern int AMUDP_SPMDHandleControlTraffic(int *controlMessagesServiced);

/* ---- AM-2 entry points. With AMUDP_COEXIST_WITH_AM the AM_ names are the
 * library's AMUDP_ names (both are defined). */
#ifdef AMUDP_COEXIST_WITH_AM
#define AM_Init AMUDP_Init
#define AM_Terminate AMUDP_Terminate
#define AM_AllocateBundle AMUDP_AllocateBundle
#define AM_AllocateEndpoint AMUDP_AllocateEndpoint
#define AM_FreeBundle AMUDP_FreeBundle
#define AM_FreeEndpoint AMUDP_FreeEndpoint
#define AM_MoveEndpoint AMUDP_MoveEndpoint
#define AM_GetSeg AMUDP_GetSeg
#define AM_SetSeg AMUDP_SetSeg
#define AM_MaxSegLength AMUDP_MaxSegLength
#define AM_GetTag AMUDP_GetTag
#define AM_SetTag AMUDP_SetTag
#define AM_Map AMUDP_Map
#define AM_MapAny AMUDP_MapAny
#define AM_UnMap AMUDP_UnMap
#define AM_GetNumTranslations AMUDP_GetNumTranslations
#define AM_SetNumTranslations AMUDP_SetNumTranslations
#define AM_GetTranslationInuse AMUDP_GetTranslationInuse
#define AM_GetTranslationTag AMUDP_GetTranslationTag
#define AM_GetTranslationName AMUDP_GetTranslationName
#define AM_SetExpectedResources AMUDP_SetExpectedResources
#define _AM_SetHandler AMUDP_SetHandler
#define _AM_SetHandlerAny AMUDP_SetHandlerAny
#define AM_GetEventMask AMUDP_GetEventMask
#define AM_SetEventMask AMUDP_SetEventMask
#define AM_WaitSema AMUDP_WaitSema
#define AM_GetSourceEndpoint AMUDP_GetSourceEndpoint
#define AM_GetDestEndpoint AMUDP_GetDestEndpoint
#define AM_GetMsgTag AMUDP_GetMsgTag
#define AM_Poll AMUDP_Poll
#endif

/* The AM-2 extensions every AMX implementation names alike. */
#define AMX_VerboseErrors AMUDP_VerboseErrors
#define AMX_SilentMode AMUDP_SilentMode
#define AMX_ProcessLabel AMUDP_ProcessLabel
#define AMX_FatalErr AMUDP_FatalErr
#define AMX_SetTranslationTag AMUDP_SetTranslationTag
#define AMX_GetEndpointStatistics AMUDP_GetEndpointStatistics
#define AMX_DumpStatistics AMUDP_DumpStatistics
#define AMX_AggregateStatistics AMUDP_AggregateStatistics
#define AMX_initial_stats AMUDP_initial_stats
#define amx_stats_t amudp_stats_t
#define amx_handler_fn_t amudp_handler_fn_t
#define AMX_GetSourceId AMUDP_GetSourceId
#define AMX_enEqual AMUDP_enEqual

/* ---- system parameters */
#define AM_MaxShort() AMUDP_MAX_SHORT
#define AM_MaxMedium() AMUDP_MAX_MEDIUM
#define AM_MaxLong() AMUDP_MAX_LONG
#define AM_MaxNumHandlers() AMUDP_MAX_NUMHANDLERS
#define AM_MaxNumTranslations(trans) (*(trans) = AMUDP_MAX_NUMTRANSLATIONS, AM_OK)
extern int AM_MaxSegLength(uintptr_t *nbytes);

/* ---- initialization */
extern int AM_Init(void);
extern int AM_Terminate(void);
/* ulnic extension: choose the transport ("udp", "vipl", "native") before
 * AM_Init; AM_ERR_BAD_ARG for an unknown name, AM_ERR_IN_USE after AM_Init. */
extern int AMX_SetTransport(const char *name);
/* The transport in use (after AM_Init), or NULL. */
extern const char *AMX_TransportName(void);

/* ---- bundles and endpoints */
extern int AM_AllocateBundle(int type, eb_t *endb);
extern int AM_AllocateEndpoint(eb_t bundle, ep_t *endp, en_t *endpoint_name);
extern int AM_FreeBundle(eb_t bundle);
extern int AM_FreeEndpoint(ep_t ea);
extern int AM_MoveEndpoint(ep_t ea, eb_t from_bundle, eb_t to_bundle);

extern int AM_GetSeg(ep_t ea, void **addr, uintptr_t *nbytes);
extern int AM_SetSeg(ep_t ea, void *addr, uintptr_t nbytes);
extern int AM_GetTag(ep_t ea, tag_t *tag);
extern int AM_SetTag(ep_t ea, tag_t tag);

/* ---- translation table */
extern int AM_Map(ep_t ea, int index, en_t name, tag_t tag);
extern int AM_MapAny(ep_t ea, int *index, en_t name, tag_t tag);
extern int AM_UnMap(ep_t ea, int index);
extern int AM_GetTranslationInuse(ep_t ea, int i);
extern int AM_GetTranslationTag(ep_t ea, int i, tag_t *tag);
extern int AM_GetTranslationName(ep_t ea, int i, en_t *gan);
extern int AM_GetNumTranslations(ep_t ea, int *ntrans);
extern int AM_SetNumTranslations(ep_t ea, int ntrans);
extern int AM_SetExpectedResources(ep_t ea, int n_endpoints, int n_outstanding_requests);
/* A mapped translation's tag, changed at any time (also after
 * AM_SetExpectedResources): the next request to it carries the new tag. */
extern int AMUDP_SetTranslationTag(ep_t ea, int index, tag_t tag);

/* ---- handler table */
extern int _AM_SetHandler(ep_t ea, handler_t handler, amudp_handler_fn_t function);
#define AM_SetHandler(ea, handler, function) _AM_SetHandler((ea), (handler), (amudp_handler_fn_t)(function))
extern int _AM_SetHandlerAny(ep_t ea, handler_t *handler, amudp_handler_fn_t function);
#define AM_SetHandlerAny(ea, handler, function) _AM_SetHandlerAny((ea), (handler), (amudp_handler_fn_t)(function))
#define AM_GetNumHandlers(ep, pnhandlers) ((ep) ? ((*(pnhandlers) = AMUDP_MAX_NUMHANDLERS), AM_OK) : AM_ERR_BAD_ARG)
#define AM_SetNumHandlers(ep, nhandlers) \
  ((ep) ? ((nhandlers) == AMUDP_MAX_NUMHANDLERS ? AM_OK : AM_ERR_RESOURCE) : AM_ERR_BAD_ARG)

/* ---- events */
extern int AM_GetEventMask(eb_t eb, int *mask);
extern int AM_SetEventMask(eb_t eb, int mask);
extern int AM_WaitSema(eb_t eb);

/* ---- message interrogation (inside a handler) */
extern int AM_GetSourceEndpoint(void *token, en_t *gan);
extern int AM_GetDestEndpoint(void *token, ep_t *endp);
extern int AM_GetMsgTag(void *token, tag_t *tagp);
extern int AMUDP_GetSourceId(void *token, int *srcid);
/* 1 if the two names are the same endpoint, else 0. */
extern int AMUDP_enEqual(en_t en1, en_t en2);

/* ---- poll */
extern int AM_Poll(eb_t bundle);

/* ---- requests and replies: six entry points (and their va_list forms),
 * the macros below expand the N = 0..16 argument forms. Arguments are 32-bit
 * integers (cast as AMUDP does, so floating-point actuals convert and wider
 * integers truncate). */
extern int AMUDP_Request(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler, int numargs, ...);
extern int AMUDP_RequestI(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler, void *source_addr,
                          size_t nbytes, int numargs, ...);
extern int AMUDP_RequestXfer(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler,
                             void *source_addr, size_t nbytes, uintptr_t dest_offset, int async, int numargs, ...);
extern int AMUDP_Reply(void *token, handler_t handler, int numargs, ...);
extern int AMUDP_ReplyI(void *token, handler_t handler, void *source_addr, size_t nbytes, int numargs, ...);
extern int AMUDP_ReplyXfer(void *token, handler_t handler, void *source_addr, size_t nbytes, uintptr_t dest_offset,
                           int numargs, ...);

extern int AMUDP_RequestVA(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler, int numargs,
                           va_list argptr);
extern int AMUDP_RequestIVA(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler,
                            void *source_addr, size_t nbytes, int numargs, va_list argptr);
extern int AMUDP_RequestXferVA(ep_t request_endpoint, amudp_node_t reply_endpoint, handler_t handler,
                               void *source_addr, size_t nbytes, uintptr_t dest_offset, int async, int numargs,
                               va_list argptr);
extern int AMUDP_ReplyVA(void *token, handler_t handler, int numargs, va_list argptr);
extern int AMUDP_ReplyIVA(void *token, handler_t handler, void *source_addr, size_t nbytes, int numargs,
                          va_list argptr);
extern int AMUDP_ReplyXferVA(void *token, handler_t handler, void *source_addr, size_t nbytes,
                             uintptr_t dest_offset, int numargs, va_list argptr);

#define AM_Request0(ep, destep, hnum) AMUDP_Request(ep, destep, hnum, 0)
#define AM_Request1(ep, destep, hnum, a0) AMUDP_Request(ep, destep, hnum, 1, (int32_t)(a0))
#define AM_Request2(ep, destep, hnum, a0, a1) AMUDP_Request(ep, destep, hnum, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_Request3(ep, destep, hnum, a0, a1, a2) AMUDP_Request(ep, destep, hnum, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_Request4(ep, destep, hnum, a0, a1, a2, a3) AMUDP_Request(ep, destep, hnum, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_Request5(ep, destep, hnum, a0, a1, a2, a3, a4) AMUDP_Request(ep, destep, hnum, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_Request6(ep, destep, hnum, a0, a1, a2, a3, a4, a5) AMUDP_Request(ep, destep, hnum, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_Request7(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6) AMUDP_Request(ep, destep, hnum, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_Request8(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7) AMUDP_Request(ep, destep, hnum, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_Request9(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8) AMUDP_Request(ep, destep, hnum, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_Request10(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) AMUDP_Request(ep, destep, hnum, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_Request11(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) AMUDP_Request(ep, destep, hnum, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_Request12(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) AMUDP_Request(ep, destep, hnum, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_Request13(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) AMUDP_Request(ep, destep, hnum, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_Request14(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) AMUDP_Request(ep, destep, hnum, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_Request15(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) AMUDP_Request(ep, destep, hnum, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_Request16(ep, destep, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) AMUDP_Request(ep, destep, hnum, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

#define AM_RequestI0(ep, destep, hnum, sa, cnt) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 0)
#define AM_RequestI1(ep, destep, hnum, sa, cnt, a0) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 1, (int32_t)(a0))
#define AM_RequestI2(ep, destep, hnum, sa, cnt, a0, a1) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_RequestI3(ep, destep, hnum, sa, cnt, a0, a1, a2) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_RequestI4(ep, destep, hnum, sa, cnt, a0, a1, a2, a3) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_RequestI5(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_RequestI6(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_RequestI7(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_RequestI8(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_RequestI9(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_RequestI10(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_RequestI11(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_RequestI12(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_RequestI13(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_RequestI14(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_RequestI15(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_RequestI16(ep, destep, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  AMUDP_RequestI(ep, destep, hnum, sa, cnt, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

#define AM_RequestXfer0(ep, destep, destoff, hnum, sa, cnt) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 0)
#define AM_RequestXfer1(ep, destep, destoff, hnum, sa, cnt, a0) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 1, (int32_t)(a0))
#define AM_RequestXfer2(ep, destep, destoff, hnum, sa, cnt, a0, a1) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_RequestXfer3(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_RequestXfer4(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_RequestXfer5(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_RequestXfer6(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_RequestXfer7(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_RequestXfer8(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_RequestXfer9(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_RequestXfer10(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_RequestXfer11(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_RequestXfer12(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_RequestXfer13(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_RequestXfer14(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_RequestXfer15(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_RequestXfer16(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 0, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

/* Async: never blocks for a credit; AM_ERR_IN_USE if none is free now. Like
 * every send, the source buffer may be reused as soon as the call returns. */
#define AM_RequestXferAsync0(ep, destep, destoff, hnum, sa, cnt) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 0)
#define AM_RequestXferAsync1(ep, destep, destoff, hnum, sa, cnt, a0) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 1, (int32_t)(a0))
#define AM_RequestXferAsync2(ep, destep, destoff, hnum, sa, cnt, a0, a1) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_RequestXferAsync3(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_RequestXferAsync4(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_RequestXferAsync5(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_RequestXferAsync6(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_RequestXferAsync7(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_RequestXferAsync8(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_RequestXferAsync9(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_RequestXferAsync10(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_RequestXferAsync11(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_RequestXferAsync12(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_RequestXferAsync13(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_RequestXferAsync14(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_RequestXferAsync15(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_RequestXferAsync16(ep, destep, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  AMUDP_RequestXfer(ep, destep, hnum, sa, cnt, destoff, 1, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

#define AM_Reply0(token, hnum) AMUDP_Reply(token, hnum, 0)
#define AM_Reply1(token, hnum, a0) AMUDP_Reply(token, hnum, 1, (int32_t)(a0))
#define AM_Reply2(token, hnum, a0, a1) AMUDP_Reply(token, hnum, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_Reply3(token, hnum, a0, a1, a2) AMUDP_Reply(token, hnum, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_Reply4(token, hnum, a0, a1, a2, a3) AMUDP_Reply(token, hnum, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_Reply5(token, hnum, a0, a1, a2, a3, a4) AMUDP_Reply(token, hnum, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_Reply6(token, hnum, a0, a1, a2, a3, a4, a5) AMUDP_Reply(token, hnum, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_Reply7(token, hnum, a0, a1, a2, a3, a4, a5, a6) AMUDP_Reply(token, hnum, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_Reply8(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7) AMUDP_Reply(token, hnum, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_Reply9(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8) AMUDP_Reply(token, hnum, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_Reply10(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) AMUDP_Reply(token, hnum, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_Reply11(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) AMUDP_Reply(token, hnum, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_Reply12(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) AMUDP_Reply(token, hnum, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_Reply13(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) AMUDP_Reply(token, hnum, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_Reply14(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) AMUDP_Reply(token, hnum, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_Reply15(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) AMUDP_Reply(token, hnum, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_Reply16(token, hnum, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) AMUDP_Reply(token, hnum, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

#define AM_ReplyI0(token, hnum, sa, cnt) AMUDP_ReplyI(token, hnum, sa, cnt, 0)
#define AM_ReplyI1(token, hnum, sa, cnt, a0) AMUDP_ReplyI(token, hnum, sa, cnt, 1, (int32_t)(a0))
#define AM_ReplyI2(token, hnum, sa, cnt, a0, a1) AMUDP_ReplyI(token, hnum, sa, cnt, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_ReplyI3(token, hnum, sa, cnt, a0, a1, a2) AMUDP_ReplyI(token, hnum, sa, cnt, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_ReplyI4(token, hnum, sa, cnt, a0, a1, a2, a3) AMUDP_ReplyI(token, hnum, sa, cnt, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_ReplyI5(token, hnum, sa, cnt, a0, a1, a2, a3, a4) AMUDP_ReplyI(token, hnum, sa, cnt, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_ReplyI6(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5) AMUDP_ReplyI(token, hnum, sa, cnt, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_ReplyI7(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6) AMUDP_ReplyI(token, hnum, sa, cnt, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_ReplyI8(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7) AMUDP_ReplyI(token, hnum, sa, cnt, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_ReplyI9(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8) AMUDP_ReplyI(token, hnum, sa, cnt, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_ReplyI10(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) AMUDP_ReplyI(token, hnum, sa, cnt, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_ReplyI11(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) AMUDP_ReplyI(token, hnum, sa, cnt, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_ReplyI12(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) AMUDP_ReplyI(token, hnum, sa, cnt, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_ReplyI13(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) AMUDP_ReplyI(token, hnum, sa, cnt, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_ReplyI14(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) AMUDP_ReplyI(token, hnum, sa, cnt, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_ReplyI15(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) AMUDP_ReplyI(token, hnum, sa, cnt, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_ReplyI16(token, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) AMUDP_ReplyI(token, hnum, sa, cnt, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

#define AM_ReplyXfer0(token, destoff, hnum, sa, cnt) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 0)
#define AM_ReplyXfer1(token, destoff, hnum, sa, cnt, a0) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 1, (int32_t)(a0))
#define AM_ReplyXfer2(token, destoff, hnum, sa, cnt, a0, a1) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 2, (int32_t)(a0), (int32_t)(a1))
#define AM_ReplyXfer3(token, destoff, hnum, sa, cnt, a0, a1, a2) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 3, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2))
#define AM_ReplyXfer4(token, destoff, hnum, sa, cnt, a0, a1, a2, a3) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 4, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3))
#define AM_ReplyXfer5(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 5, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4))
#define AM_ReplyXfer6(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 6, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5))
#define AM_ReplyXfer7(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 7, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6))
#define AM_ReplyXfer8(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 8, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7))
#define AM_ReplyXfer9(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 9, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8))
#define AM_ReplyXfer10(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 10, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9))
#define AM_ReplyXfer11(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 11, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10))
#define AM_ReplyXfer12(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 12, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11))
#define AM_ReplyXfer13(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 13, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12))
#define AM_ReplyXfer14(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 14, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13))
#define AM_ReplyXfer15(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 15, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14))
#define AM_ReplyXfer16(token, destoff, hnum, sa, cnt, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  AMUDP_ReplyXfer(token, hnum, sa, cnt, destoff, 16, (int32_t)(a0), (int32_t)(a1), (int32_t)(a2), (int32_t)(a3), (int32_t)(a4), (int32_t)(a5), (int32_t)(a6), (int32_t)(a7), (int32_t)(a8), (int32_t)(a9), (int32_t)(a10), (int32_t)(a11), (int32_t)(a12), (int32_t)(a13), (int32_t)(a14), (int32_t)(a15))

AMUDP_END_EXTERNC

#endif /* ULNIC_AMUDP_H */
