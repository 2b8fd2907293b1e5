/* libvipl for the libraries layered on it in this tree (AM over VIPL), not
 * part of VIPL and not installed.
 *
 * A program's VipSendDone, VipRecvDone and VipCQDone tell libulnic whether
 * they found anything (Nic::poll_found): a process that keeps polling and
 * finding nothing hands its core to the NIC, blocking until the NIC has news
 * for it. A layer calls those functions on its own account too -- reaping
 * its send descriptors before it posts, draining its CQ inside AM_Poll --
 * and empty answers there are no program waiting: counted, they blocked an
 * AM_Request for the hand-over's whole slice before it had even posted its
 * message (AM over VIPL round trips of ~12 ms). Such a layer marks its own
 * calls quiet and reports its program's polls itself. */
#ifndef ULNIC_VIPL_LAYER_H
#define ULNIC_VIPL_LAYER_H

#include "vipl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* From now until the matching call with 0, this thread's VipSendDone,
 * VipRecvDone and VipCQDone do not count as the program's polls (nests). */
void ulnic_vipl_quiet_polls(int quiet);

/* One poll of the layer's program (e.g. AM_Poll) found something or not:
 * counted as VipCQDone's would be, on this NIC's core. */
void ulnic_vipl_polled(VIP_NIC_HANDLE nic, int found);

#ifdef __cplusplus
}
namespace ulnic {
class Nic;
}
extern "C" {
/* This NIC's libulnic core, for a C++ layer's waits on live peers
 * (ulnic::NicDeadline: bounded by the NIC's running time as well as the
 * wall clock, as libvipl's own waits are); null for a bad handle. */
const ulnic::Nic* ulnic_vipl_core(VIP_NIC_HANDLE nic);
#endif

#ifdef __cplusplus
}
#endif

#endif
