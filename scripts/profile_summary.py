#!/usr/bin/python3
"""Sums a step profile by operator, and by GPU kernel where it has them: the trace DDPRUN_PROFILE=FIRST:COUNT
makes a ddprun rank write (OUTPUT_DIR/profile_rank<R>.trace.json, Chrome's trace format: LibTorch's
legacy profiler's list on the CPU, Kineto's object with the GPU's kernels on a GPU), or one
torch.profiler exported (scripts/bench_gpt_reference.py --profile), so both sides read alike.

    DDPRUN_PROFILE=100:20 ddprun configs/gpt_kjv.yaml ...
    python3 scripts/profile_summary.py runs/gpt_kjv/profile_rank0.trace.json --steps 20

An operator's self time is its duration less that of the operators it called (nested on its thread).
Prints the top operators by self time per step, their sum over every operator, and the wall time the
trace spans per step: the part of a step not inside any operator is the loop around the kernels. With
GPU kernels: the top kernels by time per step, kernels per step, and how much of the span the GPU was
busy (kernels, copies and sets, overlaps counted once): the rest it waited for the host.
Standard library only.
"""
import argparse
import collections
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, required=True, help="the COUNT of DDPRUN_PROFILE")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"profile_summary.py: {args.trace}: cannot be read as a Chrome trace ({e})")
    events = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
    device = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    events = [e for e in events if e.get("cat", "cpu_op").lower() in HOST_CATEGORIES]
    if not events:
        raise SystemExit(f"profile_summary.py: {args.trace} holds no operator events")
    operators(events, args)
    if device:
        kernels(device, args)


# Kineto's categories (1.13 and 2.x); the legacy profiler's events have none.
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
HOST_CATEGORIES = {"cpu_op", "operator"}


def operators(events, args):
    self_us = collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # enclosing operators, innermost last
        for e in thread:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            self_us[e["name"]] += e["dur"]
            if stack:
                self_us[stack[-1]["name"]] -= e["dur"]
            stack.append(e)
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    total = sum(self_us.values()) / args.steps / 1e3
    wall = (end - start) / args.steps / 1e3
    print("| operator | self ms/step | share of operators |\n|---|---:|---:|")
    for name, us in self_us.most_common(args.top):
        ms = us / args.steps / 1e3
        print(f"| {name} | {ms:.2f} | {ms / total:.1%} |")
    print(f"\nsum of operator self times: {total:.1f} ms/step; wall time the trace spans: {wall:.1f} ms/step "
          f"({total / wall:.1%} inside operators)")


def kernels(events, args):
    by_name = collections.Counter()
    for e in events:
        by_name[e["name"][:100]] += e["dur"]
    total = sum(by_name.values()) / args.steps / 1e3
    print("\n| GPU kernel, copy or set | ms/step | share of the GPU's time |\n|---|---:|---:|")
    for name, us in by_name.most_common(args.top):
        ms = us / args.steps / 1e3
        print(f"| {name.replace('|', '/')} | {ms:.2f} | {ms / total:.1%} |")
    busy, reach = 0.0, None  # the union of the intervals, in start order
    for e in sorted(events, key=lambda e: e["ts"]):
        begin, end = e["ts"], e["ts"] + e["dur"]
        if reach is None or begin > reach:
            busy += end - begin
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / args.steps / 1e3
    busy = busy / args.steps / 1e3
    print(f"\nGPU: {len(events) / args.steps:.0f} kernels, copies and sets per step, {total:.1f} ms/step of them; "
          f"busy {busy:.1f} of the {span:.1f} ms/step from its first to its last ({busy / span:.1%}): the rest it "
          f"waited for the host")


if __name__ == "__main__":
    main()
