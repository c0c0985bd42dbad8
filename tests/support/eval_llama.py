#!/usr/bin/python3
"""Evaluates a Llama that ddprun trained, as the Python ecosystem would receive it: the independent
Llama of llama_reference.py, shaped by the run's config.json alone and loaded strictly from its
model.safetensors (read by that script's own reader), in eval mode.

    /usr/bin/python3 tests/support/eval_llama.py RUN_DIR [--batch N]

RUN_DIR holds config.json, model.safetensors and config.yaml (only for data.eval_path,
data.token_dtype and model.block_size: the data, not the model). Prints `eval_loss X`: ddprun's eval
loss, the mean over every window of the eval shards (numbered as nanogpt.Windows does) of the window's
mean per-token cross-entropy, accumulated in float64. Exits 1 with a message when the weights do not
load strictly.
"""
import argparse
import json
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))
import eval_gpt  # noqa: E402
import llama_reference  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--batch", type=int, default=32, help="windows per forward pass")
    args = parser.parse_args()

    config = json.load(open(os.path.join(args.run_dir, "config.json")))
    if config.get("architectures") != ["LlamaForCausalLM"] or config.get("model_type") != "llama":
        sys.exit(f"eval_llama.py: config.json is not a LlamaForCausalLM's: {config}")
    model = llama_reference.Llama(config)
    weights_path = os.path.join(args.run_dir, "model.safetensors")
    weights = llama_reference.load(weights_path)
    if config.get("tie_word_embeddings"):
        weights.pop("lm_head.weight", None)  # transformers' files leave it out; ddprun's may carry it
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        sys.exit(f"eval_llama.py: {weights_path} does not load strictly into the reference Llama:\n{e}")
    model.eval()

    print(f"eval_loss {eval_gpt.run_eval_loss(model, args.run_dir, args.batch):.8f}")


if __name__ == "__main__":
    main()
