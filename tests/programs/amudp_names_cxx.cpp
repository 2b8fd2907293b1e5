// amudp_names.c compiled as C++: amudp.h and amudp_spmd.h in a C++ program
// (tests/integration/test_am_compat.py checks it links and runs too).
#include "amudp_names.c"
