// Cold path: who the job is (environment) and where every rank receives
// (a file per rank in ULNIC_FM_DIR). See fm.h for the variables.
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fm_internal.h"

namespace ulnic::fm {
namespace {

bool parse_u32(const char* s, uint32_t& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(s, &end, 10);
  if (errno || *end || v > 0xffffffffUL || s[0] == '-') return false;
  out = uint32_t(v);
  return true;
}

std::string name_file(const Job& job, uint32_t rank) { return job.dir + "/rank." + std::to_string(rank); }

}  // namespace

bool read_job(Job& job, std::string& err) {
  const char* rank = std::getenv("ULNIC_FM_RANK");
  const char* nprocs = std::getenv("ULNIC_FM_NPROCS");
  const char* dir = std::getenv("ULNIC_FM_DIR");
  if (!parse_u32(rank, job.rank) || !parse_u32(nprocs, job.nprocs)) {
    err = "ULNIC_FM_RANK and ULNIC_FM_NPROCS must be set to numbers";
    return false;
  }
  if (job.nprocs == 0 || job.nprocs > FM_MAX_NODES || job.rank >= job.nprocs) {
    err = "need 0 <= ULNIC_FM_RANK < ULNIC_FM_NPROCS <= " + std::to_string(FM_MAX_NODES);
    return false;
  }
  if (!dir || !*dir || ::access(dir, W_OK | X_OK) != 0) {
    err = "ULNIC_FM_DIR must name a writable directory";
    return false;
  }
  job.dir = dir;
  return true;
}

uint64_t random_tag() {
  uint64_t t = 0;
  for (int i = 0; i < 8 && t <= 1; ++i)
    if (::getrandom(&t, sizeof t, 0) != ssize_t(sizeof t)) t = 0;
  return t;  // 0: no randomness to be had
}

namespace {
// An open-file-description lock on the whole file: held while the
// descriptor is open, dropped by the kernel when the process dies.
struct flock whole_file(short type) {
  struct flock l{};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  return l;
}
}  // namespace

// Written under a temporary name and renamed: a reader sees all or nothing.
// The file is read-locked before the rename and stays locked (`lock_fd`)
// while the process lives: rank_alive() looks at that lock.
bool publish_name(const Job& job, const EndpointName& mine, int& lock_fd, std::string& err) {
  std::string path = name_file(job, job.rank);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  struct flock l = whole_file(F_RDLCK);
  if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &l) != 0) {
    err = "cannot write and lock " + tmp + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  bool ok = ::dprintf(fd, "ulnic-fm %u %u %u %u %llx\n", unsigned(kVersion), mine.node, mine.slot, mine.ep,
                      static_cast<unsigned long long>(mine.tag)) > 0 &&
            std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    err = "cannot publish " + path + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  lock_fd = fd;
  return true;
}

bool rank_alive(const Job& job, uint32_t rank) {
  int fd = ::open(name_file(job, rank).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // the job's directory is gone
  struct flock l = whole_file(F_WRLCK);
  bool alive = ::fcntl(fd, F_OFD_GETLK, &l) != 0 || l.l_type != F_UNLCK;  // an error says nothing: alive
  ::close(fd);
  return alive;
}

// The files are as untrusted as any input: a malformed one fails the job.
bool collect_names(const Job& job, const EndpointName& mine, std::vector<EndpointName>& names, std::string& err) {
  names.assign(job.nprocs, EndpointName{});
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(FM_INIT_TIMEOUT_S);
  for (uint32_t r = 0; r < job.nprocs; ++r) {
    std::string path = name_file(job, r);
    FILE* f = nullptr;
    while (!(f = std::fopen(path.c_str(), "r"))) {
      if (std::chrono::steady_clock::now() > until) {
        err = "rank " + std::to_string(r) + " did not publish its name in " + path;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    unsigned v = 0, node = 0, slot = 0, ep = 0;
    unsigned long long tag = 0;
    int n = std::fscanf(f, "ulnic-fm %u %u %u %u %llx", &v, &node, &slot, &ep, &tag);
    std::fclose(f);
    if (n != 5 || v != kVersion || node > 0xffff || slot >= abi::kMaxSlots || ep >= abi::kMaxAmEndpoints ||
        tag <= 1) {
      err = "malformed endpoint name in " + path;
      return false;
    }
    names[r] = EndpointName{node, slot, ep, tag};
    const EndpointName& a = names[r];
    if (r == job.rank && (a.node != mine.node || a.slot != mine.slot || a.ep != mine.ep || a.tag != mine.tag)) {
      err = path + " is not this process's name (is the directory shared by two runs?)";
      return false;
    }
    for (uint32_t q = 0; q < r; ++q)
      if (names[q].node == a.node && names[q].slot == a.slot && names[q].ep == a.ep) {
        err = "ranks " + std::to_string(q) + " and " + std::to_string(r) + " name the same endpoint";
        return false;
      }
  }
  return true;
}

}  // namespace ulnic::fm
