#!/usr/bin/env bash
# The Debian package for real: build it, `apt-get install` it, run what it installed (with the
# source and build trees hidden, as on a machine that never had them), then `apt-get remove` it and
# check that nothing of it is left. Root only; it says why when it skips.
set -euo pipefail
build=$(realpath "$1")
source_dir=$(realpath "$2")

fail() { echo "FAILED: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ]; then echo "skipped: installing a package needs root"; exit 0; fi
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "skipped: no apt-get or dpkg-deb here"; exit 0; }
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no dataset-fashion-mnist, which the example config trains on"; exit 0; }
# A package this test left behind (a run killed before its cleanup) goes; anyone else's is kept.
if dpkg-query -W -f='${Status}' ddprun 2>/dev/null | grep -q "ok installed"; then
  if [ "$(dpkg-query -W -f='${Maintainer}' ddprun)" = "ddprun developers <ddprun@localhost>" ]; then
    echo "removing a ddprun package that an earlier run of this test left installed"
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -q ddprun >/dev/null
  else
    echo "skipped: a ddprun package from elsewhere is installed; this test does not replace it"; exit 0
  fi
fi

rm -f "$build"/ddprun_*.deb
cmake --build "$build" --target package >"$build/package.log" 2>&1 || { cat "$build/package.log"; fail "building the package"; }
deb=$(ls "$build"/ddprun_*_*.deb)
echo "built $deb"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for needed in libtorch1.13 libgloo0 libyaml-cpp0.7 libspdlog1.10 libfmt9 libssl3 libisal2 libsentencepiece0; do
  [[ $depends == *"$needed"* ]] || fail "Depends does not name $needed"
done

work=$(mktemp -d)
files_list=$work/files
cleanup() {
  if dpkg-query -W -f='${Status}' ddprun 2>/dev/null | grep -q "ok installed"; then
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -q ddprun >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "apt-get install $deb"; }
dpkg -L ddprun >"$files_list"

# Everything below runs the installed files only: the checkout (build tree included) is hidden
# under an empty tmpfs in a private mount namespace, and PATH holds only the system's directories.
cat >"$work/installed.sh" <<SCRIPT
set -euo pipefail
mount -t tmpfs none "$source_dir"
[ -z "\$(ls -A "$source_dir")" ] || { echo "FAILED: the checkout is still visible"; exit 1; }
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd "$work"
[ "\$(command -v ddprun)" = /usr/bin/ddprun ] || { echo "FAILED: ddprun is not /usr/bin/ddprun"; exit 1; }
ddprun --version
MANPAGER=cat MANWIDTH=200 man ddprun | grep -F -- "--nproc-per-node"
MANPAGER=cat MANWIDTH=200 man ddp-train | grep -F -- "optim.lr"
MANPAGER=cat MANWIDTH=200 man ddp-generate | grep -F -- "--top-k"
MANPAGER=cat MANWIDTH=200 man ddp-report | grep -F -- "--output"
MANPAGER=cat MANWIDTH=200 man ddp-tokenize | grep -F -- "--vocab-size"
MANPAGER=cat MANWIDTH=200 man ddp-export | grep -F -- "--max-shard-size"
[ -f /usr/share/bash-completion/completions/ddprun ]
[ -f /usr/share/doc/ddprun/README.md ]
[ -f /usr/share/doc/ddprun/docs/launcher.md ]   # the guides, where the README's links find them
ddprun --nproc-per-node 2 -- sh -c 'echo rank \$RANK'   # a program: the TCP store plugin from /usr/libexec/ddprun
ddprun --nproc-per-node 2 /usr/share/ddprun/configs/fashion_mnist_convnet.yaml \
  --set run.output_dir="$work/run" --set train.max_steps=20 --set train.log_every=10
[ -s "$work/run/model.pt" ] || { echo "FAILED: no model.pt"; exit 1; }
# Text to text: ddp-tokenize's shards train a Llama; ddp-generate reads them through the SentencePiece
# plugin in /usr/libexec/ddprun and the tokenizer.model beside the shards.
ddp-tokenize "$work/tokens" --text /usr/share/common-licenses/GPL-3 --vocab-size 400 --name gpl
printf '%s\n' "data: {dataset: tokens, path: '$work/tokens/gpl_train_*.bin', eval_path: '$work/tokens/gpl_val_*.bin'}" \
  "model: {name: llama, n_layer: 1, n_head: 2, dim: 32, multiple_of: 16, block_size: 16, vocab_size: 400}" \
  "train: {task: causal_lm, epochs: 1, max_steps: 10, batch_size: 4}" "eval: {every_epochs: 0, at_start: false}" \
  > "$work/llama.yaml"
ddprun --nproc-per-node 1 "$work/llama.yaml" --set run.output_dir="$work/llama"
ddp-generate "$work/llama" --prompt "the Program" --tokens 8 | grep -F "the Program"
ddp-export "$work/llama" -o "$work/hub" && [ -s "$work/hub/model.safetensors" ] && [ -s "$work/hub/tokenizer.model" ]
# Every config it ships trains on data that is there: a system data set, or none (synthetic).
for config in /usr/share/ddprun/configs/*.yaml; do
  resolved=\$(ddp-train "\$config" --print-config)
  dataset=\$(printf '%s\n' "\$resolved" | sed -n '/^data:/,/^[a-z]/s/^  dataset: //p')
  path=\$(printf '%s\n' "\$resolved" | sed -n '/^data:/,/^[a-z]/s/^  path: //p' | tr -d '"')
  [ "\$dataset" = synthetic ] || compgen -G "\$path" >/dev/null ||
    { echo "FAILED: the package ships \$config, whose data.path \$path it does not install"; exit 1; }
done
SCRIPT
if unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private bash "$work/installed.sh" || fail "running the installed package"
else
  echo "note: no private mount namespace here (unshare refused), so the checkout stays visible; PATH still has only the system's directories"
  sed -i '/^mount -t tmpfs/d; /the checkout is still visible/d' "$work/installed.sh"
  bash "$work/installed.sh" || fail "running the installed package"
fi

DEBIAN_FRONTEND=noninteractive apt-get remove -y -q ddprun >"$work/remove.log" 2>&1 ||
  { cat "$work/remove.log"; fail "apt-get remove ddprun"; }
status=$(dpkg-query -W -f='${Status}' ddprun 2>/dev/null || true)
[[ -z $status || $status == *not-installed* ]] || fail "after apt-get remove, dpkg says: $status"
left=0
while IFS= read -r path; do
  if [ -f "$path" ] || [ -L "$path" ]; then echo "left behind: $path" >&2; left=1; fi
  if [[ $path == */ddprun* && -d $path ]]; then echo "left behind: $path/" >&2; left=1; fi
done <"$files_list"
[ "$left" -eq 0 ] || fail "apt-get remove left files of the package"
echo "package installed, ran, and removed cleanly"
