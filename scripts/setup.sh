#!/usr/bin/env bash
# Installs every build, run and test dependency from Debian's packages. Idempotent: quick when all is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev libcli11-dev libspdlog-dev libyaml-cpp-dev zlib1g-dev catch2
  libopenblas0-openmp  # LibTorch's BLAS is Debian's libblas.so.3: without this, the slow reference one
  dataset-fashion-mnist
  python3-torch  # tests only: sampler parity and loading model.pt in Python
  slurm-client   # tests only: scontrol, to check the Slurm host-list parser against
  slurmctld slurmd munge  # tests only: a real local cluster (scripts/slurm/local_cluster.sh)
  chromium       # tests only: the run report rendered in a real (headless) browser
  python3-protobuf  # tests only: an independent reader of the TensorBoard event files
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
