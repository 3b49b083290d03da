#!/usr/bin/env bash
# Installs the build tree BUILD_DIR into a fresh prefix under WORK_DIR, then configures, builds and
# runs the consumer project against it with find_package(torchbus). CXX_FLAGS and LINKER_FLAGS are
# those the library was built with (a sanitizer build needs its consumer built the same way).
# Usage: check-consumer.sh BUILD_DIR WORK_DIR [CXX_FLAGS] [LINKER_FLAGS]
set -euo pipefail
build_dir=$1
work_dir=$2
cxx_flags=${3:-}
linker_flags=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work_dir"
mkdir -p "$work_dir"
cmake --install "$build_dir" --prefix "$work_dir/prefix" >/dev/null
cmake -S "$here/consumer" -B "$work_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work_dir/prefix" -DCMAKE_CXX_FLAGS="$cxx_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" >/dev/null
cmake --build "$work_dir/build" | tail -n 20
"$work_dir/build/consumer"
