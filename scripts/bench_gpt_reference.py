#!/usr/bin/python3
"""The Python reference of ddprun's GPT training, for the bench's GPT tables, written the way nanoGPT's
train.py is: nanoGPT's model (scripts/nanogpt.py) under DistributedDataParallel, Gloo on CPU (or NCCL
on CUDA with --device cuda), on llm.c token shards. Run under torchrun:

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \\
        scripts/bench_gpt_reference.py --data '/tmp/kjv/kjv_train_*.bin' --batch-size 8 --steps 50 [--warmup 10]

(Debian's torch 1.13 torchrun fails at start under Python 3.11 unless --redirects and --tee are given a
value other than 0; scripts/bench.py starts the ranks itself, with RANK, WORLD_SIZE, MASTER_ADDR/PORT.)

train.py's loop, line for line where it applies: get_batch draws --batch-size random windows of
block_size+1 tokens from the memory-mapped shards (each rank its own seed, 1337 + rank), the next
batch is drawn while the step's forward is done, then backward, clipping to norm 1.0, the optimizer's
step and zero_grad(set_to_none=True); AdamW with nanoGPT's decay groups (fused where torch has it, on
CUDA, as configure_optimizers does) and ddprun's cosine schedule after --lr-warmup-steps. The samples
differ from ddprun's (a DistributedSampler's), the work per step does not.
Rank 0 prints `tokens_per_s N`: all ranks together, over the --steps steps after --warmup; on a GPU
also `peak_cuda_mib M`, torch.cuda.max_memory_allocated() in MiB.

On a GPU (scripts/gpu_check.sh gpt): --device cuda puts each rank on cuda:LOCAL_RANK under NCCL with
TF32 matrix products, batches copied from pinned memory without blocking; --precision bf16 runs
forward and loss under autocast, as ddprun's train.precision does; --compile wraps the model in
torch.compile (2.x) before DDP, as train.py does.
"""
import argparse
import glob
import inspect
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_peer  # noqa: E402
import nanogpt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a glob of training shards")
    parser.add_argument("--model", choices=("gpt", "llama"), default="gpt",
                        help="nanoGPT's GPT, or the Llama of scripts/llama_peer.py (its shape: --dim, --n-kv-heads, "
                             "--multiple-of, --rope-theta, --tie-embeddings; --n-layer, --n-head, --block-size and "
                             "--vocab-size serve both)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--n-kv-heads", type=int, default=4)
    parser.add_argument("--multiple-of", type=int, default=256)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--tie-embeddings", type=int, choices=(0, 1), default=0)
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
    parser.add_argument("--profile", metavar="TRACE",
                        help="record the timed steps with torch.profiler (the GPU's kernels too on a GPU) into this "
                             "Chrome trace, for scripts/profile_summary.py; tokens/s then includes its cost")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    paths = sorted(glob.glob(args.data))
    if not paths:
        sys.exit(f"bench_gpt_reference.py: no shard matches {args.data!r}")
    cuda = args.device == "cuda"
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # train.py's two lines
        torch.backends.cudnn.allow_tf32 = True
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1337 + rank)

    # train.py's get_batch, over every shard's tokens rather than one train.bin.
    shards = [nanogpt.read_shard(p) for p in paths]
    shards = [s for s in shards if s.size > args.block_size]
    if not shards:
        sys.exit(f"bench_gpt_reference.py: no shard of {args.data!r} holds more than {args.block_size} tokens")
    data = shards[0] if len(shards) == 1 else np.concatenate(shards)
    T = args.block_size

    def get_batch():
        ix = torch.randint(len(data) - T, (args.batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        if cuda:
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    torch.manual_seed(0)  # the same initial weights on every rank, as DDP would broadcast them
    if args.model == "llama":
        model = llama_peer.Llama(llama_peer.LlamaConfig(
            n_layer=args.n_layer, n_head=args.n_head, n_kv_heads=args.n_kv_heads, dim=args.dim,
            multiple_of=args.multiple_of, block_size=args.block_size, vocab_size=args.vocab_size,
            rope_theta=args.rope_theta, tie_embeddings=bool(args.tie_embeddings))).to(device)
    else:
        config = nanogpt.GPTConfig(block_size=args.block_size, vocab_size=args.vocab_size, n_layer=args.n_layer,
                                   n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout, bias=bool(args.bias))
        model = nanogpt.GPT(config).to(device)
    fused = cuda and "fused" in inspect.signature(torch.optim.AdamW).parameters  # configure_optimizers' test
    optimizer = torch.optim.AdamW(nanogpt.decay_groups(model, args.weight_decay), lr=args.lr,
                                  betas=(0.9, args.beta2), **({"fused": True} if fused else {}))
    if args.compile:
        model = torch.compile(model)
    model = DDP(model, device_ids=[torch.cuda.current_device()] if cuda else None)
    ctx = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    total = args.warmup + args.steps

    X, Y = get_batch()
    start = None
    profiler = None
    for step in range(total):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            start = time.time()
            if args.profile:
                activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
                profiler = torch.profiler.profile(activities=activities)
                profiler.__enter__()
        for group in optimizer.param_groups:
            group["lr"] = nanogpt.lr_at(step, args.lr, args.lr_warmup_steps, total)
        with ctx:
            _, loss = model(X, Y)
        X, Y = get_batch()  # while the forward runs on a GPU
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.time() - start
    if profiler is not None:
        profiler.__exit__(None, None, None)
        if rank == 0:
            profiler.export_chrome_trace(args.profile)
    if rank == 0:
        print(f"tokens_per_s {args.steps * args.batch_size * args.block_size * world / elapsed:.1f}")
        if cuda:  # the most the caching allocator handed out at once, as ddprun's peak_cuda_mib_max
            print(f"peak_cuda_mib {torch.cuda.max_memory_allocated() / 2**20:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
