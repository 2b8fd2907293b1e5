// fi_prov_ini and fi_getinfo: what the provider offers, checked against the
// application's hints. A hint it cannot honour is refused with -FI_ENODATA
// and a line in libfabric's log (FI_LOG_LEVEL=info or warn shows it) that
// says which.
#include <dlfcn.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ofi.h"

namespace ulnic::ofi {
namespace {

constexpr uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kPrimaryCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_RMA | FI_READ | FI_WRITE;
constexpr uint64_t kSecondaryCaps =
    FI_SOURCE | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint64_t kCaps = kPrimaryCaps | kSecondaryCaps;

// RMA addresses are virtual and keys the NIC's: FI_RMA only where the
// application takes both (FI_MR_VIRT_ADDR and FI_MR_PROV_KEY, or the old
// FI_MR_BASIC, which is both).
bool rma_mr_mode(uint32_t version, const fi_info* h) {
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) return true;
  const int m = h && h->domain_attr ? h->domain_attr->mr_mode : 0;
  return m == FI_MR_BASIC || (m & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)) == (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
}

std::string cluster_name() {
  const char* c = std::getenv("ULNIC_CLUSTER");
  return c && *c ? c : "default";
}
bool daemon_runs(const std::string& cluster, uint32_t node) {
  struct stat st;  // the NIC is there if its daemon's socket is: a cheap look that takes no slot
  return ::stat(daemon_socket_path(cluster, node).c_str(), &st) == 0;
}

// The node whose NIC this process uses: $ULNIC_NODE; else, under a parallel
// launcher that says the process's local rank (Open MPI, MPICH/Hydra,
// Slurm), rank k takes the k-th (mod their number) of the cluster's nodes
// whose daemons run on this machine, so one mpirun spreads its ranks over
// the NICs; else node 0.
int node_number(const std::string& cluster) {
  const char* n = std::getenv("ULNIC_NODE");
  if (n && *n) return std::atoi(n);
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* r = std::getenv(var);
    if (!r || !*r) continue;
    std::vector<int> here;
    for (uint32_t k = 0; k < abi::kMaxNodes; ++k)
      if (daemon_runs(cluster, k)) here.push_back(int(k));
    return here.empty() ? 0 : here[size_t(std::atoi(r)) % here.size()];
  }
  return 0;
}

// Refusals are logged at "info": an application probing several providers
// sees them only when it asks (FI_LOG_LEVEL=info FI_LOG_PROV=ulnic).
int refuse(const char* what) {
  ULNIC_INFO(FI_LOG_CORE, "refused: %s\n", what);
  return -FI_ENODATA;
}
int refuse_caps(uint64_t caps) {
  char buf[512];
  fi_tostr_r(buf, sizeof buf, &caps, FI_TYPE_CAPS);
  ULNIC_INFO(FI_LOG_CORE, "refused: capabilities not supported: %s\n", buf);
  return -FI_ENODATA;
}

char* dup(const std::string& s) { return strdup(s.c_str()); }

// Checks the hints; 0 if an info of type `type` can honour them.
int check_hints(uint32_t version, const fi_info* h, fi_ep_type type) {
  if (!h) return 0;
  uint64_t extra = h->caps & ~kCaps;
  if (extra) return refuse_caps(extra);
  if ((h->caps & kRmaCaps) && type == FI_EP_DGRAM) return -FI_ENODATA;  // RMA is for RDM endpoints
  if ((h->caps & kRmaCaps) && !rma_mr_mode(version, h))
    return refuse("FI_RMA without FI_MR_VIRT_ADDR and FI_MR_PROV_KEY (remote addresses are virtual, keys the NIC's)");
  if (h->addr_format != FI_FORMAT_UNSPEC) return refuse("address formats other than FI_FORMAT_UNSPEC");
  if (h->ep_attr) {
    if (h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != type) return -FI_ENODATA;
    if (h->ep_attr->protocol != FI_PROTO_UNSPEC) return refuse("a wire protocol other than FI_PROTO_UNSPEC");
    if (h->ep_attr->max_msg_size > kMaxMsg) return refuse("max_msg_size above 64 MiB");
    if (h->ep_attr->tx_ctx_cnt > 1 || h->ep_attr->rx_ctx_cnt > 1) return refuse("scalable endpoints (ctx_cnt > 1)");
    if (h->ep_attr->auth_key_size) return refuse("authorization keys");
  }
  if (h->domain_attr) {
    const fi_domain_attr* d = h->domain_attr;
    if (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_TABLE && d->av_type != FI_AV_MAP)
      return refuse("this AV type");
    if (d->cq_data_size > kCqDataSize) return refuse("cq_data_size above 8");
    if (d->name && std::strncmp(d->name, "ulnic", 5) != 0) return -FI_ENODATA;
  }
  if (h->fabric_attr && h->fabric_attr->name && std::strncmp(h->fabric_attr->name, "ulnic", 5) != 0)
    return -FI_ENODATA;
  if (h->tx_attr) {
    if (h->tx_attr->iov_limit > 1) return refuse("tx iov_limit above 1");
    if (h->tx_attr->inject_size > kEagerMax) return refuse("inject_size above the eager size");
    if (h->tx_attr->caps & ~kCaps) return refuse_caps(h->tx_attr->caps & ~kCaps);
  }
  if (h->rx_attr) {
    if (h->rx_attr->iov_limit > 1) return refuse("rx iov_limit above 1");
    if (h->rx_attr->caps & ~kCaps) return refuse_caps(h->rx_attr->caps & ~kCaps);
  }
  return 0;
}

fi_info* make_info(uint32_t version, const fi_info* h, fi_ep_type type, const std::string& cluster, int node) {
  fi_info* fi = fi_allocinfo();
  if (!fi) return nullptr;
  // Asked-for primary caps only (plus all secondary ones we have); none asked: all.
  uint64_t primary = h && (h->caps & kPrimaryCaps) ? h->caps & kPrimaryCaps : kPrimaryCaps;
  if (!rma_mr_mode(version, h) || type == FI_EP_DGRAM) primary &= ~kRmaCaps;
  if ((primary & (FI_MSG | FI_TAGGED)) && !(primary & (FI_SEND | FI_RECV))) primary |= FI_SEND | FI_RECV;
  if ((primary & FI_RMA) && !(primary & (FI_READ | FI_WRITE))) primary |= FI_READ | FI_WRITE;
  uint64_t secondary = h && h->caps ? h->caps & kSecondaryCaps : kSecondaryCaps;
  if (!(primary & FI_RMA)) secondary &= ~kRmaCaps;
  else if (!(secondary & (FI_REMOTE_READ | FI_REMOTE_WRITE))) secondary |= FI_REMOTE_READ | FI_REMOTE_WRITE;
  fi->caps = primary | secondary;
  fi->mode = 0;  // the provider uses none of the application's context or prefix space
  fi->addr_format = FI_FORMAT_UNSPEC;
  if (h && h->src_addr && h->src_addrlen == sizeof(Addr)) {
    fi->src_addr = std::malloc(sizeof(Addr));
    std::memcpy(fi->src_addr, h->src_addr, sizeof(Addr));
    fi->src_addrlen = sizeof(Addr);
  }
  if (h && h->dest_addr && h->dest_addrlen == sizeof(Addr)) {
    fi->dest_addr = std::malloc(sizeof(Addr));
    std::memcpy(fi->dest_addr, h->dest_addr, sizeof(Addr));
    fi->dest_addrlen = sizeof(Addr);
  }

  fi->tx_attr->caps = fi->caps;
  fi->tx_attr->op_flags = h && h->tx_attr ? h->tx_attr->op_flags & (FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_INJECT_COMPLETE) : 0;
  fi->tx_attr->msg_order = FI_ORDER_SAS;
  fi->tx_attr->comp_order = FI_ORDER_NONE;
  fi->tx_attr->inject_size = kEagerMax;
  fi->tx_attr->size = kSendBufs;
  fi->tx_attr->iov_limit = 1;
  fi->tx_attr->rma_iov_limit = 0;

  fi->rx_attr->caps = fi->caps;
  fi->rx_attr->op_flags = h && h->rx_attr ? h->rx_attr->op_flags & FI_COMPLETION : 0;
  fi->rx_attr->msg_order = FI_ORDER_SAS;
  fi->rx_attr->comp_order = FI_ORDER_NONE;
  fi->rx_attr->total_buffered_recv = kMaxUnexpectedBytes;
  fi->rx_attr->size = 1024;
  fi->rx_attr->iov_limit = 1;

  fi->ep_attr->type = type;
  fi->ep_attr->protocol = FI_PROTO_UNSPEC;
  fi->ep_attr->protocol_version = 1;
  fi->ep_attr->max_msg_size = kMaxMsg;
  fi->ep_attr->msg_prefix_size = 0;
  fi->ep_attr->max_order_raw_size = 0;
  fi->ep_attr->max_order_war_size = 0;
  fi->ep_attr->max_order_waw_size = 0;
  // All 64 tag bits match: the application's format if it asks for one,
  // else libfabric's generic one, 0xAAAA... (what tcp and udp report; Open MPI's OFI
  // MTL sizes its communicator ID from it, and 0 would mean no tag bits).
  fi->ep_attr->mem_tag_format = h && h->ep_attr && h->ep_attr->mem_tag_format ? h->ep_attr->mem_tag_format
                                                                               : 0xAAAAAAAAAAAAAAAAull;
  fi->ep_attr->tx_ctx_cnt = 1;
  fi->ep_attr->rx_ctx_cnt = 1;

  fi_domain_attr* d = fi->domain_attr;
  d->name = dup("ulnic" + std::to_string(node));
  // The Nic serializes under the domain's lock: any threading works.
  d->threading = h && h->domain_attr && h->domain_attr->threading ? h->domain_attr->threading : FI_THREAD_SAFE;
  // Manual unless the application asks for FI_PROGRESS_AUTO: then the
  // domain runs a progress thread (objects.cpp, auto_progress), which costs
  // a wake-up of its own per arrival on a host whose cores the NICs share.
  const auto asked = [&](fi_progress fi_domain_attr::*which) {
    return h && h->domain_attr && h->domain_attr->*which == FI_PROGRESS_AUTO ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
  };
  d->control_progress = asked(&fi_domain_attr::control_progress);
  d->data_progress = asked(&fi_domain_attr::data_progress);
  d->resource_mgmt = FI_RM_ENABLED;
  d->av_type = h && h->domain_attr && h->domain_attr->av_type ? h->domain_attr->av_type : FI_AV_TABLE;
  // No mode is required of the application: buffers without a desc are
  // copied (eager) or registered for the transfer (rendezvous). Older API
  // versions have an enum here; basic keys (the NIC's) are what we give.
  if (FI_VERSION_LT(version, FI_VERSION(1, 5)))
    d->mr_mode = FI_MR_BASIC;
  else
    d->mr_mode = !h || !h->domain_attr                ? 0
                 : h->domain_attr->mr_mode == FI_MR_BASIC ? FI_MR_BASIC
                 : h->domain_attr->mr_mode & (FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED);
  d->mr_key_size = 4;
  d->cq_data_size = kCqDataSize;
  d->cq_cnt = 64;
  d->cntr_cnt = 64;
  d->ep_cnt = kMaxEndpoints;
  d->tx_ctx_cnt = kMaxEndpoints;
  d->rx_ctx_cnt = kMaxEndpoints;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->mr_iov_limit = 1;
  d->mr_cnt = abi::kMaxRegistrations / 2;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;

  fi->fabric_attr->name = dup("ulnic-" + cluster);
  fi->fabric_attr->prov_version = kProvVersion;
  fi->fabric_attr->api_version = kApiVersion;
  return fi;
}

}  // namespace

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
            fi_info** info) {
  (void)node;
  (void)service;
  // node/service name the out-of-band host (fi_pingpong's socket), not a NIC address
  *info = nullptr;
  // The whole of the hints at FI_LOG_LEVEL=debug: what a refusal below refers to.
  if (hints && fi_log_enabled(&g_prov, FI_LOG_DEBUG, FI_LOG_CORE)) {
    char buf[4096];
    FI_LOG(&g_prov, FI_LOG_DEBUG, FI_LOG_CORE, "hints: %s\n", fi_tostr_r(buf, sizeof buf, hints, FI_TYPE_INFO));
  }
  if (FI_VERSION_LT(kApiVersion, version)) return refuse("an API version newer than 1.17");
  const std::string cluster = cluster_name();
  const int nodeno = node_number(cluster);
  if (nodeno < 0 || nodeno >= int(abi::kMaxNodes)) return refuse("ULNIC_NODE out of range");
  if (!daemon_runs(cluster, uint32_t(nodeno))) {
    ULNIC_INFO(FI_LOG_CORE, "no NIC: no daemon socket at %s (ULNIC_CLUSTER, ULNIC_NODE, ULNIC_RUNTIME_DIR)\n",
               daemon_socket_path(cluster, uint32_t(nodeno)).c_str());
    return -FI_ENODATA;
  }
  if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM &&
      hints->ep_attr->type != FI_EP_DGRAM)
    return refuse("endpoint types other than FI_EP_RDM and FI_EP_DGRAM");
  // libfabric asks core providers on behalf of a utility provider with
  // OFI_CORE_PROV_ONLY (bit 59 of flags; its ofi_util.h, not installed).
  // RXD asks for FI_EP_DGRAM to build an RDM endpoint on: ours is already
  // reliable and ordered, and libfabric lists "ulnic;ofi_rxd" before our own
  // RDM endpoint, so Open MPI and fi_pingpong -e rdm took the layer (whose
  // injects failed with -FI_ENOMEM). The native RDM endpoint is the one.
  const bool for_layering = flags & (uint64_t(1) << 59);
  fi_info* head = nullptr;
  fi_info** tail = &head;
  int last = -FI_ENODATA;
  for (fi_ep_type type : {FI_EP_RDM, FI_EP_DGRAM}) {
    if (type == FI_EP_DGRAM && for_layering) {
      last = refuse("FI_EP_DGRAM for a utility provider (ofi_rxd): the native FI_EP_RDM endpoint is reliable");
      continue;
    }
    int r = check_hints(version, hints, type);
    if (r) {
      last = r;
      continue;
    }
    fi_info* fi = make_info(version, hints, type, cluster, nodeno);
    if (!fi) {
      fi_freeinfo(head);
      return -FI_ENOMEM;
    }
    *tail = fi;
    tail = &fi->next;
  }
  if (!head) return last;
  *info = head;
  return 0;
}

namespace {
// libfabric links libinfinipath (its psm provider), whose constructor takes
// SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM for a handler that
// writes a backtrace file into the working directory and calls exit(): from
// inside the signal, so a crash in malloc deadlocks on malloc's lock rather
// than dying (a crashed test hung until its timeout), and a crash anywhere
// leaves no core and a stray *.btr file. A process that loads this provider
// gets the default action back for each of those signals whose handler is
// libinfinipath's; a handler of the application's own is left alone.
void restore_signals_psm_took() {
  for (int sig : {SIGILL, SIGABRT, SIGBUS, SIGSEGV, SIGINT, SIGTERM}) {
    struct sigaction a {};
    if (::sigaction(sig, nullptr, &a) != 0) continue;
    void* h = (a.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(a.sa_sigaction)
                                         : reinterpret_cast<void*>(a.sa_handler);
    if (a.sa_handler == SIG_DFL || a.sa_handler == SIG_IGN) continue;
    Dl_info where{};
    if (!::dladdr(h, &where) || !where.dli_fname || !std::strstr(where.dli_fname, "libinfinipath")) continue;
    ::signal(sig, SIG_DFL);
  }
}
}  // namespace

fi_provider g_prov = {
    .version = kProvVersion,
    .fi_version = kApiVersion,
    .context = {},
    .name = "ulnic",
    .getinfo = getinfo,
    .fabric = fabric_open,
    .cleanup = [] {},
};

}  // namespace ulnic::ofi

extern "C" {
FI_EXT_INI {
  ulnic::ofi::restore_signals_psm_took();
  fi_param_define(&ulnic::ofi::g_prov, "eager_size", FI_PARAM_SIZE_T,
                  "Messages up to this many bytes go eagerly, in one trip: one Long into the sender's lane at the "
                  "receiver, or fragments of %u bytes without one; larger ones are streamed through the lane "
                  "(up to 1 MiB, when it has room) or go by rendezvous. %u (eager in one ring entry only) .. %zu, "
                  "default %zu", unsigned(ulnic::ofi::kEagerMax), unsigned(ulnic::ofi::kEagerMax),
                  ulnic::ofi::kFragMsgMax, ulnic::ofi::kDefaultEagerSize);
  return &ulnic::ofi::g_prov;
}
}
