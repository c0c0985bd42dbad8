#!/usr/bin/env bash
# The CUDA path, on a GPU machine that has a CUDA PyTorch (pip, 2.x) and no network:
#
#   scripts/gpu_check.sh fetch [DIR]   here, with Debian's registry: our other dependencies' .debs into DIR
#   scripts/gpu_check.sh run [DIR]     there: build with -DDDP_WITH_CUDA=ON, then train (NCCL, Gloo on
#                                      CUDA tensors, bf16) and check the results in Python
#   scripts/gpu_check.sh bench [DIR]   there: build if needed, then the GraphSAGE bench on the GPU
#   scripts/gpu_check.sh tests [DIR]   there: build and run the unit tests that need a GPU ([gpu])
#   scripts/gpu_check.sh gpt [DIR]     there: the [gpu] tests, then the GPU GPT table (scripts/bench.py
#                                      BENCH_ONLY=gpt_gpu: GPT-2 124M against the Python peer, eager and
#                                      compiled) and a step's profile on each side (BENCH_ONLY=gpu_profile),
#                                      on data/kjv, made here by scripts/make_tokens.py (BENCH_GPU_SMOKE=1
#                                      runs both here on the CPU at a toy shape, to check them first)
#   scripts/gpu_check.sh quickstart [DIR]  there: the quick start's build and training (on the CPU), timed
#   scripts/gpu_check.sh elastic [DIR] there: the [gpu] tests, then train.global_batch_size and an elastic
#                                      job (a node joins, another is drained) on CUDA tensors, on data/kjv
#   scripts/gpu_check.sh pipeline [DIR] there: the [gpu] tests, then the GPT as 2 pipeline stages on CUDA
#                                      tensors (gpipe, 1f1b, bf16, ZeRO-3 within stages) against world 1, on data/kjv
#
# DIR (default .gpu) holds the .debs, which are unpacked into /tmp/ddprun-deps, never into /. CMake
# finds LibTorch through `torch.utils.cmake_prefix_path`. docs/gpu.md records what these printed.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-run}
debs=$(realpath -m "${2:-.gpu}")
python=${PYTHON:-python3}
# The runs below put two ranks on one GPU; on a machine with more, they use the first.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
packages=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev catch2 libgloo-dev
          zlib1g-dev dataset-fashion-mnist libssl-dev libssl3 libisal-dev libisal2 libxxhash-dev libxxhash0
          nlohmann-json3-dev pkgconf pkgconf-bin libpkgconf3 libsentencepiece-dev libsentencepiece0)

if [ "$stage" = fetch ]; then
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${packages[@]}")
  exit 0
fi

prefix=/tmp/ddprun-deps
data=$prefix/usr/share/datasets/fashion-mnist
tests=OFF
build() {  # unpacks and configures every time (both quick once done), so a later stage can add the tests
  mkdir -p "$prefix/first" || return
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$prefix" || return; done
  local torch_prefix torch_include
  TORCH_CUDA_ARCH_LIST=$("$python" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())') || return
  export TORCH_CUDA_ARCH_LIST
  torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') || return
  torch_include=$("$python" -c 'import torch.utils.cpp_extension as e; print(e.include_paths()[0])') || return
  # spdlog was built against Debian's fmt: its headers must win over any fmt LibTorch ships. Gloo's
  # headers come from LibTorch where it ships them, else from Debian.
  ln -sfn "$prefix/usr/include/fmt" "$prefix/first/fmt"
  [ -d "$torch_include/gloo" ] || ln -sfn "$prefix/usr/include/gloo" "$prefix/first/gloo"
  # ISA-L and xxHash are found through pkg-config: Debian's, reading only the unpacked .pc files, with
  # their /usr paths moved under the prefix.
  local multiarch=$prefix/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_LIBDIR=$multiarch/pkgconfig:$prefix/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$prefix
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_WITH_CUDA=ON -DDDP_BUILD_TESTS="$tests" \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCMAKE_CXX_FLAGS="-I$prefix/first" -DCMAKE_UNITY_BUILD="${UNITY:-ON}" \
    -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" -DOPENSSL_ROOT_DIR="$prefix/usr" || return
  cmake --build build --parallel "$(nproc)" --target ddprun ddp-train ddp-report ddp-generate
}

# One check: its name, then the command; the log keeps going past a failure, and the summary says which.
failures=()
check() {
  local name=$1
  shift
  echo "=== $name: $*"
  local start=$SECONDS
  if "$@"; then echo "=== $name: ok ($((SECONDS - start)) s)"; else
    echo "=== $name: FAILED (exit $?, $((SECONDS - start)) s)"; failures+=("$name"); fi
}
accuracy() { grep -o '"eval_accuracy": *[0-9.]*' "$1/metrics.jsonl" | tail -1; }
train() {  # OUT_NAME NPROC CONFIG [--set k=v ...]
  local out=/tmp/ddprun-runs/$1 nproc=$2 config=$3
  shift 3
  rm -rf "$out"
  build/bin/ddprun --standalone --nproc-per-node "$nproc" "$config" --set run.output_dir="$out" "$@" || return
  accuracy "$out"
}
python_accuracy() { "$python" scripts/ddp_models.py eval "/tmp/ddprun-runs/$1/model.pt" convnet --data "$data"; }
nccl_refuses_two_ranks() {
  local err
  if err=$(build/bin/ddprun --standalone --nproc-per-node 2 configs/synthetic_mlp.yaml \
      --set run.output_dir=/tmp/ddprun-runs/nccl2 --set dist.backend=nccl 2>&1); then
    echo "expected a refusal"; return 1
  fi
  echo "$err" | grep "needs a GPU per rank"
}

# The GPU and PyTorch named, then the CUDA build; no point going on without it.
gpu_and_build() {
  check "GPU and PyTorch" bash -c "nvidia-smi -L && $python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'"
  check "CUDA build" build
  [ -x build/bin/ddp-train ] || exit 1
  build/bin/ddp-train --version
}

# The CUDA build and its [gpu] tests; then the stages below train the baby GPT on data/kjv, fp32 on
# CUDA tensors, 32 sequences a step at any world size (Note [Global batch]), ranks sharing the one GPU
# through Gloo.
gpu_unit_tests() {  # every test executable that has [gpu] cases
  check "its tests' build" cmake --build build --parallel "$(nproc)" --target test_comm test_data test_model test_optim test_loop
  check "tests tagged [gpu]: placement" build/bin/test_comm "[gpu]" "$@"
  check "tests tagged [gpu]: batches staged on the GPU" build/bin/test_data "[gpu]" "$@"
  check "tests tagged [gpu]: deferred initialisation on the GPU" build/bin/test_model "[gpu]" "$@"
  check "tests tagged [gpu]: the fused AdamW" build/bin/test_optim "[gpu]" "$@"
  check "tests tagged [gpu]: no wait for the device in a step" build/bin/test_loop "[gpu]" "$@"
}
gpu_tests() {
  tests=ON
  gpu_and_build
  gpu_unit_tests
}
kjv_gpt=(configs/gpt_kjv.yaml --set "data.path=data/kjv/kjv_train_*.bin" --set "data.eval_path=data/kjv/kjv_val_*.bin"
         --set dist.device=cuda --set dist.backend=gloo --set train.global_batch_size=32 --set train.max_steps=300
         --set train.log_every=100)
last_loss() { grep -o '"loss": *[0-9.]*' "$1/metrics.jsonl" | tail -1; }

case "$stage" in
  run)
    gpu_and_build
    convnet=(configs/fashion_mnist_convnet.yaml --set data.path="$data" --set train.epochs=2)
    check "ConvNet, world 1, NCCL, fp32" train conv-w1 1 "${convnet[@]}"
    check "its model.pt in Python (strict load)" python_accuracy conv-w1
    check "ConvNet, world 1, NCCL, bf16" train conv-w1-bf16 1 "${convnet[@]}" --set train.precision=bf16
    check "ConvNet, world 2 on one GPU (Gloo, CUDA tensors)" train conv-w2 2 "${convnet[@]}"
    check "its model.pt in Python (strict load)" python_accuracy conv-w2
    check "ConvNet, world 2 on one GPU, bf16" train conv-w2-bf16 2 "${convnet[@]}" --set train.precision=bf16
    check "NCCL with two ranks on one GPU is refused" nccl_refuses_two_ranks
    check "Fashion-MNIST 10-NN graph" "$python" scripts/make_fashion_knn.py data/fashion_knn --data "$data"
    knn=(configs/graphsage_fashion_knn.yaml --set data.path=data/fashion_knn --set data.eval_split=test)
    check "GraphSAGE, world 1, NCCL" train knn-w1 1 "${knn[@]}"
    check "GraphSAGE, world 2 on one GPU, bf16" train knn-w2-bf16 2 "${knn[@]}" --set train.precision=bf16
    ;;
  bench)
    check "CUDA build" build
    [ -x build/bin/ddp-train ] || exit 1
    [ -f data/fashion_knn/edge_index.npy ] || "$python" scripts/make_fashion_knn.py data/fashion_knn --data "$data"
    for precision in ${BENCH_PRECISIONS:-fp32 bf16}; do
      check "GraphSAGE bench, $precision" env BENCH_ONLY=graph BENCH_DEVICE=cuda BENCH_PRECISION="$precision" \
        BENCH_PYTHON="$python" BENCH_REPEATS="${BENCH_REPEATS:-1}" "$python" scripts/bench.py
    done
    ;;
  tests)
    tests=ON
    check "CUDA build" build
    gpu_unit_tests --success
    ;;
  gpt)
    tests=ON
    gpu_and_build
    if [ "${GPT_TESTS:-1}" = 1 ]; then
      gpu_unit_tests
      check "the GPT tests, fused attention included" build/bin/test_model "[gpt]~[python]"
    fi
    check "GPU GPT table" env BENCH_ONLY=gpt_gpu BENCH_PYTHON="$python" BENCH_TOKENS=data/kjv "$python" scripts/bench.py
    check "a step's profile, both sides" env BENCH_ONLY=gpu_profile BENCH_PYTHON="$python" BENCH_TOKENS=data/kjv \
      "$python" scripts/bench.py
    ;;
  quickstart)  # what scripts/quickstart.sh does after its set-up, on this machine's cores
    rebuild() { rm -rf build && build; }
    check "CUDA build of the four programs, from nothing" rebuild
    check "the quick start's training, 2 CPU workers" build/bin/ddprun --nproc-per-node=2 configs/fashion_mnist_convnet.yaml \
      --set data.path="$data" --set dist.device=cpu --set run.output_dir=/tmp/ddprun-runs/quickstart
    ;;
  elastic)
    gpu_tests
    gpt=("${kjv_gpt[@]}" --set train.batch_size=16 --set eval.every_steps=0 --set checkpoint.every_steps=20)
    global_batch() {  # NPROC: trains, then prints its last loss
      local out=/tmp/ddprun-runs/global-w$1
      rm -rf "$out"
      build/bin/ddprun --standalone --nproc-per-node "$1" "${gpt[@]}" --set run.output_dir="$out" || return
      last_loss "$out"
    }
    check "GPT, global batch 32, world 1 (2 micro-steps of 16)" global_batch 1
    check "GPT, global batch 32, world 2 (1 micro-step of 16 each)" global_batch 2
    # The elastic job and its uninterrupted reference train 2000 steps (half a minute on one GPU).
    gpt+=(--set train.max_steps=2000 --set train.log_every=500 --set checkpoint.every_steps=100)
    check "GPT, global batch 32, world 1, 2000 steps (the reference)" global_batch 1
    elastic_job() {  # node a starts, b joins, b is drained with SIGTERM 5 s later; a finishes alone
      local out=/tmp/ddprun-runs/elastic logs=/tmp/ddprun-runs/elastic-logs
      rm -rf "$out" "$logs" && mkdir -p "$logs"
      node() {
        exec env DDPRUN_RDZV_SECRET=gpu build/bin/ddprun --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d \
          --rdzv-endpoint 127.0.0.1:29731 --rdzv-settle 1 --node-timeout 3 --local-addr "gpu-$1" \
          "${gpt[@]}" --set run.output_dir="$out" >"$logs/$1.log" 2>&1
      }
      node a & local a=$!
      sleep 2
      node b & local b=$!
      local i=0
      until grep -q "rendezvous round 1" "$logs/b.log" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
      sleep 5
      kill -TERM "$b"
      wait "$b"; local sb=$?
      wait "$a"; local sa=$?
      grep -h "rendezvous round\|round . ends\|leaves\|resumed" "$logs/a.log" "$logs/b.log"
      echo "node a exited $sa, node b $sb"
      last_loss "$out"
      [ "$sa" = 0 ] && [ "$sb" = 143 ] && grep -q "rendezvous round 2: node rank 0 of 1" "$logs/a.log"
    }
    check "elastic: b joins a, then b is drained (SIGTERM)" elastic_job
    ;;
  pipeline)
    gpu_tests
    # Stages exchange through Gloo (host memory). World 1 takes 4 micro-steps of 8 (the config's
    # batch), each stage 4 microbatches of 8.
    gpt=("${kjv_gpt[@]}" --set eval.every_steps=300 --set checkpoint.every_steps=0)
    pipelined() {  # NAME NPROC [--set k=v ...]: trains, prints the stage lines and the last loss
      local out=/tmp/ddprun-runs/$1 nproc=$2
      shift 2
      mkdir -p /tmp/ddprun-runs && rm -rf "$out" "$out.log"
      build/bin/ddprun --standalone --nproc-per-node "$nproc" "${gpt[@]}" --set run.output_dir="$out" "$@" >"$out.log" 2>&1
      local status=$?
      grep -E "dist.pipeline|stage [0-9]|done:|eval at|rror" "$out.log"
      [ "$status" = 0 ] || { tail -5 "$out.log"; return "$status"; }
      last_loss "$out" && [ -f "$out/model.pt" ]
    }
    same_weights() {  # A B: the largest difference between two model.pt files
      "$python" - "/tmp/ddprun-runs/$1/model.pt" "/tmp/ddprun-runs/$2/model.pt" <<'PY'
import sys, torch
a, b = (torch.load(p, map_location="cpu", weights_only=True) for p in sys.argv[1:3])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
print(f"largest weight difference {worst:.3g} over {len(a)} tensors")
sys.exit(0 if worst < 1e-4 else 1)
PY
    }
    check "GPT, world 1" pipelined pipe-w1 1
    check "GPT, 2 stages x 1, gpipe, M=4" pipelined pipe-gpipe 2 --set dist.pipeline=2 --set dist.microbatches=4 --set dist.schedule=gpipe
    check "gpipe's model.pt against world 1's" same_weights pipe-w1 pipe-gpipe
    check "GPT, 2 stages x 1, 1f1b, M=4" pipelined pipe-1f1b 2 --set dist.pipeline=2 --set dist.microbatches=4 --set dist.schedule=1f1b
    check "1f1b's model.pt against world 1's" same_weights pipe-w1 pipe-1f1b
    check "GPT, 2 stages x 1, 1f1b, M=8, bf16" pipelined pipe-bf16 2 --set dist.pipeline=2 --set dist.microbatches=8 \
      --set train.precision=bf16
    # Sharding within the stages: 4 ranks on the one GPU, 2 stages of 2 ZeRO-3 shards (Gloo).
    check "GPT, 2 stages x 2 ZeRO-3 shards, 1f1b, M=4" pipelined pipe-zero3 4 --set dist.pipeline=2 --set dist.microbatches=4 \
      --set dist.shard=parameters --set dist.data_shard=2
    check "its model.pt against world 1's" same_weights pipe-w1 pipe-zero3
    ;;
  *) echo "usage: $0 fetch|run|bench|tests|gpt|quickstart|elastic|pipeline [DEBS_DIR]" >&2; exit 2 ;;
esac
echo "=== failed: ${failures[*]:-none}"
[ ${#failures[@]} -eq 0 ]
