// Daemon mail (shared/include/ulnic/abi/vmmc.h): the node daemon's outbox and
// inbox in SRAM, carried between NICs over the reliable link. The daemons
// use it to match VMMC importers with exporters on other nodes.
#pragma once

#include "core/board.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/vmmc.h"

namespace lcp {

// The link "owner" of mail packets (no slot has this index).
constexpr uint32_t kMailOwner = 0xffff'fff0u;
// Arriving mail that finds the daemon's inbox full waits in the NIC, up to
// this many messages: every unimport of a node's 8 processes with 64
// imports each (a process's exit sends them all at once).
constexpr uint32_t kMailWaiting = ulnic::abi::kMaxSlots * ulnic::abi::kMaxImports;

void mail_init(const core::board::Board& board);
// Where to ring the daemon when mail arrives (kCtrlMailbox).
void mail_set_doorbell(uint32_t peer, uint32_t vector);
// Sends what the daemon put in its outbox, as far as the link takes it, and
// moves waiting arrivals into the inbox as the daemon makes room.
bool mail_poll();
// An arriving mail packet: into the inbox, or behind the mail waiting for
// room there (dropped and counted beyond kMailWaiting).
void mail_deliver(uint32_t src, const ulnic::abi::WireHeader& h, const uint8_t* payload);
// May a mail packet's payload (send serial `serial`) still be read?
bool mail_payload_valid(uint64_t serial);

}  // namespace lcp
