#include "lcp/mail.h"

#include <string.h>

#include "core/status.h"
#include "hal/mmio.h"
#include "link/link.h"

namespace lcp {
namespace {

namespace abi = ulnic::abi;

// Mail stays here until the link is done with it: the link rereads a
// payload for retransmission while mail_payload_valid() says so. A buffer is
// reused after kPool newer messages; a retransmission that late goes out as
// a filler and the daemons' retry covers the loss.
constexpr uint32_t kPool = 64;
// Mail that finds the daemon's inbox full waits here, in arrival order, and
// moves in as the daemon takes what is there: a process that exits with 64
// imports makes its daemon send 64 unimports at once, twice what the inbox
// holds, and the receiving daemon may be off the CPU meanwhile (a dropped
// unimport left a grant standing).
constexpr uint32_t kWaiting = kMailWaiting;
struct Outgoing {
  uint64_t serial;
  uint8_t data[abi::kMailBytes];
};

struct State {
  const core::board::Board* board;
  abi::RingConsumer<abi::MailMessage> out;
  abi::RingProducer<abi::MailMessage> in;
  Outgoing pool[kPool];
  uint64_t serial;
  abi::MailMessage waiting[kWaiting];
  uint32_t waiting_head, waiting_count;
  bool has_doorbell;
  uint32_t peer, vector;
};
State g;

abi::MailArea& area() { return *reinterpret_cast<abi::MailArea*>(abi::kSramBase + abi::kMailOffset); }

void ring_daemon() {
  if (!g.has_doorbell || !g.board->fabric.regs) return;
  hal::mmio_write32(g.board->fabric.regs + core::board::kDoorbell, g.peer << 16 | (g.vector & 0xffff));
}

// Moves waiting mail into the inbox as far as it has room.
bool move_in_waiting() {
  bool moved = false;
  for (abi::MailMessage* m; g.waiting_count && (m = g.in.reserve()) != nullptr; moved = true) {
    memcpy(m, &g.waiting[g.waiting_head], sizeof *m);
    g.in.push();
    g.waiting_head = (g.waiting_head + 1) % kWaiting;
    --g.waiting_count;
  }
  if (moved) {
    g.in.publish();
    ring_daemon();
  }
  return moved;
}

}  // namespace

void mail_init(const core::board::Board& board) {
  memset(&g, 0, sizeof g);
  g.board = &board;
  abi::MailArea& a = area();
  memset(&a, 0, sizeof a);
  g.out.attach(&a.out_ring, a.out, abi::kMailCapacity);
  g.in.attach(&a.in_ring, a.in, abi::kMailCapacity);
}

void mail_set_doorbell(uint32_t peer, uint32_t vector) {
  g.has_doorbell = true;
  g.peer = peer;
  g.vector = vector;
}

namespace {
// Mail to move in or to send (mail_poll looked). Out of line, as
// control.cpp's take_commands.
[[gnu::noinline]] bool mail_work() {
  bool worked = g.waiting_count && move_in_waiting();
  while (const abi::MailMessage* m = g.out.peek()) {
    uint32_t dst = m->peer, len = m->length;
    bool routable = link::enabled() && dst < link::nodes() && dst != link::self() && len <= abi::kMailBytes;
    if (routable && !link::can_send(dst)) break;  // later
    if (routable) {
      Outgoing& o = g.pool[g.serial % kPool];
      o.serial = ++g.serial;
      memcpy(o.data, m->data, len);
      abi::WireHeader h{};
      h.op = abi::kWireOpMail;
      h.op_length = len;
      if (link::send(dst, h, reinterpret_cast<uint64_t>(o.data), uint16_t(len), kMailOwner, o.serial)) {
        core::status::count(abi::kCtrMailOut);
      } else {
        core::status::count(abi::kCtrMailDropped);
      }
    } else {
      core::status::count(abi::kCtrMailDropped);
    }
    g.out.pop();
    worked = true;
  }
  if (worked) g.out.release();
  if (g.out.corrupt()) {
    // The daemon is trusted, but a wild index must not wedge the outbox.
    g.out.attach(&area().out_ring, area().out, abi::kMailCapacity);
  }
  return worked;
}
}  // namespace

bool mail_poll() {
  if (!g.waiting_count && g.out.available() == 0 && !g.out.corrupt()) return false;  // (most passes)
  return mail_work();
}

void mail_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  if (h.payload_len > abi::kMailBytes || g.waiting_count == kWaiting) {
    core::status::count(abi::kCtrMailDropped);
    return;
  }
  // Behind what already waits (it moves in at once if the inbox has room).
  abi::MailMessage& m = g.waiting[(g.waiting_head + g.waiting_count++) % kWaiting];
  memset(&m, 0, sizeof m);
  m.peer = uint16_t(src);
  m.length = h.payload_len;
  memcpy(m.data, payload, h.payload_len);
  core::status::count(abi::kCtrMailIn);
  move_in_waiting();
}

bool mail_payload_valid(uint64_t serial) { return serial && g.pool[(serial - 1) % kPool].serial == serial; }

}  // namespace lcp
