/* A VIPL program that registers memory when told to (integration.faults: a
 * NIC operation while the NIC is off the host's CPU, or gone).
 *
 *   vipl_register DEVICE   opens DEVICE and prints "ready"; then, for each
 *       line "register" on stdin, registers a fresh 64 KiB buffer and prints
 *       "register <VIP_RETURN> <ms the call took>"; exits 0 at end of input.
 *
 * Plain VIPL 1.0 (C99, POSIX clocks). */
#define _POSIX_C_SOURCE 200809L
#include <vipl.h>

#include "prog_common.h"

int main(int argc, char **argv) {
  VIP_NIC_HANDLE nic;
  VIP_PROTECTION_HANDLE ptag;
  VIP_MEM_ATTRIBUTES attrs;
  VIP_RETURN rc;
  char line[64];

  if (argc != 2) {
    fprintf(stderr, "usage: vipl_register DEVICE\n");
    return 2;
  }
  if ((rc = VipOpenNic(argv[1], &nic)) != VIP_SUCCESS || (rc = VipCreatePtag(nic, &ptag)) != VIP_SUCCESS) {
    fprintf(stderr, "vipl_register: VipOpenNic / VipCreatePtag: %d\n", (int)rc);
    return 1;
  }
  memset(&attrs, 0, sizeof attrs);
  attrs.Ptag = ptag;
  attrs.EnableRdmaWrite = VIP_TRUE;
  printf("ready\n");
  fflush(stdout);
  while (fgets(line, sizeof line, stdin)) {
    if (strcmp(line, "register\n") != 0) {
      fprintf(stderr, "vipl_register: unknown command: %s", line);
      return 2;
    }
    {
      const size_t bytes = 64u << 10;
      void *buf = NULL;
      VIP_MEM_HANDLE mh;
      double t0;
      if (posix_memalign(&buf, 4096, bytes) != 0) return 1;
      memset(buf, 0x5a, bytes);
      t0 = prog_now();
      rc = VipRegisterMem(nic, buf, bytes, &attrs, &mh);
      printf("register %d %.0f\n", (int)rc, (prog_now() - t0) * 1e3);
      fflush(stdout);
    }
  }
  return 0;
}
