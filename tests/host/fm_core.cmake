# Fast Messages 2.x core (tests/host/fm_core.cpp): gather/scatter, handler
# threads, multi-sender interleaving, receiver flow control, argument and
# wire errors, with real FM processes (forked) on a real 2-node cluster the
# binary boots once in a private runtime directory and takes down again.
find_package(GTest REQUIRED)
add_executable(fm_core ${CMAKE_CURRENT_LIST_DIR}/fm_core.cpp)
target_link_libraries(fm_core PRIVATE ulnic_fm ulnic_vipl_headers GTest::gtest)
target_compile_options(fm_core PRIVATE -Wall -Wextra)
target_compile_definitions(fm_core PRIVATE
  ULNIC_TEST_FIRMWARE_DIR="${ULNIC_FIRMWARE_DIR}"
  ULNIC_TEST_BINDIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(fm_core firmware ulnic ulnicd ulnic-fabricd)
add_test(NAME host.fm_core COMMAND fm_core)
set_tests_properties(host.fm_core PROPERTIES LABELS "host;qemu;fm" TIMEOUT 300
  ENVIRONMENT "ULNIC_FIRMWARE_DIR=${ULNIC_FIRMWARE_DIR}")
# fm.h is a C99 header: a C file that uses all of it, pedantic, warnings as errors.
add_library(fm_c99_check OBJECT ${PROJECT_SOURCE_DIR}/host/fm/check/fm_c99.c)
target_include_directories(fm_c99_check PRIVATE ${PROJECT_SOURCE_DIR}/host/fm/include)
set_target_properties(fm_c99_check PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(fm_c99_check PRIVATE -Wall -Wextra -pedantic -Werror)
add_dependencies(fm_core fm_c99_check)
