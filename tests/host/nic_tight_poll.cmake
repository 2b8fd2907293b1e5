# Handing a spinning process's core to its NIC (tests/host/nic_tight_poll.cpp):
# Nic::poll_found's count of empty polls, its blocks and what ends them, and
# several threads asleep on one Nic woken by one NIC wake-up, on node 0 of a
# 1-node cluster the binary boots once in a private runtime directory.
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)
add_executable(nic_tight_poll ${CMAKE_CURRENT_LIST_DIR}/nic_tight_poll.cpp)
target_link_libraries(nic_tight_poll PRIVATE ulnic_core ulnic_vipl_headers GTest::gtest GTest::gtest_main
  Threads::Threads)
target_compile_options(nic_tight_poll PRIVATE -Wall -Wextra)
target_compile_definitions(nic_tight_poll PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(nic_tight_poll firmware ulnic ulnicd ulnic-fabricd)
add_test(NAME host.nic_tight_poll COMMAND nic_tight_poll)
set_tests_properties(host.nic_tight_poll PROPERTIES LABELS "host;qemu" TIMEOUT 300
  ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
