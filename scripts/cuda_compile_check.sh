#!/usr/bin/env bash
# Compiles every source that has CUDA-only code the way a CUDA build (-DDDP_WITH_CUDA=ON) would, to
# syntax only, against this machine's LibTorch headers and a CUDA toolkit's: a CPU machine catches
# what would otherwise fail a lent GPU's build. Nothing is linked or run (the CPU LibTorch has no CUDA
# symbols), and LibTorch 2.x-only branches (TORCH_VERSION_MAJOR >= 2) are not seen.
#
#   scripts/cuda_compile_check.sh [BUILD_DIR]   the configured CPU build whose flags are reused
#
# Exit 77 (ctest's skip) with a line saying why when no CUDA toolkit headers are found.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] || [ ! -f "$cuda/include/nccl.h" ]; then
  echo "SKIP: no CUDA toolkit with NCCL headers at $cuda/include (set CUDA_HOME): the CUDA sources were not compiled"
  exit 77
fi
[ -f "$build/build.ninja" ] || { echo "error: $build/build.ninja not found: configure the CPU build first"; exit 2; }

# LibTorch's CMake writes this header at its own build; the headers Debian ships lack it.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$shim/c10/cuda/impl/cuda_cmake_macros.h"

# The CPU build's defines and include paths (every area's), plus CUDA's and NCCL's.
# Ninja escapes a define's quotes (\"), which a response file reads as they are.
defines=$(grep -o 'DEFINES = .*' "$build/build.ninja" | sed 's/DEFINES = //' | tr ' ' '\n' | sort -u |
          grep -v -e '_EXPORTS$' -e '^-DDDP_CUDA_BUILD=' | tr '\n' ' ')
includes=$(grep -o -- '-I[^ ]*\|-isystem [^ ]*' "$build/build.ninja" | sort -u | tr '\n' ' ')
cat >"$shim/flags" <<FLAGS
-fsyntax-only -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=1 -Wall -Wextra -Wno-unused-parameter -Werror=return-type
$defines -DDDP_WITH_CUDA=1 -DUSE_C10D_NCCL -DDDP_CUDA_BUILD=1
-I$PWD/lib -I$PWD/tests $includes -isystem $shim -isystem $cuda/include
FLAGS
mapfile -t sources < <(grep -rlE 'DDP_WITH_CUDA|<c10/cuda|<ATen/cuda|<torch/cuda' lib apps tests --include=*.cpp | sort)
echo "compiling ${#sources[@]} sources as a CUDA build would (syntax only): ${sources[*]}"
export flags_file=$shim/flags
printf '%s\n' "${sources[@]}" | xargs -P "${JOBS:-2}" -I{} sh -c 'g++ "@$flags_file" "$1" || { echo "FAILED: $1"; exit 255; }' sh {}
echo "all ${#sources[@]} compiled"
