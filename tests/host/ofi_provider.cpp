// The libfabric provider `ulnic` (host/ofi), through libfabric itself: the
// test loads libulnic-fi.so from the build's lib dir (FI_PROVIDER_PATH) on
// a 2-node cluster it boots once (vipl_cluster.h). Both sides of a
// conversation usually live in this process (a domain per NIC: ULNIC_NODE
// is read when a domain opens), so the tests drive both by polling both
// CQs; fi_info and fi_pingpong run as the unmodified Debian programs.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "ofi.h"  // host/ofi: the wire header, for a hostile sender
#include "ulnic/nic.h"
#include "vipl_cluster.h"

namespace {

using namespace std::chrono_literals;
using vipl_test::pattern;

constexpr size_t kEagerMax = 4224;  // host/ofi/ofi.h: kAmMaxMessage - sizeof(WireHdr)

// Test buffers own their pages. Registering memory moves its pages into
// the registering NIC's slot (Nic::register_memory), and a test holds two
// or three NICs' domains in one process: two buffers sharing a page, each
// registered by another NIC, would take the page from each other.
template <class T>
struct PageAlloc {
  using value_type = T;
  PageAlloc() = default;
  template <class U>
  PageAlloc(const PageAlloc<U>&) {}
  static size_t bytes(size_t n) { return (n * sizeof(T) + 4095) & ~size_t(4095); }
  T* allocate(size_t n) {
    void* p = ::mmap(nullptr, bytes(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { ::munmap(p, bytes(n)); }
  bool operator==(const PageAlloc&) const { return true; }
};
using Bytes = std::vector<uint8_t, PageAlloc<uint8_t>>;

fi_info* hints(fi_ep_type type = FI_EP_RDM) {
  fi_info* h = fi_allocinfo();
  h->fabric_attr->prov_name = strdup("ulnic");
  h->ep_attr->type = type;
  h->caps = FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV;
  return h;
}

// getinfo for the native provider alone (libfabric also layers its RXD
// utility provider over our DGRAM endpoints: "ulnic;ofi_rxd").
int getinfo(fi_info* h, fi_info** out, int node = 0) {
  ::setenv("ULNIC_NODE", std::to_string(node).c_str(), 1);
  fi_info* all = nullptr;
  int r = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &all);
  *out = nullptr;
  if (r) return r;
  for (fi_info* p = all; p; p = p->next)
    if (std::string(p->fabric_attr->prov_name) == "ulnic") {
      *out = fi_dupinfo(p);
      break;
    }
  fi_freeinfo(all);
  return *out ? 0 : -FI_ENODATA;
}

// One endpoint with its fabric, domain, AV and CQ (one CQ for both directions).
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_cntr* tx_cntr = nullptr;  // Options::counters: FI_SEND | FI_WRITE | FI_READ
  fid_cntr* rx_cntr = nullptr;  // ... FI_RECV
  std::vector<uint8_t> name;

  Side() = default;
  Side(const Side&) = delete;
  ~Side() {
    if (ep) {
      EXPECT_EQ(fi_close(&ep->fid), 0);
    }
    for (fid_cntr* c : {tx_cntr, rx_cntr})
      if (c) {
        EXPECT_EQ(fi_close(&c->fid), 0);
      }
    if (cq) {
      EXPECT_EQ(fi_close(&cq->fid), 0);
    }
    if (av) {
      EXPECT_EQ(fi_close(&av->fid), 0);
    }
    if (domain) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    if (fabric) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    if (info) fi_freeinfo(info);
  }
};

struct Options {
  fi_cq_format format = FI_CQ_FORMAT_TAGGED;
  fi_av_type av = FI_AV_TABLE;
  fi_wait_obj wait = FI_WAIT_NONE;
  fi_ep_type type = FI_EP_RDM;
  bool rma = false;  // ask for FI_RMA (with FI_MR_VIRT_ADDR | FI_MR_PROV_KEY, which it needs)
  bool counters = false;  // bind Side::tx_cntr and rx_cntr (FI_WAIT_UNSPEC)
  bool auto_progress = false;  // ask for FI_PROGRESS_AUTO (control and data)
};

void open_side(Side& s, int node, const Options& o = {}) {
  fi_info* h = hints(o.type);
  if (o.rma) {
    h->caps |= FI_RMA;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
  }
  if (o.auto_progress) h->domain_attr->control_progress = h->domain_attr->data_progress = FI_PROGRESS_AUTO;
  ASSERT_EQ(getinfo(h, &s.info, node), 0);
  fi_freeinfo(h);
  ASSERT_EQ(fi_fabric(s.info->fabric_attr, &s.fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(s.fabric, s.info, &s.domain, nullptr), 0);
  fi_av_attr aa{};
  aa.type = o.av;
  ASSERT_EQ(fi_av_open(s.domain, &aa, &s.av, nullptr), 0);
  fi_cq_attr ca{};
  ca.format = o.format;
  ca.wait_obj = o.wait;
  ASSERT_EQ(fi_cq_open(s.domain, &ca, &s.cq, nullptr), 0);
  ASSERT_EQ(fi_endpoint(s.domain, s.info, &s.ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(s.ep, &s.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV), 0);
  if (o.counters) {
    fi_cntr_attr ta{};
    ta.events = FI_CNTR_EVENTS_COMP;
    ta.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_cntr_open(s.domain, &ta, &s.tx_cntr, nullptr), 0);
    ASSERT_EQ(fi_cntr_open(s.domain, &ta, &s.rx_cntr, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.tx_cntr->fid, FI_SEND | FI_WRITE | FI_READ), 0);
    ASSERT_EQ(fi_ep_bind(s.ep, &s.rx_cntr->fid, FI_RECV), 0);
  }
  ASSERT_EQ(fi_enable(s.ep), 0);
  size_t len = 0;
  ASSERT_EQ(fi_getname(&s.ep->fid, nullptr, &len), -FI_ETOOSMALL);
  s.name.resize(len);
  ASSERT_EQ(fi_getname(&s.ep->fid, s.name.data(), &len), 0);
}

fi_addr_t insert(Side& s, const Side& peer) {
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(s.av, peer.name.data(), 1, &a, 0, nullptr), 1);
  return a;
}

// Reads one completion from `cq`, driving the other sides' progress too (a
// read of 0 entries). The result of the last read: 1, or -FI_EAVAIL.
ssize_t read_one(fid_cq* cq, void* entry, std::initializer_list<fid_cq*> others, fi_addr_t* src = nullptr,
                 std::chrono::milliseconds limit = 20000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    ssize_t r = src ? fi_cq_readfrom(cq, entry, 1, src) : fi_cq_read(cq, entry, 1);
    if (r != -FI_EAGAIN) return r;
    for (fid_cq* o : others) {
      fi_cq_tagged_entry none;
      (void)fi_cq_read(o, &none, 0);
    }
  }
  return -FI_ETIMEDOUT;
}

bool check_pattern(const uint8_t* p, size_t n, uint32_t seed) {
  std::vector<uint8_t> want(n);
  pattern(want.data(), n, seed);
  return n == 0 || std::memcmp(p, want.data(), n) == 0;  // an empty vector's data() may be null
}

// Two sides on the two nodes, each in the other's AV.
struct Pair {
  Side a, b;
  fi_addr_t a_to_b = 0, b_to_a = 0;
  explicit Pair(const Options& o = {}) {
    open_side(a, 0, o);
    open_side(b, 1, o);
    a_to_b = insert(a, b);
    b_to_a = insert(b, a);
  }
  // One message a -> b of `n` bytes by `send`, into a buffer of `cap`;
  // returns b's completion (or the error entry).
  template <class Send>
  void exchange(size_t n, size_t cap, Send send, fi_cq_tagged_entry& got, fi_addr_t* src = nullptr) {
    Bytes out(n ? n : 1), in(cap ? cap : 1, 0xee);
    pattern(out.data(), n, uint32_t(n) + 1);
    int rctx = 0, sctx = 0;
    ASSERT_EQ(fi_recv(b.ep, in.data(), cap, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(send(out.data(), n, &sctx), 0);
    fi_cq_tagged_entry se{};
    ASSERT_EQ(read_one(a.cq, &se, {b.cq}), 1) << "send of " << n;
    EXPECT_EQ(se.op_context, &sctx);
    EXPECT_TRUE(se.flags & FI_SEND);
    ASSERT_EQ(read_one(b.cq, &got, {a.cq}, src), 1) << "receive of " << n;
    EXPECT_EQ(got.op_context, &rctx);
    EXPECT_TRUE(check_pattern(in.data(), std::min(n, cap), uint32_t(n) + 1)) << "data of " << n;
  }
};

TEST(OfiGetinfo, ListsRdmAndDgramWithTheirLimits) {
  fi_info* h = hints(FI_EP_UNSPEC);
  fi_info* all = nullptr;
  ::setenv("ULNIC_NODE", "0", 1);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &all), 0);
  bool rdm = false, dgram = false;
  for (fi_info* p = all; p; p = p->next) {
    if (std::string(p->fabric_attr->prov_name) != "ulnic") continue;
    rdm |= p->ep_attr->type == FI_EP_RDM;
    dgram |= p->ep_attr->type == FI_EP_DGRAM;
    EXPECT_EQ(p->tx_attr->inject_size, kEagerMax);
    EXPECT_EQ(p->ep_attr->max_msg_size, 64u << 20);
    EXPECT_EQ(p->caps & (FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV),
              FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV);
    EXPECT_EQ(p->domain_attr->data_progress, FI_PROGRESS_MANUAL);
    EXPECT_EQ(std::string(p->domain_attr->name), "ulnic0");
    // 64 matched tag bits, stated (0 would say none: Open MPI's OFI MTL refused it).
    EXPECT_NE(p->ep_attr->mem_tag_format, 0u);
  }
  EXPECT_TRUE(rdm);
  EXPECT_TRUE(dgram);
  fi_freeinfo(all);
  fi_freeinfo(h);
}

// RDM hints as Open MPI's OFI MTL gives them (no provider named): libfabric
// would layer its RXD utility provider over our (already reliable) DGRAM
// endpoint and list "ulnic;ofi_rxd" first, whose injects failed. Only the
// native endpoint is offered for RDM.
TEST(OfiGetinfo, NoUtilityLayerOverTheReliableDgram) {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED;
  ::setenv("ULNIC_NODE", "0", 1);
  fi_info* all = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &all), 0);
  bool native = false;
  for (fi_info* p = all; p; p = p->next) {
    std::string name = p->fabric_attr->prov_name;
    EXPECT_EQ(name.find("ulnic;"), std::string::npos) << name;
    native |= name == "ulnic";
  }
  EXPECT_TRUE(native);
  fi_freeinfo(all);
  fi_freeinfo(h);
}

TEST(OfiGetinfo, RefusesWhatItDoesNotSupport) {
  struct Case {
    const char* what;
    void (*edit)(fi_info*);
  };
  const Case cases[] = {
      {"FI_RMA without FI_MR_VIRT_ADDR | FI_MR_PROV_KEY", [](fi_info* h) { h->caps |= FI_RMA; }},
      {"FI_ATOMIC", [](fi_info* h) { h->caps |= FI_ATOMIC; }},
      {"FI_MULTI_RECV", [](fi_info* h) { h->caps |= FI_MULTI_RECV; }},
      {"FI_EP_MSG", [](fi_info* h) { h->ep_attr->type = FI_EP_MSG; }},
      {"FI_SOCKADDR_IN", [](fi_info* h) { h->addr_format = FI_SOCKADDR_IN; }},
      {"tx iov_limit 4", [](fi_info* h) { h->tx_attr->iov_limit = 4; }},
      {"inject_size 8192", [](fi_info* h) { h->tx_attr->inject_size = 8192; }},
      {"max_msg_size 128 MiB", [](fi_info* h) { h->ep_attr->max_msg_size = 128u << 20; }},
      {"another domain", [](fi_info* h) { h->domain_attr->name = strdup("mlx5_0"); }},
  };
  for (const Case& c : cases) {
    fi_info* h = hints();
    c.edit(h);
    fi_info* out = nullptr;
    EXPECT_EQ(getinfo(h, &out), -FI_ENODATA) << c.what;
    if (out) fi_freeinfo(out);
    fi_freeinfo(h);
  }
}

TEST(OfiMsg, EveryCallAndSizeWithDataChecked) {
  Pair p;
  // Eager, eager in 2, 4 and 16 fragments (the last one short, or whole), rendezvous.
  const size_t sizes[] = {0, 1, 64, 4096, kEagerMax, kEagerMax + 1, 3 * kEagerMax + 5, 65536, 65537, 1u << 20};
  for (size_t n : sizes) {
    fi_cq_tagged_entry got{};
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    p.exchange(n, n, [&](void* buf, size_t len, void* ctx) { return fi_send(p.a.ep, buf, len, nullptr, p.a_to_b, ctx); },
               got, &src);
    EXPECT_EQ(got.len, n);
    EXPECT_EQ(got.flags & (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA), FI_RECV | FI_MSG);
    EXPECT_EQ(src, p.b_to_a) << "FI_SOURCE of " << n;
  }
  // fi_senddata: the data and FI_REMOTE_CQ_DATA come with the receive, eager and rendezvous.
  for (size_t n : {size_t(100), size_t(100000)}) {
    fi_cq_tagged_entry got{};
    p.exchange(n, n, [&](void* buf, size_t len, void* ctx) {
      return fi_senddata(p.a.ep, buf, len, nullptr, 0xfeedfacecafe0000ull + n, p.a_to_b, ctx);
    }, got);
    EXPECT_TRUE(got.flags & FI_REMOTE_CQ_DATA);
    EXPECT_EQ(got.data, 0xfeedfacecafe0000ull + n);
  }
  // fi_sendmsg / fi_recvmsg with FI_COMPLETION and FI_REMOTE_CQ_DATA.
  {
    Bytes out(3000), in(3000);
    pattern(out.data(), out.size(), 7);
    int rctx, sctx;
    iovec riov{in.data(), in.size()}, siov{out.data(), out.size()};
    fi_msg rm{&riov, nullptr, 1, FI_ADDR_UNSPEC, &rctx, 0};
    fi_msg sm{&siov, nullptr, 1, p.a_to_b, &sctx, 42};
    ASSERT_EQ(fi_recvmsg(p.b.ep, &rm, FI_COMPLETION), 0);
    ASSERT_EQ(fi_sendmsg(p.a.ep, &sm, FI_COMPLETION | FI_REMOTE_CQ_DATA), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
    EXPECT_EQ(e.op_context, &sctx);
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(e.data, 42u);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 7));
  }
  // fi_sendv / fi_recvv, fi_inject and fi_injectdata (no send completion).
  {
    Bytes out(500), in(500);
    pattern(out.data(), out.size(), 9);
    iovec riov{in.data(), in.size()}, siov{out.data(), out.size()};
    int rctx, sctx;
    ASSERT_EQ(fi_recvv(p.b.ep, &riov, nullptr, 1, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_sendv(p.a.ep, &siov, nullptr, 1, p.a_to_b, &sctx), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 9));
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
    EXPECT_EQ(e.op_context, &sctx);

    std::memset(in.data(), 0, in.size());
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_inject(p.a.ep, out.data(), out.size(), p.a_to_b), 0);
    std::memset(out.data(), 0, out.size());  // injected: the buffer is ours again at once
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 9));
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_injectdata(p.a.ep, out.data(), 10, 77, p.a_to_b), 0);
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_EQ(e.data, 77u);
    EXPECT_EQ(e.len, 10u);
    EXPECT_EQ(fi_inject(p.a.ep, out.data(), kEagerMax + 1, p.a_to_b), -FI_EMSGSIZE);
    EXPECT_EQ(fi_cq_read(p.a.cq, &e, 1), -FI_EAGAIN) << "an inject has no completion";
  }
  // The other way too.
  {
    Bytes out(200000), in(200000);
    pattern(out.data(), out.size(), 11);
    int rctx, sctx;
    ASSERT_EQ(fi_recv(p.a.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_send(p.b.ep, out.data(), out.size(), nullptr, p.b_to_a, &sctx), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 11));
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  }
}

TEST(OfiCq, EachFormatWritesItsEntryAndNoMore) {
  const std::pair<fi_cq_format, size_t> formats[] = {{FI_CQ_FORMAT_CONTEXT, sizeof(fi_cq_entry)},
                                                     {FI_CQ_FORMAT_MSG, sizeof(fi_cq_msg_entry)},
                                                     {FI_CQ_FORMAT_DATA, sizeof(fi_cq_data_entry)}};
  for (auto [format, size] : formats) {
    Options o;
    o.format = format;
    Pair p(o);
    Bytes out(64, 1), in(64);
    int rctx;
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_senddata(p.a.ep, out.data(), out.size(), nullptr, 5, p.a_to_b, nullptr), 0);
    uint8_t entry[sizeof(fi_cq_tagged_entry) + 8];
    std::memset(entry, 0xab, sizeof entry);
    ASSERT_EQ(read_one(p.b.cq, entry, {p.a.cq}), 1);
    fi_cq_tagged_entry e{};
    std::memcpy(&e, entry, size);
    EXPECT_EQ(e.op_context, &rctx);
    if (format != FI_CQ_FORMAT_CONTEXT) {
      EXPECT_EQ(e.len, 64u);
    }
    if (format == FI_CQ_FORMAT_DATA) {
      EXPECT_EQ(e.data, 5u);
    }
    EXPECT_EQ(entry[size], 0xab) << "format " << format << " wrote past its entry";
    ASSERT_EQ(read_one(p.a.cq, entry, {p.b.cq}), 1);  // the send's
  }
}

TEST(OfiAv, MapTableLookupStraddrRemoveAndBadAddresses) {
  Options o;
  o.av = FI_AV_MAP;
  Pair p(o);
  fi_cq_tagged_entry got{};
  p.exchange(100, 100, [&](void* buf, size_t len, void* ctx) { return fi_send(p.a.ep, buf, len, nullptr, p.a_to_b, ctx); },
             got);
  uint8_t back[16];
  size_t len = sizeof back;
  ASSERT_EQ(fi_av_lookup(p.a.av, p.a_to_b, back, &len), 0);
  EXPECT_EQ(len, p.b.name.size());
  EXPECT_EQ(std::memcmp(back, p.b.name.data(), len), 0);
  char s[128];
  len = sizeof s;
  fi_av_straddr(p.a.av, back, s, &len);
  EXPECT_EQ(std::string(s).rfind("ulnic://1/", 0), 0u) << s;
  // A forged address is not inserted.
  uint8_t bad[16] = {0xff, 0xff, 0, 0, 0, 9};
  fi_addr_t fa = 0;
  EXPECT_EQ(fi_av_insert(p.a.av, bad, 1, &fa, 0, nullptr), 0);
  EXPECT_EQ(fa, FI_ADDR_NOTAVAIL);
  // Removed: sends to it are refused.
  EXPECT_EQ(fi_av_remove(p.a.av, &p.a_to_b, 1, 0), 0);
  EXPECT_EQ(fi_send(p.a.ep, s, 1, nullptr, p.a_to_b, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_lookup(p.a.av, p.a_to_b, back, &len), -FI_EINVAL);
}

void expect_truncated(Pair& p, size_t n, size_t cap) {
  Bytes out(n), in(cap + 16, 0xee);
  pattern(out.data(), n, 3);
  int rctx, sctx;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), cap, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(p.a.ep, out.data(), n, nullptr, p.a_to_b, &sctx), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.op_context, &rctx);
  EXPECT_EQ(err.len, cap);
  EXPECT_EQ(err.olen, n - cap);
  std::string text = fi_cq_strerror(p.b.cq, err.prov_errno, err.err_data, nullptr, 0);
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  EXPECT_TRUE(check_pattern(in.data(), cap, 3));
  EXPECT_EQ(in[cap], 0xee) << "written past the receive buffer";
  ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);  // the send itself succeeded
  EXPECT_EQ(e.op_context, &sctx);
}

// err_data: the provider's text when the application gives no buffer
// (err_data_size 0), a copy into its own when it gives one (API 1.5), and an
// entry read before and passed again as it was -- err_data still pointing at
// the provider's text -- is no buffer of the application's (the provider
// freed that text while copying into it, found by ASan).
TEST(OfiCq, ErrDataInTheProvidersTextOrTheApplicationsBuffer) {
  Pair p;
  // A receive of 10 bytes for a message of n: an error entry whose text
  // names n (longer texts for larger n).
  auto truncated_receive = [&](size_t n) {
    Bytes out(n, 1), in(10);
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(fi_send(p.a.ep, out.data(), out.size(), nullptr, p.a_to_b, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), -FI_EAVAIL);
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  };
  auto text_for = [](size_t n) {
    return "ulnic: a message of " + std::to_string(n) + " bytes truncated to the receive buffer's 10";
  };
  fi_cq_err_entry err{};
  for (size_t n : {10, 100, 1000}) {  // the same entry each time, as it was read
    truncated_receive(n + 1);
    ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ETRUNC);
    ASSERT_NE(err.err_data, nullptr);
    EXPECT_EQ(std::string(static_cast<const char*>(err.err_data)), text_for(n + 1));
    EXPECT_EQ(err.err_data_size, text_for(n + 1).size() + 1);
  }
  char mine[12];
  std::memset(mine, 'x', sizeof mine);
  truncated_receive(50);
  err = fi_cq_err_entry{};
  err.err_data = mine;
  err.err_data_size = 8;
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err_data, mine);
  EXPECT_EQ(err.err_data_size, 8u);
  EXPECT_EQ(std::string(mine), text_for(50).substr(0, 7));
  EXPECT_EQ(mine[8], 'x') << "written past the application's buffer";
}

TEST(OfiMsg, TruncatedReceivesGiveEtruncErrorEntries) {
  Pair p;
  expect_truncated(p, 100, 10);           // eager
  expect_truncated(p, 65536, 8192);       // eager in fragments
  expect_truncated(p, 65536, 100);
  expect_truncated(p, 100000, 8192);      // rendezvous: the put stops at the buffer's end
  expect_truncated(p, 100000, 100);       // rendezvous into a buffer of eager size
}

// Sends what post_some() can and reads both sides' CQs until `n` sends have
// completed (counted in `completed`) and `n` receives (each given to `got`),
// or 60 s have passed.
template <class Post, class Got>
void drain(Pair& p, int n, int& completed, Post post_some, Got got) {
  int received = 0;
  fi_cq_tagged_entry e{};
  auto end = std::chrono::steady_clock::now() + 60s;
  while ((received < n || completed < n) && std::chrono::steady_clock::now() < end) {
    post_some();
    if (fi_cq_read(p.a.cq, &e, 1) == 1) ++completed;
    if (fi_cq_read(p.b.cq, &e, 1) == 1) {
      got(e);
      ++received;
    }
  }
}

// A receiver that does not poll: its ring (256 entries, host/ofi/ofi.h)
// fills, its NIC refuses the rest, the sender resends them, and once the
// receiver polls again every message arrives, in the order sent.
TEST(OfiMsg, FullRingRefusalsAreResentInOrder) {
  Pair p;
  constexpr int kMessages = 600;
  constexpr uint32_t kRing = 256;
  std::vector<uint32_t> out(kMessages);
  int sent = 0, completed = 0;
  fi_cq_tagged_entry e{};
  auto post_some = [&] {
    while (sent < kMessages) {
      out[sent] = uint32_t(sent);
      ssize_t r = fi_send(p.a.ep, &out[sent], sizeof(uint32_t), nullptr, p.a_to_b, nullptr);
      if (r == -FI_EAGAIN) return;
      ASSERT_EQ(r, 0);
      ++sent;
    }
  };
  // Only the sender progresses: the ring takes kRing messages, no more.
  auto quiet_since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - quiet_since < 500ms) {
    post_some();
    if (fi_cq_read(p.a.cq, &e, 1) == 1) {
      ++completed;
      quiet_since = std::chrono::steady_clock::now();
    }
  }
  EXPECT_EQ(completed, int(kRing));
  EXPECT_GT(sent, completed) << "more were posted than the ring could take";
  // The receiver posts its receives and polls: everything arrives, in order.
  std::vector<uint32_t> in(kMessages, ~0u);
  for (int k = 0; k < kMessages; ++k)
    ASSERT_EQ(fi_recv(p.b.ep, &in[k], sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, &in[k]), 0);
  int received = 0;
  drain(p, kMessages, completed, post_some, [&](const fi_cq_tagged_entry& e) {
    EXPECT_EQ(e.op_context, &in[received]) << "receives complete in the order posted";
    ++received;
  });
  ASSERT_EQ(received, kMessages);
  ASSERT_EQ(completed, kMessages);
  for (int k = 0; k < kMessages; ++k) ASSERT_EQ(in[k], uint32_t(k)) << "message " << k << " out of order";
}

// Messages in fragments (up to 64 KiB) and whole, to a receiver that does
// not poll: its ring fills, its NIC refuses fragments, which come again
// later -- after fragments of later messages. Once it polls, every message
// arrives whole and in the order sent.
TEST(OfiMsg, RefusedFragmentsComeAgainAndMessagesArriveWholeInOrder) {
  Pair p;
  constexpr int kMessages = 48;
  auto size_of = [](int k) { return k % 3 == 0 ? size_t(65536) : k % 3 == 1 ? size_t(100) : size_t(20000 + k); };
  std::vector<Bytes> out, in;
  for (int k = 0; k < kMessages; ++k) {
    out.emplace_back(size_of(k));
    pattern(out.back().data(), size_of(k), 500 + k);
    in.emplace_back(65536, 0);
  }
  int sent = 0, completed = 0;
  fi_cq_tagged_entry e{};
  auto post_some = [&] {
    while (sent < kMessages) {
      ssize_t r = fi_send(p.a.ep, out[sent].data(), out[sent].size(), nullptr, p.a_to_b, nullptr);
      if (r == -FI_EAGAIN) return;
      ASSERT_EQ(r, 0);
      ++sent;
    }
  };
  // Only the sender progresses: 256 ring entries take 16 messages of 64 KiB at most.
  auto until = std::chrono::steady_clock::now() + 500ms;
  while (std::chrono::steady_clock::now() < until) {
    post_some();
    if (fi_cq_read(p.a.cq, &e, 1) == 1) ++completed;
  }
  EXPECT_LT(completed, kMessages) << "the ring took every fragment";
  EXPECT_GT(sent, completed);
  for (int k = 0; k < kMessages; ++k)
    ASSERT_EQ(fi_recv(p.b.ep, in[k].data(), in[k].size(), nullptr, FI_ADDR_UNSPEC, &in[k]), 0);
  int received = 0;
  drain(p, kMessages, completed, post_some, [&](const fi_cq_tagged_entry& e) {
    EXPECT_EQ(e.op_context, &in[received]) << "receives complete in the order posted";
    EXPECT_EQ(e.len, size_of(received)) << "message " << received;
    EXPECT_TRUE(check_pattern(in[received].data(), std::min(e.len, in[received].size()), 500 + received))
        << "message " << received;
    ++received;
  });
  ASSERT_EQ(received, kMessages);
  ASSERT_EQ(completed, kMessages);
}

// An AM endpoint of our own on node 0, beside the provider's, speaking the
// provider's wire protocol by hand (host/ofi/ofi.h): a hostile sender, or a
// receiver that checks what the provider sends. It has a ring and a segment
// (for Longs) and sends from one staging buffer, one message at a time.
struct RawEp {
  std::unique_ptr<ulnic::Nic> nic;
  uint8_t *ring = nullptr, *seg = nullptr, *buf = nullptr;
  ulnic::MemRegion ring_mr, seg_mr, buf_mr;
  uint64_t consumed = 0;
  ulnic::ofi::Addr addr{};
  static constexpr uint32_t kEntries = 256;
  static constexpr size_t kSeg = size_t(1) << 20;
  static constexpr size_t kBuf = 128 + ulnic::ofi::kChunkBytes + 8192;  // a chunk or an eager Long, and its header

  void open() {
    ulnic::NicOptions where;
    where.node = 0;
    auto n = ulnic::Nic::open(where);
    ASSERT_TRUE(n) << n.error().message;
    nic = std::move(*n);
    const size_t ring_bytes = sizeof(ulnic::abi::AmRingControl) + size_t(kEntries) * ulnic::abi::kAmEntryBytes;
    ring = static_cast<uint8_t*>(nic->alloc(ring_bytes, 4096));
    seg = static_cast<uint8_t*>(nic->alloc(kSeg, 4096));
    buf = static_cast<uint8_t*>(nic->alloc(kBuf, 4096));
    ASSERT_TRUE(ring && seg && buf);
    std::memset(ring, 0, ring_bytes);
    auto r = nic->register_memory(ring, ring_bytes, ulnic::abi::kAccessLocal);
    auto g = nic->register_memory(seg, kSeg, ulnic::abi::kAccessLocal | ulnic::abi::kAccessRemoteWrite);
    auto b = nic->register_memory(buf, kBuf, ulnic::abi::kAccessLocal);
    ASSERT_TRUE(r && g && b);
    ring_mr = *r, seg_mr = *g, buf_mr = *b;
    addr = ulnic::ofi::Addr{uint16_t(nic->node()), uint16_t(nic->slot()), 0, ulnic::ofi::kAddrVersion, 0,
                            0x5eed5eed5eedull};
    ASSERT_TRUE(nic->configure_am_endpoint(0, addr.tag, ring_mr, kEntries, &seg_mr, 5000ms));
  }
  ulnic::ofi::WireHdr header(uint8_t kind) const {
    ulnic::ofi::WireHdr h{};
    h.magic = ulnic::ofi::kWireMagic;
    h.kind = kind;
    h.src_tag = addr.tag;
    return h;
  }
  // One message: the header and n bytes of `payload` (or, with long_offset,
  // the header alone and the n bytes as a Long there). The NIC's status.
  uint8_t send(const ulnic::ofi::Addr& to, const ulnic::ofi::WireHdr& h, const uint8_t* payload, size_t n,
               const uint32_t* long_offset = nullptr) {
    ulnic::abi::AmPrefix pre{};
    pre.tag = to.tag;
    pre.msg_len = uint32_t(sizeof h + (long_offset ? 0 : n));
    pre.long_len = long_offset ? uint32_t(n) : 0;
    pre.long_offset = long_offset ? *long_offset : 0;
    pre.dst_ep = to.ep;
    pre.flags = ulnic::abi::kAmRequest | ulnic::abi::kAmNoReply;
    std::memcpy(buf, &pre, sizeof pre);
    std::memcpy(buf + sizeof pre, &h, sizeof h);
    if (n) std::memcpy(buf + (long_offset ? ulnic::abi::am_long_start(pre.msg_len) : sizeof pre + sizeof h), payload, n);
    ulnic::abi::SqEntry e{};
    e.opcode = ulnic::abi::kOpAmSend;
    e.length = uint32_t(ulnic::abi::am_send_bytes(pre.msg_len, pre.long_len));
    e.src_addr = reinterpret_cast<uint64_t>(buf);
    e.src_key = buf_mr.key;
    e.dst_node = to.node;
    e.dst_slot = to.slot;
    auto c = nic->run(e);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->status : 0xff;
  }
  // The next message in our ring (its entry, header and the bytes after the
  // header), reading the provider's CQs meanwhile (its progress): false if
  // none came within `limit`.
  bool next(ulnic::abi::AmRxEntry& e, ulnic::ofi::WireHdr& h, std::vector<uint8_t>& body,
            std::initializer_list<fid_cq*> drive, std::chrono::milliseconds limit = 20000ms) {
    auto end = std::chrono::steady_clock::now() + limit;
    auto* at = reinterpret_cast<const ulnic::abi::AmRxEntry*>(ring + sizeof(ulnic::abi::AmRingControl) +
                                                              (consumed % kEntries) * ulnic::abi::kAmEntryBytes);
    while (__atomic_load_n(&at->seq, __ATOMIC_ACQUIRE) != uint32_t(consumed + 1)) {
      if (std::chrono::steady_clock::now() > end) return false;
      for (fid_cq* cq : drive) {
        fi_cq_tagged_entry none;
        (void)fi_cq_read(cq, &none, 0);
      }
    }
    e = *at;
    const auto* msg = reinterpret_cast<const uint8_t*>(at + 1);
    std::memcpy(&h, msg, sizeof h);
    body.assign(msg + sizeof h, msg + e.len);
    auto* ctl = reinterpret_cast<ulnic::abi::AmRingControl*>(ring);
    __atomic_store_n(&ctl->consumed, ++consumed, __ATOMIC_RELEASE);
    return true;
  }
  // The next message of `kind`, skipping others.
  bool next_of(uint8_t kind, ulnic::abi::AmRxEntry& e, ulnic::ofi::WireHdr& h, std::vector<uint8_t>& body,
               std::initializer_list<fid_cq*> drive) {
    while (next(e, h, body, drive))
      if (h.kind == kind) return true;
    return false;
  }
};

// A hostile sender (our own AM endpoint, posting to the provider's endpoint
// with its tag) sends fragments that lie: twice the same, another length
// than the message's first, an offset off the grid or past the end, the
// wrong number of bytes, a length of no fragmented message, a sequence
// number far ahead. The receiver drops each of them and still puts the one
// true message together from its true fragments, and takes the next
// message after it.
TEST(OfiMsg, FragmentsThatLieAreDropped) {
  namespace ofi = ulnic::ofi;
  Pair p;
  ofi::Addr to;
  ASSERT_EQ(p.b.name.size(), sizeof to);
  std::memcpy(&to, p.b.name.data(), sizeof to);
  RawEp raw;
  ASSERT_NO_FATAL_FAILURE(raw.open());
  constexpr size_t kLen = 10000;  // 3 fragments: 4224, 4224, 1552
  Bytes msg(kLen), junk(kLen, 0xbd);
  pattern(msg.data(), kLen, 41);
  // A fragment: `n` bytes of `from` (the message or junk) at offset `off` of a message of `len`.
  auto frag = [&](uint8_t kind, uint32_t seq, uint64_t len, uint64_t off, size_t n, const uint8_t* from) {
    ofi::WireHdr h = raw.header(kind);
    h.seq = seq;
    h.len = len;
    h.rid = off;
    ASSERT_EQ(raw.send(to, h, from, n), ulnic::abi::kCqOk);
    fi_cq_tagged_entry none;
    (void)fi_cq_read(p.b.cq, &none, 0);  // the receiver takes it from its ring
  };
  const uint32_t E = ofi::kEagerMax;
  Bytes in(2 * kLen, 0);
  int rctx = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  frag(ofi::kEagerFrag, 0, kLen, 0, E, msg.data());                 // true: fragment 0
  frag(ofi::kEagerFrag, 0, kLen, 0, E, junk.data());                // fragment 0 again (other bytes)
  frag(ofi::kEagerFrag, 0, kLen + 1, E, E, junk.data());            // another length than fragment 0's
  frag(ofi::kEagerFrag, 0, kLen, 100, E, junk.data());              // an offset off the grid
  frag(ofi::kEagerFrag, 0, kLen, 3 * E, 1, junk.data());            // past the end
  frag(ofi::kEagerFrag, 0, kLen, E, 100, junk.data());              // too few bytes
  frag(ofi::kEagerFrag, 0, E, 0, E, junk.data());                   // a message that fits one entry
  frag(ofi::kEagerFrag, 0, ofi::kFragMsgMax + 1, E, E, junk.data());  // too long for fragments
  frag(ofi::kEagerFrag, 5000, kLen, E, E, junk.data());             // far ahead of the sequence
  frag(ofi::kEagerFrag, 0, kLen, 2 * E, kLen - 2 * E, msg.data() + 2 * E);  // true: the last fragment
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN) << "a message completed without its middle fragment";
  frag(ofi::kEagerFrag, 0, kLen, E, E, msg.data() + E);             // true: the middle one
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.op_context, &rctx);
  ASSERT_EQ(e.len, kLen);
  EXPECT_EQ(std::memcmp(in.data(), msg.data(), kLen), 0) << "the message holds a lying fragment's bytes";
  // The next message in sequence, whole in one entry.
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ofi::WireHdr h = raw.header(ofi::kEager);
  h.seq = 1;
  h.len = 64;
  ASSERT_EQ(raw.send(to, h, msg.data(), 64), ulnic::abi::kCqOk);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.len, 64u);
  EXPECT_EQ(std::memcmp(in.data(), msg.data(), 64), 0);
}

// The pair's receiver b (`to`: its address) and an endpoint of our own
// beside them (RawEp), with what the last message it read said.
class OfiLanes : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memcpy(&to, p.b.name.data(), sizeof to);
    ASSERT_NO_FATAL_FAILURE(raw.open());
  }
  Pair p;
  ulnic::ofi::Addr to{};
  RawEp raw;
  ulnic::abi::AmRxEntry re{};
  ulnic::ofi::WireHdr rh{};
  std::vector<uint8_t> body;
};

// The receiving side of lanes, against a sender that lies: the provider
// grants our endpoint its lane (the one lane a 16 MiB slot has: a second
// request gets none), drops every Long outside it -- without a lane, beyond
// the room its credits gave, at another offset than its stream position
// says, overlapping a message already in, of a size no Long has -- and
// takes the true ones, also out of order, freeing their bytes and telling
// the sender (kCredit) once a quarter of the lane is free.
TEST_F(OfiLanes, LongsOutsideTheirLaneAreDroppedAndCreditsFollowTheFreedBytes) {
  namespace ofi = ulnic::ofi;
  constexpr size_t kMsg = 60000;
  std::vector<Bytes> msgs;
  for (int k = 0; k < 24; ++k) {
    msgs.emplace_back(kMsg);
    pattern(msgs.back().data(), kMsg, 900 + k);
  }
  // A Long of message `seq` (its bytes: msgs[seq]) at stream position `pos`
  // (+ skip) of a lane at `lane_off` of `lane` bytes.
  uint64_t lane_off = 0, lane = 0;
  auto long_msg = [&](uint32_t seq, uint64_t pos, uint32_t skip, size_t n, int64_t offset_error = 0) {
    ofi::WireHdr h = raw.header(ofi::kEagerLong);
    h.seq = seq;
    h.len = n;
    h.rid = pos;
    h.key = skip;
    const uint32_t off = uint32_t(lane_off + (pos + skip) % (lane ? lane : 1) + offset_error);
    return raw.send(to, h, msgs[seq % msgs.size()].data(), n, &off);
  };
  auto drive = [&] {
    fi_cq_tagged_entry none;
    (void)fi_cq_read(p.b.cq, &none, 0);
  };
  // Before any grant: dropped (the NIC placed it; the provider ignores it).
  ASSERT_EQ(long_msg(0, 0, 0, kMsg), ulnic::abi::kCqOk);
  drive();
  // Ask: the grant names the lane.
  ASSERT_EQ(raw.send(to, raw.header(ofi::kLaneReq), nullptr, 0), ulnic::abi::kCqOk);
  ASSERT_TRUE(raw.next_of(ofi::kLaneGrant, re, rh, body, {p.b.cq}));
  ASSERT_EQ(rh.len, ofi::kLaneBytes) << "a 16 MiB slot's endpoint has one lane of kLaneBytes";
  lane_off = rh.data, lane = rh.len;
  const uint64_t gen = rh.sid;
  // Asked again: dropped (no second grant).
  ASSERT_EQ(raw.send(to, raw.header(ofi::kLaneReq), nullptr, 0), ulnic::abi::kCqOk);
  // Another sender (the pair's a) asks too and gets no lane: its 20000-byte
  // message goes in fragments, and arrives.
  {
    Bytes out(20000), in(20000);
    pattern(out.data(), out.size(), 5);
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, p.b_to_a, nullptr), 0);
    ASSERT_EQ(fi_send(p.a.ep, out.data(), out.size(), nullptr, p.a_to_b, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 5));
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  }
  Bytes in(70000);
  std::vector<void*> ctx(64);
  auto expect_message = [&](uint32_t k) {
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &ctx[k]), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {}), 1) << "message " << k;
    EXPECT_EQ(e.op_context, &ctx[k]);
    ASSERT_EQ(e.len, kMsg);
    EXPECT_TRUE(check_pattern(in.data(), kMsg, 900 + k % 24)) << "message " << k << " holds a lie's bytes";
  };
  // The lies, each with sequence number 0 (the provider expects 0 next).
  ASSERT_EQ(long_msg(0, lane, 0, kMsg), ulnic::abi::kCqOk);              // beyond the room credits gave
  ASSERT_EQ(long_msg(0, 0, 0, kMsg, 4096), ulnic::abi::kCqOk);           // not where position 0 is
  ASSERT_EQ(long_msg(0, 0, 0, ofi::kEagerMax), ulnic::abi::kCqOk);       // fits a ring entry: no Long
  // Wraps the lane's end: with the segment's end there (one lane), its NIC
  // refuses it already; otherwise the provider drops it.
  const uint8_t wraps = long_msg(0, lane - 100, 0, kMsg);
  EXPECT_TRUE(wraps == ulnic::abi::kCqOk || wraps == ulnic::abi::kCqAmBadLength) << int(wraps);
  ASSERT_EQ(long_msg(0, 0, uint32_t(lane), kMsg), ulnic::abi::kCqOk);    // skips a whole lane
  drive();
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &ctx[0]), 0);
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN) << "a lie was taken";
  ASSERT_EQ(fi_cancel(&p.b.ep->fid, &ctx[0]), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  // True Longs: 0 at position 0, then 2 before 1 (1 was "refused" and comes
  // later), then one overlapping 2's bytes (dropped; its NIC wrote them over
  // 2's, which the provider has copied out already: it reads its ring
  // between the two). A sender that scribbles over its own lane before the
  // receiver has taken a message spoils that message: the segment is open
  // to every holder of the endpoint's tag (host/ofi/SEMANTICS.md).
  ASSERT_EQ(long_msg(0, 0, 0, kMsg), ulnic::abi::kCqOk);
  ASSERT_NO_FATAL_FAILURE(expect_message(0));
  ASSERT_EQ(long_msg(2, 2 * kMsg, 0, kMsg), ulnic::abi::kCqOk);
  drive();
  ASSERT_EQ(long_msg(3, 2 * kMsg + 100, 0, kMsg), ulnic::abi::kCqOk);    // overlaps 2
  ASSERT_EQ(long_msg(1, kMsg, 0, kMsg), ulnic::abi::kCqOk);
  ASSERT_NO_FATAL_FAILURE(expect_message(1));
  ASSERT_NO_FATAL_FAILURE(expect_message(2));
  // Credits: when the lane is empty again with 64 KiB freed since the last
  // (after 1 came, 180000 bytes in order), or each quarter lane otherwise.
  ASSERT_TRUE(raw.next_of(ofi::kCredit, re, rh, body, {p.b.cq}));
  EXPECT_EQ(rh.sid, gen);
  EXPECT_EQ(rh.len, 3 * kMsg) << "the credit counts the bytes freed in order";
  for (uint32_t k = 3; k < 5; ++k) {
    ASSERT_EQ(long_msg(k, k * kMsg, 0, kMsg), ulnic::abi::kCqOk);
    ASSERT_NO_FATAL_FAILURE(expect_message(k));
  }
  ASSERT_TRUE(raw.next_of(ofi::kCredit, re, rh, body, {p.b.cq}));
  EXPECT_EQ(rh.len, 5 * kMsg) << "3 alone freed less than 64 KiB; 3 and 4 more";
  // Around the lane's end: the next Long that would wrap skips to its start.
  uint64_t pos = 5 * kMsg;
  for (uint32_t k = 5; k < 40; ++k) {
    const uint64_t place = pos % lane;
    const uint32_t skip = place + kMsg > lane ? uint32_t(lane - place) : 0;
    ASSERT_EQ(long_msg(k, pos, skip, kMsg), ulnic::abi::kCqOk) << k;
    ASSERT_NO_FATAL_FAILURE(expect_message(k));
    pos += skip + kMsg;
  }
  EXPECT_GT(pos, 2 * lane) << "the stream went around the lane twice";
}

// A receiver's lanes are few (one in a 16 MiB slot): a sender whose
// endpoint closes gives its lane back (kLaneRelease, once nothing of its is
// on the way), and the next sender that asks gets it.
TEST_F(OfiLanes, AClosedSendersLaneGoesToTheNextOne) {
  namespace ofi = ulnic::ofi;
  // a takes b's lane: its first 20000-byte message asks (and goes in
  // fragments), the grant comes back, the second goes in the lane.
  for (int k = 0; k < 2; ++k) {
    Bytes out(20000), in(20000);
    pattern(out.data(), out.size(), 60 + k);
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(fi_send(p.a.ep, out.data(), out.size(), nullptr, p.a_to_b, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), in.size(), 60 + k));
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  }
  auto ask = [&] {
    EXPECT_EQ(raw.send(to, raw.header(ofi::kLaneReq), nullptr, 0), ulnic::abi::kCqOk);
    EXPECT_TRUE(raw.next_of(ofi::kLaneGrant, re, rh, body, {p.b.cq}));
    return rh.len;
  };
  EXPECT_EQ(ask(), 0u) << "b's one lane is a's";
  ASSERT_EQ(fi_close(&p.a.ep->fid), 0);
  p.a.ep = nullptr;
  EXPECT_EQ(ask(), ofi::kLaneBytes) << "a gave it back when it closed";
}

// The sending side of lanes, against a receiver of our own: the provider
// asks for a lane with its first message above one entry (sent meanwhile in
// fragments), sends into the lane once granted -- at the stream positions
// and offsets it must, skipping to the lane's start rather than wrapping --
// and waits (-FI_EAGAIN) when the credits we gave are used up; credits that
// lie (another generation, bytes never sent) change nothing.
TEST_F(OfiLanes, SendsGoIntoTheLaneAsFarAsItsCreditsReach) {
  namespace ofi = ulnic::ofi;
  fi_addr_t to_raw = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(p.b.av, &raw.addr, 1, &to_raw, 0, nullptr), 1);
  const ofi::Addr& from = to;  // b, whose sends we check
  constexpr size_t kMsg = 60000;
  constexpr uint64_t kLane = 4 * kMsg + 20000;  // 4 messages, then 20000 bytes to skip
  constexpr uint32_t kLaneOff = 8192;
  std::vector<Bytes> out;
  for (int k = 0; k < 8; ++k) {
    out.emplace_back(kMsg);
    pattern(out.back().data(), kMsg, 700 + k);
  }
  fi_cq_tagged_entry e{};
  // Message 0: the lane request, then the message in fragments.
  ASSERT_EQ(fi_send(p.b.ep, out[0].data(), kMsg, nullptr, to_raw, nullptr), 0);
  ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
  ASSERT_EQ(rh.kind, ofi::kLaneReq);
  Bytes got(kMsg);
  for (size_t off = 0; off < kMsg; off += ofi::kEagerMax) {
    ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
    ASSERT_EQ(rh.kind, ofi::kEagerFrag);
    ASSERT_LE(rh.rid + body.size(), kMsg);
    std::memcpy(got.data() + rh.rid, body.data(), body.size());
  }
  EXPECT_TRUE(check_pattern(got.data(), kMsg, 700));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);  // its send completes
  // The grant; a second one is dropped.
  ofi::WireHdr g = raw.header(ofi::kLaneGrant);
  g.data = kLaneOff;
  g.len = kLane;
  g.sid = 7;
  ASSERT_EQ(raw.send(from, g, nullptr, 0), ulnic::abi::kCqOk);
  g.data = 0;
  ASSERT_EQ(raw.send(from, g, nullptr, 0), ulnic::abi::kCqOk);
  (void)fi_cq_read(p.b.cq, &e, 0);
  // Messages 1-4 fill the lane: 4 x 60000 of 260000 bytes.
  for (int k = 1; k <= 4; ++k) {
    ASSERT_EQ(fi_send(p.b.ep, out[k].data(), kMsg, nullptr, to_raw, nullptr), 0) << k;
    ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq})) << k;
    ASSERT_EQ(rh.kind, ofi::kEagerLong) << k;
    EXPECT_EQ(rh.seq, uint32_t(k));
    EXPECT_EQ(rh.rid, uint64_t(k - 1) * kMsg);
    EXPECT_EQ(rh.key, 0u);
    ASSERT_EQ(re.long_len, kMsg);
    EXPECT_EQ(re.long_offset, kLaneOff + (k - 1) * kMsg);
    EXPECT_TRUE(check_pattern(raw.seg + re.long_offset, kMsg, 700 + k)) << k;
    ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  }
  // Message 5 would need the lane's start again: it waits for a credit.
  EXPECT_EQ(fi_send(p.b.ep, out[5].data(), kMsg, nullptr, to_raw, nullptr), -FI_EAGAIN);
  auto credit = [&](uint64_t freed, uint64_t gen) {
    ofi::WireHdr c = raw.header(ofi::kCredit);
    c.len = freed;
    c.sid = gen;
    ASSERT_EQ(raw.send(from, c, nullptr, 0), ulnic::abi::kCqOk);
  };
  credit(kMsg, 8);                 // another generation
  credit(5 * kMsg + 20000, 7);     // bytes never sent
  EXPECT_EQ(fi_send(p.b.ep, out[5].data(), kMsg, nullptr, to_raw, nullptr), -FI_EAGAIN);
  credit(kMsg, 7);                 // message 1's bytes are free: 60000 at the start
  ssize_t r = -FI_EAGAIN;
  for (int i = 0; i < 1000 && r == -FI_EAGAIN; ++i) r = fi_send(p.b.ep, out[5].data(), kMsg, nullptr, to_raw, nullptr);
  ASSERT_EQ(r, 0);
  ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
  ASSERT_EQ(rh.kind, ofi::kEagerLong);
  EXPECT_EQ(rh.seq, 5u);
  EXPECT_EQ(rh.rid, 4 * kMsg);
  EXPECT_EQ(rh.key, 20000u) << "the 20000 bytes at the lane's end are skipped";
  EXPECT_EQ(re.long_offset, kLaneOff);
  EXPECT_TRUE(check_pattern(raw.seg + re.long_offset, kMsg, 705));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  // Above 64 KiB: a stream needs a lane that holds a chunk (kChunkBytes);
  // ours (260000 bytes) does not, so the message goes by rendezvous.
  static_assert(kLane < ofi::kChunkBytes);
  constexpr size_t kBig = 150000;
  Bytes big(kBig);
  pattern(big.data(), kBig, 77);
  ASSERT_EQ(fi_send(p.b.ep, big.data(), kBig, nullptr, to_raw, nullptr), 0);
  ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
  EXPECT_EQ(rh.kind, ofi::kRts);
  EXPECT_EQ(rh.len, kBig);
}

// A stream through a lane that holds chunks (a receiver of our own, which
// grants a whole kLaneBytes lane): chunks of kChunkBytes, each a Long at the
// lane's next position -- skipping to its start rather than wrapping -- as
// far as the credits reach; the rest waits for credits, and the sender's
// next messages wait behind it (-FI_EAGAIN).
TEST_F(OfiLanes, AStreamGoesAsFarAsTheCreditsReachAndWaitsForTheRest) {
  namespace ofi = ulnic::ofi;
  fi_addr_t to_raw = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(p.b.av, &raw.addr, 1, &to_raw, 0, nullptr), 1);
  constexpr uint64_t kLane = ofi::kLaneBytes, C = ofi::kChunkBytes;
  constexpr size_t kBig = 2 * C + 75712;  // 600000: chunks of C, C and 75712
  Bytes big(kBig), got(kBig);
  pattern(big.data(), kBig, 78);
  fi_cq_tagged_entry e{};
  // The first one asks for the lane and goes by rendezvous (never answered).
  ASSERT_EQ(fi_send(p.b.ep, big.data(), kBig, nullptr, to_raw, nullptr), 0);
  ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
  ASSERT_EQ(rh.kind, ofi::kLaneReq);
  ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq}));
  ASSERT_EQ(rh.kind, ofi::kRts);
  ofi::WireHdr g = raw.header(ofi::kLaneGrant);
  g.data = 0;
  g.len = kLane;
  g.sid = 9;
  ASSERT_EQ(raw.send(to, g, nullptr, 0), ulnic::abi::kCqOk);
  (void)fi_cq_read(p.b.cq, &e, 0);
  uint64_t pos = 0;
  auto chunk = [&](uint32_t seq, uint32_t c) {
    const size_t n = std::min<size_t>(C, kBig - c * C);
    ASSERT_TRUE(raw.next(re, rh, body, {p.b.cq})) << seq << "/" << c;
    ASSERT_EQ(rh.kind, ofi::kEagerLong);
    EXPECT_TRUE(rh.flags & ofi::kWireChunk);
    EXPECT_EQ(rh.seq, seq);
    EXPECT_EQ(rh.len, kBig);
    EXPECT_EQ(rh.chunk, c);
    ASSERT_EQ(re.long_len, n);
    const uint64_t place = pos % kLane, skip = place + n > kLane ? kLane - place : 0;
    EXPECT_EQ(rh.rid, pos) << c;
    EXPECT_EQ(rh.key, skip) << c;
    EXPECT_EQ(re.long_offset, (pos + skip) % kLane) << c;
    std::memcpy(got.data() + c * C, raw.seg + re.long_offset, n);
    pos += skip + n;
  };
  // Message 1: all three chunks fit the lane.
  ASSERT_EQ(fi_send(p.b.ep, big.data(), kBig, nullptr, to_raw, nullptr), 0);
  for (uint32_t c = 0; c < 3; ++c) ASSERT_NO_FATAL_FAILURE(chunk(1, c));
  EXPECT_TRUE(check_pattern(got.data(), kBig, 78));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  // Message 2: its chunk 0 fits behind message 1; chunk 1 would skip to the
  // lane's start, which message 1 still holds: it waits, and so does the
  // next message.
  std::memset(got.data(), 0, kBig);
  ASSERT_EQ(fi_send(p.b.ep, big.data(), kBig, nullptr, to_raw, nullptr), 0);
  ASSERT_NO_FATAL_FAILURE(chunk(2, 0));
  EXPECT_EQ(fi_send(p.b.ep, big.data(), kBig, nullptr, to_raw, nullptr), -FI_EAGAIN) << "behind the stream";
  ofi::WireHdr c = raw.header(ofi::kCredit);
  c.len = pos;  // everything sent so far is free again
  c.sid = 9;
  ASSERT_EQ(raw.send(to, c, nullptr, 0), ulnic::abi::kCqOk);
  (void)fi_cq_read(p.b.cq, &e, 0);  // b takes the credit and posts the rest
  ASSERT_NO_FATAL_FAILURE(chunk(2, 1));
  ASSERT_NO_FATAL_FAILURE(chunk(2, 2));
  EXPECT_TRUE(check_pattern(got.data(), kBig, 78));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
}

// Streams (messages above 64 KiB through a lane, in kChunkBytes chunks) at
// the receiver, from a sender of our own: chunks out of order; a stream that
// arrives before its receive is posted (kept, then copied in when the
// receive comes) and one whose receive waits (chunks straight into it, and
// the next message matched before the stream is whole); a receive shorter
// than the stream (truncated, FI_ETRUNC); a whole stream nobody has asked for
// (an unexpected message); chunks that lie (twice the same, another length,
// the wrong size, past the end) dropped; and a sender replaced mid-stream: its
// bound receive fails.
TEST_F(OfiLanes, StreamsArriveInChunksInAnyOrder) {
  namespace ofi = ulnic::ofi;
  ASSERT_EQ(raw.send(to, raw.header(ofi::kLaneReq), nullptr, 0), ulnic::abi::kCqOk);
  ASSERT_TRUE(raw.next_of(ofi::kLaneGrant, re, rh, body, {p.b.cq}));
  const uint64_t lane = rh.len, lane_off = rh.data;
  ASSERT_GT(lane, 0u);
  uint64_t pos = 0, freed = 0;
  constexpr size_t C = ofi::kChunkBytes;
  std::vector<Bytes> msgs;
  // Chunk c of message `seq` (msgs[seq], `len` bytes; `n` overrides the
  // chunk's size, a lie the lane check refuses: its range is not taken, so
  // the stream's position does not move), at the lane's next position.
  auto chunk = [&](uint32_t seq, uint32_t c, int64_t len = -1, int64_t n = -1) {
    const uint64_t total = len < 0 ? msgs[seq].size() : uint64_t(len);
    const size_t bytes = n < 0 ? std::min<size_t>(C, total - c * C) : size_t(n);
    const uint64_t place = pos % lane, skip = place + bytes > lane ? lane - place : 0;
    ofi::WireHdr h = raw.header(ofi::kEagerLong);
    h.flags = ofi::kWireChunk;
    h.seq = seq;
    h.len = total;
    h.chunk = uint16_t(c);
    h.rid = pos;
    h.key = uint32_t(skip);
    const uint32_t off = uint32_t(lane_off + (pos + skip) % lane);
    ASSERT_EQ(raw.send(to, h, msgs[seq].data() + std::min<size_t>(c * C, msgs[seq].size() - 1), bytes, &off),
              ulnic::abi::kCqOk);
    if (n < 0) pos += skip + bytes;
    fi_cq_tagged_entry none;
    (void)fi_cq_read(p.b.cq, &none, 0);
    // Give the lane back as the receiver frees it (its credits come each quarter lane).
    while (pos - freed > lane / 2 && raw.next_of(ofi::kCredit, re, rh, body, {p.b.cq})) freed = rh.len;
  };
  // In chunks: 4 (the last 13568 bytes), 2, 4, 2, 2 (the last 1856); 5 goes in one entry.
  const size_t sizes[] = {3 * C + 13568, C + 17856, 1000000, C + 137856, C + 1856, 150000};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    msgs.emplace_back(sizes[i]);
    pattern(msgs.back().data(), sizes[i], 300 + uint32_t(i));
  }
  Bytes in0(sizes[0]), in1(sizes[1]), small(sizes[3]), in4(sizes[4]), in5(sizes[5]);
  int c0, c1, c2, c3, c4;
  fi_cq_tagged_entry e{};
  // 0: two chunks out of order before its receive is posted, then the receive, then the rest.
  ASSERT_NO_FATAL_FAILURE(chunk(0, 2));
  ASSERT_NO_FATAL_FAILURE(chunk(0, 0));
  ASSERT_NO_FATAL_FAILURE(chunk(0, 0));              // chunk 0 again: dropped
  ASSERT_NO_FATAL_FAILURE(chunk(0, 1, sizes[0] + 1));  // another length: dropped
  ASSERT_NO_FATAL_FAILURE(chunk(0, 3, -1, 100));      // the wrong size for the last chunk: dropped
  ASSERT_NO_FATAL_FAILURE(chunk(0, 4, -1, 100));      // past the end: dropped
  ASSERT_EQ(fi_recv(p.b.ep, in0.data(), in0.size(), nullptr, FI_ADDR_UNSPEC, &c0), 0);
  ASSERT_NO_FATAL_FAILURE(chunk(0, 1));
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN) << "complete without chunk 3";
  // 1's receive waits: its first chunk binds it (0 is bound); 2's receive
  // too, and 2 is whole first: receives are matched in order, completed as
  // their bytes are in (comp_order FI_ORDER_NONE).
  ASSERT_EQ(fi_recv(p.b.ep, in1.data(), in1.size(), nullptr, FI_ADDR_UNSPEC, &c1), 0);
  ASSERT_EQ(fi_recv(p.b.ep, small.data(), 1000, nullptr, FI_ADDR_UNSPEC, &c2), 0);  // 2 into 1000 bytes
  ASSERT_NO_FATAL_FAILURE(chunk(1, 1));
  ASSERT_NO_FATAL_FAILURE(chunk(2, 3));
  ASSERT_NO_FATAL_FAILURE(chunk(0, 3));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.op_context, &c0);
  EXPECT_EQ(e.len, sizes[0]);
  EXPECT_TRUE(check_pattern(in0.data(), sizes[0], 300));
  for (uint32_t c : {0u, 1u, 2u}) ASSERT_NO_FATAL_FAILURE(chunk(2, c));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.op_context, &c2);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.olen, sizes[2] - 1000);
  EXPECT_TRUE(check_pattern(small.data(), 1000, 302));
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN) << "1 complete without its chunk 0";
  ASSERT_NO_FATAL_FAILURE(chunk(1, 0));
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.op_context, &c1);
  EXPECT_TRUE(check_pattern(in1.data(), sizes[1], 301));
  // 3: whole before any receive: an unexpected message, taken by a later receive.
  for (uint32_t c : {1u, 0u}) ASSERT_NO_FATAL_FAILURE(chunk(3, c));
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN);
  ASSERT_EQ(fi_recv(p.b.ep, small.data(), small.size(), nullptr, FI_ADDR_UNSPEC, &c3), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.op_context, &c3);
  EXPECT_EQ(e.len, sizes[3]);
  EXPECT_TRUE(check_pattern(small.data(), sizes[3], 303));
  // 4: bound, then its sender is replaced (a new tag on its slot and
  // endpoint) before the rest: the receive fails; the new sender's message
  // 0 arrives.
  ASSERT_EQ(fi_recv(p.b.ep, in4.data(), in4.size(), nullptr, FI_ADDR_UNSPEC, &c4), 0);
  ASSERT_NO_FATAL_FAILURE(chunk(4, 0));
  EXPECT_EQ(fi_cq_read(p.b.cq, &e, 1), -FI_EAGAIN);
  raw.addr.tag ^= 1;  // the next process on that endpoint
  int c5 = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in5.data(), 64, nullptr, FI_ADDR_UNSPEC, &c5), 0);
  ofi::WireHdr h = raw.header(ofi::kEager);
  h.len = 64;
  ASSERT_EQ(raw.send(to, h, msgs[5].data(), 64), ulnic::abi::kCqOk);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), -FI_EAVAIL);
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.op_context, &c4);
  EXPECT_EQ(err.err, FI_EIO);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), 1);
  EXPECT_EQ(e.op_context, &c5);
  EXPECT_TRUE(check_pattern(in5.data(), 64, 305));
}

// A peer that dies in the middle of a rendezvous (our own endpoint, closed
// after it took the provider's CTS, or its RTS): the provider probes the
// peers its operations wait for (kProbe, every kProbeNs) and, when the NIC
// says one is gone, fails what waits for it -- the receive waiting for the
// put and FIN, the send waiting for the CTS -- with an error entry within a
// few seconds, and goes on with everyone else.
TEST_F(OfiLanes, APeerThatDiesMidRendezvousFailsWhatWaitsForIt) {
  namespace ofi = ulnic::ofi;
  constexpr size_t kBig = (size_t(2) << 20);  // above kStreamMax: a rendezvous
  auto expect_failure = [&](fid_cq* cq, void* ctx, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(cq, &e, {}, nullptr, 15000ms), -FI_EAVAIL) << what;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(cq, &err, 0), 1) << what;
    EXPECT_EQ(err.op_context, ctx) << what;
    EXPECT_EQ(err.err, FI_EIO) << what;
    EXPECT_NE(err.prov_errno, 0) << what;
    EXPECT_LT(s, 2.5 * double(ofi::kProbeNs) / 1e9 + 2) << what << ": seconds to fail";
  };
  // The receive: b answers our RTS with its CTS, and we die.
  Bytes in(kBig, 0);
  int rctx = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), kBig, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ofi::WireHdr h = raw.header(ofi::kRts);
  h.seq = 0;
  h.len = kBig;
  h.sid = 11;
  ASSERT_EQ(raw.send(to, h, nullptr, 0), ulnic::abi::kCqOk);
  ASSERT_TRUE(raw.next_of(ofi::kCts, re, rh, body, {p.b.cq}));
  EXPECT_EQ(rh.sid, 11u);
  raw.nic.reset();
  expect_failure(p.b.cq, &rctx, "the receive whose sender died after its CTS");
  // The send: a new endpoint of ours takes b's RTS and dies.
  RawEp peer;
  ASSERT_NO_FATAL_FAILURE(peer.open());
  fi_addr_t to_peer = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(p.b.av, &peer.addr, 1, &to_peer, 0, nullptr), 1);
  Bytes out(kBig);
  pattern(out.data(), kBig, 5);
  int sctx = 0;
  ASSERT_EQ(fi_send(p.b.ep, out.data(), kBig, nullptr, to_peer, &sctx), 0);
  ASSERT_TRUE(peer.next_of(ofi::kRts, re, rh, body, {p.b.cq}));
  peer.nic.reset();
  expect_failure(p.b.cq, &sctx, "the send whose receiver died after its RTS");
  // Everyone else goes on: a -> b, a rendezvous too.
  fi_cq_tagged_entry got{};
  auto send_a = [&](void* buf, size_t len, void* ctx) { return fi_send(p.a.ep, buf, len, nullptr, p.a_to_b, ctx); };
  p.exchange(kBig, kBig, send_a, got);
  EXPECT_EQ(got.len, kBig);
}

// FI_ULNIC_EAGER_SIZE (read when a domain opens) decides how a message goes:
// a send in fragments completes once the receiving NIC took them all, with
// no receive posted (the receiver keeps it as unexpected); a rendezvous send
// waits for a receive to match it.
TEST(OfiMsg, EagerSizeDecidesWhichSendsWaitForAReceive) {
  for (const char* eager : {"", "4224", "100000"}) {
    if (*eager) ::setenv("FI_ULNIC_EAGER_SIZE", eager, 1);
    Pair p;
    ::unsetenv("FI_ULNIC_EAGER_SIZE");
    const bool rendezvous = std::string(eager) == "4224";
    const size_t n = std::string(eager) == "100000" ? 67584 : 65536;  // 67584: kMaxFrags * kEagerMax
    Bytes out(n), in(n);
    pattern(out.data(), n, 77);
    int sctx = 0, rctx = 0;
    ASSERT_EQ(fi_send(p.a.ep, out.data(), n, nullptr, p.a_to_b, &sctx), 0);
    fi_cq_tagged_entry e{};
    // An eager send completes (however long the machine takes); a
    // rendezvous one has not within 300 ms (a slow machine cannot fail that).
    ssize_t r = read_one(p.a.cq, &e, {p.b.cq}, nullptr, rendezvous ? 300ms : 20000ms);
    EXPECT_EQ(r, rendezvous ? -FI_ETIMEDOUT : 1) << "FI_ULNIC_EAGER_SIZE=" << eager;
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), n, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_EQ(e.len, n);
    EXPECT_TRUE(check_pattern(in.data(), n, 77)) << "FI_ULNIC_EAGER_SIZE=" << eager;
    if (rendezvous) {
      ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
    }
  }
}

// The provider's messages are one-way: no AM reply answers them. Sent as
// requests that await a reply, each took one of the NIC's reply counts for
// its peer (abi/am.h), 0xffff at most per peer endpoint and kAmPeers peers
// an endpoint: message 65536 to one peer was refused as congestion and
// resent forever. Every message is checked, in order.
TEST(OfiMsg, MoreThan65535MessagesToOnePeer) {
  Pair p;
  constexpr uint32_t kMessages = 70000, kWindow = 64;
  std::vector<uint32_t> in(kWindow);
  uint32_t sent = 0, received = 0, out = 0;
  fi_cq_tagged_entry e{};
  for (uint32_t k = 0; k < kWindow; ++k)
    ASSERT_EQ(fi_recv(p.b.ep, &in[k], sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, &in[k]), 0);
  auto end = std::chrono::steady_clock::now() + 60s;
  while (received < kMessages && std::chrono::steady_clock::now() < end) {
    while (sent < kMessages && sent - received < kWindow) {
      out = sent;
      ssize_t r = fi_inject(p.a.ep, &out, sizeof out, p.a_to_b);
      if (r == -FI_EAGAIN) break;
      ASSERT_EQ(r, 0);
      ++sent;
    }
    (void)fi_cq_read(p.a.cq, &e, 0);
    while (fi_cq_read(p.b.cq, &e, 1) == 1) {
      auto* slot = static_cast<uint32_t*>(e.op_context);
      ASSERT_EQ(*slot, received) << "message " << received;
      ++received;
      ASSERT_EQ(fi_recv(p.b.ep, slot, sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, slot), 0);
    }
  }
  ASSERT_EQ(received, kMessages);
}

// More rendezvous in flight than the slot heap holds (16 MiB slots here;
// 40 messages of 1 MiB + 4 KiB each way at once -- above kStreamMax, so
// every one a rendezvous -- every receive posted first, as an MPI window of
// Irecv and Isend posts them): a buffer that finds no room
// waits for the room operations in flight give back, none fails, and every
// byte arrives. Both ways at once: receives that took all of a slot would
// leave none for the puts that end the peer's receives.
TEST(OfiMsg, MoreRendezvousInFlightThanTheSlotHoldsWaitForRoom) {
  Pair p;
  constexpr size_t kMessages = 40, kLen = (size_t(1) << 20) + 4096;
  struct Way {
    Side* from;
    Side* to;
    fi_addr_t dest;
    uint32_t seed;
    std::vector<Bytes> out, in;
  };
  Way ways[2] = {{&p.a, &p.b, p.a_to_b, 1000, {}, {}}, {&p.b, &p.a, p.b_to_a, 2000, {}, {}}};
  for (Way& w : ways)
    for (size_t i = 0; i < kMessages; ++i) {
      w.out.emplace_back(kLen);
      pattern(w.out.back().data(), kLen, w.seed + uint32_t(i));
      w.in.emplace_back(kLen, 0);
      ASSERT_EQ(fi_recv(w.to->ep, w.in.back().data(), kLen, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    }
  size_t sent[2] = {0, 0}, done[2] = {0, 0};  // per side (a, b): completions of its sends and receives
  const auto end = std::chrono::steady_clock::now() + 60s;
  while ((done[0] < 2 * kMessages || done[1] < 2 * kMessages) && std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 2; ++k)
      while (sent[k] < kMessages) {
        ssize_t r = fi_send(ways[k].from->ep, ways[k].out[sent[k]].data(), kLen, nullptr, ways[k].dest, nullptr);
        if (r == -FI_EAGAIN) break;
        ASSERT_EQ(r, 0);
        ++sent[k];
      }
    for (int k = 0; k < 2; ++k) {
      fi_cq_tagged_entry e{};
      ssize_t r;
      while ((r = fi_cq_read(ways[k].from->cq, &e, 1)) == 1) ++done[k];
      if (r == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        ASSERT_EQ(fi_cq_readerr(ways[k].from->cq, &err, 0), 1);
        FAIL() << "side " << k << ": " << fi_cq_strerror(ways[k].from->cq, err.prov_errno, err.err_data, nullptr, 0);
      }
    }
  }
  ASSERT_EQ(done[0], 2 * kMessages);
  ASSERT_EQ(done[1], 2 * kMessages);
  for (const Way& w : ways)
    for (size_t i = 0; i < kMessages; ++i)
      ASSERT_TRUE(check_pattern(w.in[i].data(), kLen, w.seed + uint32_t(i))) << "seed " << w.seed << ", message " << i;
}

// A send to an endpoint that is gone fails with an error entry whose text
// says what the NIC said, eager or rendezvous.
TEST(OfiMsg, SendsToAClosedEndpointFailWithTheNicsReason) {
  Pair p;
  ASSERT_EQ(fi_close(&p.b.ep->fid), 0);
  p.b.ep = nullptr;
  for (size_t n : {size_t(64), size_t(100000)}) {
    Bytes out(n, 1);
    int ctx = 0;
    ASSERT_EQ(fi_send(p.a.ep, out.data(), n, nullptr, p.a_to_b, &ctx), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.a.cq, &e, {}), -FI_EAVAIL) << n;
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(p.a.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &ctx);
    EXPECT_EQ(err.err, FI_EIO);
    std::string text = fi_cq_strerror(p.a.cq, err.prov_errno, err.err_data, nullptr, 0);
    EXPECT_NE(text.find("no such endpoint"), std::string::npos) << text;
  }
}

// A new endpoint in the place of a closed one (same node, slot and index,
// another tag) starts a new conversation: messages numbered from 0 both ways.
void reopen(Side& s) {
  ASSERT_EQ(fi_close(&s.ep->fid), 0);
  ASSERT_EQ(fi_endpoint(s.domain, s.info, &s.ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(s.ep, &s.av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(s.ep), 0);
  size_t len = s.name.size();
  ASSERT_EQ(fi_getname(&s.ep->fid, s.name.data(), &len), 0);
}
TEST(OfiMsg, ARestartedPeerStartsANewConversation) {
  Pair p;
  // One message of 1 byte and one of 20000 (in fragments, or in the lane the
  // receiver granted the sender: a new process asks for it again).
  auto one_message = [&](Side& from, fi_addr_t to, Side& at, uint8_t value) {
    for (size_t n : {size_t(1), size_t(20000)}) {
      Bytes out(n, value), in(n, 0);
      ASSERT_EQ(fi_recv(at.ep, in.data(), n, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      ASSERT_EQ(fi_send(from.ep, out.data(), n, nullptr, to, nullptr), 0);
      fi_cq_tagged_entry got{}, e{};
      ASSERT_EQ(read_one(at.cq, &got, {from.cq}), 1);
      ASSERT_EQ(read_one(from.cq, &e, {at.cq}), 1);
      EXPECT_EQ(got.len, n);
      EXPECT_EQ(in, out) << n << " bytes";
    }
  };
  for (uint8_t i = 0; i < 3; ++i) one_message(p.a, p.a_to_b, p.b, i);
  reopen(p.b);  // the receiver restarts
  fi_addr_t to_new_b = insert(p.a, p.b);
  for (uint8_t i = 10; i < 13; ++i) one_message(p.a, to_new_b, p.b, i);
  reopen(p.a);  // the sender restarts
  fi_addr_t from_new_a = insert(p.a, p.b);
  for (uint8_t i = 20; i < 23; ++i) one_message(p.a, from_new_a, p.b, i);
}

TEST(OfiTagged, IgnoreBitsUnexpectedMessagesAndOrder) {
  Pair p;
  // Sent before any receive is posted: all unexpected (one of them a rendezvous).
  std::vector<Bytes> out;
  const uint64_t tags[] = {0x10, 0x11, 0x20, 0x10};
  const size_t sizes[] = {8, 16, 100000, 24};
  for (int i = 0; i < 4; ++i) {
    out.emplace_back(sizes[i]);
    pattern(out.back().data(), sizes[i], 100 + i);
    ASSERT_EQ(fi_tsend(p.a.ep, out.back().data(), sizes[i], nullptr, p.a_to_b, tags[i], nullptr), 0);
  }
  fi_cq_tagged_entry e{};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);  // the eager ones: delivered (unexpected)
  auto take = [&](uint64_t tag, uint64_t ignore, int want) {
    Bytes in(200000);
    ASSERT_EQ(fi_trecv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, tag, ignore, nullptr), 0);
    fi_cq_tagged_entry got{};
    ASSERT_EQ(read_one(p.b.cq, &got, {p.a.cq}), 1);
    EXPECT_EQ(got.tag, tags[want]);
    EXPECT_EQ(got.len, sizes[want]);
    EXPECT_TRUE(got.flags & FI_TAGGED);
    EXPECT_TRUE(check_pattern(in.data(), sizes[want], 100 + want)) << "message " << want;
  };
  take(0x20, 0, 2);     // the rendezvous one, out of order
  ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);  // and its send completes now
  take(0x10, 0x0f, 0);  // 0x1? : the oldest first
  take(0x10, 0x0f, 1);
  take(0x10, 0, 3);
  // Posted first, matched by ignore bits on arrival; an untagged receive takes no tagged message.
  Bytes in(64), mout(64, 5);
  int untagged = 0, tagged = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &untagged), 0);
  ASSERT_EQ(fi_trecv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 0x100, 0xff, &tagged), 0);
  ASSERT_EQ(fi_tinject(p.a.ep, mout.data(), 64, p.a_to_b, 0x1ff), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  EXPECT_EQ(e.op_context, &tagged);
  EXPECT_EQ(e.tag, 0x1ffu);
  // fi_cancel takes the untagged receive back.
  ASSERT_EQ(fi_cancel(&p.b.ep->fid, &untagged), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &untagged);
  EXPECT_EQ(fi_cancel(&p.b.ep->fid, &untagged), -FI_ENOENT);
}

// MPI_Iprobe / MPI_Improbe / MPI_Mrecv as Open MPI's OFI MTL does them:
// FI_PEEK describes an unexpected message without taking it (FI_ENOMSG if
// none), FI_PEEK | FI_CLAIM sets it aside for the receive naming the same
// fi_context, FI_DISCARD drops one (a rendezvous one too: its sender completes).
TEST(OfiTagged, PeekClaimAndDiscard) {
  Pair p;
  auto peek = [&](uint64_t tag, uint64_t flags, fi_context* ctx) {
    fi_msg_tagged m{};
    m.addr = FI_ADDR_UNSPEC;
    m.tag = tag;
    m.context = ctx;
    return fi_trecvmsg(p.b.ep, &m, flags);
  };
  fi_context ctx{};
  fi_cq_tagged_entry e{};
  // Nothing has come: FI_ENOMSG.
  ASSERT_EQ(peek(0x7, FI_PEEK, &ctx), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ENOMSG);
  EXPECT_EQ(err.op_context, &ctx);
  // Three messages: eager (tag 7), rendezvous (tag 8), eager (tag 9).
  const size_t sizes[] = {100, 300000, 50};
  std::vector<Bytes> out;
  for (int i = 0; i < 3; ++i) {
    out.emplace_back(sizes[i]);
    pattern(out.back().data(), sizes[i], 700 + i);
    ASSERT_EQ(fi_tsenddata(p.a.ep, out.back().data(), sizes[i], nullptr, 40 + i, p.a_to_b, 7 + i, nullptr), 0);
  }
  for (int i = 0; i < 2; ++i) ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);  // the eager sends
  // A peek describes the message and leaves it: twice the same answer.
  for (int twice = 0; twice < 2; ++twice) {
    fi_cq_tagged_entry got{};
    auto until = std::chrono::steady_clock::now() + 20s;
    for (;;) {  // it may not have arrived yet
      ASSERT_EQ(peek(0x8, FI_PEEK, &ctx), 0);
      ssize_t r = read_one(p.b.cq, &got, {p.a.cq});
      if (r == 1) break;
      ASSERT_EQ(r, -FI_EAVAIL);
      ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
      ASSERT_EQ(err.err, FI_ENOMSG);
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the message never came";
    }
    EXPECT_EQ(got.op_context, &ctx);
    EXPECT_EQ(got.len, sizes[1]);
    EXPECT_EQ(got.tag, 8u);
    EXPECT_EQ(got.data, 41u);
    EXPECT_EQ(got.buf, nullptr);
  }
  // Claimed (the rendezvous one), then received by the claim into a buffer.
  ASSERT_EQ(peek(0x8, FI_PEEK | FI_CLAIM, &ctx), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  EXPECT_EQ(e.len, sizes[1]);
  ASSERT_EQ(peek(0x8, FI_PEEK, &ctx), 0);  // claimed: no longer there for others
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), -FI_EAVAIL);
  ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ENOMSG);
  Bytes in(sizes[1]);
  iovec iov{in.data(), in.size()};
  fi_msg_tagged m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = FI_ADDR_UNSPEC;
  m.tag = 0x8;
  m.context = &ctx;
  ASSERT_EQ(fi_trecvmsg(p.b.ep, &m, FI_CLAIM), 0);
  fi_cq_tagged_entry got{};
  ASSERT_EQ(read_one(p.b.cq, &got, {p.a.cq}), 1);
  EXPECT_EQ(got.len, sizes[1]);
  EXPECT_TRUE(check_pattern(in.data(), sizes[1], 701));
  ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);  // the rendezvous send completed
  // A claim of nothing claimed is refused.
  fi_context other{};
  m.context = &other;
  other.internal[0] = reinterpret_cast<void*>(uint64_t(12345));
  EXPECT_EQ(fi_trecvmsg(p.b.ep, &m, FI_CLAIM), -FI_EINVAL);
  // Peek and discard the others: one completion each, and they are gone.
  ASSERT_EQ(peek(0x7, FI_PEEK | FI_DISCARD, &ctx), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  EXPECT_EQ(e.len, sizes[0]);
  ASSERT_EQ(peek(0x9, FI_PEEK | FI_CLAIM, &ctx), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  m.context = &ctx;
  ASSERT_EQ(fi_trecvmsg(p.b.ep, &m, FI_CLAIM | FI_DISCARD), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
  EXPECT_EQ(e.len, 0u);
  for (uint64_t tag : {0x7, 0x9}) {
    ASSERT_EQ(peek(tag, FI_PEEK, &ctx), 0);
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), -FI_EAVAIL);
    ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ENOMSG) << tag;
  }
  // A large message discarded at the peek -- streamed through a's lane at b
  // (granted by now), or by rendezvous (above 1 MiB): its sender completes.
  for (size_t n : {size_t(200000), size_t(1500000)}) {
    Bytes big(n);
    pattern(big.data(), big.size(), 9);
    ASSERT_EQ(fi_tsend(p.a.ep, big.data(), big.size(), nullptr, p.a_to_b, 0x55, nullptr), 0);
    auto until = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      fi_cq_tagged_entry none;
      (void)fi_cq_read(p.a.cq, &none, 0);  // the sender's progress (manual): the rest of its stream
      ASSERT_EQ(peek(0x55, FI_PEEK | FI_DISCARD, &ctx), 0);
      ssize_t r = read_one(p.b.cq, &e, {p.a.cq});
      if (r == 1) break;
      ASSERT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
      ASSERT_LT(std::chrono::steady_clock::now(), until);
    }
    EXPECT_EQ(e.len, big.size());
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1) << n;
    EXPECT_TRUE(e.flags & FI_SEND);
  }
  // FI_DISCARD alone names nothing.
  EXPECT_EQ(fi_trecvmsg(p.b.ep, &m, FI_DISCARD), -FI_EINVAL);
}

// Rendezvous buffers that share pages (an MPI window of adjacent messages),
// all in flight at once: the provider stages them in the slot heap rather
// than moving the application's pages (which neighbours share), on both
// sides, every byte intact. (One mapping of our own, not malloc's heap:
// the test process's allocator is no part of what is tested.)
TEST(OfiTagged, AdjacentRendezvousBuffersSharingPages) {
  Pair p;
  constexpr size_t kN = 8, kLen = 20000;  // not a page multiple: neighbours share a page
  Bytes out(kN * kLen), in(kN * kLen, 0);
  for (size_t i = 0; i < kN; ++i) {
    pattern(out.data() + i * kLen, kLen, 900 + uint32_t(i));
    ASSERT_EQ(fi_trecv(p.b.ep, in.data() + i * kLen, kLen, nullptr, FI_ADDR_UNSPEC, 0x300 + i, 0, nullptr), 0);
  }
  for (size_t i = 0; i < kN; ++i)
    ASSERT_EQ(fi_tsend(p.a.ep, out.data() + i * kLen, kLen, nullptr, p.a_to_b, 0x300 + i, nullptr), 0);
  fi_cq_tagged_entry e{};
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1) << "receive " << i;
    EXPECT_EQ(e.len, kLen);
  }
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1) << "send " << i;
  for (size_t i = 0; i < kN; ++i)
    EXPECT_TRUE(check_pattern(in.data() + i * kLen, kLen, 900 + uint32_t(i))) << "message " << i;
}

// FI_RMA: fi_write is the NIC's put into the target's MR, checked by the
// target's NIC against the key; fi_read is served by the target's provider
// (FI_REMOTE_READ checked there). Writes and reads of many sizes at offsets
// into a 1 MiB MR on the other node and on the same node, every byte and
// the bytes around it checked; an MR without FI_REMOTE_WRITE / READ, a range
// beyond the MR and a bad key fail with error entries and change nothing.
TEST(OfiRma, WriteReadAndWhatTheTargetRefuses) {
  Options o;
  o.rma = true;
  Pair p(o);
  Side c;  // on node 0, like a
  open_side(c, 0, o);
  fi_addr_t a_to_c = insert(p.a, c);
  insert(c, p.a);
  ASSERT_TRUE(p.a.info->caps & FI_RMA);
  constexpr size_t kMr = 1 << 20;
  Bytes target(kMr + 8192, 0x5a), closed(65536, 0x33), local(kMr, 0);
  auto reg = [](Side& s, void* buf, size_t n, uint64_t access, fid_mr** mr) {
    ASSERT_EQ(fi_mr_reg(s.domain, buf, n, access, 0, 0, 0, mr, nullptr), 0);
  };
  fid_mr *open_b = nullptr, *closed_b = nullptr, *open_c = nullptr;
  reg(p.b, target.data() + 4096, kMr, FI_REMOTE_READ | FI_REMOTE_WRITE, &open_b);
  reg(p.b, closed.data(), closed.size(), FI_SEND | FI_RECV, &closed_b);
  ASSERT_NE(open_b, nullptr);
  ASSERT_NE(closed_b, nullptr);
  const uint64_t base = reinterpret_cast<uint64_t>(target.data() + 4096);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  int ctx = 0;
  auto done = [&](fid_cq* cq, std::initializer_list<fid_cq*> others) {
    EXPECT_EQ(read_one(cq, &e, others), 1);
    EXPECT_EQ(e.op_context, &ctx);
  };
  auto failed = [&](fid_cq* cq, std::initializer_list<fid_cq*> others) {
    EXPECT_EQ(read_one(cq, &e, others), -FI_EAVAIL);
    EXPECT_EQ(fi_cq_readerr(cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_EIO);
    EXPECT_EQ(err.op_context, &ctx);
  };
  uint32_t seed = 40;
  for (size_t n : {size_t(1), size_t(100), size_t(4096), size_t(70001), kMr - 24}) {
    const size_t off = n == kMr - 24 ? 24 : (n * 7) % 4096 + 8;
    Bytes out(n);
    pattern(out.data(), n, ++seed);
    ASSERT_EQ(fi_write(p.a.ep, out.data(), n, nullptr, p.a_to_b, base + off, fi_mr_key(open_b), &ctx), 0);
    done(p.a.cq, {p.b.cq});
    EXPECT_TRUE(check_pattern(target.data() + 4096 + off, n, seed)) << "write of " << n;
    EXPECT_EQ(target[4096 + off - 1], 0x5a) << "the byte before a write of " << n;
    if (off + n < kMr) {
      EXPECT_EQ(target[4096 + off + n], 0x5a) << "the byte after a write of " << n;
    }
    // Read it back, into a buffer of ours.
    std::fill(local.begin(), local.end(), 0);
    ASSERT_EQ(fi_read(p.a.ep, local.data(), n, nullptr, p.a_to_b, base + off, fi_mr_key(open_b), &ctx), 0);
    done(p.a.cq, {p.b.cq});
    EXPECT_TRUE(check_pattern(local.data(), n, seed)) << "read of " << n;
    std::fill(target.begin() + 4096 + off, target.begin() + 4096 + off + n, 0x5a);
  }
  // An injected write: the buffer may change right after the call.
  Bytes small(64);
  pattern(small.data(), 64, 77);
  ASSERT_EQ(fi_inject_write(p.a.ep, small.data(), 64, p.a_to_b, base + 128, fi_mr_key(open_b)), 0);
  std::fill(small.begin(), small.end(), 0);
  ASSERT_EQ(fi_read(p.a.ep, local.data(), 64, nullptr, p.a_to_b, base + 128, fi_mr_key(open_b), &ctx), 0);
  done(p.a.cq, {p.b.cq});
  EXPECT_TRUE(check_pattern(local.data(), 64, 77));
  EXPECT_TRUE(check_pattern(target.data() + 4096 + 128, 64, 77));
  std::fill(target.begin() + 4096 + 128, target.begin() + 4096 + 192, 0x5a);
  // Refused: an MR without FI_REMOTE_WRITE / FI_REMOTE_READ; beyond the MR; a key that is none.
  const uint64_t cbase = reinterpret_cast<uint64_t>(closed.data());
  Bytes out(4096, 0x77);
  ASSERT_EQ(fi_write(p.a.ep, out.data(), 4096, nullptr, p.a_to_b, cbase, fi_mr_key(closed_b), &ctx), 0);
  failed(p.a.cq, {p.b.cq});
  ASSERT_EQ(fi_read(p.a.ep, local.data(), 4096, nullptr, p.a_to_b, cbase, fi_mr_key(closed_b), &ctx), 0);
  failed(p.a.cq, {p.b.cq});
  EXPECT_EQ(err.prov_errno, 1004);  // kErrReadRefused
  ASSERT_EQ(fi_write(p.a.ep, out.data(), 4096, nullptr, p.a_to_b, base + kMr - 100, fi_mr_key(open_b), &ctx), 0);
  failed(p.a.cq, {p.b.cq});
  ASSERT_EQ(fi_read(p.a.ep, local.data(), 4096, nullptr, p.a_to_b, base + kMr - 100, fi_mr_key(open_b), &ctx), 0);
  failed(p.a.cq, {p.b.cq});
  ASSERT_EQ(fi_write(p.a.ep, out.data(), 64, nullptr, p.a_to_b, base, fi_mr_key(open_b) ^ 0x5555, &ctx), 0);
  failed(p.a.cq, {p.b.cq});
  EXPECT_TRUE(std::all_of(closed.begin(), closed.end(), [](uint8_t x) { return x == 0x33; }));
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](uint8_t x) { return x == 0x5a; }));
  // Within node 0 (a -> c): a copy between two slots, both ways.
  Bytes cbuf(200000, 0);
  ASSERT_EQ(fi_mr_reg(c.domain, cbuf.data(), cbuf.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &open_c,
                      nullptr),
            0);
  Bytes big(150000);
  pattern(big.data(), big.size(), 88);
  const uint64_t c0 = reinterpret_cast<uint64_t>(cbuf.data());
  ASSERT_EQ(fi_write(p.a.ep, big.data(), big.size(), nullptr, a_to_c, c0 + 1000, fi_mr_key(open_c), &ctx), 0);
  done(p.a.cq, {c.cq});
  EXPECT_TRUE(check_pattern(cbuf.data() + 1000, big.size(), 88));
  ASSERT_EQ(fi_read(p.a.ep, local.data(), big.size(), nullptr, a_to_c, c0 + 1000, fi_mr_key(open_c), &ctx), 0);
  done(p.a.cq, {c.cq});
  EXPECT_TRUE(check_pattern(local.data(), big.size(), 88));
  EXPECT_EQ(fi_close(&open_c->fid), 0);
  EXPECT_EQ(fi_close(&open_b->fid), 0);
  EXPECT_EQ(fi_close(&closed_b->fid), 0);
}

// fi_writedata, fi_inject_writedata and fi_writemsg with FI_REMOTE_CQ_DATA:
// the target's receive CQ gets FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA
// with the data, the length, the address and the source, once every byte is
// there (checked when the entry is read); no receive is taken. A refused
// write gives its initiator an error entry and the target nothing.
TEST(OfiRma, WriteDataReachesTheTargetsCqAfterItsBytes) {
  Options o;
  o.rma = true;
  Pair p(o);
  constexpr size_t kMr = 1 << 20;
  Bytes target(kMr, 0);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, target.data(), kMr, FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
  const uint64_t base = reinterpret_cast<uint64_t>(target.data());
  int ctx = 0;
  fi_cq_tagged_entry e{};
  uint32_t seed = 60;
  auto at_target = [&](size_t off, size_t n, uint64_t data, uint32_t s) {
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}, &src), 1) << "remote CQ data " << data;
    EXPECT_EQ(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e.data, data);
    EXPECT_EQ(e.len, n);
    EXPECT_EQ(e.buf, reinterpret_cast<void*>(base + off));
    EXPECT_EQ(e.op_context, nullptr);
    EXPECT_EQ(src, p.b_to_a);
    EXPECT_TRUE(check_pattern(target.data() + off, n, s)) << "the " << n << " bytes under remote CQ data " << data;
  };
  auto at_initiator = [&] {
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
    EXPECT_EQ(e.op_context, &ctx);
    EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
  };
  for (size_t n : {size_t(0), size_t(8), size_t(5000), size_t(300000)}) {
    Bytes out(n ? n : 1);
    pattern(out.data(), n, ++seed);
    const size_t off = 64 + n % 1000;
    ASSERT_EQ(fi_writedata(p.a.ep, out.data(), n, nullptr, 0xda7a0000 + n, p.a_to_b, base + off, fi_mr_key(mr), &ctx),
              0);
    at_initiator();
    at_target(off, n, 0xda7a0000 + n, seed);
  }
  // Injected: the buffer may change at once; no completion at the initiator.
  Bytes small(48);
  pattern(small.data(), small.size(), ++seed);
  ASSERT_EQ(fi_inject_writedata(p.a.ep, small.data(), small.size(), 77, p.a_to_b, base + 8, fi_mr_key(mr)), 0);
  std::fill(small.begin(), small.end(), 0);
  at_target(8, 48, 77, seed);
  // fi_writemsg with FI_REMOTE_CQ_DATA (and FI_COMPLETION).
  Bytes out(20000);
  pattern(out.data(), out.size(), ++seed);
  iovec iov{out.data(), out.size()};
  fi_rma_iov riov{base + 4096, out.size(), fi_mr_key(mr)};
  fi_msg_rma m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = p.a_to_b;
  m.rma_iov = &riov;
  m.rma_iov_count = 1;
  m.context = &ctx;
  m.data = 0xfeed;
  ASSERT_EQ(fi_writemsg(p.a.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION), 0);
  at_initiator();
  at_target(4096, out.size(), 0xfeed, seed);
  // Refused (a key that is none): the initiator's error entry and nothing at
  // the target, whose next entry is the next good write's.
  ASSERT_EQ(fi_writedata(p.a.ep, out.data(), 64, nullptr, 5, p.a_to_b, base, fi_mr_key(mr) ^ 0x5555, &ctx), 0);
  EXPECT_EQ(read_one(p.a.cq, &e, {p.b.cq}), -FI_EAVAIL);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(p.a.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_EIO);
  pattern(out.data(), 100, ++seed);
  ASSERT_EQ(fi_writedata(p.a.ep, out.data(), 100, nullptr, 6, p.a_to_b, base + 200000, fi_mr_key(mr), &ctx), 0);
  at_initiator();
  at_target(200000, 100, 6, seed);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST(OfiGetinfo, RmaNeedsVirtualAddressesAndProviderKeys) {
  fi_info* h = hints();
  h->caps |= FI_RMA;
  fi_info* got = nullptr;
  EXPECT_EQ(getinfo(h, &got), -FI_ENODATA);  // no mr_mode: offsets and chosen keys, which the NIC has not
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
  ASSERT_EQ(getinfo(h, &got), 0);
  EXPECT_EQ(got->caps & (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
            FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
  fi_freeinfo(got);
  fi_info* plain = hints();  // not asked, no mr_mode: not offered
  ASSERT_EQ(getinfo(plain, &got), 0);
  EXPECT_EQ(got->caps & FI_RMA, 0u);
  fi_freeinfo(got);
  fi_freeinfo(plain);
  fi_freeinfo(h);
}

TEST(OfiTagged, DirectedReceivesAndTheSameNodePath) {
  Pair p;
  Side c;  // a third endpoint, on node 0 like a: its rendezvous to a is a copy within the node
  open_side(c, 0);
  fi_addr_t b_to_c = insert(p.b, c), c_to_b = insert(c, p.b);
  fi_addr_t a_to_c = insert(p.a, c), c_to_a = insert(c, p.a);
  Bytes from_a(80, 'a'), from_c(80, 'c'), in(80);
  int ctx = 0;
  ASSERT_EQ(fi_trecv(p.b.ep, in.data(), in.size(), nullptr, b_to_c, 7, 0, &ctx), 0);
  ASSERT_EQ(fi_tsend(p.a.ep, from_a.data(), 80, nullptr, p.a_to_b, 7, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  // a's message arrived first, but the receive waits for c's.
  ASSERT_EQ(fi_tsend(c.ep, from_c.data(), 80, nullptr, c_to_b, 7, nullptr), 0);
  fi_addr_t src = 0;
  ASSERT_EQ(read_one(p.b.cq, &e, {c.cq}, &src), 1);
  EXPECT_EQ(src, b_to_c);
  EXPECT_EQ(in[0], 'c');
  ASSERT_EQ(fi_trecv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 7, 0, &ctx), 0);
  ASSERT_EQ(read_one(p.b.cq, &e, {}, &src), 1);
  EXPECT_EQ(src, p.b_to_a);
  EXPECT_EQ(in[0], 'a');
  ASSERT_EQ(read_one(c.cq, &e, {p.b.cq}), 1);
  // c -> a within node 0: rendezvous by kOpCopy between the two slots.
  Bytes big(300000), got(300000);
  pattern(big.data(), big.size(), 21);
  ASSERT_EQ(fi_recv(p.a.ep, got.data(), got.size(), nullptr, a_to_c, nullptr), 0);
  ASSERT_EQ(fi_send(c.ep, big.data(), big.size(), nullptr, c_to_a, nullptr), 0);
  ASSERT_EQ(read_one(p.a.cq, &e, {c.cq}), 1);
  EXPECT_TRUE(check_pattern(got.data(), got.size(), 21));
  ASSERT_EQ(read_one(c.cq, &e, {p.a.cq}), 1);
}

TEST(OfiMr, RegisteredBuffersAsDescriptors) {
  Pair p;
  const size_t n = 1u << 20;
  Bytes out(n), in(n);
  pattern(out.data(), n, 31);
  fid_mr *smr = nullptr, *rmr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.a.domain, out.data(), n, FI_SEND, 0, 0, 0, &smr, nullptr), 0);
  ASSERT_EQ(fi_mr_reg(p.b.domain, in.data(), n, FI_RECV, 0, 0, 0, &rmr, nullptr), 0);
  EXPECT_NE(fi_mr_key(smr), 0u);
  EXPECT_NE(fi_mr_key(rmr), 0u);
  // Bad arguments are refused.
  fid_mr* other = nullptr;
  EXPECT_EQ(fi_mr_reg(p.b.domain, nullptr, n, FI_RECV, 0, 0, 0, &other, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(p.b.domain, in.data(), 0, FI_RECV, 0, 0, 0, &other, nullptr), -FI_EINVAL);
  Bytes spare(8192);
  ASSERT_EQ(fi_mr_reg(p.b.domain, spare.data(), spare.size(), FI_RECV | FI_REMOTE_WRITE, 0, 0, 0, &other, nullptr), 0);
  EXPECT_EQ(fi_close(&other->fid), 0);
  for (int round = 0; round < 2; ++round) {
    std::memset(in.data(), 0, n);
    ASSERT_EQ(fi_recv(p.b.ep, in.data(), n, fi_mr_desc(rmr), FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(fi_send(p.a.ep, out.data(), n, fi_mr_desc(smr), p.a_to_b, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
    EXPECT_TRUE(check_pattern(in.data(), n, 31));
    ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  }
  EXPECT_EQ(fi_close(&smr->fid), 0);
  EXPECT_EQ(fi_close(&rmr->fid), 0);
}

// Registers one-page buffers with the domain until the NIC (its per-slot
// key table) or the slot heap refuses; how many it took. Closes them.
size_t register_until_refused(fid_domain* domain) {
  std::vector<Bytes> pages;
  std::vector<fid_mr*> mrs;
  for (;;) {
    pages.emplace_back(4096);
    fid_mr* mr = nullptr;
    if (fi_mr_reg(domain, pages.back().data(), 4096, FI_RECV | FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr) != 0) break;
    mrs.push_back(mr);
    if (mrs.size() > 4 * 256) break;  // far past abi::kMaxRegistrations: something is wrong
  }
  for (fid_mr* mr : mrs) EXPECT_EQ(fi_close(&mr->fid), 0);
  return mrs.size();
}

// Rendezvous without descs go through bounce buffers in the slot heap, kept
// registered from one message to the next (host/ofi/ep.cpp: recycle): many
// messages of several sizes both ways, from two peers into one receiver,
// every byte checked; the kept buffers give their NIC keys back when the
// application registers memory (as many registrations succeed as on a fresh
// domain), and messages still flow afterwards.
TEST(OfiMsg, KeptBounceBuffersAreReusedAndGiveWay) {
  size_t fresh = 0;
  {
    Side s;
    open_side(s, 1);
    fresh = register_until_refused(s.domain);
  }
  ASSERT_GT(fresh, 100u);
  Pair p;
  Side c;  // a second peer of b's, on node 0 beside a
  open_side(c, 0);
  const fi_addr_t c_to_b = insert(c, p.b);
  (void)insert(p.b, c);
  auto send_from = [](fid_ep* ep, fi_addr_t to) {
    return [ep, to](void* buf, size_t len, void* ctx) { return fi_send(ep, buf, len, nullptr, to, ctx); };
  };
  const size_t sizes[] = {kEagerMax + 1, 65536, 100000, 1u << 20, 65536, 3u << 18};
  for (int round = 0; round < 3; ++round)
    for (size_t n : sizes) {
      fi_cq_tagged_entry got{};
      p.exchange(n, n, send_from(p.a.ep, p.a_to_b), got);
      EXPECT_EQ(got.len, n);
      // b -> a, and c -> b: the same sizes from another peer.
      Bytes out(n), in(n, 0);
      pattern(out.data(), n, uint32_t(n) + 2);
      ASSERT_EQ(fi_recv(p.a.ep, in.data(), n, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      ASSERT_EQ(fi_send(p.b.ep, out.data(), n, nullptr, p.b_to_a, nullptr), 0);
      fi_cq_tagged_entry e{};
      ASSERT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
      ASSERT_EQ(read_one(p.b.cq, &e, {p.a.cq}), 1);
      EXPECT_TRUE(check_pattern(in.data(), n, uint32_t(n) + 2)) << "b -> a, " << n;
      std::memset(in.data(), 0, n);
      pattern(out.data(), n, uint32_t(n) + 3);
      ASSERT_EQ(fi_recv(p.b.ep, in.data(), n, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      ASSERT_EQ(fi_send(c.ep, out.data(), n, nullptr, c_to_b, nullptr), 0);
      ASSERT_EQ(read_one(p.b.cq, &e, {c.cq}), 1);
      ASSERT_EQ(read_one(c.cq, &e, {p.b.cq}), 1);
      EXPECT_TRUE(check_pattern(in.data(), n, uint32_t(n) + 3)) << "c -> b, " << n;
    }
  // b now keeps bounce buffers registered (remote-writable ones for a and
  // for c, local ones for its sends): they give way to the application's.
  EXPECT_EQ(register_until_refused(p.b.domain), fresh);
  for (size_t n : sizes) {
    fi_cq_tagged_entry got{};
    p.exchange(n, n, send_from(p.a.ep, p.a_to_b), got);
    EXPECT_EQ(got.len, n);
  }
}

// FI_PROGRESS_AUTO, when the hints ask for it: the domain's own thread runs
// progress, so what needs the peer's provider goes on while that
// application never calls it -- a rendezvous into a receive posted before
// (CTS, FIN, the copy into the buffer), and a read it serves (kReadReq).
// The peer's completions wait in its CQ for it. Without the hint,
// progress stays manual.
TEST(OfiProgress, AutoProgressMovesDataWhileThePeerNeverCallsIn) {
  {
    fi_info *h = hints(), *info = nullptr;
    ASSERT_EQ(getinfo(h, &info), 0);
    EXPECT_EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
    EXPECT_EQ(info->domain_attr->control_progress, FI_PROGRESS_MANUAL);
    fi_freeinfo(info);
    fi_freeinfo(h);
  }
  Options o;
  o.rma = true;
  o.auto_progress = true;
  Pair p(o);
  EXPECT_EQ(p.b.info->domain_attr->data_progress, FI_PROGRESS_AUTO);
  EXPECT_EQ(p.b.info->domain_attr->control_progress, FI_PROGRESS_AUTO);
  // b posts a receive, then never calls the provider until the data is there.
  constexpr size_t kBig = size_t(2) << 20;  // above kStreamMax: a rendezvous
  Bytes out(kBig), in(kBig, 0);
  pattern(out.data(), kBig, 91);
  int rctx = 0, sctx = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), kBig, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(fi_send(p.a.ep, out.data(), kBig, nullptr, p.a_to_b, &sctx), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(read_one(p.a.cq, &e, {}), 1) << "the send needs b's CTS";
  EXPECT_EQ(e.op_context, &sctx);
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (!check_pattern(in.data(), kBig, 91) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(check_pattern(in.data(), kBig, 91)) << "b's buffer, before b ever read its CQ";
  ASSERT_EQ(fi_cq_read(p.b.cq, &e, 1), 1);
  EXPECT_EQ(e.op_context, &rctx);
  EXPECT_EQ(e.len, kBig);
  // a reads b's registered buffer; b never calls in.
  Bytes src(65536), dst(65536, 0);
  pattern(src.data(), src.size(), 92);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(p.b.domain, src.data(), src.size(), FI_REMOTE_READ, 0, 0, 0, &mr, nullptr), 0);
  int ractx = 0;
  ASSERT_EQ(fi_read(p.a.ep, dst.data(), dst.size(), nullptr, p.a_to_b, reinterpret_cast<uint64_t>(src.data()),
                    fi_mr_key(mr), &ractx),
            0);
  ASSERT_EQ(read_one(p.a.cq, &e, {}), 1) << "the read needs b's provider to serve it";
  EXPECT_EQ(e.op_context, &ractx);
  EXPECT_TRUE(check_pattern(dst.data(), dst.size(), 92));
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST(OfiCq, SreadBlocksWithoutSpinningAndTimesOut) {
  Options o;
  o.wait = FI_WAIT_UNSPEC;
  Pair p(o);
  Bytes in(64), out(64, 9);
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  // Nothing comes: -FI_EAGAIN after the timeout.
  fi_cq_tagged_entry e{};
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fi_cq_sread(p.b.cq, &e, 1, nullptr, 300), -FI_EAGAIN);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);
  // A message 500 ms later wakes the reader; it spends almost no CPU meanwhile.
  std::thread sender([&] {
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(fi_send(p.a.ep, out.data(), out.size(), nullptr, p.a_to_b, nullptr), 0);
  });
  timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  t0 = std::chrono::steady_clock::now();
  ssize_t r = fi_cq_sread(p.b.cq, &e, 1, nullptr, 10000);
  auto waited = std::chrono::steady_clock::now() - t0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  sender.join();
  ASSERT_EQ(r, 1);
  EXPECT_EQ(in[0], 9);
  EXPECT_GE(waited, 400ms);
  double cpu_ms = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 50.0) << "fi_cq_sread used " << cpu_ms << " ms of CPU in a wait of ~500 ms";
  ASSERT_EQ(fi_cq_sread(p.a.cq, &e, 1, nullptr, 5000), 1);  // the send's completion
}

// ---- the unmodified Debian programs

// Runs `argv` with `env` added; output into `out` (a file). Returns the
// exit status (-1: killed or could not start).
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out) {
  std::vector<char*> a, e;
  std::vector<std::string> args = argv, envs = env;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  for (char** p = environ; *p; ++p) e.push_back(*p);
  for (auto& s : envs) e.push_back(s.data());
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0].c_str(), &fa, nullptr, a.data(), e.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
std::string tmp_file(const std::string& name) { return "/tmp/ofi-test-" + std::to_string(::getpid()) + "-" + name; }

TEST(OfiPrograms, FiInfoListsTheProviderAndLogsRefusals) {
  std::string out = tmp_file("fi_info");
  ASSERT_EQ(wait_exit(spawn({"fi_info", "-p", "ulnic"}, {"ULNIC_NODE=1"}, out), 30s), 0) << vipl_test::slurp(out);
  std::string text = vipl_test::slurp(out);
  EXPECT_NE(text.find("provider: ulnic\n"), std::string::npos) << text;
  EXPECT_NE(text.find("domain: ulnic1"), std::string::npos) << text;
  EXPECT_NE(text.find("FI_EP_RDM"), std::string::npos);
  EXPECT_NE(text.find("FI_EP_DGRAM"), std::string::npos);
  // Refusals say why in libfabric's log.
  wait_exit(spawn({"fi_info", "-p", "ulnic", "-c", "FI_ATOMIC"}, {"FI_LOG_LEVEL=info", "FI_LOG_PROV=ulnic"}, out), 30s);
  text = vipl_test::slurp(out);
  EXPECT_NE(text.find("refused: capabilities not supported: FI_ATOMIC"), std::string::npos) << text;
  std::remove(out.c_str());
}

// True once something listens on TCP `port` (/proc/net/tcp: state 0A);
// connecting to find out would take the server's only connection.
bool listening(int port) {
  std::ifstream f("/proc/net/tcp");
  std::string line;
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(f, line))
    if (line.find(want) != std::string::npos && line.find(" 0A ") != std::string::npos) return true;
  return false;
}

// fi_pingpong, server on node 1 and client on node 0, every default size,
// its own data check (-c). `extra`: endpoint type and environment.
void pingpong(const std::vector<std::string>& extra, const std::vector<std::string>& env) {
  const int port = 20000 + ::getpid() % 20000;
  std::vector<std::string> base = {"fi_pingpong", "-p", "ulnic", "-S", "all", "-I", "20", "-c"};
  base.insert(base.end(), extra.begin(), extra.end());
  std::vector<std::string> server = base, client = base;
  server.insert(server.end(), {"-B", std::to_string(port)});
  client.insert(client.end(), {"-P", std::to_string(port), "127.0.0.1"});
  std::vector<std::string> senv = env, cenv = env;
  senv.push_back("ULNIC_NODE=1");
  cenv.push_back("ULNIC_NODE=0");
  std::string sout = tmp_file("pp-server"), cout = tmp_file("pp-client");
  pid_t s = spawn(server, senv, sout);
  ASSERT_GT(s, 0);
  auto end = std::chrono::steady_clock::now() + 20s;
  while (!listening(port) && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(20ms);
  pid_t c = spawn(client, cenv, cout);
  ASSERT_GT(c, 0);
  int crc = wait_exit(c, 60s), src = wait_exit(s, 10s);
  std::string ctext = vipl_test::slurp(cout), stext = vipl_test::slurp(sout);
  EXPECT_EQ(crc, 0) << ctext;
  EXPECT_EQ(src, 0) << stext;
  for (const char* size : {"\n64 ", "\n256 ", "\n1k ", "\n4k ", "\n64k ", "\n1m "})
    EXPECT_NE(ctext.find(size), std::string::npos) << "no row for" << size << ":\n" << ctext;
  std::remove(sout.c_str());
  std::remove(cout.c_str());
}

TEST(OfiPrograms, FiPingpongDgramAllSizesVerified) { pingpong({}, {}); }

// As a user runs them: no FI_PROVIDER filter (NoUtilityLayerOverTheReliableDgram).
TEST(OfiPrograms, FiPingpongRdmAllSizesVerified) { pingpong({"-e", "rdm"}, {}); }
TEST(OfiPrograms, FiPingpongTaggedAllSizesVerified) { pingpong({"-e", "rdm", "-m", "tagged"}, {}); }

// The child of OfiSignals: its own SIGTERM handler, then the provider
// loaded (fi_getinfo), then abort(). Exit codes say what was wrong.
void on_term(int) {}
int signal_child() {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // dying of SIGABRT is the point; no core file for it
  ::signal(SIGTERM, on_term);
  fi_info* h = hints();
  fi_info* info = nullptr;
  (void)getinfo(h, &info);  // loads the provider whatever it finds
  fi_freeinfo(h);
  if (info) fi_freeinfo(info);
  struct sigaction a {};
  ::sigaction(SIGTERM, nullptr, &a);
  if (a.sa_handler != on_term) return 3;  // the application's handler was taken away
  ::sigaction(SIGABRT, nullptr, &a);
  if (a.sa_handler != SIG_DFL) return 4;  // someone else's handler is still there
  std::abort();
}

// Counters: every operation of a bound kind counts once when it ends, with
// or without a CQ entry (an inject has none); failures count apart;
// fi_cntr_wait returns at its threshold, on a new error (-FI_EAVAIL) or at
// its timeout; add/set change the values; the refusals.
TEST(OfiCntr, EachBoundKindCountsEveryEndAndErrorsApart) {
  Options o;
  o.rma = true;
  o.counters = true;
  Pair p(o);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  int ctx = 0;
  // Sends (eager: the sender's completion needs only the receiving NIC) and
  // one inject: five ends on a's transmit counter, four CQ entries.
  constexpr int kSends = 4;
  Bytes in(kSends * 256 + 256), out(256);
  pattern(out.data(), out.size(), 5);
  for (int i = 0; i <= kSends; ++i) ASSERT_EQ(fi_recv(p.b.ep, in.data() + i * 256, 256, nullptr, FI_ADDR_UNSPEC, &ctx), 0);
  for (int i = 0; i < kSends; ++i) ASSERT_EQ(fi_send(p.a.ep, out.data(), 256, nullptr, p.a_to_b, &ctx), 0);
  ASSERT_EQ(fi_inject(p.a.ep, out.data(), 256, p.a_to_b), 0);
  ASSERT_EQ(fi_cntr_wait(p.a.tx_cntr, kSends + 1, 20000), 0);
  EXPECT_EQ(fi_cntr_read(p.a.tx_cntr), uint64_t(kSends + 1));
  EXPECT_EQ(fi_cntr_readerr(p.a.tx_cntr), 0u);
  for (int i = 0; i < kSends; ++i) EXPECT_EQ(read_one(p.a.cq, &e, {}), 1);
  EXPECT_EQ(fi_cq_read(p.a.cq, &e, 1), -FI_EAGAIN) << "the inject made a CQ entry";
  // The receiver's counter, driven by its own wait (manual progress).
  ASSERT_EQ(fi_cntr_wait(p.b.rx_cntr, kSends + 1, 20000), 0);
  EXPECT_EQ(fi_cntr_read(p.b.rx_cntr), uint64_t(kSends + 1));
  for (int i = 0; i <= kSends; ++i) {
    EXPECT_EQ(read_one(p.b.cq, &e, {}), 1);
    EXPECT_TRUE(check_pattern(in.data() + i * 256, 256, 5)) << "message " << i;
  }
  EXPECT_EQ(fi_cntr_read(p.b.tx_cntr), 0u) << "the receiver's transmit counter moved";
  // A write and a read count on the same transmit counter (the read is
  // served by b's provider: b's counter reads drive its progress).
  fid_mr *open_b = nullptr, *closed_b = nullptr;
  Bytes target(8192, 0), closed(8192, 0x33), local(4096, 0);
  ASSERT_EQ(fi_mr_reg(p.b.domain, target.data(), target.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &open_b,
                      nullptr), 0);
  ASSERT_EQ(fi_mr_reg(p.b.domain, closed.data(), closed.size(), FI_SEND | FI_RECV, 0, 0, 0, &closed_b, nullptr), 0);
  const uint64_t base = reinterpret_cast<uint64_t>(target.data());
  ASSERT_EQ(fi_write(p.a.ep, out.data(), 256, nullptr, p.a_to_b, base + 64, fi_mr_key(open_b), &ctx), 0);
  ASSERT_EQ(fi_read(p.a.ep, local.data(), 256, nullptr, p.a_to_b, base + 64, fi_mr_key(open_b), &ctx), 0);
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (fi_cntr_read(p.a.tx_cntr) < uint64_t(kSends + 3) && std::chrono::steady_clock::now() < until)
    (void)fi_cntr_read(p.b.rx_cntr);
  ASSERT_EQ(fi_cntr_read(p.a.tx_cntr), uint64_t(kSends + 3));
  EXPECT_TRUE(check_pattern(local.data(), 256, 5)) << "the read";
  for (int i = 0; i < 2; ++i) EXPECT_EQ(read_one(p.a.cq, &e, {p.b.cq}), 1);
  // A write the target's NIC refuses (no FI_REMOTE_WRITE): an error, which
  // ends a wait for a value that will not come.
  ASSERT_EQ(fi_write(p.a.ep, out.data(), 64, nullptr, p.a_to_b, reinterpret_cast<uint64_t>(closed.data()),
                     fi_mr_key(closed_b), &ctx), 0);
  EXPECT_EQ(fi_cntr_wait(p.a.tx_cntr, kSends + 4, 20000), -FI_EAVAIL);
  EXPECT_EQ(fi_cntr_readerr(p.a.tx_cntr), 1u);
  EXPECT_EQ(fi_cntr_read(p.a.tx_cntr), uint64_t(kSends + 3));
  EXPECT_EQ(read_one(p.a.cq, &e, {}), -FI_EAVAIL);
  EXPECT_EQ(fi_cq_readerr(p.a.cq, &err, 0), 1);
  EXPECT_EQ(closed[0], 0x33);
  // A canceled receive is an error of the receive counter.
  int cctx = 0;
  ASSERT_EQ(fi_recv(p.b.ep, in.data(), 256, nullptr, FI_ADDR_UNSPEC, &cctx), 0);
  ASSERT_EQ(fi_cancel(&p.b.ep->fid, &cctx), 0);
  EXPECT_EQ(fi_cntr_readerr(p.b.rx_cntr), 1u);
  EXPECT_EQ(read_one(p.b.cq, &e, {}), -FI_EAVAIL);
  EXPECT_EQ(fi_cq_readerr(p.b.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECANCELED);
  // Nothing more to come: the wait times out, having waited.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fi_cntr_wait(p.a.tx_cntr, 1000, 50), -FI_ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  // add, set, adderr, seterr.
  EXPECT_EQ(fi_cntr_add(p.a.tx_cntr, 10), 0);
  EXPECT_EQ(fi_cntr_read(p.a.tx_cntr), uint64_t(kSends + 13));
  EXPECT_EQ(fi_cntr_set(p.a.tx_cntr, 3), 0);
  EXPECT_EQ(fi_cntr_read(p.a.tx_cntr), 3u);
  EXPECT_EQ(fi_cntr_wait(p.a.tx_cntr, 3, 0), 0) << "a threshold already reached";
  EXPECT_EQ(fi_cntr_adderr(p.a.tx_cntr, 2), 0);
  EXPECT_EQ(fi_cntr_readerr(p.a.tx_cntr), 3u);
  EXPECT_EQ(fi_cntr_seterr(p.a.tx_cntr, 0), 0);
  EXPECT_EQ(fi_cntr_readerr(p.a.tx_cntr), 0u);
  // Refusals: a bound counter does not close; binding an enabled endpoint,
  // remote-RMA counters, another domain's counter; attributes it lacks.
  EXPECT_EQ(fi_close(&p.a.tx_cntr->fid), -FI_EBUSY);
  EXPECT_EQ(fi_ep_bind(p.a.ep, &p.a.rx_cntr->fid, FI_RECV), -FI_EOPBADSTATE);
  fid_ep* spare = nullptr;
  ASSERT_EQ(fi_endpoint(p.a.domain, p.a.info, &spare, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(spare, &p.a.rx_cntr->fid, FI_REMOTE_WRITE), -FI_ENOSYS);
  EXPECT_EQ(fi_ep_bind(spare, &p.a.rx_cntr->fid, FI_REMOTE_READ | FI_RECV), -FI_ENOSYS);
  EXPECT_EQ(fi_ep_bind(spare, &p.b.rx_cntr->fid, FI_RECV), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(spare, &p.a.rx_cntr->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(spare, &p.a.rx_cntr->fid, FI_RECV), 0);
  EXPECT_EQ(fi_close(&spare->fid), 0);  // its binding goes with it
  fid_cntr* c = nullptr;
  fi_cntr_attr bad{};
  bad.events = fi_cntr_events(1);
  EXPECT_EQ(fi_cntr_open(p.a.domain, &bad, &c, nullptr), -FI_ENOSYS);
  bad = fi_cntr_attr{};
  bad.wait_obj = FI_WAIT_FD;
  EXPECT_EQ(fi_cntr_open(p.a.domain, &bad, &c, nullptr), -FI_ENOSYS);
  bad = fi_cntr_attr{};
  bad.flags = 1;
  EXPECT_EQ(fi_cntr_open(p.a.domain, &bad, &c, nullptr), -FI_EINVAL);
  ASSERT_EQ(fi_cntr_open(p.a.domain, nullptr, &c, nullptr), 0);  // defaults
  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&open_b->fid), 0);
  EXPECT_EQ(fi_close(&closed_b->fid), 0);
}

// A process that loaded the provider and crashes dies of its signal (the
// default action), not in libinfinipath's handler, which exit()s from the
// signal (or deadlocks on malloc's lock) and leaves a *.btr file behind.
TEST(OfiSignals, ACrashAfterLoadingTheProviderDiesOfItsSignal) {
  const std::string dir = ::testing::TempDir() + "ulnic-ofi-signals-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << std::strerror(errno);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(2);  // where a *.btr file would land
    ::execl("/proc/self/exe", "ofi_provider", "--signal-child", static_cast<char*>(nullptr));
    ::_exit(2);
  }
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL() << "the crashed child was still alive after 60 s (a handler that deadlocked)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
      << "child " << (WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                        : "died of signal " + std::to_string(WTERMSIG(status)))
      << " (3: its own SIGTERM handler was replaced; 4: SIGABRT still had a handler)";
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename());
  EXPECT_TRUE(left.empty()) << "the crash left " << left.size() << " file(s), e.g. " << (left.empty() ? "" : left[0]);
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--signal-child") {
    ::setenv("FI_PROVIDER_PATH", ULNIC_TEST_LIBDIR, 1);
    return signal_child();
  }
  ::testing::InitGoogleTest(&argc, argv);
  // Before libfabric's first call: it reads its environment once.
  ::setenv("FI_PROVIDER_PATH", ULNIC_TEST_LIBDIR, 1);
  ::testing::AddGlobalTestEnvironment(new vipl_test::ClusterEnvironment("ofi", 2));
  return RUN_ALL_TESTS();
}
