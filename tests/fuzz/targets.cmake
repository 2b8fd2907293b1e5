# The fuzz targets: tests/fuzz/fuzz_<name>.cpp, each with a seed corpus in
# corpus/<name>/ and, where it has one, a dictionary dict/<name>.dict. Read by
# the sub-build (CMakeLists.txt) and the top-level tests (fuzz.cmake).
set(ULNIC_FUZZ_EMULATOR_TARGETS json elf qmp gdb switch_options)
set(ULNIC_FUZZ_FIRMWARE_TARGETS fw)
set(ULNIC_FUZZ_TARGETS ${ULNIC_FUZZ_EMULATOR_TARGETS} ${ULNIC_FUZZ_FIRMWARE_TARGETS})
