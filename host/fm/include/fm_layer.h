/* Fast Messages for the layers built on it in this tree (MP, GM): not part
 * of FM 2.x and not installed.
 *
 * A program's FM_extract tells libulnic whether it found anything
 * (Nic::poll_found): a process that keeps extracting nothing hands its core
 * to the NIC, blocking until the NIC has news for it. A layer extracts on
 * its own account too -- before it starts a send, after it drained its
 * queues -- and empty answers there are no program waiting: counted, an
 * MP_Isend blocked for the hand-over's whole slice before its rendezvous
 * request went out, while the receiver slept in FM_wait for it (MP at
 * 64 KiB: ~8 MB/s). A layer extracts quietly and reports its program's
 * polls (MP_Test, MP_Iprobe, gm_poll) itself. */
#ifndef ULNIC_FM_LAYER_H
#define ULNIC_FM_LAYER_H

#include "fm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FM_extract, not counted as the program's poll. */
FM_ULONG ulnic_fm_extract_quiet(FM_ULONG maxbytes);

/* One poll of the layer's program found something or not: counted as
 * FM_extract's own would be. */
void ulnic_fm_polled(int found);

#ifdef __cplusplus
}
#endif

#endif
