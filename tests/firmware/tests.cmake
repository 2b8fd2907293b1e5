# Firmware unit-test images: tests/firmware/test_<name>.cpp -> fwtest-<name>.elf.
# Read by the firmware build (to build them) and the host build (to register
# each as a ctest that runs it under QEMU with `ulnic fwtest`).
set(ULNIC_FIRMWARE_TESTS pcie trap ring log boot_config mem loop slots crc vmmc vi am link mail unet)
# `ulnic fwtest` arguments a test needs beyond the default board
# (ULNIC_FIRMWARE_TEST_ARGS_<name>): the VI test plays two peer nodes.
set(ULNIC_FIRMWARE_TEST_ARGS_vi --fabric-ports 3)
