// ulnicd's VMMC part: exports and imports on behalf of its processes, and the
// mail it exchanges with other nodes' daemons (through the NICs) to match an
// importer with an exporter. The firmware tables are the truth for the data
// path; the records here say what to tear down when a process goes.
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "daemon/daemon.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic::daemon {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kImportRetry = std::chrono::milliseconds(500);
constexpr auto kImportDeadline = std::chrono::seconds(5);

std::string bounded(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

abi::OwnerReply reply_for(const abi::OwnerRequest& q, abi::VmmcStatus st, const std::string& msg = "") {
  abi::OwnerReply r{};
  r.magic = abi::kOwnerMagic;
  r.status = st;
  r.request_id = q.request_id;
  std::snprintf(r.message, sizeof r.message, "%s", msg.c_str());
  return r;
}

bool allowed(const std::vector<abi::VmmcImporter>& list, uint32_t node, uint32_t pid) {
  if (list.empty()) return true;
  return std::any_of(list.begin(), list.end(),
                     [&](const abi::VmmcImporter& i) { return i.node == node && (i.pid == 0 || i.pid == pid); });
}
}  // namespace

Result<void> Daemon::init_mail() {
  auto* area = reinterpret_cast<abi::MailArea*>(sram_->at(abi::kMailOffset));
  mail_out_.attach(&area->out_ring, area->out, abi::kMailCapacity);
  mail_in_.attach(&area->in_ring, area->in, abi::kMailCapacity);
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlMailbox;
  cmd.host_peer = uint32_t(peer_id_);
  cmd.host_vector = abi::kDaemonMailVector;
  auto r = ctrl_call(cmd);
  if (!r) return std::unexpected(r.error());
  if (r->status != abi::kCtrlOk) return fail("the firmware refused the mailbox (status " + std::to_string(r->status) + ")");
  return {};
}

void Daemon::owner_reply(uint32_t slot, const abi::OwnerReply& r) {
  if (!slots_[slot].conn) return;
  (void)send_with_fds(slots_[slot].conn.get(), &r, sizeof r, nullptr, 0);
}

// The owner's connection is readable: a request, its exit, or junk (which
// costs it the slot, as before VMMC).
void Daemon::serve_owner(uint32_t k) {
  abi::OwnerRequest q{};
  ssize_t r = ::recv(slots_[k].conn.get(), &q, sizeof q, MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r == 0 || r < 0) return detach(k);
  if (size_t(r) != sizeof q || q.magic != abi::kOwnerMagic) {
    log("slot " + std::to_string(k) + ": junk from its owner; detaching");
    return detach(k);
  }
  switch (q.type) {
    case abi::kReqExport:
      return owner_reply(k, do_export(k, q));
    case abi::kReqUnexport:
      return owner_reply(k, do_unexport(k, q));
    case abi::kReqImport:
      return start_import(k, q);
    case abi::kReqUnimport:
      return owner_reply(k, do_unimport(k, q));
    case abi::kReqUnetChannel:
    case abi::kReqUnetUnchannel:
      return owner_reply(k, do_unet_channel(k, q));
    default:
      return owner_reply(k, reply_for(q, abi::kVmmcBadRequest, "unknown request"));
  }
}

abi::OwnerReply Daemon::do_export(uint32_t k, const abi::OwnerRequest& q) {
  std::string name = bounded(q.name, sizeof q.name);
  if (name.empty() || name.size() == sizeof q.name) return reply_for(q, abi::kVmmcBadRequest, "bad export name");
  if (q.num_allowed > std::size(q.allowed)) return reply_for(q, abi::kVmmcBadRequest, "too many importers");
  if (std::any_of(exports_.begin(), exports_.end(), [&](const ExportRec& e) { return e.name == name; }))
    return reply_for(q, abi::kVmmcNameTaken, "'" + name + "' is already exported on this node");
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlExport;
  cmd.slot = k;
  cmd.vmmc.key = q.key;
  cmd.vmmc.va = q.va;
  cmd.vmmc.length = q.length;
  cmd.vmmc.notify = q.notify ? 1 : 0;
  auto r = ctrl_call(cmd);
  if (!r) return reply_for(q, abi::kVmmcUnreachable, "the NIC did not answer");
  if (r->status == abi::kCtrlBadRegion)
    return reply_for(q, abi::kVmmcBadRegion, "not registered memory with remote-write access");
  if (r->status == abi::kCtrlNoResources) return reply_for(q, abi::kVmmcNoResources, "export table full");
  if (r->status != abi::kCtrlOk) return reply_for(q, abi::kVmmcBadRequest, "refused by the NIC");
  ExportRec e;
  e.name = name;
  e.slot = k;
  e.generation = slots_[k].generation;
  e.handle = uint32_t(r->value);
  e.length = q.length;
  e.allowed.assign(q.allowed, q.allowed + q.num_allowed);
  exports_.push_back(std::move(e));
  log("slot " + std::to_string(k) + " exports '" + name + "' (" + std::to_string(q.length) + " bytes)");
  abi::OwnerReply ok = reply_for(q, abi::kVmmcOk);
  ok.handle = uint32_t(r->value);
  ok.length = q.length;
  return ok;
}

abi::OwnerReply Daemon::do_unexport(uint32_t k, const abi::OwnerRequest& q) {
  std::string name = bounded(q.name, sizeof q.name);
  auto it = std::find_if(exports_.begin(), exports_.end(),
                         [&](const ExportRec& e) { return e.name == name && e.slot == k; });
  if (it == exports_.end()) return reply_for(q, abi::kVmmcNoSuchExport, "you export nothing named '" + name + "'");
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlUnexport;
  cmd.vmmc.handle = it->handle;
  (void)ctrl_call(cmd);
  exports_.erase(it);
  return reply_for(q, abi::kVmmcOk);
}

void Daemon::start_import(uint32_t k, const abi::OwnerRequest& q) {
  std::string name = bounded(q.name, sizeof q.name);
  uint32_t nodes = sram_->boot_config().num_nodes;
  if (name.empty() || name.size() == sizeof q.name) return owner_reply(k, reply_for(q, abi::kVmmcBadRequest, "bad name"));
  if (nodes && q.node >= nodes)
    return owner_reply(k, reply_for(q, abi::kVmmcBadRequest, "no node " + std::to_string(q.node) + " in this cluster"));
  // A free proxy region: neither imported nor promised to a pending import.
  uint32_t index = 0;
  for (; index < abi::kMaxImports; ++index) {
    bool pending = std::any_of(pending_imports_.begin(), pending_imports_.end(),
                               [&](const PendingImport& p) { return p.slot == k && p.index == index; });
    if (!slots_[k].imports[index].used && !pending) break;
  }
  if (index == abi::kMaxImports) return owner_reply(k, reply_for(q, abi::kVmmcNoResources, "import table full"));
  PendingImport p;
  p.id = ++mail_seq_;
  p.owner_request = q.request_id;
  p.generation = slots_[k].generation;
  p.slot = k;
  p.index = index;
  p.node = q.node;
  p.name = name;
  p.next_try = Clock::now();
  p.deadline = Clock::now() + kImportDeadline;
  pending_imports_.push_back(std::move(p));
  retry_imports();
}

abi::OwnerReply Daemon::do_unimport(uint32_t k, const abi::OwnerRequest& q) {
  uint64_t region = q.va >> abi::kProxyShift;
  if (region == 0 || region > abi::kMaxImports || (q.va & ((uint64_t(1) << abi::kProxyShift) - 1)))
    return reply_for(q, abi::kVmmcBadRequest, "not a proxy base address");
  auto& imp = slots_[k].imports[region - 1];
  if (!imp.used) return reply_for(q, abi::kVmmcNotImported, "nothing imported there");
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlUnimport;
  cmd.slot = k;
  cmd.vmmc.index = uint32_t(region - 1);
  (void)ctrl_call(cmd);
  give_back(k, imp);
  return reply_for(q, abi::kVmmcOk);
}

// Tells the exporter's daemon that slot k dropped this import, and forgets it.
void Daemon::give_back(uint32_t k, SlotRec::Import& imp) {
  abi::MailVmmc m{};
  m.type = abi::kMailUnimport;
  m.handle = imp.handle;
  m.request_id = imp.id;
  m.importer_slot = k;
  send_mail(imp.node, m);
  imp = {};
}

void Daemon::send_mail(uint32_t node, const abi::MailVmmc& m) {
  if (node == opts_.node) {  // an import between two slots of this node: no NIC involved
    abi::MailVmmc copy = m;
    copy.magic = abi::kMailMagic;
    return handle_mail(node, copy);
  }
  // In order: behind what already waits for room in the outbox.
  mail_backlog_.emplace_back(node, m);
  flush_mail();
}

// Moves waiting mail into the outbox as far as it has room (the NIC empties
// it as fast as the link takes it); the rest waits for the next pass.
void Daemon::flush_mail() {
  bool sent = false;
  while (!mail_backlog_.empty()) {
    abi::MailMessage* out = mail_out_.reserve();
    if (!out) break;
    const auto& [node, m] = mail_backlog_.front();
    std::memset(out, 0, sizeof *out);
    out->peer = uint16_t(node);
    out->length = sizeof m;
    std::memcpy(out->data, &m, sizeof m);
    reinterpret_cast<abi::MailVmmc*>(out->data)->magic = abi::kMailMagic;
    mail_out_.push();
    mail_backlog_.pop_front();
    sent = true;
  }
  if (!sent) return;
  mail_out_.publish();
  ring_nic(abi::kVectorControl);
}

void Daemon::read_mail() {
  bool any = false;
  while (const abi::MailMessage* in = mail_in_.peek()) {
    abi::MailMessage copy = *in;
    mail_in_.pop();
    any = true;
    abi::MailVmmc m{};
    if (copy.length != sizeof m) continue;
    std::memcpy(&m, copy.data, sizeof m);
    handle_mail(copy.peer, m);
  }
  if (any) mail_in_.release();
}

void Daemon::handle_mail(uint32_t src, const abi::MailVmmc& m) {
  if (m.magic != abi::kMailMagic) return;
  if (m.type == abi::kMailImportRequest) return on_import_request(src, m);
  if (m.type == abi::kMailImportReply) return on_import_reply(src, m);
  if (m.type == abi::kMailSlotGone) return on_slot_gone(src, m);
  if (m.type != abi::kMailUnimport) return;
  auto it = std::find_if(exports_.begin(), exports_.end(), [&](const ExportRec& e) { return e.handle == m.handle; });
  if (it == exports_.end()) return;
  auto who = it->importers.find({src, m.importer_slot});
  if (who == it->importers.end()) return;
  who->second.erase(m.request_id);
  if (!who->second.empty()) return;  // the same process still holds another import of it
  it->importers.erase(who);
  revoke(*it, src, m.importer_slot, "its last import went");
}

void Daemon::on_slot_gone(uint32_t src, const abi::MailVmmc& m) {
  for (ExportRec& e : exports_)
    if (e.importers.erase({src, m.importer_slot}))
      revoke(e, src, m.importer_slot, "its process, of an earlier daemon, is gone");
}

// The NIC forgets the grant of (node, slot) on export e.
void Daemon::revoke(const ExportRec& e, uint32_t node, uint32_t slot, const std::string& why) {
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlRevoke;
  cmd.vmmc.handle = e.handle;
  cmd.vmmc.node = node;
  cmd.vmmc.peer_slot = slot;
  (void)ctrl_call(cmd);
  log("'" + e.name + "': grant of node " + std::to_string(node) + " slot " + std::to_string(slot) + " revoked (" +
      why + ")");
}

void Daemon::on_import_request(uint32_t src, const abi::MailVmmc& m) {
  abi::MailVmmc r{};
  r.type = abi::kMailImportReply;
  r.request_id = m.request_id;
  std::string name = bounded(m.name, sizeof m.name);
  auto it = std::find_if(exports_.begin(), exports_.end(), [&](const ExportRec& e) { return e.name == name; });
  if (it == exports_.end()) {
    r.status = abi::kVmmcNoSuchExport;
  } else if (!allowed(it->allowed, src, m.importer_pid)) {
    r.status = abi::kVmmcDenied;
    log("node " + std::to_string(src) + " pid " + std::to_string(m.importer_pid) + " may not import '" + name + "'");
  } else {
    // Granting is idempotent (a retried request grants nothing new).
    abi::CtrlCommand cmd{};
    cmd.opcode = abi::kCtrlGrant;
    cmd.vmmc.handle = it->handle;
    cmd.vmmc.node = src;
    cmd.vmmc.peer_slot = m.importer_slot;
    auto g = ctrl_call(cmd);
    r.status = !g ? abi::kVmmcUnreachable : g->status == abi::kCtrlOk ? abi::kVmmcOk : abi::kVmmcNoResources;
    if (r.status == abi::kVmmcOk) it->importers[{src, m.importer_slot}].insert(m.request_id);
    r.handle = it->handle;
    r.length = it->length;
    r.exporter_slot = it->slot;
  }
  send_mail(src, r);
}

void Daemon::on_import_reply(uint32_t src, const abi::MailVmmc& m) {
  auto it = std::find_if(pending_imports_.begin(), pending_imports_.end(),
                         [&](const PendingImport& p) { return p.id == m.request_id && p.node == src; });
  if (it == pending_imports_.end()) return;  // answered already, or given up on
  PendingImport p = *it;
  pending_imports_.erase(it);
  SlotRec& s = slots_[p.slot];
  if (s.use != SlotUse::kAttached || s.generation != p.generation) return;  // the importer is gone
  abi::OwnerRequest q{};
  q.request_id = p.owner_request;
  if (m.status != abi::kVmmcOk) {
    std::string why = m.status == abi::kVmmcNoSuchExport ? "node " + std::to_string(src) + " exports nothing named '" + p.name + "'"
                      : m.status == abi::kVmmcDenied     ? "the export is restricted to other importers"
                                                         : "the exporter's NIC refused";
    return owner_reply(p.slot, reply_for(q, abi::VmmcStatus(m.status), why));
  }
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlImport;
  cmd.slot = p.slot;
  cmd.vmmc.index = p.index;
  cmd.vmmc.node = src;
  cmd.vmmc.peer_slot = m.exporter_slot;
  cmd.vmmc.handle = m.handle;
  cmd.vmmc.length = m.length;
  auto r = ctrl_call(cmd);
  if (!r || r->status != abi::kCtrlOk) {
    std::string why = !r ? r.error().message : "NIC status " + std::to_string(r->status);
    log("import of '" + p.name + "' from node " + std::to_string(src) + " into slot " + std::to_string(p.slot) +
        " (request " + std::to_string(p.id) + ", handle " + std::to_string(m.handle) + ", length " +
        std::to_string(m.length) + ") refused: " + why);
    return owner_reply(p.slot, reply_for(q, abi::kVmmcBadRequest, "refused by the NIC (" + why + ")"));
  }
  s.imports[p.index] = {true, src, m.handle, p.id};
  abi::OwnerReply ok = reply_for(q, abi::kVmmcOk);
  ok.proxy = abi::proxy_base(p.index);
  ok.length = m.length;
  ok.handle = m.handle;
  owner_reply(p.slot, ok);
}

void Daemon::retry_imports() {
  auto now = Clock::now();
  std::vector<PendingImport> still;
  std::vector<std::pair<uint32_t, abi::MailVmmc>> requests;
  for (PendingImport& p : pending_imports_) {
    SlotRec& s = slots_[p.slot];
    if (s.use != SlotUse::kAttached || s.generation != p.generation) continue;
    if (now >= p.deadline) {
      abi::OwnerRequest q{};
      q.request_id = p.owner_request;
      owner_reply(p.slot, reply_for(q, abi::kVmmcUnreachable, "node " + std::to_string(p.node) + " did not answer"));
      continue;
    }
    if (now >= p.next_try) {
      abi::MailVmmc m{};
      m.type = abi::kMailImportRequest;
      m.request_id = p.id;
      m.importer_slot = p.slot;
      m.importer_pid = uint32_t(s.pid);
      m.importer_uid = uint32_t(s.uid);
      std::snprintf(m.name, sizeof m.name, "%s", p.name.c_str());
      requests.emplace_back(p.node, m);
      p.next_try = now + kImportRetry;
    }
    still.push_back(std::move(p));
  }
  pending_imports_ = std::move(still);
  // After the table is settled: a local import is answered right here.
  for (const auto& [node, m] : requests) send_mail(node, m);
}

// The slot's process is gone: its exports vanish (the firmware dropped them
// at detach), its imports are given back to their exporters.
void Daemon::vmmc_detach(uint32_t k) {
  std::erase_if(exports_, [&](const ExportRec& e) { return e.slot == k; });
  std::erase_if(pending_imports_, [&](const PendingImport& p) { return p.slot == k; });
  for (auto& imp : slots_[k].imports)
    if (imp.used) give_back(k, imp);
}

// A firmware reboot forgot every table: so do we (registrations are gone too).
void Daemon::vmmc_forget_all() {
  exports_.clear();
  pending_imports_.clear();
  for (auto& s : slots_) s.imports = {};
}

}  // namespace ulnic::daemon
