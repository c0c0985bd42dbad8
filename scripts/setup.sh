#!/usr/bin/env bash
# Installs Debian's packages for what you are about to do. Idempotent: quick when all is there.
#
#   scripts/setup.sh run      build ddprun and train the quick start (what scripts/quickstart.sh needs)
#   scripts/setup.sh lm       run, plus the King James Bible for the language-model example
#   scripts/setup.sh bench    run, plus Python's torch and scipy for the reference side of scripts/bench.sh
#   scripts/setup.sh tests    everything the test suite uses (the default; scripts/test.sh and CI)
#
# The GPU check carries its packages to the GPU machine instead: scripts/gpu_check.sh fetch.
set -euo pipefail

run=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev libcli11-dev libspdlog-dev libyaml-cpp-dev zlib1g-dev
  libssl-dev libisal-dev libxxhash-dev nlohmann-json3-dev  # HMAC-SHA256, CRC-32C, XXH64, JSON: libraries, not our own code
  libsentencepiece-dev  # ddp-tokenize and ddp-generate: SentencePiece tokenizers
  libopenblas0-openmp  # LibTorch's BLAS is Debian's libblas.so.3: without this, the slow reference one
  dataset-fashion-mnist
)
lm=(bible-kjv)  # the language-model corpus: scripts/make_tokens.py --kjv reads `bible`
bench=(
  python3-torch  # the Python references (torchrun + DDP) and loading model.pt in Python
  python3-sentencepiece  # the Python reference of ddp-tokenize (ids and throughput)
  python3-scipy  # PyG's Reddit files (scipy.sparse.save_npz) written for real
  "${lm[@]}"
)
tests=(
  catch2
  "${bench[@]}"  # the King James Bible among them
  slurm-client   # scontrol, to check the Slurm host-list parser against
  slurmctld slurmd munge  # a real local cluster (scripts/slurm/local_cluster.sh)
  chromium       # the run report rendered in a real (headless) browser
  man-db         # `man ddprun` from the installed package
  python3-protobuf  # an independent reader of the TensorBoard event files
)

purpose=${1:-tests}
case "$purpose" in
  run) packages=("${run[@]}") ;;
  lm) packages=("${run[@]}" "${lm[@]}") ;;
  bench) packages=("${run[@]}" "${bench[@]}") ;;
  tests) packages=("${run[@]}" "${tests[@]}") ;;
  *) echo "usage: $0 [run|lm|bench|tests]" >&2; exit 2 ;;
esac
# Tests only, downloaded and not installed: its data (the political-blogs graph, scripts/make_polblogs.py).
graph_tool_debs=/var/cache/ddprun
want_graph_tool=$([ "$purpose" = tests ] && echo 1 || echo 0)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
have_graph_tool() { [ "$want_graph_tool" = 0 ] || compgen -G "$graph_tool_debs/python3-graph-tool_*.deb" >/dev/null; }
if [ ${#missing[@]} -eq 0 ] && have_graph_tool; then
  echo "setup: all ${#packages[@]} packages for '$purpose' present"
  exit 0
fi

echo "setup ($purpose): installing ${missing[*]:-nothing new}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q || [ ${#missing[@]} -eq 0 ]
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! have_graph_tool; then  # best effort: without it, only the political-blogs test skips
  $sudo mkdir -p "$graph_tool_debs"
  (cd "$graph_tool_debs" && $sudo apt-get download -q python3-graph-tool) ||
    echo "setup: could not download python3-graph-tool; the political-blogs test will skip"
fi
