// spmd.cpp: AMUDP's SPMD job interface (amudp_spmd.h), the worker side.
//
// A worker is a process started for a job master (spmd_master.cpp) with
// ULNIC_AM_MASTER=ip:port and ULNIC_AM_NPROCS (and, if the master started
// it as one rank, ULNIC_AM_RANK) in its environment. AMUDP_SPMDStartup
// connects to the master and joins (JOIN: its rank if it has one, and the
// changes the program made to its environment before the call); the answer
// (JOINED) gives its rank and the NIC node it runs on. Then it makes the
// endpoint, sends its name (HELLO) and waits for every name (START); it maps
// them all and sets the job's tag. From HELLO on, a reader thread takes the
// master's messages: the answers to barriers and all-gathers, which it hands
// to the waiting caller, and EXIT, which ends this process.
//
// A program that calls AMUDP_SPMDStartup without being a worker is the
// master of a job of itself (AMUDP's model): `prog N [L|S|C] args` (N and
// the spawner letter come off argv), a spawn function starts the workers,
// and it runs spmd_master_run and exits with the job's code.
#include <amudp_spmd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "spmd_master.h"
#include "spmd_proto.h"

extern char** environ;

namespace {

using ulnic::am::spmd_getenv;

namespace proto = ulnic::am::spmd;
using namespace std::chrono_literals;

constexpr int kDefaultDepth = 8;
constexpr auto kExitEchoWait = 2s;  // AMUDP_SPMDExit: how long to wait for the master's EXIT

// The job as this worker knows it. Allocated once and never freed: the
// reader thread may still be blocked on the socket while the process runs
// its static destructors (a program returning from main).
struct Job {
  // Written by Startup before `started`, read-only afterwards.
  int fd = -1;
  int rank = -1;
  int nproc = -1;
  eb_t eb = nullptr;
  ep_t ep = nullptr;
  std::atomic<bool> started{false};
  std::atomic<bool> starting{false};

  // The reader thread's results, under mu.
  std::mutex mu;
  std::condition_variable cv;
  bool have_start = false;
  proto::Start start;           // env is kept here for AMUDP_SPMDgetenvMaster
  uint32_t sent_seq = 0;        // the collective the caller is in
  uint32_t done_seq = 0;        // the last one the master released
  std::vector<uint8_t> gathered;

  std::mutex send_mu;           // the caller and an exit callback may both send
  std::atomic<amudp_exitcallback_t> exit_cb{nullptr};
  std::atomic<bool> exiting{false};  // this worker sent EXIT: its own echo runs no callback
};

Job& job() {
  static Job* j = new Job;
  return *j;
}

void say(const std::string& msg) {
  Job& j = job();
  std::fprintf(stderr, "amudp spmd (rank %d): %s\n", j.rank, msg.c_str());
  std::fflush(stderr);
}

// Ends this process now: from the reader thread exit() would run the
// program's atexit handlers and destructors under its other threads' feet,
// so it is AMUDP_SPMDkillmyprocess (_exit unless the program chose another),
// after flushing what the program printed.
[[noreturn]] void leave(int code) {
  std::fflush(nullptr);
  // The program may assign the hook at any time, as AMUDP lets it (a plain
  // global of its interface): read once, atomically (tests/sanitize/tsan.supp).
  if (auto kill = __atomic_load_n(&AMUDP_SPMDkillmyprocess, __ATOMIC_ACQUIRE)) kill(code);
  ::_exit(code);
}

bool send(uint32_t type, const std::vector<uint8_t>& body) {
  Job& j = job();
  std::lock_guard<std::mutex> l(j.send_mu);
  return proto::send_frame(j.fd, type, body);
}

// ---- the reader thread

[[noreturn]] void on_exit_message(const proto::Frame& f) {
  Job& j = job();
  uint32_t code = 0;
  if (!proto::decode_u32(f.body, code)) say("bad EXIT from the job master"), leave(1);
  if (!j.exiting.load())
    if (amudp_exitcallback_t cb = j.exit_cb.load()) cb(int(int32_t(code)));
  leave(int(int32_t(code)));
}

// Checks an answer against the collective the caller is waiting in.
bool on_done(const proto::Frame& f) {
  Job& j = job();
  uint32_t seq = 0, len = 0;
  std::vector<uint8_t> data;
  bool ok = f.type == proto::kBarrierDone ? proto::decode_u32(f.body, seq)
                                          : proto::decode_gather(f.body, seq, len, data) &&
                                                data.size() == size_t(len) * size_t(j.nproc);
  std::lock_guard<std::mutex> l(j.mu);
  if (!ok || seq != j.sent_seq || seq == j.done_seq) return false;
  j.gathered = std::move(data);
  j.done_seq = seq;
  j.cv.notify_all();
  return true;
}

bool on_start(const proto::Frame& f) {
  Job& j = job();
  proto::Start s;
  if (!proto::decode_start(f.body, s)) return false;
  std::lock_guard<std::mutex> l(j.mu);
  if (j.have_start) return false;
  j.start = std::move(s);
  j.have_start = true;
  j.cv.notify_all();
  return true;
}

void reader() {
  Job& j = job();
  for (;;) {
    proto::Frame f;
    if (!proto::recv_frame(j.fd, f)) {
      // The master is gone (killed, or it ended the job): so is the job.
      if (!j.exiting.load()) say("lost the connection to the job master; exiting");
      leave(1);
    }
    bool ok = false;
    switch (f.type) {
      case proto::kStart: ok = on_start(f); break;
      case proto::kBarrierDone:
      case proto::kAllGatherDone: ok = on_done(f); break;
      case proto::kExit: on_exit_message(f);  // does not return
      default: break;
    }
    if (!ok) say("bad message (type " + std::to_string(f.type) + ") from the job master; exiting"), leave(1);
  }
}

// ---- waiting while handlers run

// Polls the endpoint's bundle (so requests from the other workers are served)
// until `ready` holds, sleeping at most 1 ms at a time on the reader thread's
// signal.
template <typename Pred>
void poll_until(eb_t eb, Pred ready) {
  Job& j = job();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(j.mu);
      if (ready()) return;
    }
    if (eb) AM_Poll(eb);
    std::unique_lock<std::mutex> l(j.mu);
    if (j.cv.wait_for(l, 1ms, ready)) return;
  }
}

// One collective: send it, wait for the master's answer.
int collective(uint32_t type, const std::vector<uint8_t>& body, uint32_t seq) {
  Job& j = job();
  {
    std::lock_guard<std::mutex> l(j.mu);
    j.sent_seq = seq;
  }
  if (!send(type, body)) return say("cannot reach the job master"), AM_ERR_RESOURCE;
  poll_until(j.eb, [&] { return j.done_seq == seq; });
  return AM_OK;
}

uint32_t next_seq() {
  static uint32_t seq = 0;  // collectives are the caller's thread's, one at a time
  return ++seq;
}

// ---- startup

struct WorkerEnv {
  std::string host;
  uint16_t port = 0;
  int rank = -1, nproc = -1;
};

bool parse_int(const char* s, long lo, long hi, long& v) {
  if (!s || !*s) return false;
  char* end = nullptr;
  v = std::strtol(s, &end, 10);
  return *end == 0 && v >= lo && v <= hi;
}

// ULNIC_AM_RANK is optional: a worker a spawn function started has none.
bool read_worker_env(WorkerEnv& w) {
  std::string m = std::getenv("ULNIC_AM_MASTER");
  size_t colon = m.rfind(':');
  long port = 0, nproc = 0, rank = -1;
  if (colon == std::string::npos || !parse_int(m.c_str() + colon + 1, 1, 65535, port))
    return say("ULNIC_AM_MASTER='" + m + "' is not ip:port"), false;
  if (!parse_int(std::getenv("ULNIC_AM_NPROCS"), 1, AMUDP_MAX_SPMDPROCS, nproc))
    return say("ULNIC_AM_NPROCS is not 1.." + std::to_string(AMUDP_MAX_SPMDPROCS)), false;
  if (std::getenv("ULNIC_AM_RANK") && !parse_int(std::getenv("ULNIC_AM_RANK"), 0, nproc - 1, rank))
    return say("ULNIC_AM_RANK is not 0.." + std::to_string(nproc - 1)), false;
  w.host = m.substr(0, colon), w.port = uint16_t(port), w.rank = int(rank), w.nproc = int(nproc);
  return true;
}

// What the program did to its environment before AMUDP_SPMDStartup: the
// variables it set or changed ("KEY=VALUE") and removed ("KEY"), against
// the environment it was started with (/proc/self/environ).
std::vector<std::string> environment_changes() {
  std::map<std::string, std::string> initial, now;
  auto key = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::ifstream f("/proc/self/environ", std::ios::binary);
  for (std::string kv; std::getline(f, kv, '\0');)
    if (kv.find('=') != std::string::npos) initial.emplace(key(kv), kv);
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.find('=') != std::string::npos) now.emplace(key(kv), kv);
  }
  std::vector<std::string> changes;
  for (const auto& [k, kv] : now)
    if (auto it = initial.find(k); it == initial.end() || it->second != kv) changes.push_back(kv);
  for (const auto& [k, kv] : initial)
    if (!now.count(k)) changes.push_back(k);
  return changes;
}

// JOIN, and the master's answer: this worker's rank and node.
bool join(Job& j, const WorkerEnv& w, const std::vector<std::string>& changes) {
  proto::Join msg;
  msg.rank = w.rank;
  msg.pid = uint32_t(::getpid());
  msg.changes = changes;
  if (!send(proto::kJoin, proto::encode_join(msg))) return say("cannot send JOIN to the job master"), false;
  proto::Frame f;
  if (!proto::recv_frame(j.fd, f)) return say("the job master did not answer JOIN"), false;
  if (f.type == proto::kExit) leave(1);  // the job ended before this worker could join it
  uint32_t rank = 0;
  int32_t node = -1;
  if (f.type != proto::kJoined || !proto::decode_joined(f.body, rank, node) || rank >= uint32_t(j.nproc) ||
      (w.rank >= 0 && rank != uint32_t(w.rank)))
    return say("bad answer to JOIN from the job master"), false;
  j.rank = int(rank);
  // A worker's environment names its rank, however it got it (ulnic's rule).
  ::setenv("ULNIC_AM_RANK", std::to_string(rank).c_str(), 1);
  // The node this rank runs on (native and VIPL): before AM_Init opens the NIC.
  if (node >= 0) ::setenv("ULNIC_NODE", std::to_string(node).c_str(), 1);
  return true;
}

int connect_master(const WorkerEnv& w) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(w.port);
  if (::inet_pton(AF_INET, w.host.c_str(), &a.sin_addr) != 1) return say("bad master address " + w.host), -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    say("cannot connect to the job master at " + w.host + ":" + std::to_string(w.port) + ": " + std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // barriers are latency
  return fd;
}

// AM_Init, one AM_SEQ bundle, one endpoint; its name goes to the master.
int open_endpoint(Job& j, en_t& name) {
  int rc = AM_Init();
  if (rc != AM_OK) return say("AM_Init failed (" + std::to_string(rc) + ")"), rc;
  if ((rc = AM_AllocateBundle(AM_SEQ, &j.eb)) != AM_OK) return say("AM_AllocateBundle failed"), rc;
  if ((rc = AM_AllocateEndpoint(j.eb, &j.ep, &name)) != AM_OK) return say("AM_AllocateEndpoint failed"), rc;
  return AM_OK;
}

// Every worker at translation index = its rank, the job's credits and tag.
int map_job(Job& j) {
  const proto::Start& s = j.start;
  if (int(s.nproc) != j.nproc) return say("the master's job has " + std::to_string(s.nproc) + " workers"), AM_ERR_RESOURCE;
  for (int r = 0; r < j.nproc; ++r)
    if (int rc = AM_Map(j.ep, r, s.names[size_t(r)], s.tag); rc != AM_OK)
      return say("AM_Map of rank " + std::to_string(r) + " failed (" + std::to_string(rc) + ")"), rc;
  if (int rc = AM_SetExpectedResources(j.ep, j.nproc, int(s.depth)); rc != AM_OK)
    return say("AM_SetExpectedResources failed (" + std::to_string(rc) + ")"), rc;
  if (int rc = AM_SetTag(j.ep, s.tag); rc != AM_OK) return say("AM_SetTag failed"), rc;
  return AM_OK;
}

int worker_startup(uint64_t* networkpid, eb_t* eb, ep_t* ep) {
  Job& j = job();
  if (j.starting.exchange(true)) return say("AMUDP_SPMDStartup called twice"), AM_ERR_RESOURCE;
  std::vector<std::string> changes = environment_changes();  // before the library changes anything
  WorkerEnv w;
  if (!read_worker_env(w)) return AM_ERR_BAD_ARG;
  j.rank = w.rank, j.nproc = w.nproc;
  if ((j.fd = connect_master(w)) < 0) return AM_ERR_RESOURCE;
  if (!join(j, w, changes)) return AM_ERR_RESOURCE;
  en_t name{};
  if (int rc = open_endpoint(j, name); rc != AM_OK) return rc;
  if (!send(proto::kHello, proto::encode_hello(uint32_t(j.rank), name)))
    return say("cannot send HELLO to the job master"), AM_ERR_RESOURCE;
  std::thread(reader).detach();
  poll_until(j.eb, [&] { return j.have_start; });
  if (int rc = map_job(j); rc != AM_OK) return rc;
  *eb = j.eb, *ep = j.ep;
  if (networkpid) *networkpid = j.start.tag;
  if (!AMUDP_ProcessLabel) {
    static std::string label = "Node " + std::to_string(j.rank);
    AMUDP_ProcessLabel = label.c_str();
  }
  // A process this worker starts is not a worker of the job (AMUDP's rule).
  ::unsetenv("ULNIC_AM_MASTER");
  j.started = true;
  return AM_OK;
}

// ---- master mode

int usage(const char* prog, bool degree) {
  std::fprintf(stderr,
               "AMUDP SPMD job (ulnic-am, the AMUDP %s interface)\n"
               "usage: %s%s <spawner> program arguments...\n"
               "  <spawner>: how to start the workers (default: $AMUDP_SPAWNFN, else L):\n",
               AMUDP_LIBRARY_VERSION_STR, prog, degree ? " <number of workers>" : "");
  for (const amudp_spawnfn_desc_t* d = AMUDP_Spawnfn_Desc; d->abbrev; ++d)
    std::fprintf(stderr, "    %c  %s\n", d->abbrev, d->desc);
  std::exit(1);
}

// The spawn function a letter names, or nullptr.
amudp_spawnfn_t spawner_named(char c) {
  for (const amudp_spawnfn_desc_t* d = AMUDP_Spawnfn_Desc; d->abbrev; ++d)
    if (std::toupper(static_cast<unsigned char>(c)) == d->abbrev) return d->fnptr;
  return nullptr;
}

// Takes argv[1] off the command line.
void shift(int* argc, char*** argv) {
  (*argv)[1] = (*argv)[0];
  ++*argv;
  --*argc;
}

// The job of this very program, AMUDP's way: N (nproc 0) and the spawner
// letter (spawnfn NULL) come off the command line, the workers are this
// executable (/proc/self/exe, whatever argv[0] says) with the rest of it.
// Exits with the job's code.
int master_startup(int* argc, char*** argv, int nproc, int depth, amudp_spawnfn_t spawnfn) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "AMUDP_SPMDStartup: %s\n", m.c_str());
    return AM_ERR_BAD_ARG;
  };
  if (!argc || !argv || !*argv || *argc < 1) return fail("the master needs argc and argv");
  long n = nproc;
  bool degree_from_args = false;
  if (n == 0) {
    degree_from_args = true;
    if (*argc > 1 && parse_int((*argv)[1], 1, AMUDP_MAX_SPMDPROCS, n)) shift(argc, argv);
    else if (!parse_int(std::getenv("ULNIC_AM_NPROCS"), 1, AMUDP_MAX_SPMDPROCS, n))
      usage((*argv)[0], true);
  }
  if (!spawnfn && *argc > 1 && std::strlen((*argv)[1]) == 1 && spawner_named((*argv)[1][0])) {
    spawnfn = spawner_named((*argv)[1][0]);
    shift(argc, argv);
  }
  if (!spawnfn) {
    const char* letter = spmd_getenv("SPAWNFN");
    spawnfn = letter && *letter ? spawner_named(letter[0]) : AMUDP_SPMDLocalSpawn;
    if (!spawnfn) usage((*argv)[0], degree_from_args);
  }
  ulnic::am::SpmdJob job;
  job.nproc = int(n);
  long d = depth;
  if (d == 0 && !parse_int(spmd_getenv("NETWORKDEPTH"), 1, AMUDP_MAX_NETWORKDEPTH, d)) d = kDefaultDepth;
  job.depth = int(d);
  const char* t = std::getenv("ULNIC_AM_TRANSPORT");
  job.transport = t && *t ? t : "udp";
  if (const char* c = std::getenv("ULNIC_CLUSTER")) job.cluster = c;
  long nodes = 0;
  if (std::getenv("ULNIC_AM_NODES") && !parse_int(std::getenv("ULNIC_AM_NODES"), 0, 1 << 16, nodes))
    return fail("$ULNIC_AM_NODES is not a number");
  if (!std::getenv("ULNIC_AM_NODES") && job.transport != "udp") {
    // On the NICs rank r runs on node r mod (the nodes up), as under `ulnic run`.
    nodes = ulnic::am::spmd_nodes_up(job.cluster.empty() ? "default" : job.cluster);
    if (nodes == 0)
      return fail("transport " + job.transport + ": cluster '" + (job.cluster.empty() ? "default" : job.cluster) +
                  "' has no nodes up (ulnic cluster up -n M), or set $ULNIC_AM_NODES");
  }
  job.nodes = int(nodes);
  std::string err;
  if (spawnfn == AMUDP_SPMDSshSpawn) job.spawn_hosts = ulnic::am::spmd_ssh_hosts(job.nproc, err);
  if (!err.empty()) return fail(err);
  if (spawnfn == AMUDP_SPMDCustomSpawn)
    if (const char* servers = spmd_getenv("CSPAWN_SERVERS"); servers && *servers)
      job.spawn_hosts.push_back(std::string(servers).substr(0, std::strcspn(servers, " ,/;:")));
  job.spawnfn = spawnfn;
  job.program_is_master = true;
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return fail("cannot find this program (/proc/self/exe): " + ec.message());
  job.argv.push_back(self);
  for (int i = 1; i < *argc; ++i) job.argv.push_back((*argv)[i]);
  std::exit(ulnic::am::spmd_master_run(job));
}

bool running() { return job().started.load(); }

}  // namespace

extern "C" {

int AMUDP_SPMDIsWorker(char** /*argv*/) { return running() || std::getenv("ULNIC_AM_MASTER") != nullptr; }

int AMUDP_SPMDStartup(int* argc, char*** argv, int nproc, int networkdepth, amudp_spawnfn_t spawnfn,
                      uint64_t* networkpid, eb_t* eb, ep_t* ep) {
  if (!eb || !ep) return AM_ERR_BAD_ARG;
  if (nproc < 0 || nproc > AMUDP_MAX_SPMDPROCS || networkdepth < 0 || networkdepth > AMUDP_MAX_NETWORKDEPTH)
    return AM_ERR_BAD_ARG;
  if (AMUDP_SPMDIsWorker(argv ? *argv : nullptr)) return worker_startup(networkpid, eb, ep);
  return master_startup(argc, argv, nproc, networkdepth, spawnfn);
}

int AMUDP_SPMDExit(int exitcode) {
  Job& j = job();
  if (!running()) return AM_ERR_NOT_INIT;
  j.exiting = true;
  std::fflush(nullptr);
  (void)AM_Terminate();  // best effort: the process ends either way
  if (send(proto::kExit, proto::encode_u32(uint32_t(exitcode)))) {
    // The reader thread leaves (with the master's code) when the echo comes.
    std::unique_lock<std::mutex> l(j.mu);
    j.cv.wait_for(l, kExitEchoWait, [] { return false; });
  }
  leave(exitcode);
}

int AMUDP_SPMDSetExitCallback(amudp_exitcallback_t fn) {
  job().exit_cb = fn;
  return AM_OK;
}

int AMUDP_SPMDNumProcs(void) { return running() ? job().nproc : -1; }

int AMUDP_SPMDMyProc(void) { return running() ? job().rank : -1; }

int AMUDP_SPMDBarrier(void) {
  if (!running()) return AM_ERR_NOT_INIT;
  uint32_t seq = next_seq();
  return collective(proto::kBarrier, proto::encode_u32(seq), seq);
}

const char* AMUDP_SPMDgetenvMaster(const char* keyname) {
  if (!running() || !keyname || !*keyname) return nullptr;
  size_t n = std::strlen(keyname);
  for (const std::string& e : job().start.env)
    if (e.size() > n && e[n] == '=' && e.compare(0, n, keyname) == 0) return e.c_str() + n + 1;
  return nullptr;
}

int AMUDP_SPMDAllGather(void* source, void* dest, size_t len) {
  Job& j = job();
  if (!running()) return AM_ERR_NOT_INIT;
  if (!source || !dest || len == 0 || len > proto::kMaxGatherBytes / size_t(j.nproc)) return AM_ERR_BAD_ARG;
  uint32_t seq = next_seq();
  int rc = collective(proto::kAllGather, proto::encode_gather(seq, uint32_t(len), source, len), seq);
  if (rc != AM_OK) return rc;
  std::lock_guard<std::mutex> l(j.mu);
  if (len) std::memcpy(dest, j.gathered.data(), len * size_t(j.nproc));
  return AM_OK;
}

int AMUDP_SPMDLocalSpawn(int nproc, int /*argc*/, char** argv, char** extra_env) {
  return ulnic::am::spmd_spawn_local(nproc, argv, extra_env);
}

int AMUDP_SPMDSshSpawn(int nproc, int /*argc*/, char** argv, char** extra_env) {
  return ulnic::am::spmd_spawn_ssh(nproc, argv, extra_env);
}

int AMUDP_SPMDCustomSpawn(int nproc, int /*argc*/, char** argv, char** extra_env) {
  return ulnic::am::spmd_spawn_custom(nproc, argv, extra_env);
}

amudp_spawnfn_desc_t const AMUDP_Spawnfn_Desc[] = {
    {'S', "Spawn jobs using ssh remote shells (the machines in $SSH_SERVERS)", AMUDP_SPMDSshSpawn},
    {'L', "Spawn jobs using fork()/exec() on the local machine", AMUDP_SPMDLocalSpawn},
    {'C', "Spawn jobs using a custom job spawner ($CSPAWN_CMD)", AMUDP_SPMDCustomSpawn},
    {'\0', nullptr, nullptr},
};

void (*AMUDP_SPMDkillmyprocess)(int) = &::_exit;

int AMUDP_SPMDHandleControlTraffic(int* controlMessagesServiced) {
  if (controlMessagesServiced) *controlMessagesServiced = 0;  // a thread of the library serves it
  return AM_OK;
}

// No checkpointer (AMUDP's is BLCR): a checkpoint is not taken, nothing is
// ever a restart.
int AMUDP_SPMDCheckpoint(eb_t* /*eb*/, ep_t* /*ep*/, const char* /*dir*/) {
  say("AMUDP_SPMDCheckpoint: this library has no checkpoint/restart support");
  return -1;
}

void AMUDP_SPMDRunRestart(char* argv0, char* dir, int nproc) {
  std::fprintf(stderr, "AMUDP_SPMDRunRestart(%s, %s, %d): this library has no checkpoint/restart support\n",
               argv0 ? argv0 : "(null)", dir ? dir : "(null)", nproc);
  std::exit(1);
}

int AMUDP_SPMDRestartProcId(int* /*argc*/, char*** /*argv*/) { return -1; }

}  // extern "C"
