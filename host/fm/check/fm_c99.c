/* fm.h must compile as C99 with every warning an error (tests/host/fm_core.cmake). */
#include <fm.h>

static int handler(FM_stream* stream, unsigned sender) {
  char b[8];
  (void)sender;
  return FM_receive(b, stream, sizeof b) == sizeof b ? FM_CONTINUE : FM_QUIT;
}

int fm_c99_check(void);
int fm_c99_check(void) {
  FM_stats st;
  FM_stream* s;
  if (FM_register_handler(FM_ANY_ID, handler) == FM_ANY_ID || FM_initialize() != 0) return -1;
  s = FM_begin_message(FM_numnodes - 1, 8, 0);
  if (s && (FM_send_piece(s, "12345678", 8) != 0 || FM_end_message(s) != 0)) return -1;
  (void)FM_extract(FM_PACKET_PAYLOAD);
  FM_get_stats(&st);
  (void)FM_wait(10);
  return FM_finalize() + (int)(FM_nodeid + st.bad_packets);
}
