/* Split-C style global memory over Fast Messages 2.x (host/fm/gm.cpp; what
 * each call does, in detail: host/fm/LAYERS.md).
 *
 * A global pointer names a byte of some process's memory: (FM node id,
 * address). Any process may read and write memory that its owner exposed
 * (gm_expose); every request is checked at the owner against what it
 * exposed (requests come from the wire: untrusted).
 *
 *   blocking        gm_read, gm_write               return when done
 *   split-phase     gm_get, gm_put  + gm_sync       issue now, complete at gm_sync
 *   stores          gm_store + gm_store_sync (target) / gm_all_store_sync
 *                   the initiator is never told a store landed; the target
 *                   counts the bytes stored into it; the owners acknowledge
 *                   stores in batches, so gm_all_store_sync can tell when
 *                   every store everyone issued has landed.
 *
 * Built on fm.h's public calls only; it uses FM handler ids GM_FIRST_HANDLER
 * .. GM_FIRST_HANDLER + 7 (registered by gm_init). One thread per process
 * calls gm_*; the owner of memory serves requests whenever it is inside a
 * gm_* call (gm_poll serves and returns), as Split-C on Active Messages did.
 */
#ifndef ULNIC_FM_GM_H
#define ULNIC_FM_GM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GM_FIRST_HANDLER 1008
#define GM_MAX_REGIONS 16          /* gm_expose regions per process */
#define GM_MAX_BYTES (64u << 20)   /* one request's bytes */

typedef struct {
  unsigned node; /* FM node id */
  void* addr;    /* an address in that process */
} gm_ptr;

static inline gm_ptr gm_global(unsigned node, void* addr) {
  gm_ptr p;
  p.node = node;
  p.addr = addr;
  return p;
}
static inline gm_ptr gm_offset(gm_ptr p, ptrdiff_t bytes) {
  p.addr = (char*)p.addr + bytes;
  return p;
}

/* FM_initialize (the job from the environment, fm.h) and GM's handlers.
 * 0 / -1. gm_finalize: collective, after gm_all_store_sync semantics. */
int gm_init(void);
int gm_finalize(void);
unsigned gm_mynode(void);
unsigned gm_nodes(void);

/* Lets other processes address [base, base + bytes). 0 / -1 (EINVAL, or
 * ENOSPC past GM_MAX_REGIONS). */
int gm_expose(void* base, size_t bytes);

/* Collective: every process passes its `mine`; `all[r]` gets process r's.
 * (Addresses differ between processes: this is how they learn them.) */
int gm_allgather(uint64_t mine, uint64_t* all);
/* Collective: returns when every process called it. */
int gm_barrier(void);

/* Blocking: done (the bytes are in `dst` / at `dst`) when they return.
 * 0, or -1 with errno EFAULT (the owner refused the range), EINVAL, EIO. */
int gm_read(void* dst, gm_ptr src, size_t bytes);
int gm_write(gm_ptr dst, const void* src, size_t bytes);

/* Split-phase: issued when they return (`src` of a put may be reused at
 * once: it was copied); complete at the next gm_sync, which returns -1
 * (EFAULT) if any of them was refused since the last gm_sync. */
int gm_get(void* dst, gm_ptr src, size_t bytes);
int gm_put(gm_ptr dst, const void* src, size_t bytes);
int gm_sync(void);

/* A store: like a put, but only the target learns it completed. */
int gm_store(gm_ptr dst, const void* src, size_t bytes);
/* At the target: waits until `bytes` more bytes were stored into this
 * process than the previous calls waited for (Split-C store_sync(n)). */
int gm_store_sync(size_t bytes);
/* Collective: every store any process issued before it has landed when it
 * returns (Split-C all_store_sync); -1 (EFAULT) if an owner refused any of
 * this process's stores since the last call. */
int gm_all_store_sync(void);

/* Serves requests that arrived; never blocks. */
void gm_poll(void);

/* Primitive types (Split-C's scalar reads and writes through global pointers). */
int32_t gm_read_i32(gm_ptr p);
int64_t gm_read_i64(gm_ptr p);
double gm_read_f64(gm_ptr p);
void gm_write_i32(gm_ptr p, int32_t v);
void gm_write_i64(gm_ptr p, int64_t v);
void gm_write_f64(gm_ptr p, double v);
void gm_get_i64(int64_t* dst, gm_ptr p);
void gm_put_i64(gm_ptr p, int64_t v);
void gm_store_i64(gm_ptr p, int64_t v);

/* What this process did and served (tests and tools). */
typedef struct {
  unsigned long long reads, writes, gets, puts, stores; /* issued */
  unsigned long long served, refused;  /* requests from others served / refused as out of range */
  unsigned long long store_acks_sent, store_acks_received; /* batched store acknowledgements */
  unsigned long long deferred;         /* replies that waited for credits (sent outside handlers) */
} gm_stats;
void gm_get_stats(gm_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* ULNIC_FM_GM_H */
