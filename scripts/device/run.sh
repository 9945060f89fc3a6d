#!/usr/bin/env bash
# Runs ON THE GPU MACHINE (through the device tool, from the repository root, with
# `.device` carried): builds the GPU path against the machine's own torch and CUDA and runs
# the ctest labels given (default: gpu and unit). Results and logs go to $OUT.
#
#   from a session:  scripts/device/prepare.sh, then the device tool's run with
#     command: bash scripts/device/run.sh 'gpu|unit'     carry: [".device"]
set -euo pipefail
labels=${1:-gpu|unit}
out=${OUT:-/tmp/mltool-device-out}
mkdir -p "$out"
prefix=$(pwd)/.device/prefix
[ -d "$prefix/usr" ] || { echo "device: .device/prefix missing: run scripts/device/prepare.sh and carry .device" >&2; exit 1; }
multiarch=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$multiarch/pkgconfig:$prefix/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$prefix
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not available"; } | tee "$out/gpu.txt"
torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" \
  -DProtobuf_PROTOC_EXECUTABLE="$prefix/usr/bin/protoc" \
  -DPython3_EXECUTABLE="$(command -v python3)" \
  -DMLTOOL_WITH_SLIDE=OFF > "$out/configure.log" 2>&1 || { tail -50 "$out/configure.log"; exit 1; }
cmake --build build-device -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -80 "$out/build.log"; exit 1; }
build-device/bin/mltool --version | tee "$out/version.txt"
cd build-device
ctest --output-on-failure -L "$labels" 2>&1 | tee "$out/ctest.log"
