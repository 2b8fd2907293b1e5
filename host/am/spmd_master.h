// spmd_master.h: the master of an AMUDP SPMD job.
//
// `ulnic run` and AMUDP_SPMDStartup (in a program that is not a worker) both
// call spmd_master_run: it starts the workers, gives them the job (every
// endpoint name, one tag, the depth, the master's environment), serves their
// barriers and all-gathers (spmd_proto.h) and ends the job. It does not use
// AM itself, so the `ulnic` command links it without the AM library.
//
// Two ways to start the workers:
//   * `ulnic run`: the master starts each rank itself (fork/exec, or ssh
//     with --hosts), telling it its rank and node in its environment;
//   * AMUDP's: a spawn function (AMUDP_SPMDLocalSpawn, ...SshSpawn,
//     ...CustomSpawn or the program's own) starts nproc identical workers
//     with `extra_env`; each asks the master for a rank when it joins (in
//     the order they join) and learns its node from the answer.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ulnic::am {

// amudp_spawnfn_t without amudp_spmd.h.
using SpawnFn = int (*)(int nproc, int argc, char** argv, char** extra_env);

struct SpmdJob {
  int nproc = 0;                    // workers, 1..AMUDP_MAX_SPMDPROCS
  int depth = 8;                    // network depth, 1..AMUDP_MAX_NETWORKDEPTH
  std::string transport = "udp";    // ULNIC_AM_TRANSPORT of the workers
  std::vector<std::string> argv;    // the program and its arguments
  std::vector<std::string> hosts;   // empty = local (fork/exec); else ssh, round robin
  int nodes = 0;                    // NIC nodes to spread ranks over (ULNIC_NODE = rank % nodes); 0 = leave ULNIC_NODE alone
  std::string cluster;              // ULNIC_CLUSTER of the workers, if not empty
  // AMUDP's way (see above): the spawn function, and the hosts it will start
  // workers on (they pick the address the workers dial; empty: this machine).
  SpawnFn spawnfn = nullptr;
  std::vector<std::string> spawn_hosts;
  // The program itself is the master (AMUDP_SPMDStartup): AMUDP_SPMDgetenvMaster
  // gives this process's environment. Otherwise (`ulnic run`) it gives the
  // launcher's with the changes rank 0 made to its own before Startup, as
  // if that program had been the master.
  bool program_is_master = false;
};

// Runs the job to its end and returns its exit code: the code a worker gave
// AMUDP_SPMDExit, else the status of the first worker that exited or died
// without it (128 + signal; 1 for a worker that is not this process's child
// and closed its connection), else nonzero for a failed start. Errors are
// printed to stderr as one line prefixed "ulnic run: ".
int spmd_master_run(const SpmdJob& job);

// The nodes of `cluster` that are up (0..M-1 with a live QEMU), for a master
// that spreads ranks over them: M, or 0 if node 0 is not up.
int spmd_nodes_up(const std::string& cluster);

// The library's spawn functions (amudp_spmd.h). They work only while a
// master runs a spawn function (else they say so and return 0); the
// processes they start are the master's to reap. Non-zero on success.
int spmd_spawn_local(int nproc, char** argv, char** extra_env);
int spmd_spawn_ssh(int nproc, char** argv, char** extra_env);
int spmd_spawn_custom(int nproc, char** argv, char** extra_env);

// AMUDP's environment lookup: $AMUDP_<key>, else $<key>; nullptr if neither.
const char* spmd_getenv(const char* key);
// The hosts of $SSH_SERVERS (AMUDP's delimiters " ,/;:"), else of
// $ULNIC_AM_HOSTS; the first `nproc` of them (ulnic's list round robin).
std::vector<std::string> spmd_ssh_hosts(int nproc, std::string& err);

}  // namespace ulnic::am
