#!/usr/bin/env bash
# The benchmark table: throughput and scaling efficiency against the compute limit, the
# torchrun+DDP recipe side by side, all-reduce time hidden by overlap, start-up, memory, and an
# all-reduce microbenchmark (Gloo, and the shared-memory path gradients take on one node). docs/performance.md keeps the latest table.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh bench >/dev/null
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_BUILD_TESTS=OFF >/dev/null
fi
cmake --build build --parallel "$(nproc)" --target ddprun ddp-train ddp-tokenize ddp-bench-allreduce >/dev/null
exec /usr/bin/python3 scripts/bench.py
