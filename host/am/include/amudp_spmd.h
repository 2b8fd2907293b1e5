/* amudp_spmd.h: the AMUDP SPMD job interface on ulnic.
 *
 * A job is N worker processes of one program. It starts either
 *   * the AMUDP way: the program run as `prog N [L|S|C] args` is the job's
 *     master: AMUDP_SPMDStartup takes N (and the spawner letter) off argv,
 *     spawns N workers through a spawn function and serves them until the
 *     job ends, then exits with the job's code (it never returns there); or
 *   * under the launcher: `ulnic run -n N [--transport T] prog args`.
 * On a worker AMUDP_SPMDStartup returns a ready endpoint: every worker's
 * endpoint mapped at translation index = its rank, expected resources set
 * for nproc peers and the network depth, and one tag for the whole job
 * (also returned as networkpid). host/am/SEMANTICS.md says what each call
 * does (and which environment variables pick the transport and spawner).
 */
#ifndef ULNIC_AMUDP_SPMD_H
#define ULNIC_AMUDP_SPMD_H

#include <amudp.h>

AMUDP_BEGIN_EXTERNC

/* Starts nproc workers running argv (argv[0] is the program) with the
 * extra_env variables ("KEY=VALUE", NULL-terminated) added to their
 * environment; called by AMUDP_SPMDStartup in the master. Non-zero if it
 * started them. */
typedef int (*amudp_spawnfn_t)(int nproc, int argc, char **argv, char **extra_env);
typedef void (*amudp_exitcallback_t)(int);

extern int AMUDP_SPMDStartup(int *argc, char ***argv, int nproc, int networkdepth, amudp_spawnfn_t spawnfn,
                             uint64_t *networkpid, eb_t *eb, ep_t *ep);
/* Ends the whole job with exitcode: every other worker's exit callback runs
 * and it exits too. Does not return. */
extern int AMUDP_SPMDExit(int exitcode);
extern int AMUDP_SPMDSetExitCallback(amudp_exitcallback_t);
/* Ends this process when the job ends (_exit by default). */
extern void (*AMUDP_SPMDkillmyprocess)(int);
extern int AMUDP_SPMDIsWorker(char **argv);
extern int AMUDP_SPMDNumProcs(void);
extern int AMUDP_SPMDMyProc(void);
/* Blocks until every worker has called it; polls the SPMD endpoint meanwhile. */
extern int AMUDP_SPMDBarrier(void);
/* The master's environment as it was when the job started (a variable the
 * program set before AMUDP_SPMDStartup included); NULL if unset or before
 * Startup. */
extern const char *AMUDP_SPMDgetenvMaster(const char *keyname);
/* dest (len * NumProcs bytes) receives every worker's len bytes, rank order. */
extern int AMUDP_SPMDAllGather(void *source, void *dest, size_t len);

/* The library's spawn functions, for AMUDP_SPMDStartup only (called
 * directly they fail and return 0). */
extern int AMUDP_SPMDLocalSpawn(int nproc, int argc, char **argv, char **extra_env);  /* fork/exec here */
extern int AMUDP_SPMDSshSpawn(int nproc, int argc, char **argv, char **extra_env);    /* $SSH_SERVERS */
extern int AMUDP_SPMDCustomSpawn(int nproc, int argc, char **argv, char **extra_env); /* $CSPAWN_CMD */

typedef struct {
  char abbrev;         /* the letter after N on the command line */
  const char *desc;
  amudp_spawnfn_t fnptr;
} amudp_spawnfn_desc_t;
/* The spawn functions above, ended by an entry with abbrev '\0'. */
extern amudp_spawnfn_desc_t const AMUDP_Spawnfn_Desc[];

/* Checkpoint/restart (AMUDP's BLCR extension): ulnic has no checkpointer.
 * AMUDP_SPMDCheckpoint returns -1 (not taken), AMUDP_SPMDRestartProcId -1
 * (this is not a restart), AMUDP_SPMDRunRestart says so and exits 1. */
extern int AMUDP_SPMDCheckpoint(eb_t *eb, ep_t *ep, const char *dir);
extern void AMUDP_SPMDRunRestart(char *argv0, char *dir, int nproc);
extern int AMUDP_SPMDRestartProcId(int *argc, char ***argv);

#define AMX_SPMDgetenvMaster AMUDP_SPMDgetenvMaster
#define AMX_SPMDBarrier AMUDP_SPMDBarrier
#define AMX_SPMDNumProcs AMUDP_SPMDNumProcs
#define AMX_SPMDMyProc AMUDP_SPMDMyProc
#define AMX_SPMDExit AMUDP_SPMDExit
#define AMX_SPMDSetExitCallback AMUDP_SPMDSetExitCallback
#define AMX_SPMDkillmyprocess AMUDP_SPMDkillmyprocess
#define AMX_SPMDIsWorker AMUDP_SPMDIsWorker
#define AMX_SPMDAllGather AMUDP_SPMDAllGather
#define AMX_SPMDStartup(pargc, pargv, networkdepth, pnetworkpid, peb, pep) \
  AMUDP_SPMDStartup((pargc), (pargv), 0, (networkdepth), NULL, (pnetworkpid), (peb), (pep))

AMUDP_END_EXTERNC

#endif /* ULNIC_AMUDP_SPMD_H */
