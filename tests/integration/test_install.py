#!/usr/bin/env python3
"""libvipl, the AM-2 library and libunet install like real libraries: `cmake
--install` into a fresh prefix, then programs outside the tree build against
the installed copy with pkg-config and with find_package (vipl, am, unet),
and run: the VIPL and U-Net programs directly, the AM-2 SPMD program under
the installed `<prefix>/bin/ulnic run -n 3 --transport udp`. Every installed
header compiles alone from the prefix (no header includes one that is not
installed).

Needs ULNIC_BUILD (the build directory) in the environment.
"""
import os
import shutil
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("ULNIC_BUILD", "build")

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <vipl.h>

int main(void) {
  VIP_NIC_HANDLE nic;
  /* No cluster runs in this test's runtime directory: the open must fail
     cleanly, with VIP_ERROR_RESOURCE, and a bad name with INVALID_PARAMETER. */
  VIP_RETURN bad = VipOpenNic((const VIP_CHAR*)"eth0", &nic);
  VIP_RETURN absent = VipOpenNic((const VIP_CHAR*)"nic0", &nic);
  printf("bad=%d absent=%d\n", (int)bad, (int)absent);
  return bad == VIP_INVALID_PARAMETER && absent == VIP_ERROR_RESOURCE ? 0 : 1;
}
"""

# An AM-2 SPMD program as a user writes it: only amudp.h / amudp_spmd.h.
# Every rank sends every rank (itself included) a medium request whose
# handler checks the payload and replies, and a Long into its segment;
# every rank checks what came (60 s at most), says ok, and the job ends.
AM_PROGRAM = r"""
#include <amudp_spmd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int my_rank, nprocs, replies, longs_in, bad;
static char seg[4096 * 16];

static void on_medium(void *token, void *buf, size_t nbytes, int from) {
  char want[64];
  snprintf(want, sizeof want, "hello from %d", from);
  if (nbytes != strlen(want) + 1 || memcmp(buf, want, nbytes) != 0) bad++;
  if (AM_Reply1(token, 2, my_rank) != AM_OK) bad++;
}

static void on_reply(void *token, int from) {
  (void)token;
  if (from < 0 || from >= nprocs) bad++;
  replies++;
}

static void on_long(void *token, void *buf, size_t nbytes, int from) {
  size_t i;
  (void)token;
  if ((char *)buf != seg + 4096 * from || nbytes != 4096) bad++;
  for (i = 0; i < nbytes; i++)
    if (((unsigned char *)buf)[i] != (unsigned char)(from * 7 + i)) bad++;
  longs_in++;
}

int main(int argc, char **argv) {
  eb_t eb;
  ep_t ep;
  uint64_t tag;
  char msg[64];
  static unsigned char block[4096];
  int r, i;
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) return 2;
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  if (AM_SetSeg(ep, seg, sizeof seg) != AM_OK || AM_SetHandler(ep, 1, on_medium) != AM_OK ||
      AM_SetHandler(ep, 2, on_reply) != AM_OK || AM_SetHandler(ep, 3, on_long) != AM_OK)
    return 3;
  AMUDP_SPMDBarrier();
  snprintf(msg, sizeof msg, "hello from %d", my_rank);
  for (i = 0; i < 4096; i++) block[i] = (unsigned char)(my_rank * 7 + i);
  for (r = 0; r < nprocs; r++) {
    if (AM_RequestI1(ep, r, 1, msg, (int)strlen(msg) + 1, my_rank) != AM_OK) bad++;
    if (AM_RequestXfer1(ep, r, (uintptr_t)4096 * my_rank, 3, block, 4096, my_rank) != AM_OK) bad++;
  }
  {
    time_t deadline = time(NULL) + 60;
    while ((replies < nprocs || longs_in < nprocs) && time(NULL) < deadline) AM_Poll(eb);
    if (replies < nprocs || longs_in < nprocs) bad++;
  }
  AMUDP_SPMDBarrier();
  printf("%s rank %d of %d: %s\n", AMX_TransportName(), my_rank, nprocs, bad ? "FAIL" : "ok");
  fflush(stdout);
  AMUDP_SPMDBarrier();
  AMUDP_SPMDExit(bad ? 1 : 0);
  return 0;
}
"""

# A U-Net program: with no cluster the endpoint cannot open (UNET_ERR_NIC),
# and a receive queue that is not a power of 2 is refused first (BAD_ARG).
UNET_PROGRAM = r"""
#include <stdio.h>
#include <unet.h>

int main(void) {
  unet_endpoint* ep = NULL;
  unet_attr bad = {NULL, -1, 0, 3, 0, NULL, 0};
  int b = unet_endpoint_create(&bad, &ep);
  int absent = unet_endpoint_create(NULL, &ep);
  printf("bad=%d absent=%d (%s)\n", b, absent, unet_strerror(absent));
  return b == UNET_ERR_BAD_ARG && absent == UNET_ERR_NIC && ep == NULL ? 0 : 1;
}
"""


def cmakelists(package, source, target, languages="C", c99=True):
    """A project outside the tree that builds `source` against the installed `package` (find_package)."""
    text = f"""
cmake_minimum_required(VERSION 3.20)
project({target} {languages})
find_package({package} REQUIRED CONFIG)
add_executable({target} {source})
target_link_libraries({target} PRIVATE {package}::{package})
"""
    return text + (f"set_target_properties({target} PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)\n" if c99 else "")


UNET_CMAKELISTS = cmakelists("unet", "main_unet.c", "outside_unet", "C CXX")
AM_CMAKELISTS = cmakelists("am", "main_am.c", "outside_am")
CMAKELISTS = cmakelists("vipl", "main.c", "outside", "C CXX", c99=False)


# The classic C APIs: C programs include them, so they compile as C99 too.
C_HEADERS = {"vipl.h", "amudp.h", "amudp_spmd.h"}


def installed_headers(include_dir):
    """Every header below include_dir, as the path a program includes it by."""
    return sorted(os.path.relpath(os.path.join(d, f), include_dir)
                  for d, _, files in os.walk(include_dir) for f in files if f.endswith((".h", ".hpp")))


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ulnic-install-", dir="/tmp")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        p = subprocess.run(["cmake", "--install", BUILD, "--prefix", cls.prefix], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.env = dict(os.environ, ULNIC_RUNTIME_DIR=os.path.join(cls.tmp, "run"), ULNIC_CLUSTER="none")
        with open(os.path.join(cls.tmp, "main.c"), "w") as f:
            f.write(PROGRAM)
        with open(os.path.join(cls.tmp, "main_am.c"), "w") as f:
            f.write(AM_PROGRAM)
        with open(os.path.join(cls.tmp, "main_unet.c"), "w") as f:
            f.write(UNET_PROGRAM)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_ok(self, argv, env=None, cwd=None):
        p = subprocess.run(argv, capture_output=True, text=True, env=env or self.env, cwd=cwd, timeout=300)
        self.assertEqual(p.returncode, 0, f"{' '.join(argv)}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def test_the_prefix_holds_header_libraries_and_package_files(self):
        for f in ("include/vipl.h", "lib/libulnic_vipl.a", "lib/libulnic_core.a", "lib/libulnic_util.a",
                  "lib/pkgconfig/vipl.pc", "lib/cmake/vipl/viplConfig.cmake",
                  "include/amudp.h", "include/amudp_spmd.h", "lib/libulnic_am.a", "lib/libulnic_am_spmd_master.a",
                  "lib/pkgconfig/am.pc", "lib/cmake/am/amConfig.cmake", "bin/ulnic", "share/man/man1/ulnic.1",
                  "include/unet.h", "lib/libulnic_unet.a", "lib/pkgconfig/unet.pc", "lib/cmake/unet/unetConfig.cmake"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, f)), f)
        self.assertTrue(os.access(os.path.join(self.prefix, "bin", "ulnic"), os.X_OK))
        # The libfabric provider, where the build has one: <libdir>/libfabric (libfabric's own search
        # directory when the prefix is /usr; `ulnic mpirun` finds it there beside bin/).
        if os.path.exists(os.path.join(BUILD, "lib", "libulnic-fi.so")):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, "lib", "libfabric", "libulnic-fi.so")))
        # The installed manual is the installed command's own help.
        with open(os.path.join(self.prefix, "share", "man", "man1", "ulnic.1")) as f:
            self.assertEqual(f.read(), self.run_ok([os.path.join(self.prefix, "bin", "ulnic"), "help", "--roff"]))

    def test_every_installed_header_compiles_alone_from_the_prefix(self):
        include = os.path.join(self.prefix, "include")
        headers = installed_headers(include)
        self.assertTrue(C_HEADERS <= set(headers), headers)
        self.assertIn("ulnic/nic.h", headers)  # libulnic core's API comes with its library
        # Only the prefix: nothing from the source or build tree, nor from the environment.
        env = {k: v for k, v in self.env.items() if k not in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")}
        for h in headers:
            langs = [("c++", "-std=c++23")] + ([("c", "-std=c99")] if h in C_HEADERS else [])
            for lang, std in langs:
                with self.subTest(header=h, lang=lang):
                    p = subprocess.run(["cc", "-x", lang, std, "-fsyntax-only", "-Wall", "-Wextra", "-pedantic",
                                        "-Werror", "-I", include, "-"], input=f"#include <{h}>\n",
                                       capture_output=True, text=True, env=env, timeout=120)
                    self.assertEqual(p.returncode, 0, f"{h} as {lang}:\n{p.stderr}")

    def test_a_c_program_builds_with_pkg_config_and_runs(self):
        env = dict(self.env, PKG_CONFIG_PATH=os.path.join(self.prefix, "lib", "pkgconfig"))
        flags = self.run_ok(["pkg-config", "--cflags", "--libs", "vipl"], env=env).split()
        self.assertIn("-I" + os.path.join(self.prefix, "include"), [os.path.normpath(f) if f.startswith("-I")
                                                                     else f for f in flags])
        exe = os.path.join(self.tmp, "pc_prog")
        self.run_ok(["cc", "-std=c99", "-Wall", "-Werror", os.path.join(self.tmp, "main.c"), "-o", exe, *flags],
                    env=env)
        self.assertIn("bad=2 absent=3", self.run_ok([exe]))

    def build_cmake_project(self, name, source, cmakelists, target):
        """Configures and builds a project outside the tree against the prefix; returns its program."""
        src = os.path.join(self.tmp, name + "_src")
        os.makedirs(src, exist_ok=True)
        shutil.copy(os.path.join(self.tmp, source), src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(cmakelists)
        bld = os.path.join(self.tmp, name + "_build")
        self.run_ok(["cmake", "-S", src, "-B", bld, f"-DCMAKE_PREFIX_PATH={self.prefix}"])
        self.run_ok(["cmake", "--build", bld])
        return os.path.join(bld, target)

    def test_a_cmake_project_builds_with_find_package_and_runs(self):
        exe = self.build_cmake_project("cmake", "main.c", CMAKELISTS, "outside")
        self.assertIn("bad=2 absent=3", self.run_ok([exe]))

    def run_am_job(self, exe, nproc=3):
        """The installed `ulnic run` starts an AM-2 job of the program built outside the tree."""
        env = {k: v for k, v in self.env.items() if not k.startswith("ULNIC_AM_")}
        out = self.run_ok([os.path.join(self.prefix, "bin", "ulnic"), "run", "-n", str(nproc), "--transport", "udp",
                           exe], env=env)
        for r in range(nproc):
            self.assertIn(f"udp rank {r} of {nproc}: ok\n", out)
        self.assertNotIn("FAIL", out)

    def test_an_am2_spmd_program_builds_with_pkg_config_and_runs_under_ulnic_run(self):
        env = dict(self.env, PKG_CONFIG_PATH=os.path.join(self.prefix, "lib", "pkgconfig"))
        cflags = self.run_ok(["pkg-config", "--cflags", "am"], env=env).split()
        libs = self.run_ok(["pkg-config", "--libs", "am"], env=env).split()
        self.assertEqual([os.path.normpath(f[2:]) for f in cflags if f.startswith("-I")],
                         [os.path.join(self.prefix, "include")])
        exe = os.path.join(self.tmp, "pc_am_prog")
        self.run_ok(["cc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", *cflags,
                     os.path.join(self.tmp, "main_am.c"), "-o", exe, *libs], env=env)
        self.run_am_job(exe)

    def test_an_am2_cmake_project_builds_with_find_package_and_runs_under_ulnic_run(self):
        self.run_am_job(self.build_cmake_project("cmake_am", "main_am.c", AM_CMAKELISTS, "outside_am"))

    def test_a_unet_program_builds_with_pkg_config_and_runs(self):
        env = dict(self.env, PKG_CONFIG_PATH=os.path.join(self.prefix, "lib", "pkgconfig"))
        flags = self.run_ok(["pkg-config", "--cflags", "--libs", "unet"], env=env).split()
        exe = os.path.join(self.tmp, "pc_unet_prog")
        self.run_ok(["cc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", os.path.join(self.tmp, "main_unet.c"),
                     "-o", exe, *flags], env=env)
        self.assertIn("bad=1 absent=3", self.run_ok([exe]))

    def test_a_unet_cmake_project_builds_with_find_package_and_runs(self):
        exe = self.build_cmake_project("cmake_unet", "main_unet.c", UNET_CMAKELISTS, "outside_unet")
        self.assertIn("bad=1 absent=3", self.run_ok([exe]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
