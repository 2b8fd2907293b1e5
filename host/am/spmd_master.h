// spmd_master.h: the master of an AMUDP SPMD job.
//
// `ulnic run` and AMUDP_SPMDStartup (in a program that is not a worker) both
// call spmd_master_run: it starts the workers, gives them the job (every
// endpoint name, one tag, the depth, its environment), serves their barriers
// and all-gathers (spmd_proto.h) and ends the job. It does not use AM itself,
// so the `ulnic` command links it without the AM library.
#pragma once

#include <string>
#include <vector>

namespace ulnic::am {

struct SpmdJob {
  int nproc = 0;                    // workers, 1..AMUDP_MAX_SPMDPROCS
  int depth = 8;                    // network depth, 1..AMUDP_MAX_NETWORKDEPTH
  std::string transport = "udp";    // ULNIC_AM_TRANSPORT of the workers
  std::vector<std::string> argv;    // the program and its arguments
  std::vector<std::string> hosts;   // empty = local (fork/exec); else ssh, round robin
  int nodes = 0;                    // NIC nodes to spread ranks over (ULNIC_NODE = rank % nodes); 0 = leave ULNIC_NODE alone
  std::string cluster;              // ULNIC_CLUSTER of the workers, if not empty
};

// Runs the job to its end and returns its exit code: the code a worker gave
// AMUDP_SPMDExit, else the status of the first worker that exited or died
// without it (128 + signal), else nonzero for a failed start. Errors are
// printed to stderr as one line prefixed "ulnic run: ".
int spmd_master_run(const SpmdJob& job);

}  // namespace ulnic::am
