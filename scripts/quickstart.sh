#!/usr/bin/env bash
# Set-up, build, then the main job: the ConvNet on Fashion-MNIST with 2 CPU workers.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
exec build/bin/ddprun --nproc-per-node=2 configs/fashion_mnist_convnet.yaml "$@"
