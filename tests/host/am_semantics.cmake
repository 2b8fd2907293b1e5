# The AM-2 semantics suite (tests/host/am_semantics.cpp), once per transport:
# udp (no emulator), vipl and native (the binary boots a 2-node cluster of
# its own in a private runtime directory).
find_package(GTest REQUIRED)
add_executable(am_semantics ${CMAKE_CURRENT_LIST_DIR}/am_semantics.cpp)
target_link_libraries(am_semantics PRIVATE ulnic_am GTest::gtest)
target_compile_options(am_semantics PRIVATE -Wall -Wextra)
target_compile_definitions(am_semantics PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(am_semantics firmware ulnic ulnicd ulnic-fabricd)
add_test(NAME host.am_semantics_udp COMMAND am_semantics)
set_tests_properties(host.am_semantics_udp PROPERTIES LABELS "host;am" TIMEOUT 300
  ENVIRONMENT "ULNIC_AM_TRANSPORT=udp")
add_test(NAME host.am_semantics_vipl COMMAND am_semantics)
set_tests_properties(host.am_semantics_vipl PROPERTIES LABELS "host;qemu;am" TIMEOUT 900
  ENVIRONMENT "ULNIC_AM_TRANSPORT=vipl;ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
add_test(NAME host.am_semantics_native COMMAND am_semantics)
set_tests_properties(host.am_semantics_native PROPERTIES LABELS "host;qemu;am" TIMEOUT 900
  ENVIRONMENT "ULNIC_AM_TRANSPORT=native;ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
