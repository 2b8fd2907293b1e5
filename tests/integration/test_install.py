#!/usr/bin/env python3
"""libvipl installs like a real library: `cmake --install` into a fresh
prefix, then programs outside the tree build against the installed copy with
pkg-config and with find_package(vipl), and run.

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

CMAKELISTS = """
cmake_minimum_required(VERSION 3.20)
project(outside C CXX)
find_package(vipl REQUIRED CONFIG)
add_executable(outside main.c)
target_link_libraries(outside PRIVATE vipl::vipl)
"""


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

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_ok(self, argv, env=None, cwd=None):
        p = subprocess.run(argv, capture_output=True, text=True, env=env or self.env, cwd=cwd, timeout=300)
        self.assertEqual(p.returncode, 0, f"{' '.join(argv)}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def test_the_prefix_holds_header_libraries_and_package_files(self):
        for f in ("include/vipl.h", "lib/libulnic_vipl.a", "lib/libulnic_core.a", "lib/libulnic_util.a",
                  "lib/pkgconfig/vipl.pc", "lib/cmake/vipl/viplConfig.cmake"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, f)), f)

    def test_a_c_program_builds_with_pkg_config_and_runs(self):
        env = dict(self.env, PKG_CONFIG_PATH=os.path.join(self.prefix, "lib", "pkgconfig"))
        flags = self.run_ok(["pkg-config", "--cflags", "--libs", "vipl"], env=env).split()
        self.assertIn("-I" + os.path.join(self.prefix, "include"), [os.path.normpath(f) if f.startswith("-I")
                                                                     else f for f in flags])
        exe = os.path.join(self.tmp, "pc_prog")
        self.run_ok(["cc", "-std=c99", "-Wall", "-Werror", os.path.join(self.tmp, "main.c"), "-o", exe, *flags],
                    env=env)
        self.assertIn("bad=2 absent=3", self.run_ok([exe]))

    def test_a_cmake_project_builds_with_find_package_and_runs(self):
        src = os.path.join(self.tmp, "cmake_src")
        os.makedirs(src, exist_ok=True)
        shutil.copy(os.path.join(self.tmp, "main.c"), src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(CMAKELISTS)
        bld = os.path.join(self.tmp, "cmake_build")
        self.run_ok(["cmake", "-S", src, "-B", bld, f"-DCMAKE_PREFIX_PATH={self.prefix}"])
        self.run_ok(["cmake", "--build", bld])
        self.assertIn("bad=2 absent=3", self.run_ok([os.path.join(bld, "outside")]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
