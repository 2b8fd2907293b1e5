/* U-Net: a user-level network interface (von Eicken, Basu, Buch, Vogels,
 * SOSP 1995) on ulnic. C API, C++ implementation (host/unet/unet.cpp).
 *
 * An ENDPOINT is the application's handle on the network: a communication
 * SEGMENT (memory the NIC reads messages from and places them into), a SEND
 * QUEUE, a RECEIVE QUEUE and a FREE QUEUE of buffer descriptors. Each
 * endpoint is a slot of its node's NIC (its own protection domain).
 * CHANNELS are set up by the node daemon, never by the process alone: a
 * channel joins this endpoint to a remote one with a tag pair -- messages
 * sent on it carry tx_tag, and it takes arriving messages that carry
 * rx_tag from that remote endpoint (rx tags are unique on a node; the NIC
 * demultiplexes on them and drops and counts anything else).
 *
 *   unet_endpoint* ep;  unet_endpoint_create(NULL, &ep);   // $ULNIC_CLUSTER/$ULNIC_NODE
 *   unet_addr me;       unet_endpoint_addr(ep, &me);       // tell the peer, out of band
 *   unet_channel ch;    unet_channel_create(ep, peer, 7, 9, &ch);  // peer's channel: tx 9, rx 7
 *   size_t len; char* seg = unet_segment(ep, &len);
 *   unet_free_push(ep, 0, 4096);                          // a receive buffer
 *   memcpy(seg + 8192, msg, n); unet_send(ep, ch, 8192, n);
 *   unet_rx_desc d;  unet_recv_wait(ep, &d, -1);          // d.data: the message
 *
 * Messages of at most UNET_INLINE_MAX bytes travel in the receive
 * descriptor (no buffer); larger ones (up to UNET_MESSAGE_MAX) go straight
 * into the free buffer the NIC takes at their first packet. unet_send_inline
 * carries up to UNET_SEND_INLINE_MAX bytes in the send descriptor.
 *
 * NO FLOW CONTROL, as in the paper: a message that finds the receive queue
 * full, or the free queue empty, is dropped and counted (unet_stats); so is
 * one longer than the buffer taken for it (the buffer goes back on the free
 * queue). The sender is not told. Every function returns UNET_OK (0) or an
 * error code; unet_strerror() names it. An endpoint is not thread-safe.
 *
 * U-NET/MM (Welsh, Basu, von Eicken 1997): with unet_attr.segment the
 * segment is the application's own memory (any page-backed private memory:
 * heap, stack, globals), not memory allocated for the endpoint, and the NIC
 * reaches it through a TLB of its own, a page at a time. Pages are pinned
 * on demand: a send whose pages the NIC's TLB does not hold waits while the
 * library, told of the miss, moves the page into the NIC's reach (copied,
 * then mapped over the same addresses: pointers stay valid) and gives the
 * NIC its translation; unet_free_push maps a buffer's pages ahead of the
 * messages. At most pin_limit_bytes are pinned at once: beyond it the least
 * recently used page that no send in flight and no buffer the NIC has taken
 * uses goes back to ordinary memory. A message whose buffer is not mapped
 * when it arrives is dropped and counted (drops_tlb_miss), as U-Net drops
 * what it cannot place. Whole pages move: a neighbour of the segment on the
 * same page moves with it, and another thread must not write those pages
 * while one moves. The segment must stay mapped while the endpoint lives.
 * The library takes misses in its calls (unet_send*, unet_recv*,
 * unet_ready, unet_dispatch, unet_free_push): a program that stops calling
 * it while a send waits for a page leaves that send waiting.
 */
#ifndef ULNIC_UNET_H
#define ULNIC_UNET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UNET_INLINE_MAX 40         /* bytes delivered inside a receive descriptor */
#define UNET_SEND_INLINE_MAX 128   /* bytes unet_send_inline carries in the send queue */
#define UNET_MESSAGE_MAX 65536     /* largest message (one free buffer) */
#define UNET_QUEUE_MAX 4096        /* entries of a receive or free queue */
#define UNET_PAGE 4096             /* U-Net/MM: what the NIC's TLB maps */

enum unet_status {
  UNET_OK = 0,
  UNET_ERR_BAD_ARG = 1,       /* bad argument (length, offset, queue size, tag 0, ...) */
  UNET_ERR_RESOURCE = 2,      /* no slot, heap, channel-table room */
  UNET_ERR_NIC = 3,           /* the daemon or the NIC failed the request */
  UNET_ERR_TAG_IN_USE = 4,    /* unet_channel_create: the rx tag is taken on this node */
  UNET_ERR_BAD_CHANNEL = 5,   /* not a channel of this endpoint (the NIC refused the send) */
  UNET_ERR_EMPTY = 6,         /* unet_recv: the receive queue is empty */
  UNET_ERR_FULL = 7,          /* unet_free_push: the free queue is full */
  UNET_ERR_TIMEOUT = 8,
  UNET_ERR_UNREACHABLE = 9    /* a send failed: the remote NIC does not answer */
};

typedef struct unet_endpoint unet_endpoint;
typedef uint32_t unet_channel;

/* An endpoint's address: its node and slot. */
typedef struct {
  uint32_t node;
  uint32_t slot;
} unet_addr;

/* unet_endpoint_create's options (NULL: all defaults). */
typedef struct {
  const char* cluster;       /* NULL: $ULNIC_CLUSTER or "default" */
  int node;                  /* -1: $ULNIC_NODE or 0 */
  size_t segment_bytes;      /* 0: 1 MiB */
  uint32_t rx_entries;       /* receive queue, a power of 2; 0: 64 */
  uint32_t free_entries;     /* free queue, a power of 2; 0: 64 */
  void* segment;             /* U-Net/MM: the application's memory [segment, +segment_bytes) (NULL: none) */
  size_t pin_limit_bytes;    /* U-Net/MM: pinned at most (0: 1 MiB; at least UNET_MM_PIN_MIN) */
} unet_attr;

#define UNET_MM_PIN_MIN (36u * 4096u) /* two largest messages' pages, and two more */

#define UNET_RX_INLINE 1u    /* unet_rx_desc.flags: the message is in inline_data */

typedef struct {
  unet_channel channel;      /* the channel it arrived on */
  uint32_t length;           /* message bytes */
  uint32_t flags;            /* UNET_RX_INLINE */
  void* data;                /* the message: inline_data, or the buffer in the segment */
  size_t offset;             /* not inline: the buffer's segment offset (push it again when done) */
  size_t buf_len;            /* not inline: the buffer's length as pushed */
  uint8_t inline_data[UNET_INLINE_MAX];
} unet_rx_desc;

typedef struct {
  uint64_t delivered;        /* messages placed in the receive queue */
  uint64_t drops_rx_full;    /* dropped: receive queue full */
  uint64_t drops_free_empty; /* dropped: free queue empty */
  uint64_t drops_too_long;   /* dropped: longer than the buffer taken (or UNET_MESSAGE_MAX) */
  uint64_t drops_bad_tag;    /* dropped: carried a tag no channel of ours takes from its sender */
  uint64_t free_taken;       /* free-queue entries the NIC has taken */
  /* U-Net/MM (zero otherwise): */
  uint64_t tlb_hits;         /* segment pages the NIC's TLB translated */
  uint64_t tlb_misses;       /* ... it did not hold (the library was asked) */
  uint64_t drops_tlb_miss;   /* messages dropped: a page of their buffer was not mapped */
  uint64_t pages_pinned;     /* segment pages pinned now */
  uint64_t pins;             /* pages moved in (misses that needed a page, and buffers mapped ahead) */
  uint64_t refills;          /* misses on a page still pinned (the NIC's TLB had lost it) */
  uint64_t evictions;        /* pinned pages moved back to make room */
} unet_stats;

/* Runs in unet_dispatch for each descriptor taken from the receive queue. */
typedef void (*unet_upcall_fn)(unet_endpoint* ep, const unet_rx_desc* d, void* arg);

int unet_endpoint_create(const unet_attr* attr, unet_endpoint** out);
/* Closes the endpoint: its channels go (their rx tags are free again),
 * sends not yet sent are dropped. Also what happens when the process exits. */
int unet_endpoint_destroy(unet_endpoint* ep);
int unet_endpoint_addr(const unet_endpoint* ep, unet_addr* out);
void* unet_segment(unet_endpoint* ep, size_t* bytes);

/* Asks the node daemon for a channel to `remote` (tags nonzero). */
int unet_channel_create(unet_endpoint* ep, unet_addr remote, uint32_t tx_tag, uint32_t rx_tag, unet_channel* out);
int unet_channel_destroy(unet_endpoint* ep, unet_channel ch);

/* Sends [offset, offset + length) of the segment on channel ch. The bytes
 * must stay as they are until the send has left (unet_send_wait). With the
 * send queue full it first waits for room. */
int unet_send(unet_endpoint* ep, unet_channel ch, size_t offset, size_t length);
/* Sends `length` (<= UNET_SEND_INLINE_MAX) bytes from anywhere, copied into
 * the send queue: `data` may be reused at once. */
int unet_send_inline(unet_endpoint* ep, unet_channel ch, const void* data, size_t length);
/* Waits until every send posted so far has left (timeout_ms < 0: no limit);
 * returns the first error of those sends (UNET_ERR_BAD_CHANNEL, ...). */
int unet_send_wait(unet_endpoint* ep, int timeout_ms);
uint32_t unet_send_pending(const unet_endpoint* ep);

/* Pushes a receive buffer [offset, offset + length) of the segment. */
int unet_free_push(unet_endpoint* ep, size_t offset, size_t length);
/* Free-queue entries the NIC has not taken yet. */
uint32_t unet_free_count(const unet_endpoint* ep);

/* Takes the next receive descriptor (UNET_ERR_EMPTY if none). A program
 * that polls in a loop yields its core to the NIC after empty polls. */
int unet_recv(unet_endpoint* ep, unet_rx_desc* out);
/* The same, blocking until one arrives or timeout_ms passes (< 0: no limit). */
int unet_recv_wait(unet_endpoint* ep, unet_rx_desc* out, int timeout_ms);
/* select-style readiness: nonzero if unet_recv would take a descriptor. */
int unet_ready(unet_endpoint* ep);
/* The upcall (NULL: none), and the loop that runs it: waits until the
 * receive queue is non-empty (timeout_ms < 0: no limit), then runs the
 * upcall for every descriptor in it; returns how many (0 on timeout), or
 * -UNET_ERR_BAD_ARG without an upcall. */
int unet_set_upcall(unet_endpoint* ep, unet_upcall_fn fn, void* arg);
int unet_dispatch(unet_endpoint* ep, int timeout_ms);

int unet_stats_get(const unet_endpoint* ep, unet_stats* out);
const char* unet_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif /* ULNIC_UNET_H */
