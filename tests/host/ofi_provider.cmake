# The libfabric provider `ulnic` (host/ofi; tests/host/ofi_provider.cpp):
# every call through libfabric itself, bad hints, truncation, tagged
# matching, blocking reads, and the unmodified fi_info and fi_pingpong
# (Debian's libfabric-bin), on one 2-node cluster the binary boots once.
if(ULNIC_HAVE_LIBFABRIC)
  find_program(ULNIC_FI_PINGPONG fi_pingpong)
  find_program(ULNIC_FI_INFO fi_info)
  find_package(GTest REQUIRED)
  add_executable(ofi_provider ${CMAKE_CURRENT_LIST_DIR}/ofi_provider.cpp)
  target_include_directories(ofi_provider PRIVATE ${ULNIC_LIBFABRIC_INCLUDE} ${CMAKE_SOURCE_DIR}/host/ofi)
  # ulnic_core: a hostile sender's raw AM messages (FragmentsThatLieAreDropped)
  target_link_libraries(ofi_provider PRIVATE ${ULNIC_LIBFABRIC} ulnic_core ulnic_vipl_headers GTest::gtest)
  target_compile_options(ofi_provider PRIVATE -Wall -Wextra)
  target_compile_definitions(ofi_provider PRIVATE
    ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
    ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}"
    ULNIC_TEST_LIBDIR="${CMAKE_BINARY_DIR}/lib")
  add_dependencies(ofi_provider ulnic_fi firmware ulnic ulnicd ulnic-fabricd)
  if(ULNIC_SANITIZE)
    # An instrumented provider: fi_info and fi_pingpong cannot load it.
    add_test(NAME host.ofi_provider COMMAND ofi_provider --gtest_filter=-OfiPrograms.*)
    set_tests_properties(host.ofi_provider PROPERTIES LABELS "host;qemu;ofi" TIMEOUT 300
      ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
  elseif(ULNIC_FI_PINGPONG AND ULNIC_FI_INFO)
    add_test(NAME host.ofi_provider COMMAND ofi_provider)
    set_tests_properties(host.ofi_provider PROPERTIES LABELS "host;qemu;ofi" TIMEOUT 300
      ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
  else()
    message(STATUS "fi_info/fi_pingpong not found: host.ofi_provider is not registered (Debian: libfabric-bin)")
  endif()
endif()
