# The sanitizer pass: the host side (libraries, ulnicd, ulnic, the switch,
# the fabric server, test programs) built twice more as sub-builds of this
# tree, once with ASan+UBSan and once with TSan (ULNIC_SANITIZE,
# tests/sanitize/flags.cmake), booting this build's firmware. The tests
# below run each sub-build's test of that name (its ctest, so with its
# environment and its instrumented binaries) under tests/sanitize/run.py,
# which fails the test on any sanitizer report from any process the test
# started, daemons included. Label `sanitize` (and `asan` or `tsan`):
#   ctest -L sanitize      the pass alone
#   ctest -LE sanitize     everything else
# -DULNIC_SANITIZER_PASS=OFF leaves the sub-builds and their tests out.
option(ULNIC_SANITIZER_PASS "build the host side with ASan+UBSan and with TSan and test them" ON)
if(NOT ULNIC_SANITIZER_PASS)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter REQUIRED)

# Which tests each build runs, chosen for what they cover against what they
# cost (each group here takes 2 to 45 s; what the pass adds: README).
# ASan+UBSan: every host unit test, the daemon, CLI, switch and fabric
# server paths, and each API end to end (VMMC, VIPL with and without a
# faulty switch, AM over UDP, VIPL and native, FM and its layers) and the
# libfabric provider (without libfabric's own programs: host/ofi/ofi.cmake).
# integration.fabric (15 min of loss runs) and integration.slots are left
# to the plain build: the units and the other groups run their code.
# host.vipl_regcache too: it tests registration against glibc malloc's own
# behaviour (mallopt(M_MMAP_THRESHOLD), free unmapping), and ASan brings
# another malloc.
set(ULNIC_SANITIZE_ASAN_TESTS
  host.units host.NodeLifecycle
  host.vipl_conformance host.vipl_data host.vipl_names
  host.am_semantics_udp host.am_semantics_vipl host.am_semantics_native
  host.fm_core host.fm_layers host.nic_tight_poll host.ofi_provider
  integration.cli integration.vmmc integration.vipl integration.am_spmd
  integration.am_exercises integration.am_compat integration.tight_poll)
# TSan: the groups whose processes run threads: the rings' threads
# (host.units), libulnic's sleepers (nic_tight_poll), libvipl's notify
# thread (vipl_data, vipl_conformance, vipl_names), AM over VIPL with its
# listener thread, and over UDP (am_semantics, am_compat's waits from a
# second thread). FM's handlers are not threads but contexts it switches
# with swapcontext in one thread: nothing for TSan there, and it cannot
# follow the switches.
set(ULNIC_SANITIZE_TSAN_TESTS
  host.units host.nic_tight_poll
  host.vipl_conformance host.vipl_data host.vipl_names
  host.am_semantics_udp host.am_semantics_vipl
  integration.am_compat)

function(ulnic_sanitizer_build name sanitizers)
  set(dir ${CMAKE_BINARY_DIR}/sanitize/${name})
  ExternalProject_Add(sanitize-${name}
    SOURCE_DIR ${PROJECT_SOURCE_DIR}
    BINARY_DIR ${dir}
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    CMAKE_ARGS -DULNIC_SANITIZE=${sanitizers} -DULNIC_PREBUILT_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}
               -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
               -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    USES_TERMINAL_BUILD ON)
  foreach(t IN LISTS ARGN)
    add_test(NAME ${name}.${t}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/run.py
                     --ctest ${CMAKE_CTEST_COMMAND} --build ${dir} --test ${t}
                     --suppressions ${CMAKE_CURRENT_LIST_DIR})
    set_tests_properties(${name}.${t} PROPERTIES LABELS "sanitize;${name}" TIMEOUT 1800)
  endforeach()
endfunction()
ulnic_sanitizer_build(asan address,undefined ${ULNIC_SANITIZE_ASAN_TESTS})
ulnic_sanitizer_build(tsan thread ${ULNIC_SANITIZE_TSAN_TESTS})
