#!/usr/bin/env python3
"""Prints PyTorch's DistributedSampler indices, for the C++ parity test.

usage: sampler_indices.py N REPLICAS SEED EPOCH SHUFFLE(0|1) DROP_LAST(0|1) [N REPLICAS ...]
For each case in turn, prints REPLICAS lines: line r holds rank r's indices for that epoch,
space-separated (empty when the rank gets none). Several cases per run pay for one torch import.
"""
import sys

import torch.utils.data
from torch.utils.data.distributed import DistributedSampler


class Dummy(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def main(args):
    if not args or len(args) % 6 != 0:
        sys.exit(__doc__)
    values = [int(a) for a in args]
    for start in range(0, len(values), 6):
        n, replicas, seed, epoch, shuffle, drop_last = values[start:start + 6]
        for rank in range(replicas):
            sampler = DistributedSampler(Dummy(n), num_replicas=replicas, rank=rank, shuffle=bool(shuffle),
                                         seed=seed, drop_last=bool(drop_last))
            sampler.set_epoch(epoch)
            print(" ".join(str(i) for i in sampler))


if __name__ == "__main__":
    main(sys.argv[1:])
