# Firmware unit-test images: tests/firmware/test_<name>.cpp -> fwtest-<name>.elf.
# Read by the firmware build (to build them) and the host build (to register
# each as a ctest that runs it under QEMU with `ulnic fwtest`).
set(ULNIC_FIRMWARE_TESTS pcie trap ring log boot_config mem loop slots crc vmmc vi am link mail unet)
