#!/usr/bin/env bash
# torchbus configured with CMAKE_PREFIX_PATH=<libtorch> against a LibTorch laid out as the official
# one is (the zip from pytorch.org, or the wheel's torch.utils.cmake_prefix_path), made from this
# machine's LibTorch (TORCH_DIR: its TorchConfig.cmake's folder), with the two traits of the
# official build that broke torchbus there (docs/getting-started.md):
# - its Caffe2Config.cmake is the one of a LibTorch with its protobuf linked in: it defines
#   protobuf::libprotobuf as an alias of an empty target `dummy` unless the target exists;
# - its include/ bundles fmt and protobuf headers, here copies of the system's names that stop the
#   compiler with #error, so reaching one of them fails the build.
# Then the sources that include fmt, spdlog, protobuf's generated code and LibTorch's c10d headers
# together are compiled (each on its own, without the precompiled header).
# Usage: check-official-layout.sh SOURCE_DIR TORCH_DIR WORK_DIR CXX_COMPILER
set -euo pipefail
source_dir=$1
torch_dir=$2
work=$3
compiler=$4
rm -rf "$work"
prefix="$work/libtorch"

# The real package: TORCH_DIR is <root>/<libdir>/cmake/Torch, Caffe2Targets.cmake's import prefix
# is <root>/lib (the libraries are under it, the headers in <root>/include).
cmake_dir=$(dirname "$torch_dir")
root=$(cd "$torch_dir/../../../.." && pwd)
libdir=${cmake_dir#"$root"/}
libdir=${libdir%/cmake}
real_import_prefix=$(cd "$cmake_dir/../.." && pwd)

mkdir -p "$prefix/$libdir/cmake" "$prefix/include"
for package in Torch Caffe2 ATen; do
  if [ -d "$cmake_dir/$package" ]; then cp -r "$cmake_dir/$package" "$prefix/$libdir/cmake/"; fi
done
# The official build links protobuf in (CAFFE2_LINK_LOCAL_PROTOBUF).
sed -i '/^# Protobuf$/{n;s/^if(OFF)$/if(ON)/}' "$prefix/$libdir/cmake/Caffe2/Caffe2Config.cmake"
grep -q 'add_library(dummy INTERFACE)' "$prefix/$libdir/cmake/Caffe2/Caffe2Config.cmake"
# The libraries the imported targets name, where the copied Caffe2Targets expects them.
import_prefix=$(cd "$prefix/$libdir/.." && pwd)
grep -ho '${_IMPORT_PREFIX}/[^" ]*' "$cmake_dir"/Caffe2/Caffe2Targets-*.cmake | sort -u |
  while read -r entry; do
    relative=${entry#'${_IMPORT_PREFIX}/'}
    mkdir -p "$(dirname "$import_prefix/$relative")"
    ln -sf "$real_import_prefix/$relative" "$import_prefix/$relative"
  done
# LibTorch's own headers, then the bundled third-party ones.
real_include="$real_import_prefix/../include"
for entry in ATen c10 caffe2 torch kineto; do
  if [ -e "$real_include/$entry" ]; then ln -s "$(cd "$real_include" && pwd)/$entry" "$prefix/include/$entry"; fi
done
for bundled in fmt google/protobuf; do
  (cd "$real_include" && find "$bundled" -type f) | while read -r header; do
    mkdir -p "$(dirname "$prefix/include/$header")"
    echo "#error \"LibTorch's bundled $header was included instead of the system's\"" \
      >"$prefix/include/$header"
  done
done
# The version of the protobuf bundled with LibTorch 2.x, where FindProtobuf reads it.
echo '#define GOOGLE_PROTOBUF_VERSION 3013000' >>"$prefix/include/google/protobuf/stubs/common.h"

cmake -S "$source_dir" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_PREFIX_PATH="$prefix" -DTORCHBUS_BUILD_TESTS=OFF \
  -DTORCHBUS_BUILD_EXAMPLES=OFF -DTORCHBUS_UNITY_BUILD=OFF -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
grep -q "^Torch_DIR:PATH=$prefix/" "$work/build/CMakeCache.txt" ||
  { echo "Torch was not found in the emulated LibTorch $prefix"; exit 1; }
grep 'torchbus: LibTorch bundles' "$work/configure.log"
cmake --build "$work/build" --target \
  callbacks/proto/CMakeFiles/torchbus_tensorboard_proto.dir/tensorboard/event.pb.cc.o \
  callbacks/CMakeFiles/torchbus_callbacks.dir/src/loggers/event_file_writer.cpp.o \
  callbacks/CMakeFiles/torchbus_callbacks.dir/src/loggers/simple_logger.cpp.o \
  framework/CMakeFiles/torchbus_framework.dir/src/distributed/process_group.cpp.o \
  framework/CMakeFiles/torchbus_framework.dir/src/support/logging.cpp.o | tail -n 20
echo "official layout: configured and compiled against $prefix"
