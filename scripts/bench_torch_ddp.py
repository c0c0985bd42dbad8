#!/usr/bin/env python3
"""The PyTorch tutorials' recipe, for comparison with ddprun: DistributedSampler + DataLoader +
DistributedDataParallel + SGD on Fashion-MNIST, Gloo on CPU. Run under torchrun:

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 scripts/bench_torch_ddp.py --model convnet

Prints one line on rank 0: `samples_per_s N` (all ranks together, after a warm-up).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_models import build, read_idx  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="convnet")
    parser.add_argument("--hidden", default="1024,1024")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--scripted", help="train this TorchScript module (torch.jit.load) instead of --model")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    images = torch.from_numpy(read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))).float()
    images = ((images / 255 - 0.2860) / 0.3530).unsqueeze(1)
    labels = torch.from_numpy(read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))).long()
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    hidden = [int(h) for h in args.hidden.split(",")]
    if args.scripted:
        module = torch.jit.load(args.scripted)
    else:
        module = build(args.model, hidden=hidden) if args.model == "mlp" else build(args.model)
    model = DDP(module)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    step, start = 0, None
    for inputs, targets in loader:
        if step == args.warmup:
            dist.barrier()
            start = time.time()
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
        step += 1
        if step == args.warmup + args.steps:
            break
    dist.barrier()
    elapsed = time.time() - start
    if rank == 0:
        print(f"samples_per_s {args.steps * args.batch_size * dist.get_world_size() / elapsed:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
