#!/usr/bin/env bash
# The README's two commands:
#   toolchain/bootstrap.sh demo   set up this machine, build, run the main demo
#   toolchain/bootstrap.sh test   set up this machine, build, run every test
# $ULNIC_BUILD_DIR overrides the build directory (default: build/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ULNIC_BUILD_DIR:-$ROOT/build}"
what="${1:-}"
case "$what" in
  demo|test) ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac

"$ROOT/toolchain/install-deps.sh"
cmake -S "$ROOT" -B "$BUILD" -G Ninja
cmake --build "$BUILD"

if [ "$what" = demo ]; then
  exec "$BUILD/bin/ulnic" demo
fi
# Two cores: two tests at a time. Each firmware test and each QEMU test
# group boots its own private board, so they never share runtime files.
# No reruns: a test that fails once is a bug to find, not to retry.
exec ctest --test-dir "$BUILD" --output-on-failure -j 2
