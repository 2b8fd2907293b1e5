/* A small MPI-like message-passing layer over Fast Messages 2.x
 * (host/fm/mp.cpp; the protocols and matching rules: host/fm/LAYERS.md).
 *
 * Point-to-point only, one communicator (the FM job: ranks 0..size-1):
 *   * matching by source and tag, MP_ANY_SOURCE / MP_ANY_TAG wildcards;
 *     messages from one sender that match one receive are received in the
 *     order they were sent (MPI's non-overtaking rule);
 *   * a receive posted before its message arrives gets the bytes straight
 *     from the network into its buffer (FM_receive, no staging copy); a
 *     message that arrives first waits in the unexpected queue;
 *   * eager protocol up to the eager limit (the data goes with the
 *     envelope), rendezvous above it (request to send, clear to send when
 *     the receive is matched, then the data, straight into the buffer);
 *   * a message longer than the receive buffer fills the buffer and the
 *     receive completes with MP_ERR_TRUNCATE (status.count = the bytes
 *     delivered, status.length = the bytes sent).
 * Built on fm.h's public calls only; it uses FM handler ids MP_FIRST_HANDLER
 * .. MP_FIRST_HANDLER + 3. One thread per process calls MP_*.
 */
#ifndef ULNIC_FM_MP_H
#define ULNIC_FM_MP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MP_FIRST_HANDLER 1016
#define MP_ANY_SOURCE (-1)
#define MP_ANY_TAG (-1)
#define MP_TAG_MAX 0x7fffffff
#define MP_EAGER_LIMIT_DEFAULT 16384 /* bytes; ULNIC_MP_EAGER_LIMIT overrides */

enum {
  MP_SUCCESS = 0,
  MP_ERR_ARG = 1,      /* a bad rank, tag, buffer, request or count */
  MP_ERR_TRUNCATE = 2, /* the message was longer than the receive buffer */
  MP_ERR_INTERN = 3,   /* FM failed (the message on stderr) */
  MP_ERR_INIT = 4,     /* not initialized, or initialized twice */
};

typedef struct {
  int source, tag;
  int error;      /* MP_SUCCESS or MP_ERR_TRUNCATE */
  size_t count;   /* bytes received into the buffer */
  size_t length;  /* bytes the sender sent */
} MP_Status;

typedef struct mp_request* MP_Request; /* NULL: no request (MP_REQUEST_NULL) */
#define MP_REQUEST_NULL ((MP_Request)0)

/* FM_initialize and the layer's handlers; MP_Finalize: collective (FM_finalize). */
int MP_Init(void);
int MP_Finalize(void);
int MP_Comm_rank(int* rank);
int MP_Comm_size(int* size);
size_t MP_Eager_limit(void);

/* Blocking send: returns when `buf` may be reused (eager: at once, the bytes
 * were copied; rendezvous: when the data has left). */
int MP_Send(const void* buf, size_t bytes, int dest, int tag);
int MP_Recv(void* buf, size_t bytes, int source, int tag, MP_Status* status);

/* Nonblocking: the request completes in MP_Wait / MP_Test (which free it
 * and set it to MP_REQUEST_NULL). `buf` is not to be touched until then. */
int MP_Isend(const void* buf, size_t bytes, int dest, int tag, MP_Request* req);
int MP_Irecv(void* buf, size_t bytes, int source, int tag, MP_Request* req);
int MP_Wait(MP_Request* req, MP_Status* status);
int MP_Test(MP_Request* req, int* done, MP_Status* status);
int MP_Waitall(int n, MP_Request* reqs, MP_Status* statuses); /* statuses may be NULL */

/* Is a message matching (source, tag) waiting to be received? Never blocks. */
int MP_Iprobe(int source, int tag, int* found, MP_Status* status);

/* Counters for tests and tools. */
typedef struct {
  unsigned long long eager_sent, rendezvous_sent;
  unsigned long long direct;      /* received straight into a posted buffer */
  unsigned long long unexpected;  /* arrived before their receive: staged (eager) or held (rendezvous) */
  unsigned long long staged_bytes;/* bytes copied out of the unexpected queue */
  unsigned long long truncated;
  unsigned long long bad_packets; /* envelopes that failed a check */
} MP_Stats;
void MP_Get_stats(MP_Stats* out);

#ifdef __cplusplus
}
#endif

#endif /* ULNIC_FM_MP_H */
