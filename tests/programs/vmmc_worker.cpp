// vmmc_worker: a VMMC process the integration tests drive line by line on
// stdin; one JSON line answers each command on stdout.
//
//   export NAME SIZE [notify] [malloc] [allow=NODE:PID,...]   -> {"ok":1,"handle":H} | {"status":S,...}
//   unexport NAME
//   import NODE NAME [TIMEOUT_MS]                             -> {"ok":1,"import":I,"length":L}
//   unimport I
//   send I OFF LEN SEED [notify] [malloc|heap=AT] [async=K]   K sends in flight (each notifying if
//                                                              notify), LEN bytes each, consecutive
//                                                              offsets; data = pattern(SEED, byte offset);
//                                                              heap=AT: from one malloc'ed buffer at AT
//                                                              (remap: its pages fresh ones first, as a
//                                                              program that unmapped and mapped anew)
//   fill NAME SEED                                            our export := pattern(SEED, offset)
//   verify NAME OFF LEN SEED                                  -> {"ok":1} | {"ok":0,"first_bad":X}
//   notes K TIMEOUT_MS                                        wait until K notifications ran in all
//   raw I OFF LEN unregistered|proxy=ADDR|redirect=HANDLE                    a descriptor past the library (NIC checks)
//   redirect NAME OFF LEN                                     VMMC-2: the next send into that range goes
//                                                              to a fresh buffer (notes then say "redirect")
//   verify-redirect OFF LEN SEED                              check that buffer (OFF: export offset)
//   daemon-raw KIND                                           a malformed request to the daemon:
//                                                              type | unterminated | allowed | unimport | node
//   wait-timeouts N MS                                        N vmmc_wait(MS) with nothing coming
//   quit
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ulnic/vmmc.hpp"

namespace abi = ulnic::abi;
using ulnic::vmmc::Endpoint;

namespace {

uint8_t pattern(uint64_t seed, uint64_t byte) { return uint8_t((seed * 131 + byte * 31 + (byte >> 9) * 7) >> 2); }

struct Buffer {
  uint8_t* p = nullptr;
  size_t size = 0;
};

struct Note {
  std::string export_name;
  size_t offset, length;
  uint32_t src;
  bool in_export;  // false: the data is in the redirection buffer
};

struct RedirectBuffer {
  uint8_t* p = nullptr;
  size_t offset = 0, length = 0;
} g_redirect;

// What stays registered for the process's life (malloc'ed exports and
// sources: the library's TLB keeps them; export names, the notifications'
// argument): freed at exit after the endpoint has closed (declared before
// g_ep, so destroyed after it), and owned meanwhile, not leaked.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
std::vector<std::unique_ptr<uint8_t, FreeDeleter>> g_kept;
std::deque<std::string> g_export_names;
std::unique_ptr<Endpoint> g_ep;
std::map<std::string, Buffer> g_exports;
std::vector<Note> g_notes;
std::vector<std::pair<vmmc_proxy_t, size_t>> g_imports;

void on_note(void* arg, void* data, size_t offset, size_t length, uint32_t src) {
  const std::string& name = *static_cast<std::string*>(arg);
  bool in_export = g_exports.count(name) && data == g_exports[name].p + offset;
  bool in_redirect = g_redirect.p && data == g_redirect.p + (offset - g_redirect.offset);
  if (!in_export && !in_redirect) std::fprintf(stderr, "vmmc_worker: a note points nowhere we know\n");
  g_notes.push_back(Note{name, offset, length, src, in_export});
}

void status(int st) {
  if (st == VMMC_OK) std::printf("{\"ok\":1}\n");
  else std::printf("{\"ok\":0,\"status\":%d,\"error\":\"%s\",\"why\":\"%s\"}\n", st, vmmc_strerror(st), g_ep->error().c_str());
}

uint8_t* memory(size_t n, bool use_malloc) {
  if (use_malloc) {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) & ~size_t(4095)));
    if (p) g_kept.emplace_back(p);
    return p;
  }
  return static_cast<uint8_t*>(g_ep->nic().alloc(n, 4096));
}

void cmd_export(std::istringstream& in) {
  std::string name, opt;
  size_t size = 0;
  in >> name >> size;
  bool notify = false, use_malloc = false;
  std::vector<vmmc_importer> allowed;
  while (in >> opt) {
    if (opt == "notify") notify = true;
    else if (opt == "malloc") use_malloc = true;
    else if (opt.rfind("allow=", 0) == 0) {
      std::istringstream list(opt.substr(6));
      for (std::string item; std::getline(list, item, ',');) {
        vmmc_importer imp{};
        std::sscanf(item.c_str(), "%u:%u", &imp.node, &imp.pid);
        allowed.push_back(imp);
      }
    }
  }
  uint8_t* p = memory(size, use_malloc);
  if (!p) return status(VMMC_ERR_NO_RESOURCES);
  std::memset(p, 0, size);
  auto* name_copy = &g_export_names.emplace_back(name);  // lives as long as the process
  int st = g_ep->export_buffer(name, p, size, allowed, notify ? on_note : nullptr, name_copy);
  if (st != VMMC_OK) return status(st);
  g_exports[name] = Buffer{p, size};
  std::printf("{\"ok\":1,\"pid\":%d}\n", int(::getpid()));
}

void cmd_send(std::istringstream& in) {
  size_t index = 0, off = 0, len = 0;
  uint64_t seed = 0;
  in >> index >> off >> len >> seed;
  int flags = 0, async = 0;
  bool use_malloc = false, remap = false;
  long at = -1;  // heap=AT: send from a persistent malloc'ed buffer at offset AT
  for (std::string opt; in >> opt;) {
    if (opt == "notify") flags |= VMMC_NOTIFY;
    else if (opt == "remap") remap = true;
    else if (opt == "malloc") use_malloc = true;
    else if (opt.rfind("async=", 0) == 0) async = std::atoi(opt.c_str() + 6);
    else if (opt.rfind("heap=", 0) == 0) at = std::atol(opt.c_str() + 5);
  }
  if (index >= g_imports.size()) return status(VMMC_ERR_BAD_REQUEST);
  int count = async > 0 ? async : 1;
  size_t total = len * size_t(count);
  static uint8_t* persistent = static_cast<uint8_t*>(std::aligned_alloc(4096, 4 << 20));
  if (at >= 0 && size_t(at) + total > (4u << 20)) return status(VMMC_ERR_BAD_REQUEST);
  if (at >= 0 && remap &&
      ::mmap(persistent, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    return status(VMMC_ERR_NO_RESOURCES);
  uint8_t* src = at >= 0 ? persistent + at : memory(total, use_malloc);
  if (!src) return status(VMMC_ERR_NO_RESOURCES);
  if (at >= 0) use_malloc = true;  // nothing to free
  for (size_t i = 0; i < total; ++i) src[i] = pattern(seed, off + i);
  vmmc_proxy_t dst = g_imports[index].first + off;
  int st = VMMC_OK;
  if (!async) {
    st = g_ep->send(src, dst, len, flags);
  } else {
    std::vector<vmmc_send_id> ids;
    for (int k = 0; k < count && st == VMMC_OK; ++k) {
      vmmc_send_id id = 0;
      st = g_ep->send_async(src + k * len, dst + k * len, len, flags, id);
      if (st == VMMC_OK) ids.push_back(id);
    }
    for (vmmc_send_id id : ids) {
      int s = g_ep->send_wait(id);
      if (st == VMMC_OK) st = s;
    }
  }
  // Sources from the slot heap go back; malloc'ed ones stay registered (the
  // library's TLB keeps them) until exit (g_kept).
  if (!use_malloc) g_ep->nic().free(src);
  if (st != VMMC_OK) return status(st);
  std::printf("{\"ok\":1,\"bounces\":%llu}\n", static_cast<unsigned long long>(g_ep->bounces()));
}

void cmd_raw(std::istringstream& in) {
  size_t index = 0, off = 0, len = 0;
  std::string what;
  in >> index >> off >> len >> what;
  abi::SqEntry e{};
  e.opcode = abi::kOpSend;
  e.length = uint32_t(len);
  e.user_data = 0xabc;
  static uint8_t unregistered[1 << 16];  // never registered: the NIC must refuse it
  e.src_addr = reinterpret_cast<uint64_t>(unregistered);
  e.dst_addr = index < g_imports.size() ? g_imports[index].first + off : 0;
  if (what.rfind("redirect=", 0) == 0) {  // a redirection on somebody else's export handle
    e = abi::SqEntry{};
    e.opcode = abi::kOpRedirect;
    e.dst_key = uint32_t(std::strtoul(what.c_str() + 9, nullptr, 0));
    e.length = uint32_t(len);
    e.src_addr = reinterpret_cast<uint64_t>(unregistered);
  } else if (what.rfind("proxy=", 0) == 0) {
    e.dst_addr = std::strtoull(what.c_str() + 6, nullptr, 0);
    uint8_t* src = memory(len, false);
    auto mr = g_ep->nic().register_memory(src, len, abi::kAccessLocal);
    if (!mr) return status(VMMC_ERR_NO_RESOURCES);
    e.src_addr = reinterpret_cast<uint64_t>(src);
  }
  auto c = g_ep->nic().run(e);
  if (!c) return std::printf("{\"ok\":0,\"error\":\"%s\"}\n", c.error().message.c_str()), void();
  std::printf("{\"ok\":%d,\"cq_status\":%u,\"status\":%d}\n", c->status == 0, c->status,
              ulnic::vmmc::status_of(c->status));
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto ep = Endpoint::open();
  if (!ep) return std::fprintf(stderr, "vmmc_worker: %s\n", ep.error().message.c_str()), 1;
  g_ep = std::move(*ep);
  std::printf("{\"ok\":1,\"node\":%u,\"slot\":%u,\"pid\":%d}\n", g_ep->node(), g_ep->nic().slot(), int(::getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit") break;
    if (cmd == "export") cmd_export(in);
    else if (cmd == "unexport") {
      std::string name;
      in >> name;
      status(g_ep->unexport(name));
    } else if (cmd == "import") {
      uint32_t node = 0;
      std::string name;
      int timeout = 10000;
      in >> node >> name >> timeout;
      vmmc_proxy_t proxy = 0;
      size_t len = 0;
      int st = g_ep->import(node, name, timeout, proxy, len);
      if (st != VMMC_OK) status(st);
      else {
        g_imports.emplace_back(proxy, len);
        std::printf("{\"ok\":1,\"import\":%zu,\"length\":%zu,\"proxy\":%llu}\n", g_imports.size() - 1, len,
                    static_cast<unsigned long long>(proxy));
      }
    } else if (cmd == "unimport") {
      size_t i = 0;
      in >> i;
      status(i < g_imports.size() ? g_ep->unimport(g_imports[i].first) : VMMC_ERR_BAD_REQUEST);
    } else if (cmd == "redirect") {
      std::string name;
      size_t off = 0, len = 0;
      in >> name >> off >> len;
      if (g_redirect.p) g_ep->nic().free(g_redirect.p);
      g_redirect = RedirectBuffer{memory(len, false), off, len};
      if (!g_redirect.p) { status(VMMC_ERR_NO_RESOURCES); continue; }
      std::memset(g_redirect.p, 0, len);
      status(g_ep->redirect(name, off, len, g_redirect.p));
    } else if (cmd == "verify-redirect") {
      size_t off = 0, len = 0;
      uint64_t seed = 0;
      in >> off >> len >> seed;
      long bad = -1;
      if (!g_redirect.p || off < g_redirect.offset || off + len > g_redirect.offset + g_redirect.length) bad = 0;
      for (size_t i = off; bad < 0 && i < off + len; ++i)
        if (g_redirect.p[i - g_redirect.offset] != pattern(seed, i)) bad = long(i);
      std::printf("{\"ok\":%d,\"first_bad\":%ld}\n", bad < 0, bad);
    } else if (cmd == "wait-timeouts") {  // N waits of MS each with nothing arriving
      int n = 0, ms = 0, timeouts = 0;
      in >> n >> ms;
      for (int i = 0; i < n; ++i) timeouts += g_ep->wait(ms) == -VMMC_ERR_TIMEOUT;
      std::printf("{\"ok\":%d,\"timeouts\":%d}\n", timeouts == n, timeouts);
    } else if (cmd == "daemon-raw") {
      std::string kind;
      in >> kind;
      abi::OwnerRequest q{};
      q.type = abi::kReqExport;
      std::snprintf(q.name, sizeof q.name, "raw");
      if (kind == "type") q.type = 99;
      else if (kind == "unterminated") std::memset(q.name, 'x', sizeof q.name);
      else if (kind == "allowed") q.num_allowed = 9;
      else if (kind == "unimport") q.type = abi::kReqUnimport, q.va = 0x123;
      else if (kind == "node") q.type = abi::kReqImport, q.node = 1000;
      auto r = g_ep->nic().call_daemon(q);
      if (!r) std::printf("{\"ok\":0,\"error\":\"%s\"}\n", r.error().message.c_str());
      else std::printf("{\"ok\":%d,\"daemon_status\":%u}\n", r->status == 0, r->status);
    } else if (cmd == "send") cmd_send(in);
    else if (cmd == "raw") cmd_raw(in);
    else if (cmd == "fill" || cmd == "verify") {
      std::string name;
      size_t off = 0, len = 0;
      uint64_t seed = 0;
      in >> name;
      if (cmd == "verify") in >> off >> len;
      in >> seed;
      auto it = g_exports.find(name);
      if (it == g_exports.end()) { status(VMMC_ERR_NO_EXPORT); continue; }
      if (cmd == "fill") {
        for (size_t i = 0; i < it->second.size; ++i) it->second.p[i] = pattern(seed, i);
        status(VMMC_OK);
        continue;
      }
      long bad = -1;
      for (size_t i = off; i < off + len && i < it->second.size; ++i)
        if (it->second.p[i] != pattern(seed, i)) { bad = long(i); break; }
      if (off + len > it->second.size) bad = long(it->second.size);
      std::printf("{\"ok\":%d,\"first_bad\":%ld}\n", bad < 0, bad);
    } else if (cmd == "notes") {
      size_t want = 0;
      int timeout = 10000;
      in >> want >> timeout;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
      while (g_notes.size() < want && std::chrono::steady_clock::now() < deadline) {
        g_ep->poll();
        if (g_notes.size() < want) g_ep->wait(int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()) + 1);
      }
      g_ep->poll();
      std::printf("{\"ok\":%d,\"notes\":[", g_notes.size() >= want);
      for (size_t i = 0; i < g_notes.size(); ++i)
        std::printf("%s{\"export\":\"%s\",\"offset\":%zu,\"length\":%zu,\"src\":%u%s}", i ? "," : "",
                    g_notes[i].export_name.c_str(), g_notes[i].offset, g_notes[i].length, g_notes[i].src,
                    g_notes[i].in_export ? "" : ",\"in\":\"redirect\"");
      std::printf("],\"dropped\":%llu,\"redirect_hits\":%llu,\"redirect_copies\":%llu}\n",
                  static_cast<unsigned long long>(g_ep->nic().events_dropped()),
                  static_cast<unsigned long long>(g_ep->redirect_hits()),
                  static_cast<unsigned long long>(g_ep->redirect_copies()));
      g_notes.clear();
    } else {
      std::printf("{\"ok\":0,\"error\":\"unknown command\"}\n");
    }
  }
  return 0;
}
