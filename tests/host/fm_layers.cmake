# The layers over Fast Messages 2.x (tests/host/fm_layers.cpp): Split-C style
# global memory (ulnic_fm_gm) and the MPI-like layer (ulnic_fm_mp), with real
# forked ranks spread over a real 4-node cluster the binary boots once in a
# private runtime directory and takes down again.
find_package(GTest REQUIRED)
add_executable(fm_layers ${CMAKE_CURRENT_LIST_DIR}/fm_layers.cpp)
target_link_libraries(fm_layers PRIVATE ulnic_fm_gm ulnic_fm_mp ulnic_vipl_headers GTest::gtest)
target_compile_options(fm_layers PRIVATE -Wall -Wextra)
target_compile_definitions(fm_layers PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(fm_layers firmware ulnic ulnicd ulnic-fabricd)
add_test(NAME host.fm_layers COMMAND fm_layers)
set_tests_properties(host.fm_layers PROPERTIES LABELS "host;qemu;fm" TIMEOUT 420
  ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
