#!/usr/bin/python3
"""Sums a step profile by operator: the trace DDPRUN_PROFILE=FIRST:COUNT makes a ddprun rank write
(OUTPUT_DIR/profile_rank<R>.trace.json, Chrome's trace format, LibTorch's profiler).

    DDPRUN_PROFILE=100:20 ddprun configs/gpt_kjv.yaml ...
    python3 scripts/profile_summary.py runs/gpt_kjv/profile_rank0.trace.json --steps 20

An operator's self time is its duration less that of the operators it called (nested on its thread).
Prints the top operators by self time per step, their sum over every operator, and the wall time the
trace spans per step: the part of a step not inside any operator is the loop around the kernels.
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
    events = [e for e in json.load(open(args.trace)) if e.get("ph") == "X"]
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


if __name__ == "__main__":
    main()
