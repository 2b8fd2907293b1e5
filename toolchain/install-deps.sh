#!/usr/bin/env bash
# Installs every Debian package ulnic needs to build, run and test. Idempotent:
# asks apt only for what is missing, so a second run is instant. Debian 12.
set -euo pipefail

PACKAGES=(
  # host build
  cmake ninja-build g++ make pkg-config libgtest-dev libgmock-dev
  # NIC firmware cross toolchain: clang-16 + lld-16 (lld-14 cannot link
  # RISC-V relaxations), llvm-16 for objcopy/addr2line
  clang-16 lld-16 llvm-16
  # libFuzzer and the ASan/UBSan runtimes for clang-16 (tests/fuzz)
  libclang-rt-16-dev
  # the emulated NIC board and its debugger
  qemu-system-misc qemu-system-data gdb-multiarch
  # tools and tests (tshark reads the switch's captures)
  python3 procps tshark iproute2
  # benchmark plots; host instruction counts (tests/bench/host_cost.py)
  python3-matplotlib valgrind
  # the libfabric provider (host/ofi) and the clients that test it
  # (fi_info, fi_pingpong; Open MPI's mpirun and its OFI MTL, mpi4py)
  libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev python3-mpi4py
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
for attempt in 1 2 3; do
  if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    exit 0
  fi
  echo "install-deps: apt failed (attempt $attempt), retrying" >&2
  sleep $((attempt * 5))
done
echo "install-deps: could not install: ${missing[*]}" >&2
exit 1
