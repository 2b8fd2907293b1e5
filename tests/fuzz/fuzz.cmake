# Fuzz targets (tests/fuzz): built by a sub-build with clang++-16 when it can
# link -fsanitize=fuzzer,address,undefined (the Debian package
# libclang-rt-16-dev, toolchain/install-deps.sh), and run briefly by
# `ctest -L fuzz`. tests/fuzz/run_long.py runs them long.
include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz/targets.cmake)
set(ULNIC_FUZZ_DIR ${CMAKE_BINARY_DIR}/fuzz)

set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/fuzz-probe)
file(WRITE ${probe_dir}/probe.cpp
  "#include <stddef.h>\n#include <stdint.h>\n"
  "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
execute_process(
  COMMAND ${ULNIC_NIC_CLANG} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.cpp -o ${probe_dir}/probe
  RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT probe_rc EQUAL 0)
  message(WARNING "fuzz targets not built: clang++-16 cannot link -fsanitize=fuzzer "
                  "(install the Debian package libclang-rt-16-dev: toolchain/install-deps.sh)")
  return()
endif()

ExternalProject_Add(fuzz
  SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz
  BINARY_DIR ${ULNIC_FUZZ_DIR}
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${ULNIC_NIC_CLANG} -DCMAKE_BUILD_TYPE=RelWithDebInfo
  BUILD_ALWAYS ON
  INSTALL_COMMAND ""
  USES_TERMINAL_BUILD ON)

# The smoke run: 10 s or ULNIC_FUZZ_SMOKE_RUNS inputs per target, one
# process, from the seed corpus; what it finds goes to the build tree.
set(ULNIC_FUZZ_SMOKE_RUNS 200000)
foreach(t IN LISTS ULNIC_FUZZ_TARGETS)
  set(dict ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/dict/${t}.dict)
  set(dict_arg "")
  if(EXISTS ${dict})
    set(dict_arg -dict=${dict})
  endif()
  add_test(NAME fuzz.${t}
           COMMAND ${ULNIC_FUZZ_DIR}/fuzz_${t} -seed=1 -max_total_time=10 -runs=${ULNIC_FUZZ_SMOKE_RUNS}
                   -print_final_stats=1 -artifact_prefix=${ULNIC_FUZZ_DIR}/artifacts/${t}- ${dict_arg}
                   ${ULNIC_FUZZ_DIR}/work/${t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${t})
  set_tests_properties(fuzz.${t} PROPERTIES LABELS fuzz TIMEOUT 120)
endforeach()
