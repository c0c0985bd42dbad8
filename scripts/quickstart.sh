#!/usr/bin/env bash
# The main job, from a fresh machine: the packages it needs (scripts/setup.sh run, no test-only ones),
# the programs (not the tests, and at -O1: DDP_QUICK_BUILD in CMakeLists.txt), then the ConvNet on
# Fashion-MNIST with 2 CPU workers for an epoch.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh run
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_BUILD_TESTS=OFF -DDDP_QUICK_BUILD=ON
fi
cmake --build build --parallel "$(nproc)" --target ddprun ddp-train ddp-report ddp-generate ddp-tokenize ddp-export \
  ddp-generated-docs
exec build/bin/ddprun --nproc-per-node=2 configs/fashion_mnist_convnet.yaml "$@"
