// spmd_master.cpp: the master of an AMUDP SPMD job (see spmd_master.h and
// the protocol in spmd_proto.h).
//
// One thread, one poll loop over the listener, the workers' connections and
// the connections that have not said JOIN yet. Workers are reaped with
// waitpid(WNOHANG) on every turn of the loop (a 50 ms tick) rather than from
// a SIGCHLD handler: the master also runs inside user programs (master-mode
// AMUDP_SPMDStartup) whose signal handlers are theirs. A worker that is not
// this process's child (started over ssh, or by a spawn function of the
// program's) is followed by its connection instead: it ends when that
// closes.
#include "spmd_master.h"

#include <amudp.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "spmd_proto.h"
#include "ulnic/util/process.h"
#include "ulnic/util/runtime_dir.h"

extern char** environ;

namespace ulnic::am {
namespace {

namespace proto = spmd;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kDefaultStartupTimeout{30'000};
constexpr milliseconds kKillGrace{2'000};  // SIGTERM, then SIGKILL
constexpr milliseconds kExitGrace{5'000};  // after EXIT went out: time for the exit callbacks
constexpr milliseconds kEofGrace{2'000};   // a worker that closed its connection must end by then
constexpr milliseconds kTick{50};          // poll period, and so the reaping latency
constexpr int kSendTimeoutS = 30;          // a worker that stops reading fails the send
constexpr size_t kMaxPending = 1024;       // connections without HELLO yet

void error(const std::string& msg) {
  std::fprintf(stderr, "ulnic run: %s\n", msg.c_str());
  std::fflush(stderr);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_end(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(exit_code_of(status));
}

milliseconds startup_timeout() {
  const char* s = std::getenv("ULNIC_AM_STARTUP_TIMEOUT_MS");
  if (!s || !*s) return kDefaultStartupTimeout;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (*end || v <= 0) {
    error(std::string("ignoring ULNIC_AM_STARTUP_TIMEOUT_MS='") + s + "' (not a positive number of ms)");
    return kDefaultStartupTimeout;
  }
  return milliseconds(v);
}

// ssh joins its command words with spaces and hands them to the remote shell,
// so every word we mean literally is quoted for that shell.
std::string shell_quote(const std::string& s) {
  static const char* safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=@%+,-";
  if (!s.empty() && s.find_first_not_of(safe) == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while ((i = s.find_first_not_of(" \t", i)) != std::string::npos) {
    size_t j = s.find_first_of(" \t", i);
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string ip_text(in_addr a) {
  char b[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

std::optional<sockaddr_in> resolve(const std::string& host, std::string& err) {
  std::string name = host.substr(host.find('@') + 1);  // ssh's user@host
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (int rc = ::getaddrinfo(name.c_str(), "9", &hints, &res); rc != 0) {
    err = "cannot resolve '" + name + "': " + ::gai_strerror(rc);
    return std::nullopt;
  }
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  return a;
}

// The address this machine uses to reach `host`: connecting a UDP socket
// sends nothing, it only picks the route and with it the source address.
std::optional<in_addr> route_to(const std::string& host, std::string& err) {
  auto dst = resolve(host, err);
  if (!dst) return std::nullopt;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&*dst), sizeof *dst) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  if (!ok) err = "no route to '" + host + "': " + std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!ok) return std::nullopt;
  return me.sin_addr;
}

struct Worker {
  pid_t pid = -1;
  bool child = true;  // this process's child: reaped, its status is the job's
  bool reaped = false;
  int status = 0;
  int fd = -1;  // its connection, from its JOIN on
  bool hello = false;  // its endpoint's name came (HELLO)
  proto::FrameBuffer in;
  en_t name{};
  std::vector<std::string> changes;  // its environment changes (JOIN)
  bool eof = false;  // the connection is closed (or broke on a send)
  Clock::time_point eof_at;
  std::string master;  // the ULNIC_AM_MASTER it was given
  // Done for the job: reaped, or (not a child) its connection is gone.
  bool gone() const { return reaped || pid <= 0 || (!child && (eof || fd < 0)); }
};

struct Pending {  // an accepted connection that has not said JOIN yet
  int fd = -1;
  proto::FrameBuffer in;
};

// Is pid a child of this process (so waitpid may reap it)?
bool is_child(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return false;
  char buf[512] = "";
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close = std::strrchr(buf, ')');  // the command may hold spaces and parentheses
  int ppid = 0;
  return close && std::sscanf(close + 1, " %*c %d", &ppid) == 1 && ppid == ::getpid();
}

// Starts args[0] (a path, or a name on $PATH) with `env` (nullptr: ours);
// stdin from /dev/null if `no_stdin`. The pid, or the errno as -errno.
pid_t start_process(const std::vector<std::string>& args, const std::vector<std::string>* env, bool no_stdin) {
  std::vector<std::string> a = args, e = env ? *env : std::vector<std::string>{};
  std::vector<char*> cargs, cenv;
  for (auto& x : a) cargs.push_back(x.data());
  for (auto& x : e) cenv.push_back(x.data());
  cargs.push_back(nullptr);
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  ::posix_spawn_file_actions_init(&fa);
  if (no_stdin) ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargs[0], &fa, nullptr, cargs.data(), env ? cenv.data() : environ);
  ::posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -rc;
}

// The environment with `vars` (KEY=VALUE) in place of any of the same name.
std::vector<std::string> with_vars(const std::vector<std::string>& vars) {
  std::vector<std::string> env;
  auto key = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const auto& v : vars) replaced |= key(v) == key(kv);
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), vars.begin(), vars.end());
  return env;
}

// The remote command of an ssh spawn: `cd DIR && env K=V ... prog args`,
// every word quoted for the remote shell (ssh joins its words with spaces).
std::string remote_command(const std::string& dir, const std::vector<std::string>& vars,
                           const std::vector<std::string>& argv) {
  std::string cmd = dir.empty() ? "" : "cd " + shell_quote(dir) + " && ";
  cmd += "env";
  for (const auto& v : vars) cmd += " " + shell_quote(v);
  // A relative path means this directory; the remote shell starts elsewhere.
  std::string prog = argv[0];
  if (prog.find('/') != std::string::npos) prog = std::filesystem::absolute(prog).lexically_normal().string();
  cmd += " " + shell_quote(prog);
  for (size_t i = 1; i < argv.size(); ++i) cmd += " " + shell_quote(argv[i]);
  return cmd;
}

std::vector<std::string> ssh_words() {
  const char* cmd = spmd_getenv("SSH_CMD");
  if (!cmd || !*cmd) cmd = std::getenv("ULNIC_SSH");
  std::vector<std::string> args = split_words(cmd && *cmd ? cmd : "ssh");
  if (const char* o = spmd_getenv("SSH_OPTIONS"))
    for (auto& w : split_words(o)) args.push_back(w);
  return args;
}

struct Collective {  // the barrier or all-gather the workers are in
  uint32_t type = 0, seq = 0, len = 0;
  int arrived = 0;
  int first = -1;  // the first rank in: named if another disagrees
  std::vector<bool> in;
  std::vector<uint8_t> data;
};

std::string describe(uint32_t type, uint32_t seq, uint32_t len) {
  if (type == proto::kBarrier) return "barrier #" + std::to_string(seq);
  return "all-gather #" + std::to_string(seq) + " of " + std::to_string(len) + " bytes";
}

class Master {
 public:
  explicit Master(const SpmdJob& job) : job_(job), workers_(size_t(std::max(job.nproc, 0))) {}
  ~Master();
  int run();

 private:
  friend int ulnic::am::spmd_spawn_local(int, char**, char**);
  friend int ulnic::am::spmd_spawn_ssh(int, char**, char**);
  friend int ulnic::am::spmd_spawn_custom(int, char**, char**);
  bool validate();
  bool open_listener();
  void spawn_all();
  bool spawn(int rank);
  void spawn_with_function();
  std::vector<std::pair<std::string, std::string>> worker_env(int rank) const;
  std::vector<std::string> job_vars() const;
  void poll_once();
  void accept_all();
  void read_pending(Pending& p);
  void read_worker(int rank);
  void worker_frames(int rank);
  void on_join(Pending& p, const proto::Frame& f);
  void on_hello(int rank, const proto::Frame& f);
  void on_frame(int rank, const proto::Frame& f);
  void on_collective(int rank, const proto::Frame& f);
  void start_job();
  void send_to(int rank, uint32_t type, const std::vector<uint8_t>& body);
  // Reaps the workers that ended; the first failure (or a last clean exit)
  // ends the job. failures_only: a clean exit is recorded, nothing more.
  void reap(bool failures_only = false);
  struct Held {  // a failure not yet the job's (hold())
    int code = 0;
    std::string msg;          // what end() says (a reaped worker's failure)
    bool exit_frame = false;  // a failing AMUDP_SPMDExit: EXIT goes to everyone with body
    std::vector<uint8_t> body;
    uint64_t after_poll = 0;
  };
  void hold(Held h);
  void settle_held();
  void exit_all(int code, const std::vector<uint8_t>& body);
  void reap_helpers();
  void check_deadlines();
  void end(int code, bool graceful, const std::string& msg);
  int finish();
  bool wait_all(milliseconds timeout);
  void kill_all();
  std::string who(int rank) const {
    return "rank " + std::to_string(rank) + " (pid " + std::to_string(workers_[size_t(rank)].pid) + ")";
  }

  const SpmdJob& job_;
  std::vector<Worker> workers_;
  std::vector<Pending> pending_;
  std::vector<pid_t> helpers_;          // started by spawn functions (ssh, custom): reaped, not workers
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<std::string> advertise_;  // by host (one entry for a local job): the address workers there dial
  bool started_ = false;                // START went out
  int hellos_ = 0;
  Clock::time_point startup_deadline_;
  milliseconds startup_timeout_{};
  Collective coll_;
  std::optional<int> result_;  // the job's exit code, once it is ending
  std::optional<Held> held_;   // a failure waiting to see whether a death caused it
  uint64_t polls_ = 0;         // poll_once() calls
  bool graceful_ = false;      // ending by EXIT: workers leave by themselves
};

Master::~Master() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (auto& p : pending_)
    if (p.fd >= 0) ::close(p.fd);
  for (auto& w : workers_)
    if (w.fd >= 0) ::close(w.fd);
}

bool Master::validate() {
  if (job_.nproc < 1 || job_.nproc > AMUDP_MAX_SPMDPROCS)
    return error("the number of workers must be 1.." + std::to_string(AMUDP_MAX_SPMDPROCS) + ", got " +
                 std::to_string(job_.nproc)), false;
  if (job_.depth < 1 || job_.depth > AMUDP_MAX_NETWORKDEPTH)
    return error("the network depth must be 1.." + std::to_string(AMUDP_MAX_NETWORKDEPTH) + ", got " +
                 std::to_string(job_.depth)), false;
  if (job_.transport != "udp" && job_.transport != "vipl" && job_.transport != "native")
    return error("unknown transport '" + job_.transport + "' (udp, vipl or native)"), false;
  if (job_.argv.empty() || job_.argv[0].empty()) return error("no program to run"), false;
  if (job_.nodes < 0) return error("the number of nodes must not be negative"), false;
  if (job_.spawnfn && !job_.hosts.empty()) return error("a spawn function chooses its own hosts"), false;
  return true;
}

// A local job listens on loopback only. With hosts, the master listens on
// $ULNIC_AM_MASTER_HOST (or AMUDP's $AMUDP_MASTERIP) if set, else on every
// address, and tells the workers on each host the address this machine
// reaches that host from. (A spawn function's workers all get the first
// host's: they share one environment.)
bool Master::open_listener() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  std::string err;
  const std::vector<std::string>& hosts = job_.spawnfn ? job_.spawn_hosts : job_.hosts;
  const char* mh = std::getenv("ULNIC_AM_MASTER_HOST");
  if (!mh || !*mh) mh = spmd_getenv("MASTERIP");
  if (mh && *mh) {
    auto a = resolve(mh, err);
    if (!a) return error("ULNIC_AM_MASTER_HOST: " + err), false;
    addr.sin_addr = a->sin_addr;
    advertise_.assign(std::max<size_t>(hosts.size(), 1), ip_text(a->sin_addr));
  } else if (hosts.empty()) {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    advertise_ = {"127.0.0.1"};
  } else {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    for (const auto& h : hosts) {
      auto a = route_to(h, err);
      if (!a) return error(err + " (set ULNIC_AM_MASTER_HOST to the address the workers reach this machine on)"), false;
      advertise_.push_back(ip_text(*a));
    }
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return error(std::string("cannot listen for the workers on ") + ip_text(addr.sin_addr) + ": " +
                 std::strerror(errno)), false;
  port_ = ntohs(addr.sin_port);
  return true;
}

std::vector<std::pair<std::string, std::string>> Master::worker_env(int rank) const {
  size_t host = job_.hosts.empty() ? 0 : size_t(rank) % job_.hosts.size();
  std::vector<std::pair<std::string, std::string>> env = {
      {"ULNIC_AM_MASTER", advertise_[host] + ":" + std::to_string(port_)},
      {"ULNIC_AM_RANK", std::to_string(rank)},
      {"ULNIC_AM_NPROCS", std::to_string(job_.nproc)},
      {"ULNIC_AM_TRANSPORT", job_.transport}};
  if (job_.nodes > 0) env.emplace_back("ULNIC_NODE", std::to_string(rank % job_.nodes));
  if (!job_.cluster.empty()) env.emplace_back("ULNIC_CLUSTER", job_.cluster);
  return env;
}

// The variables every worker of a spawn function gets (extra_env): no rank
// and no node, which it learns when it joins.
std::vector<std::string> Master::job_vars() const {
  std::vector<std::string> v = {"ULNIC_AM_MASTER=" + advertise_[0] + ":" + std::to_string(port_),
                                "ULNIC_AM_NPROCS=" + std::to_string(job_.nproc),
                                "ULNIC_AM_TRANSPORT=" + job_.transport};
  if (!job_.cluster.empty()) v.push_back("ULNIC_CLUSTER=" + job_.cluster);
  return v;
}

void Master::spawn_all() {
  if (job_.spawnfn) return spawn_with_function();
  for (int r = 0; r < job_.nproc && !result_; ++r)
    if (!spawn(r)) return;
}

// Locally: the program itself, with our environment plus the job's variables.
// With hosts: `${ULNIC_SSH:-ssh} host env K=V ... prog args`, stdin from
// /dev/null (the workers' ssh sessions must not compete for ours).
bool Master::spawn(int rank) {
  std::vector<std::string> vars, args, env;
  for (const auto& [k, v] : worker_env(rank)) vars.push_back(k + "=" + v);
  if (job_.hosts.empty()) {
    args = job_.argv;
    env = with_vars(vars);
  } else {
    args = ssh_words();
    args.push_back(job_.hosts[size_t(rank) % job_.hosts.size()]);
    args.push_back(remote_command("", vars, job_.argv));
  }
  pid_t pid = start_process(args, job_.hosts.empty() ? &env : nullptr, !job_.hosts.empty());
  if (pid < 0) {
    end(127, false, "cannot start rank " + std::to_string(rank) + ": " + args[0] + ": " + std::strerror(-pid));
    return false;
  }
  workers_[size_t(rank)].pid = pid;
  workers_[size_t(rank)].master = worker_env(rank)[0].second;
  return true;
}

// The master whose spawn function runs (the library's spawn functions are
// only for it: they register what they start with it).
Master* g_spawning = nullptr;

// AMUDP's way: one call starts them all; each worker joins without a rank.
void Master::spawn_with_function() {
  std::vector<std::string> vars = job_vars(), argv = job_.argv;
  std::vector<char*> cvars, cargv;
  for (auto& v : vars) cvars.push_back(v.data());
  for (auto& a : argv) cargv.push_back(a.data());
  cvars.push_back(nullptr);
  cargv.push_back(nullptr);
  g_spawning = this;
  int ok = job_.spawnfn(job_.nproc, int(argv.size()), cargv.data(), cvars.data());
  g_spawning = nullptr;
  if (!ok) end(1, false, "the spawn function could not start the workers");
}

void Master::poll_once() {
  ++polls_;
  // who[i]: what fds[i] is. -1 the listener, -2 - k pending k, r >= 0 rank r.
  std::vector<pollfd> fds;
  std::vector<int> who;
  if (!started_) fds.push_back({listen_fd_, POLLIN, 0}), who.push_back(-1);
  for (size_t k = 0; k < pending_.size(); ++k) fds.push_back({pending_[k].fd, POLLIN, 0}), who.push_back(-2 - int(k));
  for (size_t r = 0; r < workers_.size(); ++r)
    if (workers_[r].fd >= 0 && !workers_[r].eof) fds.push_back({workers_[r].fd, POLLIN, 0}), who.push_back(int(r));
  int n = ::poll(fds.data(), fds.size(), int(kTick.count()));
  if (n < 0 && errno != EINTR) return end(1, false, std::string("poll: ") + std::strerror(errno));
  bool accept = false;
  for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    if (who[i] == -1) accept = true;
    else if (who[i] <= -2) read_pending(pending_[size_t(-2 - who[i])]);
    else read_worker(who[i]);
  }
  // Last, so pending_ does not grow while the loop above holds references into it.
  if (accept && !started_) accept_all();
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
}

void Master::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: all taken; anything else: the peer gave up, nothing to do
    if (pending_.size() >= kMaxPending) {
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // barriers are latency
    timeval tv{kSendTimeoutS, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pending_.push_back({fd, {}});
  }
}

// Reads what is there without blocking; false when the connection is gone.
bool read_some(int fd, proto::FrameBuffer& in) {
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

void Master::read_pending(Pending& p) {
  if (p.fd < 0) return;
  bool open = read_some(p.fd, p.in);
  proto::Frame f;
  proto::FrameBuffer::Status st;
  while (p.fd >= 0 && (st = p.in.next(f)) == proto::FrameBuffer::kGotFrame) on_join(p, f);
  if (p.fd >= 0 && (!open || st == proto::FrameBuffer::kBad)) ::close(p.fd), p.fd = -1;
}

// A worker joins: with its rank (the master started it as that rank), or
// without (a spawn function started it): the lowest rank nobody has.
void Master::on_join(Pending& p, const proto::Frame& f) {
  proto::Join j;
  std::string why;
  int rank = -1;
  if (f.type != proto::kJoin || !proto::decode_join(f.body, j)) {
    why = "it did not start with JOIN";
  } else if (j.rank >= job_.nproc) {
    why = "rank " + std::to_string(j.rank) + " is not in this job";
  } else if (j.rank >= 0) {
    rank = j.rank;
    if (workers_[size_t(rank)].fd >= 0) why = "rank " + std::to_string(rank) + " has already connected";
  } else {
    for (int r = 0; r < job_.nproc && rank < 0; ++r)
      if (workers_[size_t(r)].fd < 0 && workers_[size_t(r)].pid <= 0) rank = r;
    if (rank < 0) why = "every rank of the job has joined";
  }
  if (!why.empty()) {
    error("note: dropped a connection to the master: " + why);
    ::close(p.fd), p.fd = -1;
    return;
  }
  Worker& w = workers_[size_t(rank)];
  w.fd = p.fd, p.fd = -1;
  w.in = std::move(p.in);
  w.changes = std::move(j.changes);
  if (w.pid <= 0) {  // not started by us as this rank: follow it by its connection unless it is our child
    w.pid = pid_t(j.pid);
    w.child = j.pid && is_child(pid_t(j.pid));
  }
  send_to(rank, proto::kJoined, proto::encode_joined(uint32_t(rank), job_.nodes > 0 ? rank % job_.nodes : -1));
  worker_frames(rank);  // anything it sent after its JOIN
}

void Master::on_hello(int rank, const proto::Frame& f) {
  uint32_t r = 0;
  en_t name{};
  Worker& w = workers_[size_t(rank)];
  if (!proto::decode_hello(f.body, r, name) || r != uint32_t(rank) || w.hello)
    return end(1, false, who(rank) + " sent a bad HELLO");
  w.name = name;
  w.hello = true;
  if (++hellos_ == job_.nproc) start_job();
}

void Master::read_worker(int rank) {
  Worker& w = workers_[size_t(rank)];
  if (w.fd < 0 || w.eof) return;
  if (!read_some(w.fd, w.in)) w.eof = true, w.eof_at = Clock::now();
  worker_frames(rank);
}

void Master::worker_frames(int rank) {
  Worker& w = workers_[size_t(rank)];
  proto::Frame f;
  for (;;) {
    auto st = w.in.next(f);
    if (st == proto::FrameBuffer::kNeedMore) return;
    if (st == proto::FrameBuffer::kBad) return end(1, false, who(rank) + " sent a frame longer than 16 MiB");
    on_frame(rank, f);
  }
}

void Master::on_frame(int rank, const proto::Frame& f) {
  if (result_) return;  // the job is ending: nothing more to serve
  if (!started_ && f.type == proto::kHello) return on_hello(rank, f);
  if (!started_)
    return end(1, false, who(rank) + " sent message type " + std::to_string(f.type) + " before the job started");
  switch (f.type) {
    case proto::kBarrier:
    case proto::kAllGather:
      return on_collective(rank, f);
    case proto::kExit: {
      uint32_t code = 0;
      if (!proto::decode_u32(f.body, code)) break;
      // A failing exit often follows another worker's death (its messages
      // to the dead one came back): a worker already gone is the job's
      // cause, and its status the job's.
      if (code != 0) reap(/*failures_only=*/true);
      if (result_ || held_) return;  // a held failure's EXIT will answer this one too
      if (code != 0) return hold({int(int32_t(code)), "", true, f.body});
      exit_all(0, f.body);
      return;
    }
    default:
      break;
  }
  end(1, false, who(rank) + " sent a bad message (type " + std::to_string(f.type) + ", " +
                    std::to_string(f.body.size()) + " bytes)");
}

void Master::on_collective(int rank, const proto::Frame& f) {
  uint32_t seq = 0, len = 0;
  std::vector<uint8_t> data;
  bool ok = f.type == proto::kBarrier ? proto::decode_u32(f.body, seq)
                                      : proto::decode_gather(f.body, seq, len, data) && data.size() == len;
  if (!ok) return end(1, false, who(rank) + " sent a malformed " + describe(f.type, seq, len));
  if (size_t(len) * size_t(job_.nproc) > proto::kMaxGatherBytes)
    return end(1, false, who(rank) + ": " + describe(f.type, seq, len) + " from " + std::to_string(job_.nproc) +
                             " workers exceeds 16 MiB");
  Collective& c = coll_;
  if (c.arrived == 0) {
    c.type = f.type, c.seq = seq, c.len = len, c.first = rank;
    c.data.assign(size_t(len) * size_t(job_.nproc), 0);
  } else if (c.type != f.type || c.seq != seq || c.len != len) {
    return end(1, false, "the workers disagree: rank " + std::to_string(rank) + " is in " + describe(f.type, seq, len) +
                             ", rank " + std::to_string(c.first) + " in " + describe(c.type, c.seq, c.len));
  }
  if (c.in[size_t(rank)]) return end(1, false, who(rank) + " entered " + describe(f.type, seq, len) + " twice");
  c.in[size_t(rank)] = true;
  if (len) std::memcpy(c.data.data() + size_t(rank) * len, data.data(), len);
  if (++c.arrived < job_.nproc) return;
  std::vector<uint8_t> done = f.type == proto::kBarrier ? proto::encode_u32(seq)
                                                        : proto::encode_gather(seq, len, c.data.data(), c.data.size());
  c.arrived = 0;
  c.in.assign(c.in.size(), false);
  for (int r = 0; r < job_.nproc; ++r) send_to(r, f.type == proto::kBarrier ? proto::kBarrierDone : proto::kAllGatherDone, done);
}

// Every worker has said HELLO: one tag for the job (random, so a stray
// message from another job is returned with EBADTAG), and START to all.
void Master::start_job() {
  proto::Start s;
  s.nproc = uint32_t(job_.nproc);
  s.depth = uint32_t(job_.depth);
  std::random_device rd;
  do s.tag = uint64_t(rd()) << 32 | rd();
  while (s.tag == AM_NONE || s.tag == AM_ALL);
  for (const auto& w : workers_) s.names.push_back(w.name);
  for (char** e = environ; *e; ++e) s.env.push_back(*e);
  if (!job_.program_is_master) {
    // The launcher is not the program: its environment as the program would
    // have had it, with the changes rank 0 made before AMUDP_SPMDStartup.
    for (const std::string& c : workers_[0].changes) {
      std::string key = c.substr(0, c.find('='));
      std::erase_if(s.env, [&](const std::string& kv) { return kv.compare(0, key.size() + 1, key + "=") == 0; });
      if (c.find('=') != std::string::npos) s.env.push_back(c);
    }
  }
  std::vector<uint8_t> body = proto::encode_start(s);
  if (body.size() > proto::kMaxBody)
    return end(1, false, "the environment is too large to send to the workers (" + std::to_string(body.size()) + " bytes)");
  started_ = true;
  coll_.in.assign(size_t(job_.nproc), false);
  ::close(listen_fd_), listen_fd_ = -1;
  for (auto& p : pending_)
    if (p.fd >= 0) ::close(p.fd), p.fd = -1;
  for (int r = 0; r < job_.nproc; ++r) send_to(r, proto::kStart, body);
}

// A send that fails means the worker is going or gone: its end (reaped, or
// the EOF deadline) reports it with its real status.
void Master::send_to(int rank, uint32_t type, const std::vector<uint8_t>& body) {
  Worker& w = workers_[size_t(rank)];
  if (w.fd < 0 || w.eof) return;
  if (!proto::send_frame(w.fd, type, body)) w.eof = true, w.eof_at = Clock::now();
}

// Everyone (the sender too: that is its acknowledgement) exits with code.
void Master::exit_all(int code, const std::vector<uint8_t>& body) {
  result_ = code, graceful_ = true;
  for (size_t r = 0; r < workers_.size(); ++r) send_to(int(r), proto::kExit, body);
}

// A worker's failure can be another's death seen first: its messages to a
// worker killed a moment ago came back, and it failed, before the dead one
// was reaped -- a process's files close (its connection here, its NIC slot)
// before it becomes a zombie, and under load that can take a while. So a
// failure is held: for one more look at every connection (the dead one's
// EOF came before, so that look sees it), and then for as long as a child
// whose connection closed is not reaped yet. reap() names a killed worker
// first; check_deadlines() ends a closed one that is not reaped in
// kEofGrace. A held failure still beats a later clean exit. Only the
// first failure is held.
void Master::hold(Held h) {
  if (!held_) h.after_poll = polls_, held_ = std::move(h);
}

void Master::settle_held() {
  if (!held_ || result_ || polls_ <= held_->after_poll) return;
  for (const auto& w : workers_)
    if (w.child && w.pid > 0 && !w.reaped && w.eof) return;  // dying, most likely
  Held h = std::move(*held_);
  held_.reset();
  if (h.exit_frame) return exit_all(h.code, h.body);
  end(h.code, false, h.msg);
}

void Master::reap(bool failures_only) {
  reap_helpers();
  std::vector<size_t> ended;
  for (size_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.reaped || w.pid <= 0 || !w.child) continue;
    int st = 0;
    pid_t p = ::waitpid(w.pid, &st, WNOHANG);
    if (p == 0) continue;
    // p < 0: someone else reaped it (a master-mode program's SIGCHLD handler).
    w.reaped = true, w.status = p < 0 ? (1 << 8) : st;
    ended.push_back(r);
  }
  // Of the workers found ended in one look, one killed by a signal is named
  // first: the others most likely failed because it died (their messages to
  // it came back), a moment later but within the same 50 ms tick.
  std::stable_partition(ended.begin(), ended.end(), [&](size_t r) { return WIFSIGNALED(workers_[r].status); });
  for (size_t r : ended) {
    Worker& w = workers_[r];
    if (result_) continue;
    read_worker(int(r));  // its last words: an EXIT sent just before it went
    if (result_) continue;
    bool others = false;
    for (const auto& o : workers_) others |= !o.reaped;
    int code = exit_code_of(w.status);
    if ((failures_only || held_) && code == 0) continue;
    std::string when = !w.hello ? " before it joined the job" : WIFSIGNALED(w.status) ? "" : " without AMUDP_SPMDExit";
    std::string msg = who(int(r)) + " " + describe_end(w.status) + when;
    if (others) msg += "; stopping the other workers";
    if (code != 0 && !WIFSIGNALED(w.status)) hold({code, msg, false, {}});
    else end(code, false, code != 0 || others ? msg : "");
  }
}

// What a spawn function started besides workers (ssh clients, a custom
// spawner's shell): reaped; one that fails before the job starts ends it
// (its workers will not come).
void Master::reap_helpers() {
  for (size_t i = 0; i < helpers_.size();) {
    // A worker that joined is reaped as one (its status is the job's).
    bool worker = std::any_of(workers_.begin(), workers_.end(),
                              [&](const Worker& w) { return w.child && w.pid == helpers_[i]; });
    if (worker) {
      helpers_.erase(helpers_.begin() + ptrdiff_t(i));
      continue;
    }
    int st = 0;
    pid_t p = ::waitpid(helpers_[i], &st, WNOHANG);
    if (p == 0) {
      i++;
      continue;
    }
    if (p > 0 && !started_ && !result_ && exit_code_of(st) != 0)
      end(exit_code_of(st), false, "a process the spawn function started (pid " + std::to_string(helpers_[i]) + ") " +
                                       describe_end(st) + " before the job started");
    helpers_.erase(helpers_.begin() + ptrdiff_t(i));
  }
}

void Master::check_deadlines() {
  auto now = Clock::now();
  if (!started_ && now > startup_deadline_) {
    std::string missing;
    int shown = 0;
    for (int r = 0; r < job_.nproc; ++r)
      if (!workers_[size_t(r)].hello && shown++ < 16) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    if (shown > 16) missing += ",...";
    return end(1, false, "startup timed out after " + std::to_string(startup_timeout_.count()) + " ms: " +
                             std::to_string(hellos_) + " of " + std::to_string(job_.nproc) +
                             " workers called AMUDP_SPMDStartup (waiting for rank " + missing + ")");
  }
  for (size_t r = 0; r < workers_.size(); ++r) {
    const Worker& w = workers_[r];
    // A child has kEofGrace to be reaped (its status says more); another
    // process is followed by its connection only.
    if (w.eof && !w.reaped && (!w.child || now - w.eof_at > kEofGrace))
      return end(1, false, who(int(r)) + " closed its connection to the master without AMUDP_SPMDExit; stopping the job");
  }
}

// The first end wins; an empty message ends quietly (a lone worker that
// simply returned 0).
void Master::end(int code, bool graceful, const std::string& msg) {
  if (result_) return;
  result_ = code, graceful_ = graceful;
  if (!msg.empty()) error(msg);
}

bool Master::wait_all(milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (auto& w : workers_) {
      if (!w.child && !w.gone() && w.fd >= 0) {  // followed by its connection: gone when it closes
        char b[256];
        ssize_t n = ::recv(w.fd, b, sizeof b, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) w.eof = true;
      }
      if (w.gone()) continue;
      int st = 0;
      pid_t p = ::waitpid(w.pid, &st, WNOHANG);
      if (p != 0) w.reaped = true, w.status = st;
      else all = false;
    }
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

// SIGTERM, then SIGKILL. The connections close too: a worker behind ssh
// learns from its lost master connection that the job is over.
void Master::kill_all() {
  for (auto& w : workers_)
    if (!w.reaped && w.pid > 0 && w.child) ::kill(w.pid, SIGTERM);
  for (auto& w : workers_)
    if (w.fd >= 0) ::close(w.fd), w.fd = -1;
  bool all = wait_all(kKillGrace);
  if (!all) {
    for (auto& w : workers_)
      if (!w.reaped && w.pid > 0 && w.child) ::kill(w.pid, SIGKILL);
    wait_all(milliseconds(60'000));
  }
  // A spawn function's helpers end with their workers; reap what has.
  for (auto deadline = Clock::now() + kKillGrace; !helpers_.empty() && Clock::now() < deadline;) {
    reap_helpers();
    std::this_thread::sleep_for(milliseconds(10));
  }
}

int Master::finish() {
  if (graceful_ && !wait_all(kExitGrace)) {
    int left = 0;
    for (const auto& w : workers_) left += !w.reaped;
    error(std::to_string(left) + " workers still running " + std::to_string(kExitGrace.count() / 1000) +
          " s after AMUDP_SPMDExit; killing them");
  }
  kill_all();
  return *result_;
}

int Master::run() {
  if (!validate()) return 2;
  if (!open_listener()) return 1;
  // The workers share our stdout: nothing of ours may still sit in a buffer.
  std::fflush(nullptr);
  startup_timeout_ = startup_timeout();
  startup_deadline_ = Clock::now() + startup_timeout_;
  spawn_all();
  while (!result_) {
    poll_once();
    if (!result_) reap();
    if (!result_) check_deadlines();
    settle_held();
  }
  return finish();
}

}  // namespace

int spmd_master_run(const SpmdJob& job) {
  Master m(job);
  return m.run();
}

int spmd_nodes_up(const std::string& cluster) {
  std::string dir = runtime_base_dir() + "/" + cluster;
  int n = 0;
  for (;; ++n) {
    std::string node = dir + "/node" + std::to_string(n);
    std::ifstream pidfile(node + "/qemu.pid");
    long pid = 0;
    if (!(pidfile >> pid) || pid <= 0 || !process_alive(pid_t(pid)) ||
        process_cmdline(pid_t(pid)).find(node + "/sram") == std::string::npos)
      return n;
  }
}

const char* spmd_getenv(const char* key) {
  std::string prefixed = std::string("AMUDP_") + key;
  if (const char* v = std::getenv(prefixed.c_str())) return v;
  return std::getenv(key);
}

std::vector<std::string> spmd_ssh_hosts(int nproc, std::string& err) {
  std::vector<std::string> hosts;
  if (const char* servers = spmd_getenv("SSH_SERVERS"); servers && *servers) {
    std::string cur;
    for (const char* p = servers;; ++p) {
      if (*p == 0 || std::strchr(" ,/;:", *p)) {
        if (!cur.empty() && int(hosts.size()) < nproc) hosts.push_back(cur);
        cur.clear();
        if (*p == 0) break;
      } else {
        cur += *p;
      }
    }
    if (int(hosts.size()) < nproc)
      err = "SSH_SERVERS names " + std::to_string(hosts.size()) + " machines for " + std::to_string(nproc) +
            " workers (one each): " + servers;
  } else if (const char* list = std::getenv("ULNIC_AM_HOSTS"); list && *list) {
    std::vector<std::string> all;
    std::string cur;
    for (const char* p = list;; ++p) {
      if (*p == 0 || *p == ',' || *p == ' ' || *p == '\t') {
        if (!cur.empty()) all.push_back(cur), cur.clear();
        if (*p == 0) break;
      } else {
        cur += *p;
      }
    }
    for (int r = 0; r < nproc && !all.empty(); ++r) hosts.push_back(all[size_t(r) % all.size()]);
  } else {
    err = "ssh spawn needs the machines in $SSH_SERVERS (or $ULNIC_AM_HOSTS, round robin)";
  }
  if (!err.empty()) hosts.clear();
  return hosts;
}

namespace {

// The spawn functions' common part: only inside a master's spawn.
Master* spawning(const char* fn) {
  if (!g_spawning)
    error(std::string(fn) + ": spawn functions are for AMUDP_SPMDStartup only (it calls them in the job's master)");
  return g_spawning;
}

std::vector<std::string> strings(char** v) {
  std::vector<std::string> out;
  for (; v && *v; ++v) out.push_back(*v);
  return out;
}

std::string cwd() {
  std::error_code ec;
  std::string d = std::filesystem::current_path(ec).string();
  return ec ? "" : d;
}

// The library's spawn functions also give worker i its rank, ULNIC_AM_RANK=i
// (the ranks go in the order they are started, not as they join).
std::vector<std::string> ranked(char** extra_env, int rank) {
  std::vector<std::string> vars = strings(extra_env);
  vars.push_back("ULNIC_AM_RANK=" + std::to_string(rank));
  return vars;
}

}  // namespace

int spmd_spawn_local(int nproc, char** argv, char** extra_env) {
  Master* m = spawning("AMUDP_SPMDLocalSpawn");
  if (!m || !argv || !argv[0]) return 0;
  std::vector<std::string> args = strings(argv);
  for (int i = 0; i < nproc; ++i) {
    std::vector<std::string> env = with_vars(ranked(extra_env, i));
    pid_t pid = start_process(args, &env, false);
    if (pid < 0) return error("cannot start a worker: " + args[0] + ": " + std::strerror(-pid)), 0;
    m->helpers_.push_back(pid);
  }
  return 1;
}

// `ssh [options] host "cd DIR && env K=V ... prog args"`, one worker per
// machine of $SSH_SERVERS, in $SSH_REMOTE_PATH (default: this directory).
int spmd_spawn_ssh(int nproc, char** argv, char** extra_env) {
  Master* m = spawning("AMUDP_SPMDSshSpawn");
  if (!m || !argv || !argv[0]) return 0;
  std::string err;
  std::vector<std::string> hosts = spmd_ssh_hosts(nproc, err);
  if (hosts.empty()) return error(err), 0;
  const char* dir = spmd_getenv("SSH_REMOTE_PATH");
  for (int i = 0; i < nproc; ++i) {
    std::vector<std::string> args = ssh_words();
    args.push_back(hosts[size_t(i)]);
    args.push_back(remote_command(dir && *dir ? dir : cwd(), ranked(extra_env, i), strings(argv)));
    pid_t pid = start_process(args, nullptr, true);
    if (pid < 0) return error("cannot start " + args[0] + ": " + std::strerror(-pid)), 0;
    m->helpers_.push_back(pid);
  }
  return 1;
}

// $CSPAWN_CMD through /bin/sh, once, with %N (nproc), %C (the command each
// worker runs), %M (the first nproc machines of $CSPAWN_SERVERS), %D (this
// directory), %P (the program) and %% replaced: it must start the nproc
// workers itself.
int spmd_spawn_custom(int nproc, char** argv, char** extra_env) {
  Master* m = spawning("AMUDP_SPMDCustomSpawn");
  if (!m || !argv || !argv[0]) return 0;
  const char* tmpl = spmd_getenv("CSPAWN_CMD");
  if (!tmpl || !*tmpl) return error("AMUDP_SPMDCustomSpawn needs the spawn command in $CSPAWN_CMD"), 0;
  std::string servers;
  if (const char* list = spmd_getenv("CSPAWN_SERVERS")) {
    int taken = 0;
    std::string spaced = list;
    for (char& c : spaced)
      if (std::strchr(",/;:", c)) c = ' ';
    for (const auto& w : split_words(spaced))
      if (taken++ < nproc) servers += (servers.empty() ? "" : " ") + w;
  }
  std::string worker = remote_command("", strings(extra_env), strings(argv)), cmd;
  for (const char* p = tmpl; *p; ++p) {
    if (*p != '%' || !p[1]) {
      cmd += *p;
      continue;
    }
    switch (std::toupper(static_cast<unsigned char>(*++p))) {
      case 'N': cmd += std::to_string(nproc); break;
      case 'C': cmd += worker; break;
      case 'M': cmd += servers; break;
      case 'D': cmd += shell_quote(cwd()); break;
      case 'P': cmd += shell_quote(argv[0]); break;
      case '%': cmd += '%'; break;
      default: break;  // AMUDP drops an unknown %x
    }
  }
  pid_t pid = start_process({"/bin/sh", "-c", cmd}, nullptr, false);
  if (pid < 0) return error(std::string("cannot start /bin/sh: ") + std::strerror(-pid)), 0;
  m->helpers_.push_back(pid);
  return 1;
}

}  // namespace ulnic::am
