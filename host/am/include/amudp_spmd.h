/* amudp_spmd.h: the AMUDP SPMD job interface on ulnic.
 *
 * A job is N worker processes of one program, started by the launcher
 *   ulnic run -n N [--transport udp|vipl|native] [--hosts h1,h2,...] prog args
 * (or by a program that calls AMUDP_SPMDStartup without being a worker: it
 * becomes the job's master, spawns the workers and waits for them, as AMUDP
 * does). On a worker AMUDP_SPMDStartup returns a ready endpoint: every
 * worker's endpoint mapped at translation index = its rank, expected
 * resources set for nproc peers and the network depth, and one tag for the
 * whole job (also returned as networkpid).
 */
#ifndef ULNIC_AMUDP_SPMD_H
#define ULNIC_AMUDP_SPMD_H

#include <amudp.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*amudp_spawnfn_t)(int nproc, int argc, char **argv);
typedef void (*amudp_exitcallback_t)(int);

extern int AMUDP_SPMDStartup(int *argc, char ***argv, int nproc, int networkdepth, amudp_spawnfn_t spawnfn,
                             uint64_t *networkpid, eb_t *eb, ep_t *ep);
/* Ends the whole job with exitcode: every other worker's exit callback runs
 * and it exits too. Does not return. */
extern int AMUDP_SPMDExit(int exitcode);
extern int AMUDP_SPMDSetExitCallback(amudp_exitcallback_t);
extern int AMUDP_SPMDIsWorker(char **argv);
extern int AMUDP_SPMDNumProcs(void);
extern int AMUDP_SPMDMyProc(void);
/* Blocks until every worker has called it; polls the SPMD endpoint meanwhile. */
extern int AMUDP_SPMDBarrier(void);
/* The launcher's environment at spawn time; NULL if unset or before Startup. */
extern const char *AMUDP_SPMDgetenvMaster(const char *keyname);
/* dest (len * NumProcs bytes) receives every worker's len bytes, rank order. */
extern int AMUDP_SPMDAllGather(void *source, void *dest, size_t len);

/* Library spawn functions for a master's spawnfn (NULL = local). */
extern int AMUDP_SPMDLocalSpawn(int nproc, int argc, char **argv);
extern int AMUDP_SPMDSshSpawn(int nproc, int argc, char **argv);

#define AMX_SPMDgetenvMaster AMUDP_SPMDgetenvMaster
#define AMX_SPMDBarrier AMUDP_SPMDBarrier
#define AMX_SPMDNumProcs AMUDP_SPMDNumProcs
#define AMX_SPMDMyProc AMUDP_SPMDMyProc
#define AMX_SPMDExit AMUDP_SPMDExit
#define AMX_SPMDSetExitCallback AMUDP_SPMDSetExitCallback
#define AMX_SPMDIsWorker AMUDP_SPMDIsWorker
#define AMX_SPMDAllGather AMUDP_SPMDAllGather
#define AMX_SPMDStartup(pargc, pargv, networkdepth, pnetworkpid, peb, pep) \
  AMUDP_SPMDStartup((pargc), (pargv), 0, (networkdepth), NULL, (pnetworkpid), (peb), (pep))

#ifdef __cplusplus
}
#endif

#endif /* ULNIC_AMUDP_SPMD_H */
