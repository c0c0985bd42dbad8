#!/usr/bin/env bash
# Compiles every source that has CUDA-only code the way a CUDA build (-DDDP_WITH_CUDA=ON) would, to
# syntax only, against this machine's LibTorch headers and a CUDA toolkit's: a CPU machine catches
# what would otherwise fail a lent GPU's build. Nothing is linked or run (the CPU LibTorch has no CUDA
# symbols). LibTorch 2.x-only branches are not seen, except the CUDA graphs' LibTorch 2.3 lines
# (Note [CUDA graphs]): a second pass compiles their two files as LibTorch 2.3 would, with the 2.x
# declarations they use (CUDAGraph::capture_begin's capture mode, _fused_adamw_'s two overloads,
# as upstream's headers have them) put over 1.13's.
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

mkdir -p "$shim/v23/torch" "$shim/v23/ATen/cuda"
torch_api=/usr/include/torch/csrc/api/include
sed -e 's/#define TORCH_VERSION_MAJOR .*/#define TORCH_VERSION_MAJOR 2/' \
    -e 's/#define TORCH_VERSION_MINOR .*/#define TORCH_VERSION_MINOR 3/' "$torch_api/torch/version.h" >"$shim/v23/torch/version.h"
sed 's/void capture_begin(MempoolId_t pool={0, 0});/void capture_begin(MempoolId_t pool={0, 0}, cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal);/' \
    /usr/include/ATen/cuda/CUDAGraph.h >"$shim/v23/ATen/cuda/CUDAGraph.h"
grep -q 'cudaStreamCaptureMode capture_mode' "$shim/v23/ATen/cuda/CUDAGraph.h" ||
  { echo "error: CUDAGraph.h's capture_begin is not 1.13's: update this script"; exit 1; }
cat >"$shim/v23/fused_adamw.h" <<'DECLARATIONS'
#pragma once
#include <ATen/ATen.h>
namespace at {  // torchgen's declarations of aten::_fused_adamw_ and aten::_fused_adamw_.tensor_lr (2.x)
void _fused_adamw_(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                   at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                   double weight_decay, double eps, bool amsgrad, bool maximize,
                   const c10::optional<at::Tensor>& grad_scale = {}, const c10::optional<at::Tensor>& found_inf = {});
void _fused_adamw_(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                   at::TensorList max_exp_avg_sqs, at::TensorList state_steps, const at::Tensor& lr, double beta1,
                   double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                   const c10::optional<at::Tensor>& grad_scale = {}, const c10::optional<at::Tensor>& found_inf = {});
}  // namespace at
DECLARATIONS
mapfile -t v23 < <(grep -rlE 'DDP_LIBTORCH_CAPTURES_STEPS|DDP_FUSED_ADAMW_TENSOR_LR' lib --include=*.cpp | sort)
echo "compiling ${#v23[@]} sources as LibTorch 2.3 would: ${v23[*]}"
for source in "${v23[@]}"; do
  g++ -isystem "$shim/v23" -include "$shim/v23/fused_adamw.h" "@$flags_file" "$source" || { echo "FAILED: $source"; exit 1; }
done
echo "all ${#v23[@]} compiled"
