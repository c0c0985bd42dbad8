#!/usr/bin/python3
"""Evaluates what ddprun trained, with plain PyTorch: the scripted module and the state_dict.

    /usr/bin/python3 tests/support/eval_torchscript.py MODEL_SCRIPTED_PT MODEL_PT X_NPY Y_NPY [NORMALIZATION_JSON]

Loads model_scripted.pt with torch.jit.load, checks that model.pt (torch.load) holds the same
tensors and loads strictly into it, and prints "accuracy A loss L" over the samples in eval mode:
the raw features normalised as the run's normalization.json says, when it is given.
"""

import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

scripted_path, state_path, x_path, y_path = sys.argv[1:5]
module = torch.jit.load(scripted_path)
state = torch.load(state_path, weights_only=True)
own = module.state_dict()
assert list(state.keys()) == list(own.keys()), (list(state.keys()), list(own.keys()))
for name, tensor in state.items():
    assert torch.equal(tensor, own[name]), name
module.load_state_dict(state, strict=True)
module.eval()
x = torch.from_numpy(np.load(x_path)).float()
if len(sys.argv) > 5:
    with open(sys.argv[5]) as f:
        normalization = json.load(f)
    if normalization["normalize"] not in ("none", "as_stored"):
        shape = normalization.get("shape", [])
        mean = torch.tensor(normalization["mean"], dtype=torch.float32).reshape(shape)
        std = torch.tensor(normalization["std"], dtype=torch.float32).reshape(shape)
        x = (x / normalization["divide_by"] - mean) / std
y = torch.from_numpy(np.load(y_path)).long()
with torch.no_grad():
    logits = module(x)
print(f"accuracy {(logits.argmax(1) == y).double().mean().item():.6f} loss {F.cross_entropy(logits, y).item():.8f}")
