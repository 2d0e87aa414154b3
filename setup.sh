#!/usr/bin/env bash
# Fresh-machine set-up: installs the Debian dependencies, builds moegen, and
# runs the main job on the default config (the deepseek-v3 preset, NVRTC,
# sm_90a) into build/out/. Needs the CUDA toolkit (nvcc, NVRTC) installed.
# Usage: ./setup.sh [extra cmake options, e.g. -DMOEGEN_STATIC_DEPS=ON]
set -euo pipefail
cd "$(dirname "$0")"
need=()
for p in cmake gcc g++ make pkgconf liblua5.4-dev libjansson-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j "$(nproc)"
./build/moegen --preset deepseek-v3 --name ds3 --out build/out --compile nvrtc
