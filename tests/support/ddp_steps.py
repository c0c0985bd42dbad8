#!/usr/bin/python3
"""A few optimizer steps of a scripted module under torch's DistributedDataParallel (its default,
broadcast_buffers=True: rank 0's buffers on every rank before each forward), to hold ddprun's
against. Run it under a launcher at world W (ddprun runs it as torchrun would):

    ddprun --nproc-per-node W tests/support/ddp_steps.py MODULE_PT X_NPY Y_NPY BATCH STEPS LR DDPRUN_MODEL_PT

Each rank takes BATCH samples a step from torch's DistributedSampler without shuffling (ddprun's
sampler.shuffle=false), with cross-entropy and SGD without momentum. Rank 0 prints "max_diff D",
the largest difference from ddprun's model.pt over the parameters and buffers.
"""

import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

module_path, x_path, y_path, batch, steps, lr, ddprun_path = sys.argv[1:8]
batch, steps, lr = int(batch), int(steps), float(lr)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
module = torch.jit.load(module_path)
module.train()
model = torch.nn.parallel.DistributedDataParallel(module)
x = torch.from_numpy(np.load(x_path)).float()
y = torch.from_numpy(np.load(y_path)).long()
indices = list(DistributedSampler(range(len(x)), num_replicas=world, rank=rank, shuffle=False))
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0)
for step in range(steps):
    mine = indices[step * batch:(step + 1) * batch]
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x[mine]), y[mine]).backward()
    optimizer.step()
if rank == 0:
    theirs = torch.load(ddprun_path)
    ours = module.state_dict()
    assert sorted(theirs) == sorted(ours), (sorted(theirs), sorted(ours))
    print("max_diff", max((theirs[k] - ours[k]).abs().max().item() for k in ours), flush=True)
dist.destroy_process_group()
