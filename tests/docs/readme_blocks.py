#!/usr/bin/python3
"""Runs every shell block of README.md and docs/*.md marked runnable, as a newcomer would paste it after the quick start.

    tests/docs/readme_blocks.py SOURCE_DIR BUILD_DIR

A block is runnable when the line before its ```sh fence is `<!-- runnable -->`. The README's blocks
run first, then those of the guides in ORDER (a block may use data or runs an earlier one made), then
those of every other docs/*.md, by name; it fails if no file has one. Each block runs as one bash
script (`set -ex`: a failing command fails the test, naming the block's file and line, as
`docs/graphs.md:12:`), in order, from one scratch directory holding copies of the checkout's configs/,
scripts/ and examples/ and links to its tests/ and build/ (so runs/ and data/ are made there), with
BUILD_DIR/bin first on PATH, as the quick start tells. Short settings: a command
that trains a config (`ddprun`, `ddp-train` or the quick start, given a .yaml) gets
`--set train.max_steps=20 --set train.epochs=1 --set eval.max_batches=4` appended (an evaluation of 4
batches, not of the whole split: it took half of a Llama's 20-step run), so all the blocks run in minutes. A port
written in a block (`--master-port 29511`) becomes one free now, the same for each mention in that block,
so a block never meets a test that runs beside it. Standard library only.
"""
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

MARK = "<!-- runnable -->"
SHORT = " --set train.max_steps=20 --set train.epochs=1 --set eval.max_batches=4"
TRAINS = re.compile(r"(^|[\s/])(ddprun|ddp-train|quickstart\.sh)\b.*\.yaml|quickstart\.sh")
# The guides whose blocks run right after the README's, in this order, since a block may use what an
# earlier one made: watching.md's ddp-report overlays the two runs of graphs.md's block. Every other
# docs/*.md follows, by name.
ORDER = ("docs/training.md", "docs/own-model-and-data.md", "docs/graphs.md", "docs/language-models.md",
         "docs/watching.md")


def documents(source):
    """The files whose blocks run, as paths relative to SOURCE_DIR, in the order they run."""
    for name in ORDER:
        if not os.path.isfile(os.path.join(source, name)):
            sys.exit(f"{name}: named in ORDER of tests/docs/readme_blocks.py, but there is no such file")
    guides = sorted(os.path.relpath(path, source) for path in glob.glob(os.path.join(source, "docs", "*.md")))
    return ["README.md", *ORDER, *(name for name in guides if name not in ORDER)]


def blocks(path, name=None):
    """(line number, [(line number, command)]) for each runnable block, continuation lines joined.
    Messages call the file `name` (default: `path`)."""
    name = name or path
    lines = open(path, encoding="utf-8").read().split("\n")
    found = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```sh"):
            sys.exit(f"{name}:{i + 1}: {MARK} must come right before a ```sh block")
        commands, pending, start = [], "", None
        for j in range(i + 2, len(lines)):
            if lines[j].startswith("```"):
                break
            text = re.sub(r"\s+#.*$", "", lines[j]).rstrip()  # a trailing comment
            if not text or text.startswith("#"):
                continue
            start = start or j + 1
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            commands.append((start, pending + text))
            pending, start = "", None
        found.append((i + 1, commands))
    return found


def shortened(command):
    if not TRAINS.search(command):
        return command
    background = command.rstrip().endswith("&")
    body = command.rstrip().rstrip("&").rstrip()
    return body + SHORT + (" &" if background else "")


PORT = re.compile(r"(--master[-_]port[= ]|MASTER_PORT=|--rdzv[-_]endpoint[= ][\w.-]+:)(\d{4,5})\b")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_free_ports(commands):
    """The block's commands with each written port replaced by one free now."""
    ports = {}
    def swap(match):
        ports.setdefault(match.group(2), str(free_port()))
        return match.group(1) + ports[match.group(2)]
    return [PORT.sub(swap, command) for command in commands]


def main():
    source, build = (os.path.abspath(p) for p in sys.argv[1:3])
    names = documents(source)
    found = [(name, line, commands) for name in names
             for line, commands in blocks(os.path.join(source, name), name)]
    if not found:
        sys.exit("no block marked runnable in README.md or docs/*.md")
    scratch = tempfile.mkdtemp(prefix="ddprun-docs-")
    for name in ("configs", "scripts", "examples"):
        shutil.copytree(os.path.join(source, name), os.path.join(scratch, name), symlinks=True)
    os.symlink(os.path.join(source, "tests"), os.path.join(scratch, "tests"))
    os.symlink(build, os.path.join(scratch, "build"))
    env = dict(os.environ, PATH=os.path.join(build, "bin") + ":" + os.environ["PATH"], OMP_NUM_THREADS="1")
    failures = 0
    for name, block_line, commands in found:
        runs = with_free_ports([shortened(command) for _, command in commands])
        script = "\n".join(runs) + "\nwait\n"
        started = time.time()
        done = subprocess.run(["bash", "-exc", script], cwd=scratch, env=env, capture_output=True, text=True,
                              errors="replace",  # a barely trained GPT writes any bytes
                              timeout=1200)
        print(f"{name}:{block_line}: {len(commands)} command(s) [{time.time() - started:.0f} s, exit "
              f"{done.returncode}]", flush=True)
        for command in runs:
            print("    " + command)
        if done.returncode != 0:
            failures += 1
            print(done.stdout[-3000:] + done.stderr[-4000:])
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"{sum(len(c) for _, _, c in found)} commands in {len(found)} runnable blocks of "
          f"{len({name for name, _, _ in found})} files; {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
