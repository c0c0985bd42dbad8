#!/usr/bin/env bash
# Configures (once) and builds into build/. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ] || [ $# -gt 0 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_QUICK_BUILD=OFF "$@"  # -O3, as benchmarked
fi
cmake --build build --parallel "$(nproc)"
