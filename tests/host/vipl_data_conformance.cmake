# VIPL 1.0 conformance, data path (tests/host/vipl_data_conformance.cpp):
# connections (client/server, peer-to-peer, disconnect, a peer process that
# dies), posting and completing descriptors, immediate data, RDMA write and
# read, protection, format and length errors, the three reliability levels,
# CQs and Notify callbacks, as a program sees them, on a real 2-node cluster
# that the binary boots once in a private runtime directory and takes down
# again. The binary has its own main(): started with --vipl-data-child it is
# the peer process that the connection-loss tests start and kill.
# Paths are relative to this file, so it can be included from anywhere.
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)
add_executable(vipl_data_conformance ${CMAKE_CURRENT_LIST_DIR}/vipl_data_conformance.cpp)
target_link_libraries(vipl_data_conformance PRIVATE ulnic_vipl GTest::gtest Threads::Threads)
target_compile_options(vipl_data_conformance PRIVATE -Wall -Wextra)
target_compile_definitions(vipl_data_conformance PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(vipl_data_conformance firmware ulnic ulnicd ulnic-fabricd)
# One ctest entry for the whole suite: the binary boots one cluster for all
# its tests (a GoogleTest environment).
add_test(NAME host.vipl_data COMMAND vipl_data_conformance)
set_tests_properties(host.vipl_data PROPERTIES LABELS "host;qemu;vipl" TIMEOUT 900
  ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
