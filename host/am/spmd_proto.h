// spmd_proto.h: the bootstrap protocol of an AMUDP SPMD job, between each
// worker and the job's master (`ulnic run`, or a program that is its own
// master), over one TCP connection per worker.
//
// A frame is u32 type, u32 body length, body; every integer little-endian.
// A worker's first frame is JOIN; once JOINED tells it its rank (and node)
// it opens its endpoint and says HELLO with the endpoint's name.
// Bodies:
//   JOIN            worker -> master  i32 rank (-1: "give me the next free
//                                     one", a worker that a spawn function
//                                     started without one), u32 pid, the
//                                     changes the program made to its
//                                     environment before AMUDP_SPMDStartup:
//                                     "KEY=VALUE\0" set, "KEY\0" unset
//   JOINED          master -> worker  u32 rank, i32 node (ULNIC_NODE for the
//                                     worker's NIC; -1: leave it alone)
//   HELLO           worker -> master  u32 rank, en_t name (16 bytes)
//   START           master -> worker  u32 nproc, u32 depth, u64 tag,
//                                     en_t names[nproc],
//                                     the master's environment: KEY=VALUE\0...
//   BARRIER         worker -> master  u32 seq
//   BARRIER_DONE    master -> worker  u32 seq
//   ALLGATHER       worker -> master  u32 seq, u32 len, len bytes
//   ALLGATHER_DONE  master -> worker  u32 seq, u32 len, nproc * len bytes (rank order)
//   EXIT            both ways         i32 code (worker: "end the job";
//                                     master: "the job ends, exit with code")
// seq counts a worker's collectives (barriers and all-gathers alike) from 1;
// every worker is at the same seq in the same collective, so the master can
// tell a program whose ranks disagree.
//
// Both sides treat what they read as untrusted: bodies are capped at
// kMaxBody, and every decoder checks the exact size and ranges.
#pragma once

#include <amudp.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ulnic::am::spmd {

enum MsgType : uint32_t {
  kHello = 1,
  kStart = 2,
  kBarrier = 3,
  kBarrierDone = 4,
  kAllGather = 5,
  kAllGatherDone = 6,
  kExit = 7,
  kJoin = 8,
  kJoined = 9,
};

constexpr uint32_t kMaxBody = 16u << 20;
constexpr size_t kHeaderBytes = 8;
constexpr size_t kNameBytes = 16;  // en_t on the wire
// An all-gather's result travels in one frame: nproc * len must fit.
constexpr size_t kMaxGatherBytes = kMaxBody - 8;

struct Frame {
  uint32_t type = 0;
  std::vector<uint8_t> body;
};

// ---- encoding

class Writer {
 public:
  Writer& u8(uint8_t v) { return put(v, 1); }
  Writer& u16(uint16_t v) { return put(v, 2); }
  Writer& u32(uint32_t v) { return put(v, 4); }
  Writer& u64(uint64_t v) { return put(v, 8); }
  Writer& bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    return *this;
  }
  // Field by field, so the name is the same bytes on every machine.
  Writer& name(const en_t& n) {
    return u32(n.host).u32(n.port).u32(n.id).u16(n.index).u8(n.transport).u8(n.reserved);
  }
  std::vector<uint8_t>& out() { return buf_; }

 private:
  Writer& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> buf_;
};

// A bounds-checked cursor: every read fails (and keeps failing) past the end.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : p_(b.data()), left_(b.size()) {}
  Reader(const uint8_t* p, size_t n) : p_(p), left_(n) {}
  bool u8(uint8_t& v) { return get(v, 1); }
  bool u16(uint16_t& v) { return get(v, 2); }
  bool u32(uint32_t& v) { return get(v, 4); }
  bool u64(uint64_t& v) { return get(v, 8); }
  bool name(en_t& n) {
    return u32(n.host) && u32(n.port) && u32(n.id) && u16(n.index) && u8(n.transport) && u8(n.reserved);
  }
  bool bytes(std::vector<uint8_t>& out, size_t n) {
    if (!ok_ || n > left_) return ok_ = false;
    out.assign(p_, p_ + n);
    p_ += n, left_ -= n;
    return true;
  }
  size_t left() const { return left_; }
  const uint8_t* here() const { return p_; }

 private:
  template <typename T>
  bool get(T& v, size_t n) {
    if (!ok_ || n > left_) return ok_ = false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= uint64_t(p_[i]) << (8 * i);
    v = T(x);
    p_ += n, left_ -= n;
    return true;
  }
  const uint8_t* p_;
  size_t left_;
  bool ok_ = true;
};

inline std::vector<uint8_t> encode_frame(uint32_t type, const std::vector<uint8_t>& body) {
  Writer w;
  w.u32(type).u32(uint32_t(body.size())).bytes(body.data(), body.size());
  return std::move(w.out());
}

// ---- messages

// NUL-terminated strings to the end of the body.
inline void write_strings(Writer& w, const std::vector<std::string>& v) {
  for (const std::string& e : v) w.bytes(e.c_str(), e.size() + 1);
}
inline std::vector<std::string> read_strings(const Reader& r) {
  std::vector<std::string> out;
  const char* p = reinterpret_cast<const char*>(r.here());
  const char* end = p + r.left();
  while (p < end) {
    const char* nul = static_cast<const char*>(std::memchr(p, 0, size_t(end - p)));
    const char* stop = nul ? nul : end;
    if (stop > p) out.emplace_back(p, stop);
    p = stop + 1;
  }
  return out;
}

struct Start {
  uint32_t nproc = 0;
  uint32_t depth = 0;
  uint64_t tag = 0;
  std::vector<en_t> names;
  std::vector<std::string> env;  // KEY=VALUE
};

inline std::vector<uint8_t> encode_hello(uint32_t rank, const en_t& name) {
  Writer w;
  w.u32(rank).name(name);
  return std::move(w.out());
}

inline bool decode_hello(const std::vector<uint8_t>& body, uint32_t& rank, en_t& name) {
  Reader r(body);
  return r.u32(rank) && r.name(name) && r.left() == 0;
}

inline std::vector<uint8_t> encode_start(const Start& s) {
  Writer w;
  w.u32(s.nproc).u32(s.depth).u64(s.tag);
  for (const en_t& n : s.names) w.name(n);
  write_strings(w, s.env);
  return std::move(w.out());
}

inline bool decode_start(const std::vector<uint8_t>& body, Start& s) {
  Reader r(body);
  if (!r.u32(s.nproc) || !r.u32(s.depth) || !r.u64(s.tag)) return false;
  if (s.nproc < 1 || s.nproc > AMUDP_MAX_SPMDPROCS) return false;
  if (s.depth < 1 || s.depth > AMUDP_MAX_NETWORKDEPTH) return false;
  if (s.tag == AM_NONE || s.tag == AM_ALL) return false;
  s.names.assign(s.nproc, en_t{});
  for (en_t& n : s.names)
    if (!r.name(n)) return false;
  // The rest is the environment; entries without '=' are not variables.
  s.env.clear();
  for (std::string& e : read_strings(r))
    if (e.find('=') != std::string::npos && e[0] != '=') s.env.push_back(std::move(e));
  return true;
}

struct Join {
  int32_t rank = -1;
  uint32_t pid = 0;
  std::vector<std::string> changes;  // KEY=VALUE (set) or KEY (unset)
};

inline std::vector<uint8_t> encode_join(const Join& j) {
  Writer w;
  w.u32(uint32_t(j.rank)).u32(j.pid);
  write_strings(w, j.changes);
  return std::move(w.out());
}

inline bool decode_join(const std::vector<uint8_t>& body, Join& j) {
  Reader r(body);
  uint32_t rank = 0;
  if (!r.u32(rank) || !r.u32(j.pid)) return false;
  j.rank = int32_t(rank);
  if (j.rank < -1) return false;
  j.changes.clear();
  for (std::string& e : read_strings(r))
    if (e[0] != '=') j.changes.push_back(std::move(e));  // "=..." names nothing
  return true;
}

inline std::vector<uint8_t> encode_joined(uint32_t rank, int32_t node) {
  Writer w;
  w.u32(rank).u32(uint32_t(node));
  return std::move(w.out());
}

inline bool decode_joined(const std::vector<uint8_t>& body, uint32_t& rank, int32_t& node) {
  Reader r(body);
  uint32_t n = 0;
  if (!r.u32(rank) || !r.u32(n) || r.left() != 0) return false;
  node = int32_t(n);
  return node >= -1;
}

inline std::vector<uint8_t> encode_u32(uint32_t v) {
  Writer w;
  w.u32(v);
  return std::move(w.out());
}

// BARRIER, BARRIER_DONE (seq) and EXIT (code, as its two's complement bits).
inline bool decode_u32(const std::vector<uint8_t>& body, uint32_t& v) {
  Reader r(body);
  return r.u32(v) && r.left() == 0;
}

// ALLGATHER (data = this worker's len bytes) and ALLGATHER_DONE (data = all
// workers' bytes, so its size is nproc * len; the receiver checks that).
inline std::vector<uint8_t> encode_gather(uint32_t seq, uint32_t len, const void* data, size_t size) {
  Writer w;
  w.u32(seq).u32(len).bytes(data, size);
  return std::move(w.out());
}

inline bool decode_gather(const std::vector<uint8_t>& body, uint32_t& seq, uint32_t& len,
                          std::vector<uint8_t>& data) {
  Reader r(body);
  return r.u32(seq) && r.u32(len) && r.bytes(data, r.left());
}

// ---- the byte stream

// Reassembles frames from whatever a non-blocking read returned. A header
// announcing more than kMaxBody makes the stream bad for good (the peer is
// broken or not a worker; it is never resynchronized).
class FrameBuffer {
 public:
  enum Status { kNeedMore, kGotFrame, kBad };

  void append(const void* p, size_t n) {
    if (pos_ > 0 && pos_ == buf_.size()) buf_.clear(), pos_ = 0;
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }

  Status next(Frame& f) {
    if (bad_) return kBad;
    size_t have = buf_.size() - pos_;
    if (have < kHeaderBytes) return kNeedMore;
    const uint8_t* h = buf_.data() + pos_;
    uint32_t type = le32(h), len = le32(h + 4);
    if (len > kMaxBody) return bad_ = true, kBad;
    if (have < kHeaderBytes + len) return kNeedMore;
    f.type = type;
    f.body.assign(h + kHeaderBytes, h + kHeaderBytes + len);
    pos_ += kHeaderBytes + len;
    // Drop consumed bytes now and then so a long stream does not grow the buffer.
    if (pos_ > (1u << 16) && pos_ * 2 > buf_.size()) buf_.erase(buf_.begin(), buf_.begin() + ptrdiff_t(pos_)), pos_ = 0;
    return kGotFrame;
  }

 private:
  static uint32_t le32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  bool bad_ = false;
};

// Writes a whole frame to a blocking socket. MSG_NOSIGNAL: a peer that went
// away is an error here, not a SIGPIPE that kills the caller.
inline bool send_frame(int fd, uint32_t type, const std::vector<uint8_t>& body) {
  if (body.size() > kMaxBody) return false;
  std::vector<uint8_t> f = encode_frame(type, body);
  for (size_t off = 0; off < f.size();) {
    ssize_t n = ::send(fd, f.data() + off, f.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

inline bool read_exact(int fd, void* p, size_t n) {
  uint8_t* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t got = ::recv(fd, b, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    b += got, n -= size_t(got);
  }
  return true;
}

// Reads one frame from a blocking socket; false on EOF, error or a bad length.
inline bool recv_frame(int fd, Frame& f) {
  uint8_t h[kHeaderBytes];
  if (!read_exact(fd, h, sizeof h)) return false;
  Reader r(h, sizeof h);
  uint32_t len = 0;
  if (!r.u32(f.type) || !r.u32(len) || len > kMaxBody) return false;
  f.body.resize(len);
  return read_exact(fd, f.body.data(), len);
}

}  // namespace ulnic::am::spmd
