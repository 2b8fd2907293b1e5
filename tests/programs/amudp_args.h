/* amudp_args.h: argument lists of N = 0..16 handler arguments, for test
 * programs that write one handler or call per argument count with the
 * preprocessor (amudp_allam.c). C99 and C++.
 *
 *   AMUDP_T_DECL##N   ", int a0, ..., int aN-1"      (a handler's parameters)
 *   AMUDP_T_PASS##N   ", a0, ..., aN-1"              (passing them on)
 *   AMUDP_T_VAL##N    ", ARG(0), ..., ARG(N-1)"      (the values a sender uses)
 *   AMUDP_T_BAD##N    "0 || a0 != ARG(0) || ..."     (true if one differs)
 *   AMUDP_T_INVOKE(f, (args))  expands args before f counts them
 * ARG(i) is the including file's.
 */
#ifndef AMUDP_TEST_ARGS_H
#define AMUDP_TEST_ARGS_H

#define AMUDP_T_INVOKE(f, args) f args

#define AMUDP_T_DECL0
#define AMUDP_T_DECL1 AMUDP_T_DECL0, int a0
#define AMUDP_T_DECL2 AMUDP_T_DECL1, int a1
#define AMUDP_T_DECL3 AMUDP_T_DECL2, int a2
#define AMUDP_T_DECL4 AMUDP_T_DECL3, int a3
#define AMUDP_T_DECL5 AMUDP_T_DECL4, int a4
#define AMUDP_T_DECL6 AMUDP_T_DECL5, int a5
#define AMUDP_T_DECL7 AMUDP_T_DECL6, int a6
#define AMUDP_T_DECL8 AMUDP_T_DECL7, int a7
#define AMUDP_T_DECL9 AMUDP_T_DECL8, int a8
#define AMUDP_T_DECL10 AMUDP_T_DECL9, int a9
#define AMUDP_T_DECL11 AMUDP_T_DECL10, int a10
#define AMUDP_T_DECL12 AMUDP_T_DECL11, int a11
#define AMUDP_T_DECL13 AMUDP_T_DECL12, int a12
#define AMUDP_T_DECL14 AMUDP_T_DECL13, int a13
#define AMUDP_T_DECL15 AMUDP_T_DECL14, int a14
#define AMUDP_T_DECL16 AMUDP_T_DECL15, int a15

#define AMUDP_T_PASS0
#define AMUDP_T_PASS1 AMUDP_T_PASS0, a0
#define AMUDP_T_PASS2 AMUDP_T_PASS1, a1
#define AMUDP_T_PASS3 AMUDP_T_PASS2, a2
#define AMUDP_T_PASS4 AMUDP_T_PASS3, a3
#define AMUDP_T_PASS5 AMUDP_T_PASS4, a4
#define AMUDP_T_PASS6 AMUDP_T_PASS5, a5
#define AMUDP_T_PASS7 AMUDP_T_PASS6, a6
#define AMUDP_T_PASS8 AMUDP_T_PASS7, a7
#define AMUDP_T_PASS9 AMUDP_T_PASS8, a8
#define AMUDP_T_PASS10 AMUDP_T_PASS9, a9
#define AMUDP_T_PASS11 AMUDP_T_PASS10, a10
#define AMUDP_T_PASS12 AMUDP_T_PASS11, a11
#define AMUDP_T_PASS13 AMUDP_T_PASS12, a12
#define AMUDP_T_PASS14 AMUDP_T_PASS13, a13
#define AMUDP_T_PASS15 AMUDP_T_PASS14, a14
#define AMUDP_T_PASS16 AMUDP_T_PASS15, a15

#define AMUDP_T_VAL0
#define AMUDP_T_VAL1 AMUDP_T_VAL0, ARG(0)
#define AMUDP_T_VAL2 AMUDP_T_VAL1, ARG(1)
#define AMUDP_T_VAL3 AMUDP_T_VAL2, ARG(2)
#define AMUDP_T_VAL4 AMUDP_T_VAL3, ARG(3)
#define AMUDP_T_VAL5 AMUDP_T_VAL4, ARG(4)
#define AMUDP_T_VAL6 AMUDP_T_VAL5, ARG(5)
#define AMUDP_T_VAL7 AMUDP_T_VAL6, ARG(6)
#define AMUDP_T_VAL8 AMUDP_T_VAL7, ARG(7)
#define AMUDP_T_VAL9 AMUDP_T_VAL8, ARG(8)
#define AMUDP_T_VAL10 AMUDP_T_VAL9, ARG(9)
#define AMUDP_T_VAL11 AMUDP_T_VAL10, ARG(10)
#define AMUDP_T_VAL12 AMUDP_T_VAL11, ARG(11)
#define AMUDP_T_VAL13 AMUDP_T_VAL12, ARG(12)
#define AMUDP_T_VAL14 AMUDP_T_VAL13, ARG(13)
#define AMUDP_T_VAL15 AMUDP_T_VAL14, ARG(14)
#define AMUDP_T_VAL16 AMUDP_T_VAL15, ARG(15)

#define AMUDP_T_BAD0 0
#define AMUDP_T_BAD1 AMUDP_T_BAD0 || a0 != ARG(0)
#define AMUDP_T_BAD2 AMUDP_T_BAD1 || a1 != ARG(1)
#define AMUDP_T_BAD3 AMUDP_T_BAD2 || a2 != ARG(2)
#define AMUDP_T_BAD4 AMUDP_T_BAD3 || a3 != ARG(3)
#define AMUDP_T_BAD5 AMUDP_T_BAD4 || a4 != ARG(4)
#define AMUDP_T_BAD6 AMUDP_T_BAD5 || a5 != ARG(5)
#define AMUDP_T_BAD7 AMUDP_T_BAD6 || a6 != ARG(6)
#define AMUDP_T_BAD8 AMUDP_T_BAD7 || a7 != ARG(7)
#define AMUDP_T_BAD9 AMUDP_T_BAD8 || a8 != ARG(8)
#define AMUDP_T_BAD10 AMUDP_T_BAD9 || a9 != ARG(9)
#define AMUDP_T_BAD11 AMUDP_T_BAD10 || a10 != ARG(10)
#define AMUDP_T_BAD12 AMUDP_T_BAD11 || a11 != ARG(11)
#define AMUDP_T_BAD13 AMUDP_T_BAD12 || a12 != ARG(12)
#define AMUDP_T_BAD14 AMUDP_T_BAD13 || a13 != ARG(13)
#define AMUDP_T_BAD15 AMUDP_T_BAD14 || a14 != ARG(14)
#define AMUDP_T_BAD16 AMUDP_T_BAD15 || a15 != ARG(15)

/* Applies X(N) for N = 0..16. */
#define AMUDP_T_EACH_COUNT(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)

#endif
