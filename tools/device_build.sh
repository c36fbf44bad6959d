#!/usr/bin/env bash
# Configure, build and test on a GPU machine that has CUDA, CMake, Ninja and a CUDA
# PyTorch but no package registry. Prepare the kit first, on a machine with Debian's
# registry:   tools/device_kit.sh   (writes .devkit/: the shared kit plus yaml-cpp, nlohmann/json)
# then run this script on the GPU machine from the project root (carry .devkit along).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
[ -d .devkit/usr/include/yaml-cpp ] || { echo "device_build: .devkit/ missing or incomplete: run tools/device_kit.sh first" >&2; exit 1; }
KIT=$PWD/.devkit/usr
export PKG_CONFIG_PATH=$KIT/lib/x86_64-linux-gnu/pkgconfig:$KIT/share/pkgconfig
export LD_LIBRARY_PATH=$KIT/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build=${TORCHMT_BUILD_DIR:-build-cuda}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$KIT;$KIT/lib/cmake;$KIT/lib/x86_64-linux-gnu/cmake;$KIT/share/cmake" \
  -DPython3_EXECUTABLE="$(command -v python3)" ${TORCHMT_CMAKE_ARGS:-}
cmake --build "$build" -- -j "$(nproc)"
[ -z "${DEVICE_BUILD_NO_TEST:-}" ] || exit 0  # DEVICE_BUILD_NO_TEST=1: build only
cd "$build"
ctest --output-on-failure -j 4 "$@"
