# VIPL 1.0 conformance, control plane (tests/host/vipl_conformance.cpp):
# NICs, ptags, memory registration, CQs, VIs, the error callback, the name
# service and autodiscovery, as a program sees them, on a real 2-node
# cluster that the binary boots once (about 0.3 s) in a private runtime
# directory and takes down again.
# Paths are relative to this file, so it can be included from anywhere.
find_package(GTest REQUIRED)
include(GoogleTest)
add_executable(vipl_conformance ${CMAKE_CURRENT_LIST_DIR}/vipl_conformance.cpp)
target_link_libraries(vipl_conformance PRIVATE ulnic_vipl GTest::gtest GTest::gtest_main)
target_compile_options(vipl_conformance PRIVATE -Wall -Wextra)
target_compile_definitions(vipl_conformance PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(vipl_conformance firmware ulnic ulnicd ulnic-fabricd)
# One ctest entry for the whole suite: the binary boots one cluster for all
# its tests (a GoogleTest environment), as every test group here does.
add_test(NAME host.vipl_conformance COMMAND vipl_conformance)
set_tests_properties(host.vipl_conformance PROPERTIES LABELS "host;qemu;vipl" TIMEOUT 600
  ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
