# A sanitizer build (ULNIC_SANITIZE, CMakeLists.txt): every host target
# instrumented, and no firmware of its own: its tests boot the NICs of the
# build named by ULNIC_PREBUILT_FIRMWARE_DIR (QEMU and the firmware are not
# instrumented; neither is anything the tests do not build).
set(ULNIC_PREBUILT_FIRMWARE_DIR "" CACHE PATH "firmware build the sanitizer build's tests boot")
if(NOT ULNIC_PREBUILT_FIRMWARE_DIR)
  message(FATAL_ERROR "ULNIC_SANITIZE needs ULNIC_PREBUILT_FIRMWARE_DIR (a build's firmware/ directory)")
endif()
set(ULNIC_FIRMWARE_DIR ${ULNIC_PREBUILT_FIRMWARE_DIR})
# Targets that boot boards depend on `firmware`: here it is already built.
add_custom_target(firmware)

# A report fails the process that made it: UBSan and ASan stop at the first
# (-fno-sanitize-recover), TSan by halt_on_error (tests/sanitize/run.py).
# -O1 -g1 (after the build type's flags, so they win): line tables are all a
# report's stack needs. With them the ASan+UBSan build took 5.3 min of CPU,
# with RelWithDebInfo's -O2 -g 12.0 (2026-11-27, this 2-core machine).
add_compile_options(-fsanitize=${ULNIC_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g1)
add_link_options(-fsanitize=${ULNIC_SANITIZE})
