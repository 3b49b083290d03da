#!/usr/bin/env bash
# Installs the build tree BUILD_DIR into a fresh prefix under WORK_DIR, then configures, builds and
# runs the consumer project against it with find_package(torchbus).
set -euo pipefail
build_dir=$1
work_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work_dir"
mkdir -p "$work_dir"
cmake --install "$build_dir" --prefix "$work_dir/prefix" >/dev/null
cmake -S "$here/consumer" -B "$work_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work_dir/prefix" >/dev/null
cmake --build "$work_dir/build" >/dev/null
"$work_dir/build/consumer"
