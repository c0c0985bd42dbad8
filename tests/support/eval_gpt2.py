#!/usr/bin/python3
"""Evaluates a GPT that ddprun trained as the Python ecosystem would receive it: a GPT-2 written here
from transformers' modeling_gpt2.py (GPT2LMHeadModel's names; Conv1D layers, whose weights are
[in, out]; biases everywhere; lm_head tied to wte), shaped by the run's config.json alone and loaded
strictly from its model.safetensors (read by llama_reference.py's own reader), in eval mode.

    /usr/bin/python3 tests/support/eval_gpt2.py RUN_DIR [--batch N]

Prints `eval_loss X` as eval_gpt.py does. Exits 1 with a message when config.json is not a GPT-2's
this module implements, or the weights do not load strictly.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))
import eval_gpt  # noqa: E402
import llama_reference  # noqa: E402


class Conv1D(nn.Module):
    """transformers' Conv1D: y = x W + b with W of shape [in, out]."""

    def __init__(self, n_out, n_in):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.width = c["n_head"], c["n_embd"]
        self.c_attn = Conv1D(3 * self.width, self.width)
        self.c_proj = Conv1D(self.width, self.width)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        heads = lambda z: z.view(b, t, self.n_head, -1).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(v.size(-1))
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), torch.finfo(scores.dtype).min)
        y = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, self.width))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c.get("n_inner") or 4 * c["n_embd"]
        self.c_fc = Conv1D(inner, c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], inner)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # activation_function "gelu": exact


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["layer_norm_epsilon"]
        self.ln_1, self.attn = nn.LayerNorm(c["n_embd"], eps=eps), Attention(c)
        self.ln_2, self.mlp = nn.LayerNorm(c["n_embd"], eps=eps), Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])


class Gpt2(nn.Module):
    """GPT2LMHeadModel's state_dict without the tied lm_head: transformer.{wte, wpe, h.N.*, ln_f}."""

    def __init__(self, c):
        super().__init__()
        self.transformer = Transformer(c)

    def forward(self, idx):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.size(1)))
        for block in tr.h:
            x = block(x)
        return tr.ln_f(x) @ tr.wte.weight.t()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--batch", type=int, default=32, help="windows per forward pass")
    args = parser.parse_args()

    config = json.load(open(os.path.join(args.run_dir, "config.json")))
    expected = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu",
                "tie_word_embeddings": True, "scale_attn_weights": True}
    if any(config.get(key) != value for key, value in expected.items()):
        sys.exit(f"eval_gpt2.py: config.json is not a GPT-2 this module implements: {config}")
    model = Gpt2(config)
    weights_path = os.path.join(args.run_dir, "model.safetensors")
    try:
        model.load_state_dict(llama_reference.load(weights_path), strict=True)
    except RuntimeError as e:
        sys.exit(f"eval_gpt2.py: {weights_path} does not load strictly into GPT-2's structure:\n{e}")
    model.eval()
    print(f"eval_loss {eval_gpt.run_eval_loss(model, args.run_dir, args.batch, config['n_positions']):.8f}")


if __name__ == "__main__":
    main()
