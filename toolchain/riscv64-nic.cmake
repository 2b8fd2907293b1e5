# CMake toolchain file for the NIC processor: RV64IMAC, LP64, medany, bare
# metal, built with Debian's clang-16 and ld.lld-16 (lld-14 cannot link RISC-V
# relaxations). Freestanding C++20: no exceptions, no RTTI, no heap, no libc.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

set(_llvm_hint /usr/lib/llvm-16/bin)
find_program(ULNIC_CLANG NAMES clang-16 clang HINTS ${_llvm_hint} NO_DEFAULT_PATH)
find_program(ULNIC_CLANG NAMES clang-16)
find_program(ULNIC_CLANGXX NAMES clang++-16 clang++ HINTS ${_llvm_hint} NO_DEFAULT_PATH)
find_program(ULNIC_CLANGXX NAMES clang++-16)
find_program(ULNIC_LLD NAMES ld.lld-16 ld.lld HINTS ${_llvm_hint} NO_DEFAULT_PATH)
find_program(ULNIC_LLD NAMES ld.lld-16)
find_program(ULNIC_OBJCOPY NAMES llvm-objcopy-16 llvm-objcopy HINTS ${_llvm_hint} NO_DEFAULT_PATH)
find_program(ULNIC_OBJCOPY NAMES llvm-objcopy-16)
if(NOT ULNIC_CLANG OR NOT ULNIC_CLANGXX)
  message(FATAL_ERROR "clang-16 not found: install the Debian package clang-16 (toolchain/install-deps.sh)")
endif()
if(NOT ULNIC_LLD)
  message(FATAL_ERROR "ld.lld-16 not found: install the Debian package lld-16 (toolchain/install-deps.sh)")
endif()

set(CMAKE_C_COMPILER ${ULNIC_CLANG})
set(CMAKE_CXX_COMPILER ${ULNIC_CLANGXX})
set(CMAKE_ASM_COMPILER ${ULNIC_CLANG})
set(CMAKE_OBJCOPY ${ULNIC_OBJCOPY} CACHE FILEPATH "objcopy for the NIC")

set(ULNIC_NIC_TRIPLE riscv64-unknown-elf)
set(CMAKE_C_COMPILER_TARGET ${ULNIC_NIC_TRIPLE})
set(CMAKE_CXX_COMPILER_TARGET ${ULNIC_NIC_TRIPLE})
set(CMAKE_ASM_COMPILER_TARGET ${ULNIC_NIC_TRIPLE})

set(_arch "-march=rv64imac -mabi=lp64 -mcmodel=medany")
set(_free "-ffreestanding -fno-common -ffunction-sections -fdata-sections -fno-stack-protector -fno-pic")
set(CMAKE_C_FLAGS_INIT "${_arch} ${_free}")
set(CMAKE_CXX_FLAGS_INIT "${_arch} ${_free} -fno-exceptions -fno-rtti -fno-threadsafe-statics -fno-use-cxa-atexit")
set(CMAKE_ASM_FLAGS_INIT "${_arch}")
# Link with lld directly through the driver; no crt files, no libc, no libgcc
# (RV64IM has hardware multiply/divide, so nothing needs a helper library).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-nostdlib -static --ld-path=${ULNIC_LLD} -Wl,--build-id=sha1 -Wl,--gc-sections")

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
