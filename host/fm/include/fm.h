/* Illinois Fast Messages 2.x on the ulnic NIC (DESIGN §9; what each call
 * does and where the names come from: host/fm/SEMANTICS.md).
 *
 * C ABI, usable from C99 and C++. One FM job = N processes, FM node ids
 * 0..N-1; each process opens its own slot on a NIC of the cluster and
 * receives through one native AM endpoint of that slot.
 *
 * Job description (read by FM_initialize from the environment):
 *   ULNIC_FM_RANK    this process's FM node id, 0..N-1
 *   ULNIC_FM_NPROCS  N (1..FM_MAX_NODES)
 *   ULNIC_FM_DIR     a directory private to this job run, empty at start and
 *                    shared by all ranks: each rank writes its endpoint name
 *                    there (file "rank.<id>": NIC node, slot, endpoint) and
 *                    waits for everyone else's (FM_INIT_TIMEOUT_S seconds).
 *   ULNIC_NODE, ULNIC_CLUSTER, ULNIC_RUNTIME_DIR
 *                    which NIC to attach to, as for every ulnic program.
 *
 * Threads: FM is single-threaded (one thread calls FM). Handlers are
 * logical threads of their own (one per message, on a stack of their own)
 * that FM runs inside FM_extract and inside a sender blocked for credits.
 */
#ifndef ULNIC_FM_H
#define ULNIC_FM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long FM_ULONG; /* the FM 2.x papers' ULONG */
typedef struct FM_stream FM_stream;

/* A handler: runs when the first packet of a message arrives, reads the
 * message with FM_receive and returns FM_CONTINUE (FM_extract goes on) or
 * FM_QUIT (FM_extract returns after it). */
typedef int FM_handler(FM_stream* stream, unsigned sender);

enum {
  FM_CONTINUE = 0,
  FM_QUIT = 1,
};

#define FM_ANY_ID ((FM_ULONG)-1)   /* FM_register_handler: pick the next free id */
#define FM_MAX_HANDLERS 1024       /* handler ids 0..FM_MAX_HANDLERS-1 */
#define FM_MAX_NODES 32          /* receive ring (256 entries) / 32 = 8 per sender, SEMANTICS.md */
#define FM_MAX_MESSAGE 0xffffffffUL /* FM_begin_message's length bound */
#define FM_INIT_TIMEOUT_S 60
#define FM_MAX_STREAMS 48          /* outbound streams open at once (each holds a send buffer) */

/* Set by FM_initialize. */
extern FM_ULONG FM_nodeid;
extern FM_ULONG FM_numnodes;

/* Joins the job described by the environment: attaches to the NIC, opens
 * the receive endpoint, publishes its name and waits for all others.
 * 0 on success, -1 on failure (a message on stderr; FM is then unusable). */
int FM_initialize(void);

/* Leaves the job. Collective: every rank calls it; it returns after every
 * message this process sent has been delivered and every other rank has
 * said it sends nothing more (messages arriving meanwhile still run their
 * handlers, and streams they opened are finished first). 0 on success; -1
 * with errno EBUSY (nothing done) if the caller still has a stream open,
 * EINVAL inside a handler or before FM_initialize, and -1 with EIO (FM
 * ended all the same) if a peer failed: a packet to or from it was lost, or
 * its process died (host/fm/SEMANTICS.md, "Failures"). */
int FM_finalize(void);

/* Associates `handler` with `id` (or the next free id for FM_ANY_ID) and
 * returns the id; FM_ANY_ID on failure (bad id, NULL handler, table full). */
FM_ULONG FM_register_handler(FM_ULONG id, FM_handler* handler);

/* Opens a message of at most `length` bytes to `dest`, to run handler
 * `handler` there. NULL with errno EINVAL if an argument is invalid or FM is
 * not initialized (or is finalizing); EAGAIN inside a handler if the credits
 * for the whole message are not available right now (a handler must not
 * spin on it), or if FM_MAX_STREAMS streams are open (outside handlers: of
 * the caller's own; it waits for handlers' to end); EIO if `dest` failed (a
 * packet to or from it was lost, or its process died). Outside handlers it
 * may block (running handlers) until credits come back. */
FM_stream* FM_begin_message(FM_ULONG dest, FM_ULONG length, FM_ULONG handler);

/* Appends `length` bytes at `buffer` to the message (gather: any number of
 * calls, any sizes). The bytes are copied before it returns. 0 on success,
 * -1 with errno EINVAL for a bad stream, a NULL buffer with bytes, or bytes
 * beyond the length given to FM_begin_message (nothing is then appended);
 * EIO if the peer failed or a packet of the message could not be sent: the
 * message is lost and the stream must still be ended. */
int FM_send_piece(FM_stream* stream, const void* buffer, FM_ULONG length);

/* Sends what is left and closes the stream (the pointer is then invalid).
 * Fewer bytes than FM_begin_message's length is fine. 0; -1 with errno
 * EINVAL for a bad stream, EIO if the message could not be sent whole (the
 * stream is closed all the same). A handler that returns with a stream
 * still open has it ended for it (counted in FM_stats). */
int FM_end_message(FM_stream* stream);

/* In a handler, on its own stream: copies the next `length` bytes of the
 * message into `buffer` (scatter: any number of calls, any sizes), waiting
 * (the handler is descheduled) for bytes still in flight. Returns the bytes
 * copied: `length`, or fewer at the end of the message; 0 with errno EINVAL
 * outside a handler, on another handler's stream or with a NULL buffer. */
FM_ULONG FM_receive(void* buffer, FM_stream* stream, FM_ULONG length);

/* Processes arrived packets -- running and resuming handlers -- until about
 * `maxbytes` message bytes were extracted (a soft bound: whole packets of at
 * most FM_PACKET_PAYLOAD bytes), nothing is left, or a handler returned
 * FM_QUIT. Packets are taken in arrival order, so the bound stops at the
 * first data packet past it: FM_extract(0) takes the control packets (credit
 * reports) before the first data packet and no data. Never blocks. Returns
 * the message bytes extracted. */
FM_ULONG FM_extract(FM_ULONG maxbytes);

#define FM_PACKET_PAYLOAD 131072 /* message bytes per NIC packet, at most (64 KiB for 2 ranks, 32 KiB for 3-16) */

/* ulnic extension: waits until a packet is ready to extract, or `usec`
 * microseconds passed (asleep on the NIC's wake-up at once, no spin: two
 * cores are shared with the emulated NICs). Returns 1 if a ring entry
 * is ready (a packet, possibly a control packet with no message bytes, or
 * an entry the NIC gave up on: FM_extract may then return 0), 0 otherwise (timeout, not initialized, inside a handler, or the
 * NIC cut the slot off). Layers above FM block with it instead of spinning
 * on FM_extract. */
int FM_wait(FM_ULONG usec);

/* ulnic extension: what this process's FM saw (for tests and tools). */
typedef struct {
  unsigned long long packets_sent, packets_received;
  unsigned long long credit_packets_sent, credit_packets_received;
  unsigned long long credit_waits;     /* times a sender had to wait for credits */
  unsigned long long bad_packets;      /* dropped: header failed a check */
  unsigned long long send_errors;      /* sends the NIC completed with an error */
  unsigned long long handler_yields;   /* handlers descheduled in FM_receive */
  unsigned long long max_live_handlers; /* most handlers alive at once */
  unsigned long long lost_packets;     /* ring entries the NIC gave up on (a sender died mid-packet) */
  unsigned long long streams_ended_for_handlers; /* streams a handler left open, ended when it returned */
  unsigned long long in_flight;        /* now: packets the NIC has not completed yet */
  unsigned long long long_packets_sent; /* data packets that went as Long packets */
  unsigned long long long_splits;      /* a handler's Long buffers sent as inline packets (window full) */
} FM_stats;
/* The running job's counters; after FM_finalize, the finished job's. */
void FM_get_stats(FM_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* ULNIC_FM_H */
