#!/usr/bin/python3
"""Writes the state_dict of a freshly built nanoGPT-structured GPT (scripts/nanogpt.py) after
torch.manual_seed(SEED), for the test that ddprun's GPT initialises to the same tensors:

    /usr/bin/python3 tests/support/nanogpt_init.py OUT.pt SEED N_LAYER N_HEAD N_EMBD BLOCK_SIZE VOCAB_SIZE BIAS
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import nanogpt  # noqa: E402

out, seed, n_layer, n_head, n_embd, block_size, vocab_size, bias = sys.argv[1:]
torch.manual_seed(int(seed))
model = nanogpt.GPT(nanogpt.GPTConfig(block_size=int(block_size), vocab_size=int(vocab_size), n_layer=int(n_layer),
                                      n_head=int(n_head), n_embd=int(n_embd), bias=bias == "1"))
torch.save(model.state_dict(), out)
