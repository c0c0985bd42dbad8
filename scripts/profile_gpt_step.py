#!/usr/bin/python3
"""Where a GPT training step's time goes, by ATen operator: nanoGPT's model (scripts/nanogpt.py) at the
shape of configs/gpt_kjv.yaml (4 layers, 4 heads, width 128, block 128, byte vocabulary, batch 8), one
process, one thread, AdamW with nanoGPT's groups and clipping, as ddprun trains it. The operators are
the LibTorch kernels ddprun calls too, so their summed self time is the floor of a step of either:

    OMP_NUM_THREADS=1 /usr/bin/python3 scripts/profile_gpt_step.py [--steps 20] [--batch 8]

Prints the top operators by self CPU time per step, their sum, and the step's wall time under the profiler.
"""
import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = nanogpt.GPTConfig(block_size=128, vocab_size=256, n_layer=4, n_head=4, n_embd=128, bias=False)
    model = nanogpt.GPT(config)
    optimizer = torch.optim.AdamW(nanogpt.decay_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
    data = torch.randint(0, 256, (args.batch * (args.steps + 10), config.block_size + 1))

    def step(i):
        rows = data[i * args.batch:(i + 1) * args.batch]
        _, loss = model(rows[:, :-1], rows[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for i in range(10):
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for i in range(10, 10 + args.steps):
            step(i)
        wall = (time.perf_counter() - start) / args.steps * 1e3
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) / args.steps / 1e3
    print(f"| operator | self ms/step | share |\n|---|---:|---:|")
    for e in events[:15]:
        ms = e.self_cpu_time_total / args.steps / 1e3
        print(f"| {e.key} | {ms:.2f} | {ms / total:.1%} |")
    print(f"\nsum of operator self times: {total:.1f} ms/step; step wall time under the profiler: {wall:.1f} ms")


if __name__ == "__main__":
    main()
