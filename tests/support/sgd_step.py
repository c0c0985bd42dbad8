#!/usr/bin/python3
"""One SGD step in plain PyTorch, to hold ddprun's against.

    /usr/bin/python3 tests/support/sgd_step.py MODULE_PT X_NPY Y_NPY BATCH LR MOMENTUM DDPRUN_MODEL_PT

Loads the scripted module, takes the first BATCH samples, does cross-entropy, backward and one
torch.optim.SGD step, and prints "max_diff D": the largest difference from ddprun's model.pt.
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F

module_path, x_path, y_path, batch, lr, momentum, ddprun_path = sys.argv[1:8]
module = torch.jit.load(module_path)
module.train()
x = torch.from_numpy(np.load(x_path)[: int(batch)]).float()
y = torch.from_numpy(np.load(y_path)[: int(batch)]).long()
optimizer = torch.optim.SGD(module.parameters(), lr=float(lr), momentum=float(momentum))
optimizer.zero_grad()
F.cross_entropy(module(x), y).backward()
optimizer.step()
theirs = torch.load(ddprun_path, weights_only=True)
mine = module.state_dict()
assert sorted(theirs) == sorted(mine), (sorted(theirs), sorted(mine))
print("max_diff", max((theirs[k] - mine[k]).abs().max().item() for k in mine))
