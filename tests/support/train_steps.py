#!/usr/bin/python3
"""A few optimizer steps in plain PyTorch, to hold ddprun's against.

    /usr/bin/python3 tests/support/train_steps.py MODULE_PT X_NPY Y_NPY BATCH STEPS OPTIMIZER LR WEIGHT_DECAY DDPRUN_MODEL_PT

Loads the scripted module and trains it on consecutive batches of BATCH samples from the start
(ddprun with sampler.shuffle=false takes the same global batches at any world size), with
cross-entropy and torch.optim.SGD (no momentum) or AdamW, zero_grad(set_to_none=True) as PyTorch
does by default. Prints "max_diff D", the largest difference from ddprun's model.pt, and for each
parameter of ddprun's that is still exactly its initial value "unchanged NAME".
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F

module_path, x_path, y_path, batch, steps, optimizer_name, lr, weight_decay, ddprun_path = sys.argv[1:10]
batch, steps, lr, weight_decay = int(batch), int(steps), float(lr), float(weight_decay)
module = torch.jit.load(module_path)
module.train()
start = {k: v.clone() for k, v in module.state_dict().items()}
x = torch.from_numpy(np.load(x_path)).float()
y = torch.from_numpy(np.load(y_path)).long()
if optimizer_name == "sgd":
    optimizer = torch.optim.SGD(module.parameters(), lr=lr, momentum=0, weight_decay=weight_decay)
else:
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
for step in range(steps):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(module(x[step * batch:(step + 1) * batch]), y[step * batch:(step + 1) * batch]).backward()
    optimizer.step()
theirs = torch.load(ddprun_path, weights_only=True)
mine = module.state_dict()
assert sorted(theirs) == sorted(mine), (sorted(theirs), sorted(mine))
print("max_diff", max((theirs[k] - mine[k]).abs().max().item() for k in mine))
for k in theirs:
    if torch.equal(theirs[k], start[k]):
        print("unchanged", k)
