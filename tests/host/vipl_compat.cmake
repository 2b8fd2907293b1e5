# VIPL programs written for M-VIA and cLAN (issue 24, items 5 and 6), each
# test binary on a 2-node cluster it boots once in a private runtime
# directory (tests/host/vipl_cluster.h). Paths are relative to this file.
#   host.vipl_regcache  tests/host/vipl_regcache_test.cpp: registering,
#       freeing (free, munmap), re-allocating and deregistering in every
#       order; registering again moves no pages; and two processes of
#       vipl_regcache_mpl, a ping-pong over a message-passing library with a
#       registration cache (tests/programs/vipl_regcache_mpl.c); and a
#       layer's quiet polls (vipl_layer.h) never hand the core over.
#   host.vipl_names     tests/host/vipl_names_test.cpp: the name service
#       (ulnic cluster up --names, also across machines, the hosts file, the
#       host name, localhost),
#       M-VIA device names, VIP_NO_MATCH at once, quiet orderly disconnects.
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)

add_executable(vipl_regcache_mpl ${CMAKE_CURRENT_LIST_DIR}/../programs/vipl_regcache_mpl.c)
target_link_libraries(vipl_regcache_mpl PRIVATE ulnic_vipl)
set_target_properties(vipl_regcache_mpl PROPERTIES C_STANDARD 99 LINKER_LANGUAGE CXX)
target_compile_options(vipl_regcache_mpl PRIVATE -Wall -Wextra -Werror)

foreach(t IN ITEMS regcache names)
  add_executable(vipl_${t}_test ${CMAKE_CURRENT_LIST_DIR}/vipl_${t}_test.cpp)
  target_link_libraries(vipl_${t}_test PRIVATE ulnic_vipl GTest::gtest Threads::Threads)
  target_compile_options(vipl_${t}_test PRIVATE -Wall -Wextra)
  target_compile_definitions(vipl_${t}_test PRIVATE
    ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
    ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  add_dependencies(vipl_${t}_test firmware ulnic ulnicd ulnic-fabricd)
  add_test(NAME host.vipl_${t} COMMAND vipl_${t}_test)
  set_tests_properties(host.vipl_${t} PROPERTIES LABELS "host;qemu;vipl" TIMEOUT 600
    ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
endforeach()
# The regcache test reaches libulnic's Nic behind a VIPL handle (libvipl's
# vipl_internal.h) for its registration statistics, and runs the program.
target_include_directories(vipl_regcache_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../../host/vipl)
add_dependencies(vipl_regcache_test vipl_regcache_mpl)
