#!/usr/bin/env bash
# Installs every build, run and test dependency from Debian's packages. Idempotent: quick when all is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev libcli11-dev libspdlog-dev libyaml-cpp-dev zlib1g-dev catch2
  libssl-dev libisal-dev libxxhash-dev nlohmann-json3-dev  # HMAC-SHA256, CRC-32C, XXH64, JSON: libraries, not our own code
  libopenblas0-openmp  # LibTorch's BLAS is Debian's libblas.so.3: without this, the slow reference one
  dataset-fashion-mnist
  bible-kjv      # the language-model corpus: scripts/make_tokens.py --kjv reads `bible`
  python3-torch  # tests only: sampler parity and loading model.pt in Python
  slurm-client   # tests only: scontrol, to check the Slurm host-list parser against
  slurmctld slurmd munge  # tests only: a real local cluster (scripts/slurm/local_cluster.sh)
  chromium       # tests only: the run report rendered in a real (headless) browser
  man-db         # tests only: `man ddprun` from the installed package
  python3-protobuf  # tests only: an independent reader of the TensorBoard event files
  python3-scipy  # tests and the bench only: PyG's Reddit files (scipy.sparse.save_npz) written for real
)
# Downloaded, not installed: its data (the political-blogs graph, scripts/make_polblogs.py), for the tests.
graph_tool_debs=/var/cache/ddprun

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
have_graph_tool() { compgen -G "$graph_tool_debs/python3-graph-tool_*.deb" >/dev/null; }
if [ ${#missing[@]} -eq 0 ] && have_graph_tool; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]:-nothing new}"
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
