#!/usr/bin/env bash
# Set-up (every package the tests use), build (the tests included), then the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh tests
./scripts/build.sh -DDDP_BUILD_TESTS=ON  # on a tree the quick start configured without them too
cd build
ctest --output-on-failure --parallel "$(nproc)" --timeout 600
