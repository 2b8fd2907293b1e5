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
  bool has_doorbell;
  uint32_t peer, vector;
};
State g;

abi::MailArea& area() { return *reinterpret_cast<abi::MailArea*>(abi::kSramBase + abi::kMailOffset); }

void ring_daemon() {
  if (!g.has_doorbell || !g.board->fabric.regs) return;
  hal::mmio_write32(g.board->fabric.regs + core::board::kDoorbell, g.peer << 16 | (g.vector & 0xffff));
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

bool mail_poll() {
  bool worked = false;
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

void mail_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  abi::MailMessage* m = h.payload_len <= abi::kMailBytes ? g.in.reserve() : nullptr;
  if (!m) {
    core::status::count(abi::kCtrMailDropped);
    return;
  }
  m->peer = uint16_t(src);
  m->length = h.payload_len;
  memcpy(m->data, payload, h.payload_len);
  g.in.push();
  g.in.publish();
  core::status::count(abi::kCtrMailIn);
  ring_daemon();
}

bool mail_payload_valid(uint64_t serial) { return serial && g.pool[(serial - 1) % kPool].serial == serial; }

}  // namespace lcp
