// FUZZ_CHECK, for every fuzz target (tests/fuzz), the firmware's included.
#pragma once

#include <stdio.h>
#include <stdlib.h>

// An invariant the code under test promises: a violation is a finding, as a
// sanitizer report is (libFuzzer saves the input that caused it).
#define FUZZ_CHECK(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                       \
    }                                                                                \
  } while (0)
