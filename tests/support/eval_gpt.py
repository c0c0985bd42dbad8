#!/usr/bin/python3
"""Evaluates a GPT that ddprun trained, with plain PyTorch: nanoGPT's module (scripts/nanogpt.py) built
from the run's resolved config, loaded strictly from its model.pt, in eval mode.

    /usr/bin/python3 tests/support/eval_gpt.py RUN_DIR [--eval-path GLOB] [--batch N]

RUN_DIR holds config.yaml (model.n_layer, n_head, n_embd, block_size, vocab_size, bias, dropout;
data.eval_path, a glob of token shards, which --eval-path replaces) and model.pt. Prints one line,
`eval_loss X`: ddprun's eval loss, the mean over every window of the eval shards (numbered as
nanogpt.Windows does) of the window's mean per-token cross-entropy, accumulated in float64. Exits 1
with a message when model.pt does not load strictly or no shard matches.
"""
import argparse
import glob
import os
import sys

import torch
import torch.nn.functional as F
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import nanogpt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--eval-path", help="a glob of eval shards (default: the config's data.eval_path)")
    parser.add_argument("--batch", type=int, default=32, help="windows per forward pass")
    args = parser.parse_args()

    config = yaml.safe_load(open(os.path.join(args.run_dir, "config.yaml")))
    model_keys = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias")
    model = nanogpt.GPT(nanogpt.GPTConfig(**{key: config["model"][key] for key in model_keys}))
    state_path = os.path.join(args.run_dir, "model.pt")
    try:
        model.load_state_dict(torch.load(state_path, weights_only=True), strict=True)
    except RuntimeError as e:
        sys.exit(f"eval_gpt.py: {state_path} does not load strictly into nanoGPT's GPT "
                 f"(torch {torch.__version__}, attention buffer {'absent' if nanogpt.HAS_SDPA else 'present'}):\n{e}")
    model.eval()

    pattern = args.eval_path or config["data"]["eval_path"]
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit(f"eval_gpt.py: no eval shard matches {pattern!r}")
    windows = nanogpt.Windows(paths, model.config.block_size, config["data"].get("token_dtype") or None)
    if len(windows) == 0:
        sys.exit(f"eval_gpt.py: {pattern!r} holds no window of {model.config.block_size + 1} tokens")
    print(f"eval_loss {mean_window_loss(lambda x: model(x)[0], windows, args.batch):.8f}")


def run_eval_loss(model, run_dir, batch, block_size=None):
    """ddprun's eval loss of `model` on a run's held-out shards (config.yaml's data.eval_path), windows of
    `block_size` (default: config.yaml's model.block_size); exits naming the shards when none has a window."""
    run = yaml.safe_load(open(os.path.join(run_dir, "config.yaml")))
    paths = sorted(glob.glob(run["data"]["eval_path"]))
    block_size = block_size or run["model"]["block_size"]
    windows = nanogpt.Windows(paths, block_size, run["data"].get("token_dtype") or None)
    if len(windows) == 0:
        sys.exit(f"no window of {block_size + 1} tokens in {paths}")
    return mean_window_loss(model, windows, batch)


def mean_window_loss(logits_of, windows, batch):
    """ddprun's eval loss: the mean over every window of its mean per-token cross-entropy, in float64."""
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(windows), batch):
            x, y = windows.batch(range(start, min(start + batch, len(windows))))
            logits = logits_of(x)
            per_token = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
            total += per_token.view(y.shape).double().mean(1).sum().item()
    return total / len(windows)


if __name__ == "__main__":
    main()
