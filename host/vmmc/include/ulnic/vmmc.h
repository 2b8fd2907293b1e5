/* VMMC: virtual memory-mapped communication (Princeton's VMMC on Myrinet,
 * with VMMC-2's user-managed TLB), on ulnic. C API; ulnic/vmmc.hpp has the
 * C++ one.
 *
 * The model: a receiver EXPORTS a buffer of its memory under a name; a
 * sender on another node IMPORTS it by (node, name) and gets a proxy
 * address; SendMsg copies bytes from the sender's memory straight into the
 * receiver's buffer at the matching offset -- no receive call. The node
 * daemons set up the tables; the NICs check every send (outgoing page table
 * at the sender, incoming page table at the receiver, on every chunk).
 *
 *   vmmc_endpoint* ep;  vmmc_open(NULL, -1, &ep);        // $ULNIC_CLUSTER/$ULNIC_NODE
 *   receiver: vmmc_export(ep, "inbox", buf, len, NULL, 0, on_note, arg);
 *             ... vmmc_wait(ep, -1);                      // runs on_note after a notifying send
 *   sender:   vmmc_proxy_t p; vmmc_import(ep, 1, "inbox", 5000, &p, &len);
 *             vmmc_send(ep, data, p + 64, n, VMMC_NOTIFY);
 *
 * Sends of at most 128 bytes travel inside the send queue (no source fetch);
 * longer ones are fetched by the NIC from registered memory, which the
 * library registers on first use (user-managed TLB: a miss is served by
 * registering, never fails the send). Every function returns VMMC_OK (0) or
 * an error code; vmmc_strerror() names it. An endpoint is not thread-safe.
 */
#ifndef ULNIC_VMMC_H
#define ULNIC_VMMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmmc_endpoint vmmc_endpoint;
typedef uint64_t vmmc_proxy_t;   /* an address in the importer's proxy space */
typedef uint64_t vmmc_send_id;   /* an asynchronous send */

typedef struct {
  uint32_t node;                 /* importer's node */
  uint32_t pid;                  /* importer's process id; 0 = any on that node */
} vmmc_importer;

/* Runs in the receiving process (from vmmc_poll / vmmc_wait) once a send
 * with VMMC_NOTIFY has placed all its bytes. The send was aimed at
 * [offset, offset + length) of the export; `data` is where its first byte
 * is now: inside the export, or inside a redirection buffer. */
typedef void (*vmmc_notify_fn)(void* arg, void* data, size_t offset, size_t length, uint32_t src_node);

enum vmmc_status {
  VMMC_OK = 0,
  VMMC_ERR_NO_EXPORT = 1,      /* no export of that name on that node */
  VMMC_ERR_DENIED = 2,         /* the export is restricted to other importers */
  VMMC_ERR_NAME_TAKEN = 3,     /* that name is exported on this node already */
  VMMC_ERR_BAD_REGION = 4,     /* buffer could not be registered / exported */
  VMMC_ERR_NO_RESOURCES = 5,   /* a table, the slot heap or the send queue is full */
  VMMC_ERR_UNREACHABLE = 6,    /* the other node (or its NIC) does not answer */
  VMMC_ERR_BAD_REQUEST = 7,    /* bad argument */
  VMMC_ERR_NOT_IMPORTED = 8,   /* the destination is not inside an import */
  VMMC_ERR_REVOKED = 9,        /* the receiver unexported, or the grant is gone */
  VMMC_ERR_PROTECTION = 10,    /* the receiver refused the bytes (bounds) */
  VMMC_ERR_NOT_REGISTERED = 11,/* the source is not registered memory */
  VMMC_ERR_IO = 12,            /* the NIC or daemon failed the request otherwise */
  VMMC_ERR_TIMEOUT = 13,
  VMMC_PENDING = 100           /* vmmc_send_done: not finished yet */
};

#define VMMC_NOTIFY 1            /* vmmc_send flag: notify the receiver */
#define VMMC_SHORT_MAX 128       /* sends up to this size go inline */

int vmmc_open(const char* cluster, int node, vmmc_endpoint** out);
void vmmc_close(vmmc_endpoint* ep);
int vmmc_node(const vmmc_endpoint* ep);
/* DMA-able memory from the endpoint's slot (exports and sends need no page
 * moves then); NULL when the slot heap is exhausted. */
void* vmmc_alloc(vmmc_endpoint* ep, size_t bytes);
void vmmc_free(vmmc_endpoint* ep, void* p);

int vmmc_export(vmmc_endpoint* ep, const char* name, void* buffer, size_t length, const vmmc_importer* allowed,
                size_t num_allowed, vmmc_notify_fn handler, void* arg);
int vmmc_unexport(vmmc_endpoint* ep, const char* name);
/* Waits up to timeout_ms (-1: 30 s) for the export to appear. */
int vmmc_import(vmmc_endpoint* ep, int node, const char* name, int timeout_ms, vmmc_proxy_t* proxy,
                size_t* length);
int vmmc_unimport(vmmc_endpoint* ep, vmmc_proxy_t proxy);

/* SendMsg: synchronous (returns when the receiver's NIC placed every byte)
 * and asynchronous (returns at once; ask vmmc_send_done / vmmc_send_wait). */
int vmmc_send(vmmc_endpoint* ep, const void* src, vmmc_proxy_t dst, size_t nbytes, int flags);
int vmmc_send_async(vmmc_endpoint* ep, const void* src, vmmc_proxy_t dst, size_t nbytes, int flags,
                    vmmc_send_id* id);
int vmmc_send_done(vmmc_endpoint* ep, vmmc_send_id id); /* VMMC_OK, VMMC_PENDING or the error */
int vmmc_send_wait(vmmc_endpoint* ep, vmmc_send_id id);

/* VMMC-2 transfer redirection. The next send that lands wholly inside
 * [offset, offset + length) of our export `name` is placed by the NIC
 * straight into `buffer` (at buffer + its offset - offset) instead: no copy.
 * A send that had already begun to arrive when the redirection was posted
 * lands in the export; the library then copies it into `buffer` before the
 * handler runs. Either way the handler gets `data` inside `buffer`. One
 * redirection per export at a time; it is used up by one send. The export
 * needs a handler (that is how the receiver learns the data is there). */
int vmmc_redirect(vmmc_endpoint* ep, const char* name, size_t offset, size_t length, void* buffer);

/* Notifications: vmmc_poll runs the handlers of what arrived and returns how
 * many ran; vmmc_wait blocks until at least one ran (or timeout_ms, -1 =
 * forever) and returns that count, or -VMMC_ERR_TIMEOUT. */
int vmmc_poll(vmmc_endpoint* ep);
int vmmc_wait(vmmc_endpoint* ep, int timeout_ms);

const char* vmmc_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif
