#!/usr/bin/python3
"""The Python reference of ddprun's GPT training, for the bench's GPT table: nanoGPT's model
(scripts/nanogpt.py) under DistributedDataParallel, Gloo on CPU (or NCCL on CUDA with --device cuda),
on llm.c token shards. Run under torchrun:

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \\
        scripts/bench_gpt_reference.py --data '/tmp/kjv/kjv_train_*.bin' --batch-size 8 --steps 50 [--warmup 10]

(Debian's torch 1.13 torchrun fails at start under Python 3.11 unless --redirects and --tee are given a
value other than 0; scripts/bench.py starts the ranks itself, with RANK, WORLD_SIZE, MASTER_ADDR/PORT.)

The samples are ddprun's windows of block_size+1 tokens (nanogpt.Windows), shuffled by
DistributedSampler(seed=0) and gathered straight from the memory-mapped shards; AdamW with nanoGPT's
decay groups, ddprun's cosine schedule after --lr-warmup-steps, gradients clipped to norm 1.0.
Rank 0 prints one line, `tokens_per_s N`: all ranks together, over the --steps steps after --warmup.

On a GPU (scripts/gpu_check.sh gpt): --device cuda puts each rank on cuda:LOCAL_RANK under NCCL;
--precision bf16 runs forward and loss under autocast, as ddprun's train.precision does; --compile
wraps the model in torch.compile (2.x) before DDP, as nanoGPT's train.py does.
"""
import argparse
import glob
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt  # noqa: E402


def batches(windows, sampler, batch_size):
    """(inputs, targets) forever, epoch after epoch; an epoch's last partial batch is dropped."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        indices = list(sampler)
        for start in range(0, len(indices) - batch_size + 1, batch_size):
            yield windows.batch(indices[start:start + batch_size])
        epoch += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a glob of training shards")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--bias", type=int, choices=(0, 1), default=0)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=8, help="windows per rank per step")
    parser.add_argument("--steps", type=int, default=50, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lr-warmup-steps", type=int, default=10)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--beta2", type=float, default=0.99)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    paths = sorted(glob.glob(args.data))
    if not paths:
        sys.exit(f"bench_gpt_reference.py: no shard matches {args.data!r}")
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    windows = nanogpt.Windows(paths, args.block_size)
    sampler = DistributedSampler(windows, shuffle=True, seed=0)

    torch.manual_seed(0)
    config = nanogpt.GPTConfig(block_size=args.block_size, vocab_size=args.vocab_size, n_layer=args.n_layer,
                               n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout, bias=bool(args.bias))
    module = nanogpt.GPT(config).to(args.device)
    if args.compile:
        module = torch.compile(module)
    model = DDP(module)
    optimizer = torch.optim.AdamW(nanogpt.decay_groups(model.module, args.weight_decay), lr=args.lr,
                                  betas=(0.9, args.beta2))
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    total = args.warmup + args.steps

    start = None
    for step, (inputs, targets) in zip(range(total), batches(windows, sampler, args.batch_size)):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            start = time.time()
        for group in optimizer.param_groups:
            group["lr"] = nanogpt.lr_at(step, args.lr, args.lr_warmup_steps, total)
        with autocast:
            _, loss = model(inputs.to(args.device, non_blocking=True), targets.to(args.device, non_blocking=True))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.time() - start
    if rank == 0:
        print(f"tokens_per_s {args.steps * args.batch_size * args.block_size * world / elapsed:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
