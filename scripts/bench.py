#!/usr/bin/env python3
"""ddprun's benchmark: prints markdown tables (see docs/performance.md). Run it with scripts/bench.sh;
BENCH_ONLY=threads (ranks as threads against processes), BENCH_ONLY=tensor (dist.tensor against data
parallelism), BENCH_ONLY=multinode, BENCH_ONLY=monitor, BENCH_ONLY=graph, BENCH_ONLY=gpt, BENCH_ONLY=sharding, BENCH_ONLY=pipeline or BENCH_ONLY=tokenize (ddp-tokenize against Python
sentencepiece) runs only that table;
BENCH_ONLY=gpt_gpu (a CUDA build on a GPU machine) runs the GPU GPT table: GPT-2 124M's tokens/s, model
FLOPs utilisation and peak CUDA memory against the Python peer, eager and compiled (BENCH_GPU_PRECISIONS,
default "fp32 bf16", and BENCH_GPU_COMPILE=0 narrow it; BENCH_GPU_MODELS="gpt llama" adds the Llama of
issue 41 at GPT-2 124M's size; BENCH_GPU_SHARD=1 adds dist.shard on CUDA
tensors; BENCH_GPU_SMOKE=1 runs it all on the CPU at a toy shape, to check the bench itself);
BENCH_ONLY=gpu_profile records one bf16 step of that GPT on each side and sums it by operator and by
kernel (scripts/profile_summary.py), with how much of a step the GPU was busy;
BENCH_ONLY=compare BENCH_BASELINE=DIR compares this build's ConvNet, MLP and GPT throughput with another
build's bin/ (an earlier commit's), runs of the two alternating so that both see the same machine. The graph table runs on
BENCH_DEVICE (cpu, or cuda on a CUDA build) in BENCH_PRECISION (fp32 or bf16), ddprun and the Python
reference alike; BENCH_PYTHON is the Python with torch (default /usr/bin/python3, Debian's). The GPT
table trains on the King James Bible's byte-level shards, made by scripts/make_tokens.py --kjv into a
temporary directory, or read from BENCH_TOKENS=DIR (kjv_train_*.bin, kjv_val_*.bin) where they exist.

Every training run uses one intra-op thread per rank (OMP_NUM_THREADS=1), Fashion-MNIST, batch 64
per rank, no evaluation or checkpoints, and reports the mean samples/s of its log windows after the
first (warm-up). The compute limit of world N is N independent single-rank runs started together:
what N processes compute with no communication at all. Scaling efficiency = world-N samples/s ÷ that.
The GPT table measures tokens/s the same way, over BENCH_GPT_STEPS steps (default 60), the best of
BENCH_REPEATS (default 3 there) repeats, each running ddprun and the Python reference in turn.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")
CONFIG = os.path.join(ROOT, "configs", "fashion_mnist_convnet.yaml")
STEPS = int(os.environ.get("BENCH_STEPS", "150"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))  # each row is the best of this many runs
MODELS = {"convnet": [], "mlp": ["model.name=mlp", "model.hidden=[1024,1024]"]}
ENV = dict(os.environ, OMP_NUM_THREADS="1")
PYTHON = os.environ.get("BENCH_PYTHON", "/usr/bin/python3")
DEVICE = os.environ.get("BENCH_DEVICE", "cpu")
PRECISION = os.environ.get("BENCH_PRECISION", "fp32")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_run(work, name, nproc, model, extra=(), nodes=1, config=CONFIG, steps=STEPS, log_every=25, threads=False,
              env=None):
    """One run; with nodes > 1, that many launchers on this host (--nnodes), nproc ranks each; with
    threads, one ddp-train running nproc ranks as its threads (--threads); `env` adds variables."""
    out = os.path.join(work, name)
    sets = [f"run.output_dir={out}", f"train.max_steps={steps}", f"train.log_every={log_every}", "data.eval_split=none",
            "checkpoint.every_epochs=0", "checkpoint.resume=never", *MODELS.get(model, []), *extra]
    launchers = [["--standalone"]] if nodes == 1 else \
        [["--nnodes", str(nodes), "--node-rank", str(n), "--master-port", str(port)] for port in [free_port()]
         for n in range(nodes)]
    processes = []
    for launcher in launchers:
        argv = [os.path.join(BIN, "ddprun"), *launcher, "--nproc-per-node", str(nproc), config]
        if threads:
            argv = [os.path.join(BIN, "ddp-train"), config, "--threads", str(nproc)]
        for s in sets:
            argv += ["--set", s]
        # stderr to a file, not a pipe: launchers waited for one after another must not block on a full pipe.
        err = tempfile.TemporaryFile()
        processes.append((subprocess.Popen(argv, env=dict(ENV, **(env or {})), stdout=subprocess.DEVNULL, stderr=err),
                          err))
    return out, time.time(), processes


def finish_run(out, started, processes):
    failed = None
    for process, err in processes:
        process.wait()
        if process.returncode != 0 and failed is None:
            err.seek(0)
            failed = err.read().decode()[-2000:]
    if failed is not None:
        sys.exit(f"bench: a run failed:\n{failed}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    logs = [r for r in records if "samples_per_s" in r][1:]  # the first window includes warm-up
    first = next(r["first_step_unix_s"] for r in records if "first_step_unix_s" in r)
    memory = next(r for r in records if "peak_rss_mib_max" in r)
    mean = lambda key: sum(r.get(key, 0) for r in logs) / len(logs)  # world 1 logs no all-reduce
    return {"samples_per_s": mean("samples_per_s"), "allreduce_ms": mean("allreduce_ms"), "loss": logs[-1].get("loss"),
            "exposed_ms": mean("allreduce_exposed_ms"), "first_step_s": first - started,
            "rss_mib": memory["peak_rss_mib_max"],
            "rss_ranks_mib": [v for k, v in sorted(memory.items()) if k.startswith("peak_rss_mib_rank")],
            "tokens_per_s": mean("tokens_per_s") if "tokens_per_s" in logs[0] else 0,
            "sampled_edges_per_s": mean("sampled_edges_per_s") if "sampled_edges_per_s" in logs[0] else 0}


def best(results, key="samples_per_s"):
    """The best of repeated runs: interference on a shared machine only ever slows a run down."""
    return max(results, key=lambda r: r[key] if isinstance(r, dict) else r)


def train(work, name, nproc, model, extra=(), nodes=1):
    return best([finish_run(*start_run(work, f"{name}-{i}", nproc, model, extra, nodes)) for i in range(REPEATS)])


def compute_limit(work, model, n, extra=()):
    totals = []
    for repeat in range(REPEATS):
        runs = [start_run(work, f"{model}-limit-{repeat}-{i}-{len(extra)}", 1, model, extra) for i in range(n)]
        totals.append(sum(finish_run(*run)["samples_per_s"] for run in runs))
    return best(totals)


def torchrun(model, nproc, scripted=None):
    runs = [python_recipe(model, nproc, scripted) for _ in range(REPEATS)]
    return None if runs[0] is None else best(runs)


def python_recipe(model, nproc, scripted=None):
    """The Python recipe's samples/s, or None without python3-torch. Debian's torch 1.13 `torchrun`
    fails at start under Python 3.11 (its redirect flags parse to None), so the ranks are started
    the way torchrun would: one process each with RANK, WORLD_SIZE and MASTER_ADDR/PORT."""
    python = PYTHON
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        return None
    port = free_port()
    script = os.path.join(ROOT, "scripts", "bench_torch_ddp.py")
    processes = []
    for rank in range(nproc):
        env = dict(ENV, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        extra = ["--scripted", scripted] if scripted else []
        processes.append(subprocess.Popen([python, script, "--model", model, "--steps", str(STEPS), *extra], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate() for p in processes]
    if any(p.returncode != 0 for p in processes):
        sys.exit("bench: the Python DDP recipe failed:\n" + "".join(err[-2000:] for _, err in outputs))
    return float(outputs[0][0].split()[1])


def multinode(work):
    """Gradients across nodes, 2 nodes × 2 ranks as two launchers on this host: shared memory within
    each node and Gloo between the nodes' leaders (hierarchical), against Gloo among all 4 ranks (flat)."""
    print("| model | 2 nodes × 2 ranks | samples/s | all-reduce ms/step | vs flat | torchrun+DDP (flat Gloo, world 4) "
          "| vs torchrun |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model in MODELS:
        flat = train(work, f"{model}-2x2-flat", 2, model, ["dist.shared_memory=false"], nodes=2)
        hierarchical = train(work, f"{model}-2x2-hier", 2, model, [], nodes=2)
        python = torchrun(model, 4)
        for label, r in (("hierarchical", hierarchical), ("flat Gloo", flat)):
            cells = [model, label, f"{r['samples_per_s']:.0f}", f"{r['allreduce_ms']:.2f}",
                     f"{r['samples_per_s'] / flat['samples_per_s']:.2f}×", f"{python:.0f}" if python else "",
                     f"{r['samples_per_s'] / python:.2f}×" if python else ""]
            print("| " + " | ".join(cells) + " |", flush=True)
    print()


def monitor_cost(work):
    """The system monitor's cost: world 2 with monitor.every_s at its default (5 s) and at its most
    frequent sensible setting (0.5 s), against the monitor off, runs interleaved."""
    print("| model | world | monitor | samples/s | vs off |")
    print("|---|---:|---|---:|---:|")
    for model in MODELS:
        runs = {label: [] for label in ("off", "every 5 s", "every 0.5 s")}
        for i in range(REPEATS):  # interleaved, so that drift on a shared machine hits all three alike
            for label, every in (("off", "0"), ("every 5 s", "5"), ("every 0.5 s", "0.5")):
                runs[label].append(finish_run(*start_run(work, f"{model}-mon-{every}-{i}", 2, model,
                                                         [f"monitor.every_s={every}"])))
        off = best(runs["off"])["samples_per_s"]
        for label, results in runs.items():
            r = best(results)["samples_per_s"]
            print(f"| {model} | 2 | {label} | {r:.0f} | {r / off:.3f} |", flush=True)
    print()


GRAPH = os.path.join(ROOT, "data", "reddit_like")
GRAPH_CONFIG = os.path.join(ROOT, "configs", "graphsage_reddit.yaml")
GRAPH_STEPS = int(os.environ.get("BENCH_GRAPH_STEPS", "40"))


def graph_reference(nproc):
    """scripts/bench_graphsage_reference.py's JSON at world `nproc`, its ranks started as torchrun would."""
    port, processes = free_port(), []
    out = tempfile.NamedTemporaryFile(suffix=".json")
    for rank in range(nproc):
        env = dict(ENV, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        argv = [PYTHON, os.path.join(ROOT, "scripts", "bench_graphsage_reference.py"), "--data", GRAPH,
                "--fanouts", "25", "10", "--batch-size", "1024", "--hidden", "256", "--split", "chunk",
                "--device", DEVICE, "--precision", PRECISION,
                "--steps", str(GRAPH_STEPS // 2), "--warmup", "3", "--json", out.name]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errors = [p.communicate()[1] for p in processes]
    if any(p.returncode != 0 for p in processes):
        sys.exit("bench: the Python GraphSAGE reference failed:\n" + "".join(e[-2000:] for e in errors))
    return json.load(open(out.name))


def graph(work):
    """GraphSAGE as PyG's multi-GPU example trains it (fanouts [25, 10], 1024 seeds per rank, hidden 256,
    chunk split) on a graph of Reddit's size, against the pure-PyTorch reference; then accuracy on the
    Fashion-MNIST kNN graph with and without neighbours."""
    if not os.path.exists(os.path.join(GRAPH, "reddit_graph.npz")):
        subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "make_reddit_like.py"), GRAPH], check=True)
    cache = os.path.join(work, "graph-cache")
    # One prefetch thread per core the ranks leave over (1 on two cores), each with a batch ahead.
    workers = lambda nproc: max(1, (os.cpu_count() or 2) // nproc - 1)
    run = lambda name, nproc, extra=(): finish_run(*start_run(
        work, name, nproc, None, [f"data.path={GRAPH}", f"data.cache_dir={cache}", f"dist.device={DEVICE}",
                                  f"train.precision={PRECISION}", f"data.workers={workers(nproc)}",
                                  f"data.prefetch={workers(nproc)}", *extra], config=GRAPH_CONFIG,
        steps=GRAPH_STEPS, log_every=10))
    cold = run("graph-cold", 2)  # converts the graph into the node's cache before its first step
    ours = {n: best([run(f"graph-w{n}-{i}", n) for i in range(REPEATS)]) for n in (1, 2)}
    python = {n: best([graph_reference(n) for _ in range(REPEATS)], "seed_nodes_per_s") for n in (1, 2)}
    print(f"GraphSAGE, Reddit-sized graph (232,965 nodes, 114.6M edges, 602 features), fanouts [25, 10], 1024 seeds "
          f"per rank, {GRAPH_STEPS} steps, best of {REPEATS}, 1 intra-op thread per rank (ddprun: "
          f"{workers(1)} prefetch thread(s) at world 1, {workers(2)} per rank at world 2), {os.cpu_count()} cores, "
          f"model on {DEVICE}, {PRECISION}\n")
    print("| system | world | seed nodes/s | sampled edges/s | vs Python | time to first step | peak RSS/rank |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in (1, 2):
        r, p = ours[n], python[n]
        print(f"| ddprun | {n} | {r['samples_per_s']:.0f} | {r['sampled_edges_per_s']:.0f} "
              f"| {r['samples_per_s'] / p['seed_nodes_per_s']:.2f}× | {r['first_step_s']:.1f} s | {r['rss_mib']:.0f} MiB |")
    print(f"| ddprun, graph cache cold | 2 | {cold['samples_per_s']:.0f} | {cold['sampled_edges_per_s']:.0f} | "
          f"| {cold['first_step_s']:.1f} s | {cold['rss_mib']:.0f} MiB |")
    for n in (1, 2):
        p = python[n]
        print(f"| Python reference | {n} | {p['seed_nodes_per_s']:.0f} | {p['sampled_edges_per_s']:.0f} | 1.00× "
              f"| {p['first_step_s']:.1f} s | {max(p['peak_rss_mib']):.0f} MiB |")
    print()
    knn = os.path.join(ROOT, "data", "fashion_knn")
    if not os.path.exists(os.path.join(knn, "edge_index.npy")):
        subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "make_fashion_knn.py"), knn], check=True)
    print("| Fashion-MNIST 10-NN graph, world 2, 5 epochs | test accuracy |")
    print("|---|---:|")
    for label, extra in (("GraphSAGE, fanouts [25, 10]", []), ("the same network without neighbours (an MLP)",
                                                                  ["sampler.fanouts=[0,0]"])):
        out = os.path.join(work, f"knn-{len(extra)}")
        argv = [os.path.join(BIN, "ddprun"), "--standalone", "--nproc-per-node", "2",
                os.path.join(ROOT, "configs", "graphsage_fashion_knn.yaml")]
        for s in [f"data.path={knn}", f"run.output_dir={out}", "data.eval_split=test", "eval.at_start=false",
                  "checkpoint.every_epochs=0", *extra]:
            argv += ["--set", s]
        subprocess.run(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        accuracy = [r["eval_accuracy"] for r in records if "eval_accuracy" in r][-1]
        print(f"| {label} | {accuracy:.4f} |", flush=True)
    print()


GPT_CONFIG = os.path.join(ROOT, "configs", "gpt_kjv.yaml")
LLAMA_CONFIG = os.path.join(ROOT, "configs", "llama_kjv.yaml")
GPT_STEPS = int(os.environ.get("BENCH_GPT_STEPS", "60"))  # a GPT step is several ConvNet steps
GPT_LOG_EVERY = 10  # the first window, warm-up, is skipped: ddprun's and the reference's alike
# The shape both sides train, set here on both so that they cannot differ.
GPT_SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "vocab_size": 256, "bias": False,
             "dropout": 0.0}
GPT_BATCH = 8  # windows per rank per step
GPT_REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))  # issue 42 asks for the best of 3


def gpt_reference(nproc, train_glob, shape=GPT_SHAPE, batch=GPT_BATCH, steps=GPT_STEPS, extra=()):
    """scripts/bench_gpt_reference.py's tokens/s at world `nproc`, its ranks started as torchrun would."""
    port, processes = free_port(), []
    flag = lambda value: str(int(value)) if isinstance(value, bool) else str(value)  # --bias 0 or 1
    shape = [arg for key, value in shape.items() for arg in ("--" + key.replace("_", "-"), flag(value))]
    for rank in range(nproc):
        env = dict(ENV, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        argv = [PYTHON, os.path.join(ROOT, "scripts", "bench_gpt_reference.py"), "--data", train_glob, *shape,
                "--batch-size", str(batch), "--warmup", str(GPT_LOG_EVERY), "--steps", str(steps - GPT_LOG_EVERY), *extra]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate() for p in processes]
    if any(p.returncode != 0 for p in processes):
        sys.exit("bench: the Python GPT reference failed:\n" + "".join(err[-2000:] for _, err in outputs))
    return reference_values(outputs[0][0])


def reference_values(stdout):
    """A Python reference's `name value` lines (tokens_per_s, peak_cuda_mib on a GPU) as a dict."""
    values = {}
    for line in stdout.splitlines():
        name, _, value = line.partition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            pass
    if "tokens_per_s" not in values:
        sys.exit(f"bench: the Python reference printed no tokens_per_s:\n{stdout[-2000:]}")
    return values


def kjv_tokens(work):
    """The globs of the King James Bible's training and held-out shards, made first where missing."""
    tokens = os.environ.get("BENCH_TOKENS") or os.path.join(work, "tokens")
    train_glob, eval_glob = (os.path.join(tokens, f"kjv_{split}_*.bin") for split in ("train", "val"))
    if not glob.glob(train_glob):
        subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "make_tokens.py"), tokens, "--kjv"], check=True,
                       stdout=subprocess.DEVNULL)
    return train_glob, eval_glob


def gpt(work):
    """nanoGPT's GPT on the King James Bible's bytes: ddprun at world 1 and 2 against the compute limit (2
    independent single-rank runs together) and against the Python DDP reference, same batch and shape."""
    if GPT_STEPS < 2 * GPT_LOG_EVERY:
        sys.exit(f"bench: BENCH_GPT_STEPS must be at least {2 * GPT_LOG_EVERY} (a warm-up log window and a timed one)")
    train_glob, eval_glob = kjv_tokens(work)
    sets = [f"data.path={train_glob}", f"data.eval_path={eval_glob}", f"train.batch_size={GPT_BATCH}",
            *(f"model.{key}={str(value).lower()}" for key, value in GPT_SHAPE.items())]
    run = lambda name, nproc: start_run(work, name, nproc, None, sets, config=GPT_CONFIG, steps=GPT_STEPS,
                                        log_every=GPT_LOG_EVERY)
    # Interleaved: each repeat runs every row once, so a slow stretch of a shared machine slows both sides.
    ours, python, limits = {1: [], 2: []}, {1: [], 2: []}, []
    for i in range(GPT_REPEATS):
        for n in (1, 2):
            ours[n].append(finish_run(*run(f"gpt-w{n}-{i}", n)))
            python[n].append(gpt_reference(n, train_glob)["tokens_per_s"])
        # The two single-rank runs are both started before either is waited for.
        limits.append(sum(finish_run(*r)["tokens_per_s"] for r in [run(f"gpt-limit-{i}-{j}", 1) for j in range(2)]))
    ours = {n: best(runs, "tokens_per_s") for n, runs in ours.items()}
    python = {n: best(runs) for n, runs in python.items()}
    limit = best(limits)
    print(f"GPT (nanoGPT's: {GPT_SHAPE['n_layer']} layers, {GPT_SHAPE['n_head']} heads, width {GPT_SHAPE['n_embd']}, "
          f"block {GPT_SHAPE['block_size']}, byte vocabulary) on the King James Bible, batch {GPT_BATCH} per rank, "
          f"{GPT_STEPS} steps ({GPT_LOG_EVERY} of warm-up untimed), best of {GPT_REPEATS} interleaved, 1 thread per "
          f"rank, {os.cpu_count()} cores; compute limit of world 2: {limit:.0f} tokens/s; Python: "
          f"scripts/bench_gpt_reference.py (nanoGPT's train.py loop)\n")
    print("| world | ddprun tokens/s | efficiency vs compute limit | peak RSS MiB per rank | Python DDP tokens/s "
          "| ddprun ÷ Python |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (1, 2):
        r = ours[n]["tokens_per_s"]
        efficiency = f"{r / limit:.2f}" if n == 2 else ""
        print(f"| {n} | {r:.0f} | {efficiency} | {ours[n]['rss_mib']:.0f} | {python[n]:.0f} | {r / python[n]:.2f}× |",
              flush=True)
    print()


# GPT-2 124M as nanoGPT trains it (12 layers, 12 heads, width 768, block 1024, its vocabulary of
# 50,304: GPT-2's 50,257 padded to a multiple of 64), on the byte shards: the ids use 256 of the rows,
# the work per token is the full vocabulary's.
GPU_GPT = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50304, "bias": False,
           "dropout": 0.0}
GPU_GPT_BATCH = int(os.environ.get("BENCH_GPU_GPT_BATCH", "16"))
# BENCH_GPU_SMOKE=1 runs the table's every row on the CPU at a toy shape, to check the bench itself
# before a GPU's few minutes are spent on it (no torch.compile there: Debian's torch is 1.13).
GPU_SMOKE = os.environ.get("BENCH_GPU_SMOKE") == "1"
# The Llama of issue 41 at that size (scripts/llama_peer.py on the Python side): grouped-query
# attention (4 key/value heads for 12), SwiGLU of Llama's width rule, an untied head, Llama 2's vocabulary.
GPU_LLAMA = {"n_layer": 12, "n_head": 12, "n_kv_heads": 4, "dim": 768, "multiple_of": 256, "block_size": 1024,
             "vocab_size": 32000, "rope_theta": 10000.0, "tie_embeddings": False}
if GPU_SMOKE:
    GPU_GPT = dict(GPU_GPT, n_layer=2, n_head=2, n_embd=64, block_size=64)
    GPU_LLAMA = dict(GPU_LLAMA, n_layer=2, n_head=4, n_kv_heads=2, dim=64, block_size=64)
    GPU_GPT_BATCH = 4
# Dense bf16 tensor-core peaks (NVIDIA's data sheets, SXM parts), for model FLOPs utilisation.
BF16_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def flops_per_token(shape):
    """nanoGPT's estimate (its estimate_mfu, after the PaLM paper): 6N for the matrices' forward and
    backward, plus 12·L·C·T for attention's two sequence-long products; N counts no position embedding,
    nor a Llama's untied input embedding (a lookup, not a product)."""
    if "dim" in shape:  # a Llama: q and o square, k and v one per key/value head, three SwiGLU matrices, the head
        L, C, T, V, H, K = (shape[k] for k in ("n_layer", "dim", "block_size", "vocab_size", "n_head", "n_kv_heads"))
        width = 8 * C // 3
        F = shape["multiple_of"] * ((width + shape["multiple_of"] - 1) // shape["multiple_of"])
        n = V * C + L * (2 * C * C + 2 * C * (C // H) * K + 3 * C * F + 2 * C) + C
        return 6 * n + 12 * L * C * T
    L, C, T, V = shape["n_layer"], shape["n_embd"], shape["block_size"], shape["vocab_size"]
    n = V * C + L * (12 * C * C + 2 * C) + C  # tied embedding, blocks (no biases), final norm
    return 6 * n + 12 * L * C * T


def gpt_gpu(work):
    """The GPU language-model table (issue 42's): GPT-2 124M (and with BENCH_GPU_MODELS="gpt llama" the
    Llama of issue 41 at that size) at world 1 on one GPU, fp32 (TF32 on both sides) and bf16; ddprun
    against the Python peer (nanoGPT's recipe), eager and torch.compile'd, in one call: each row's
    tokens/s, model FLOPs utilisation against the card's bf16 peak, and peak CUDA memory (the caching
    allocator's most handed out); ddprun with the step as a CUDA graph; ddprun without the chunked loss,
    for its memory. BENCH_GPU_SHARD=1 adds dist.shard on CUDA tensors."""
    device = "cpu" if GPU_SMOKE else "cuda"
    name = "CPU (BENCH_GPU_SMOKE)" if GPU_SMOKE else subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.get_device_name(0))"], check=True, capture_output=True,
        text=True).stdout.strip()
    peak = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None)
    train_glob, _ = kjv_tokens(work)
    steps = int(os.environ.get("BENCH_GPU_GPT_STEPS", "20" if GPU_SMOKE else "60"))
    compile_too = not GPU_SMOKE and os.environ.get("BENCH_GPU_COMPILE", "1") == "1"
    common = [f"data.path={train_glob}", "eval.every_steps=0", "checkpoint.every_steps=0", f"dist.device={device}",
              f"train.batch_size={GPU_GPT_BATCH}"]
    for model in os.environ.get("BENCH_GPU_MODELS", "gpt").split():
        shape, config = {"gpt": (GPU_GPT, GPT_CONFIG), "llama": (GPU_LLAMA, LLAMA_CONFIG)}[model]
        lm_table(work, name, peak, device, model, shape, config, common, train_glob, steps, compile_too)
    if os.environ.get("BENCH_GPU_SHARD") != "1":
        return
    sets = [*common, *(f"model.{k}={str(v).lower()}" for k, v in GPU_GPT.items())]
    short = max(2 * GPT_LOG_EVERY, steps // 2)  # world 2 sums the gradients through the host a step
    print(f"dist.shard on CUDA tensors, the GPT above in bf16 ({short} steps at world 2; replicated at world 1 is "
          f"the row ddprun, bf16 above)\n")
    print("| run | tokens/s | last logged loss |")
    print("|---|---:|---:|", flush=True)
    for label, nproc, extra, n in (("world 1 NCCL, parameters", 1, ["dist.shard=parameters"], steps),
                                   ("world 2 Gloo, none", 2, ["dist.backend=gloo"], short),
                                   ("world 2 Gloo, parameters", 2, ["dist.backend=gloo", "dist.shard=parameters"], short)):
        out, started, processes = start_run(work, re.sub(r"[^A-Za-z0-9]+", "_", label), nproc, None,
                                            [*sets, "train.precision=bf16", *extra], config=GPT_CONFIG, steps=n,
                                            log_every=GPT_LOG_EVERY)
        r = finish_run(out, started, processes)
        print(f"| {label} | {r['tokens_per_s']:.0f} | {r['loss']:.4f} |", flush=True)
    print()


def lm_table(work, card, peak, device, model, shape, config, common, train_glob, steps, compile_too):
    """One model's rows of the GPU table (gpt_gpu)."""
    per_token = flops_per_token(shape)
    sets = [*common, f"model.name={model}", *(f"model.{k}={str(v).lower()}" for k, v in shape.items())]

    def ours(label, extra):
        out, started, processes = start_run(work, re.sub(r"[^A-Za-z0-9]+", "_", f"{model} {label}"), 1, None,
                                            [*sets, *extra], config=config, steps=steps, log_every=GPT_LOG_EVERY)
        r = finish_run(out, started, processes)
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        r["peak_cuda_mib"] = next((x["peak_cuda_mib_max"] for x in records if "peak_cuda_mib_max" in x), None)
        return label, r

    def theirs(label, extra):
        values = gpt_reference(1, train_glob, shape, GPU_GPT_BATCH, steps, ["--model", model, "--device", device, *extra])
        return label, {"tokens_per_s": values["tokens_per_s"], "peak_cuda_mib": values.get("peak_cuda_mib")}

    title = "GPT-2 124M" if model == "gpt" else f"Llama ({shape['n_kv_heads']} key/value heads, untied head)"
    width = shape.get("n_embd", shape.get("dim"))
    print(f"{title} on one {card}: {shape['n_layer']} layers, {shape['n_head']} heads, width {width}, block "
          f"{shape['block_size']}, vocabulary {shape['vocab_size']}, batch {GPU_GPT_BATCH} × {shape['block_size']} "
          f"tokens, {steps} steps ({GPT_LOG_EVERY} untimed), world 1; fp32 is TF32 matrix products on both sides "
          f"(train.tf32, allow_tf32); MFU = tokens/s × {per_token / 1e6:.0f} MFLOP/token ÷ "
          f"{peak or '(unknown card)'} TFLOP/s (dense bf16); Python: scripts/bench_gpt_reference.py (nanoGPT's "
          f"train.py: fused AdamW, scaled_dot_product_attention, pinned non-blocking copies), "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| run | tokens/s | MFU | peak CUDA MiB | ÷ Python eager | ÷ Python compiled |")
    print("|---|---:|---:|---:|---:|---:|", flush=True)
    baseline = {}  # (precision, "eager" or "compiled") → the Python peer's tokens/s

    def row(label, r, precision):
        tokens = r["tokens_per_s"]
        mfu = f"{tokens * per_token / (peak * 1e12):.1%}" if peak else "?"
        memory = f"{r['peak_cuda_mib']:.0f}" if r.get("peak_cuda_mib") is not None else "–"
        ratio = lambda kind: f"{tokens / baseline[precision, kind]:.2f}×" if (precision, kind) in baseline else "–"
        # Each row is printed as it ends: a run cut short keeps the rows before it.
        print(f"| {label} | {tokens:.0f} | {mfu} | {memory} | {ratio('eager')} | {ratio('compiled')} |", flush=True)

    for precision in os.environ.get("BENCH_GPU_PRECISIONS", "fp32 bf16").split():
        label, r = theirs(f"Python eager, {precision}", ["--precision", precision])
        baseline[precision, "eager"] = r["tokens_per_s"]
        row(label, r, precision)
        if compile_too:
            label, r = theirs(f"Python torch.compile, {precision}", ["--precision", precision, "--compile"])
            baseline[precision, "compiled"] = r["tokens_per_s"]
            row(label, r, precision)
        row(*ours(f"ddprun, {precision}", [f"train.precision={precision}"]), precision)
        if not GPU_SMOKE:  # the step as one CUDA graph (Note [CUDA graphs]); on the CPU it would only say why not
            row(*ours(f"ddprun, {precision}, train.cuda_graphs=on",
                      [f"train.precision={precision}", "train.cuda_graphs=on"]), precision)
        if precision == "bf16":  # the head and loss over the whole [B, T, V] at once, for its memory
            row(*ours("ddprun, bf16, train.chunked_loss=off", ["train.precision=bf16", "train.chunked_loss=off"]),
                precision)
    print()


def gpu_profile(work):
    """Issue 42's first item: one bf16 step of GPT-2 124M (the GPU table's shape and batch) recorded on
    each side, ddprun (DDPRUN_PROFILE, Kineto's kernels on a CUDA build) and the Python peer
    (torch.profiler), each summed by scripts/profile_summary.py: operators, kernels, and how much of
    a step the GPU was busy."""
    device = "cpu" if GPU_SMOKE else "cuda"
    train_glob, _ = kjv_tokens(work)
    first, count = 2 * GPT_LOG_EVERY, 5
    summary = lambda trace: subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "profile_summary.py"), trace,
                                            "--steps", str(count)], check=True)
    sets = [f"data.path={train_glob}", "eval.every_steps=0", "checkpoint.every_steps=0", f"dist.device={device}",
            f"train.batch_size={GPU_GPT_BATCH}", "train.precision=bf16",
            *(f"model.{k}={str(v).lower()}" for k, v in GPU_GPT.items())]
    print(f"A bf16 step of the GPU table's GPT on {device}, steps {first}–{first + count - 1} recorded, per step\n")
    print("ddprun (DDPRUN_PROFILE):\n", flush=True)
    out, started, processes = start_run(work, "profile", 1, None, sets, config=GPT_CONFIG, steps=first + count,
                                        log_every=GPT_LOG_EVERY, env={"DDPRUN_PROFILE": f"{first}:{count}"})
    finish_run(out, started, processes)
    summary(os.path.join(out, "profile_rank0.trace.json"))
    print("\nPython (torch.profiler):\n", flush=True)
    trace = os.path.join(work, "python_profile.json")
    # gpt_reference's warm-up is GPT_LOG_EVERY steps: the recorded ones are the `count` after it.
    gpt_reference(1, train_glob, GPU_GPT, GPU_GPT_BATCH, GPT_LOG_EVERY + count,
                  ["--device", device, "--precision", "bf16", "--profile", trace])
    summary(trace)
    print()


SHARD_MODES = ("none", "optimizer", "gradients", "parameters")
# At least 50M parameters for the memory table: nanoGPT's shape, 8 blocks of width 768 (7.1M each).
BIG_GPT = {"n_layer": 8, "n_head": 12, "n_embd": 768, "block_size": 64, "vocab_size": 256, "bias": False,
           "dropout": 0.0}
BIG_GPT_STEPS = int(os.environ.get("BENCH_BIG_GPT_STEPS", "4"))


def sharding(work):
    """dist.shard at world 4 on a 57M-parameter GPT (bytes per rank against replicated: the issue's
    0.65 / 0.45 / 0.30), then tokens/s of each setting at world 2 on the GPT table's model."""
    train_glob, _ = kjv_tokens(work)
    shape = lambda s: [f"model.{key}={str(value).lower()}" for key, value in s.items()]
    data = [f"data.path={train_glob}", "data.eval_split=none", "eval.every_steps=0", "checkpoint.every_steps=0"]
    memory = {}
    for mode in SHARD_MODES:
        out, started, processes = start_run(work, f"big-{mode}", 4, None,
                                            [*data, "train.batch_size=2", f"dist.shard={mode}", *shape(BIG_GPT)],
                                            config=GPT_CONFIG, steps=BIG_GPT_STEPS, log_every=1)
        finish_run(out, started, processes)
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        state = next(r for r in records if "optimizer_state_mib_max" in r)
        peak = next(r for r in records if "peak_rss_mib_max" in r)
        memory[mode] = {"state": state["parameter_mib_max"] + state["gradient_mib_max"] + state["optimizer_state_mib_max"],
                        "unit": state.get("gathered_unit_mib", 0), "rss": peak["peak_rss_mib_max"],
                        "others": max(peak[f"peak_rss_mib_rank{r}"] for r in range(1, 4))}
    whole = memory["none"]["state"]
    print(f"dist.shard at world 4: nanoGPT's shape, {BIG_GPT['n_layer']} blocks of width {BIG_GPT['n_embd']} "
          f"(57M parameters), AdamW in float32, {BIG_GPT_STEPS} steps of batch 2 × {BIG_GPT['block_size']} tokens "
          f"per rank, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| dist.shard | parameters + gradients + optimizer state MiB per rank | ÷ replicated | with the largest "
          "gathered unit | peak RSS MiB per rank | of ranks 1–3 (not model.pt's writer) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in SHARD_MODES:
        m = memory[mode]
        gathered = f"{(m['state'] + m['unit']) / whole:.3f} ({m['unit']:.0f} MiB unit)" if m["unit"] else ""
        print(f"| {mode} | {m['state']:.0f} | {m['state'] / whole:.3f} | {gathered} | {m['rss']:.0f} | {m['others']:.0f} |",
              flush=True)
    print()
    sets = [*data, f"train.batch_size={GPT_BATCH}", *shape(GPT_SHAPE)]
    speed = {mode: best([finish_run(*start_run(work, f"gpt-{mode}-{i}", 2, None, [*sets, f"dist.shard={mode}"],
                                               config=GPT_CONFIG, steps=GPT_STEPS, log_every=GPT_LOG_EVERY))
                         for i in range(REPEATS)], "tokens_per_s")["tokens_per_s"] for mode in SHARD_MODES}
    print(f"dist.shard at world 2: the GPT table's model ({GPT_SHAPE['n_layer']} layers, width {GPT_SHAPE['n_embd']}), "
          f"batch {GPT_BATCH} per rank, {GPT_STEPS} steps, best of {REPEATS}\n")
    print("| dist.shard | tokens/s | ÷ replicated |")
    print("|---|---:|---:|")
    for mode in SHARD_MODES:
        print(f"| {mode} | {speed[mode]:.0f} | {speed[mode] / speed['none']:.3f} |", flush=True)
    print()


TABLE_ROWS = (1_000_000, 10_000_000)  # rows of the 26 tables together
TABLE_STEPS = int(os.environ.get("BENCH_TABLE_STEPS", "60"))
TABLE_BATCH = 128


def tables(work):
    """DLRM at world 2: row-wise sharded tables against replicated ones whose whole gradients are
    all-reduced, both updated by row-wise Adagrad (issue 43's bench): steps/s and memory."""
    log = os.path.join(work, "clicks.tsv")
    subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "make_clicks.py"), log, "--rows", "40000", "--seed", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    config = os.path.join(ROOT, "configs", "clicks_dlrm.yaml")
    layouts = (("replicate", "replicated, dense all-reduce"), ("row", "row-wise sharded, all-to-all"))
    print(f"Sharded embedding tables: DLRM (dimension 16, MLPs 64-32) at world 2, batch {TABLE_BATCH} per rank, "
          f"{TABLE_STEPS} steps, row-wise Adagrad on the tables and Adam on the MLPs, best of {REPEATS}, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| rows in 26 tables | tables | steps/s | ÷ replicated | all-reduce ms/step | tables, gradients and state MiB per rank "
          "| peak RSS MiB per rank |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for total in TABLE_ROWS:
        measured = {}
        for layout, label in layouts:
            sets = [f"data.path={log}", "eval.every_epochs=0", f"train.batch_size={TABLE_BATCH}",
                    f"model.embedding_rows=[{total // 26}]", "optim.embeddings=rowwise_adagrad",
                    f"model.embedding_sharding={layout}"]
            runs = []
            for i in range(REPEATS):
                out, started, processes = start_run(work, f"tables-{total}-{layout}-{i}", 2, None, sets, config=config,
                                                    steps=TABLE_STEPS, log_every=10)
                r = finish_run(out, started, processes)
                records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
                state = next(x for x in records if "optimizer_state_mib_max" in x)
                r["state_mib"] = state["parameter_mib_max"] + state["gradient_mib_max"] + state["optimizer_state_mib_max"]
                runs.append(r)
            measured[layout] = best(runs)
        for layout, label in layouts:
            r = measured[layout]
            steps = r["samples_per_s"] / (2 * TABLE_BATCH)
            ratio = r["samples_per_s"] / measured["replicate"]["samples_per_s"]
            print(f"| {total:,} | {label} | {steps:.1f} | {ratio:.2f} | {r['allreduce_ms']:.1f} | {r['state_mib']:.0f} "
                  f"| {r['rss_mib']:.0f} |", flush=True)
    print()


def threads(work):
    """Ranks as threads of one process (ddp-train --threads N) against N ddprun processes (issue 43):
    the same training, so samples/s should agree; what differs is the start and the memory. Peak RSS
    is the processes' sum (each maps the dataset and LibTorch alone) against the one process's."""
    print(f"Ranks as threads: {STEPS} steps, batch 64 per rank, 1 intra-op thread a rank, best of {REPEATS}, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| model | ranks | as | samples/s | launch→first step s | peak RSS MiB, all ranks |")
    print("|---|---:|---|---:|---:|---:|")
    for model in MODELS:
        for n in (2, 4):
            for label, as_threads in (("processes (ddprun)", False), ("threads (ddp-train --threads)", True)):
                r = best([finish_run(*start_run(work, f"threads-{model}-{n}-{as_threads}-{i}", n, model,
                                                threads=as_threads)) for i in range(REPEATS)])
                rss = sum(r["rss_ranks_mib"])  # threads record their shares of their process's, which add up
                print(f"| {model} | {n} | {label} | {r['samples_per_s']:.0f} | {r['first_step_s']:.2f} | {rss:.0f} |",
                      flush=True)
    print()


def pipeline(work):
    """2 pipeline stages × 1 against 1 × 2 data-parallel ranks at world 2 on the GPT table's model, the
    same global batch: tokens/s, and each stage's measured bubble beside (P-1)/(M+P-1)."""
    train_glob, _ = kjv_tokens(work)
    shape = [f"model.{key}={str(value).lower()}" for key, value in GPT_SHAPE.items()]
    sets = [f"data.path={train_glob}", "data.eval_split=none", "eval.every_steps=0", "checkpoint.every_steps=0",
            f"train.global_batch_size={2 * GPT_BATCH}", *shape]
    layouts = [("1 × 2 data-parallel", [])]
    for microbatches in (4, 8):
        for schedule in ("gpipe", "1f1b"):
            layouts.append((f"2 stages × 1, M = {microbatches}, {schedule}",
                            ["dist.pipeline=2", f"dist.microbatches={microbatches}", f"dist.schedule={schedule}"]))
    print(f"dist.pipeline at world 2: the GPT table's model ({GPT_SHAPE['n_layer']} layers, width {GPT_SHAPE['n_embd']}), "
          f"global batch {2 * GPT_BATCH} × {GPT_SHAPE['block_size']} tokens, {GPT_STEPS} steps, best of {REPEATS}, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| layout | tokens/s | ÷ data-parallel | bubble stage 0 / 1 (measured) | (P-1)/(M+P-1) "
          "| peak activation MiB stage 0 / 1 |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for i, (name, extra) in enumerate(layouts):
        runs = []
        for r in range(REPEATS):
            out, started, processes = start_run(work, f"pipe-{i}-{r}", 2, None, [*sets, *extra], config=GPT_CONFIG,
                                                steps=GPT_STEPS, log_every=GPT_LOG_EVERY)
            result = finish_run(out, started, processes)
            records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
            result["stages"] = next((r for r in records if "pipeline_stage0_bubble" in r), None)
            runs.append(result)
        top = best(runs, "tokens_per_s")
        base = base or top["tokens_per_s"]
        stages = top["stages"]
        bubble = ideal = memory = ""
        if stages:
            bubble = f"{stages['pipeline_stage0_bubble']:.3f} / {stages['pipeline_stage1_bubble']:.3f}"
            ideal = f"{stages['pipeline_ideal_bubble']:.3f}"
            memory = (f"{stages['pipeline_stage0_peak_activation_mib']:.1f} / "
                      f"{stages['pipeline_stage1_peak_activation_mib']:.1f}")
        print(f"| {name} | {top['tokens_per_s']:.0f} | {top['tokens_per_s'] / base:.3f} | {bubble} | {ideal} | {memory} |",
              flush=True)
    print()

WIDE_GPT = dict(GPT_SHAPE, n_head=8, n_embd=512)  # where a tensor group's matrix products are worth splitting


def tensor(work):
    """dist.tensor 2 (with and without dist.sequence_parallel) against 2 data-parallel replicas at world 2, the
    same global batch, on the GPT table's model and on a wider one: tokens/s, the collectives a step on each
    process group (counted by ddprun's tracker), and each rank's parameters and activations."""
    train_glob, _ = kjv_tokens(work)
    layouts = [("1 × 2 data-parallel", []), ("tensor 2", ["dist.tensor=2"]),
               ("tensor 2, sequence parallel", ["dist.tensor=2", "dist.sequence_parallel=true"])]
    print(f"dist.tensor at world 2: global batch {2 * GPT_BATCH} × {GPT_SHAPE['block_size']} tokens, {GPT_STEPS} steps, "
          f"best of {REPEATS}, 1 intra-op thread a rank, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| model | layout | tokens/s | ÷ data-parallel | collectives a step (rank 0, by group) | parameters MiB "
          "per rank | peak activation MiB per rank |")
    print("|---|---|---:|---:|---|---:|---:|")
    for label, shape in ((f"{GPT_SHAPE['n_layer']} layers × {GPT_SHAPE['n_embd']}", GPT_SHAPE),
                         (f"{WIDE_GPT['n_layer']} layers × {WIDE_GPT['n_embd']}", WIDE_GPT)):
        sets = [f"data.path={train_glob}", "data.eval_split=none", "eval.every_steps=0", "checkpoint.every_steps=0",
                f"train.global_batch_size={2 * GPT_BATCH}",
                *(f"model.{key}={str(value).lower()}" for key, value in shape.items())]
        base = None
        for i, (name, extra) in enumerate(layouts):
            runs = []
            for r in range(REPEATS):
                out, started, processes = start_run(work, f"tensor-{shape['n_embd']}-{i}-{r}", 2, None, [*sets, *extra],
                                                    config=GPT_CONFIG, steps=GPT_STEPS, log_every=GPT_LOG_EVERY)
                result = finish_run(out, started, processes)
                records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
                counts = next(r for r in records if any(k.startswith("collectives_per_step_") for k in r))
                result["collectives"] = ", ".join(f"{k[len('collectives_per_step_'):]} {v:.0f}"
                                                  for k, v in counts.items() if k.startswith("collectives_per_step_"))
                result["parameters"] = next(r for r in records if "parameter_mib_max" in r)["parameter_mib_max"]
                result["activations"] = next(r for r in records if "activation_mib_max" in r)["activation_mib_max"]
                runs.append(result)
            top = best(runs, "tokens_per_s")
            base = base or top["tokens_per_s"]
            print(f"| {label} | {name} | {top['tokens_per_s']:.0f} | {top['tokens_per_s'] / base:.3f} | "
                  f"{top['collectives']} | {top['parameters']:.1f} | {top['activations']:.1f} |", flush=True)
    print()


def tokenize(work):
    """ddp-tokenize's encoding throughput against Python sentencepiece's, on the King James Bible's text with
    the same tokenizer.model (a BPE and a unigram of 8,000 pieces that ddp-tokenize trained): MB of text a
    second, one thread and every core, each side timing its encoding call alone."""
    text = os.path.join(work, "kjv.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(kjv_text())
    size = os.path.getsize(text)
    cores = os.cpu_count()
    print(f"ddp-tokenize against Python sentencepiece {python_sentencepiece_version()}: the King James Bible "
          f"({size / 1e6:.1f} MB, {sum(1 for _ in open(text, encoding='utf-8'))} lines), best of {REPEATS} runs, "
          f"{cores} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| tokenizer | threads | ddp-tokenize MB/s | Python sentencepiece MB/s | ddp-tokenize ÷ Python |")
    print("|---|---:|---:|---:|---:|")
    for model_type in ("bpe", "unigram"):
        out = os.path.join(work, f"tok-{model_type}")
        subprocess.run([os.path.join(BIN, "ddp-tokenize"), out, "--text", text, "--vocab-size", "8000",
                        "--model-type", model_type], check=True, stdout=subprocess.DEVNULL)
        model = os.path.join(out, "tokenizer.model")
        for threads in sorted({1, cores}):
            ours = max(ddp_tokenize_mb_per_s(out, text, model, threads) for _ in range(REPEATS))
            theirs = max(python_sentencepiece_mb_per_s(model, text, threads) for _ in range(REPEATS))
            print(f"| {model_type} 8,000 | {threads} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}× |", flush=True)
    print()


def kjv_text():
    """The King James Bible from Debian's bible-kjv, one verse a line without its reference."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    verses = (re.sub(r"^\d?[A-Za-z]+\d+:\d+ ", "", line) for line in out.splitlines())
    return "".join(verse + "\n" for verse in verses if verse)


def ddp_tokenize_mb_per_s(out, text, model, threads):
    result = subprocess.run([os.path.join(BIN, "ddp-tokenize"), out, "--text", text, "--tokenizer", model,
                             "--threads", str(threads)], check=True, capture_output=True, text=True)
    return float(re.search(r"thread\(s\): ([0-9.]+) MB/s", result.stdout).group(1))


def python_sentencepiece_version():
    return subprocess.run([PYTHON, "-c", "import sentencepiece; print(sentencepiece.__version__)"],
                          check=True, capture_output=True, text=True).stdout.strip()


def python_sentencepiece_mb_per_s(model, text, threads):
    script = ("import sys, time, sentencepiece as s\n"
              "p = s.SentencePieceProcessor(model_file=sys.argv[1])\n"
              "data = open(sys.argv[2], 'rb').read()\n"
              "lines = data.decode('utf-8').split('\\n')\n"
              "lines = lines[:-1] if lines and lines[-1] == '' else lines\n"
              "start = time.perf_counter()\n"
              "p.encode(lines, num_threads=int(sys.argv[3]))\n"
              "print(len(data) / 1e6 / (time.perf_counter() - start))\n")
    result = subprocess.run([PYTHON, "-c", script, model, text, str(threads)], check=True, capture_output=True,
                            text=True)
    return float(result.stdout)


def compare(work):
    """This build against BENCH_BASELINE's binaries, back to back: ConvNet, MLP and the GPT at world 1 and 2."""
    global BIN
    ours, theirs = BIN, os.environ.get("BENCH_BASELINE", "")
    if not os.path.isfile(os.path.join(theirs, "ddprun")):
        sys.exit("bench: BENCH_ONLY=compare needs BENCH_BASELINE=DIR, a build's bin/ holding ddprun and ddp-train")
    train_glob, eval_glob = kjv_tokens(work)
    gpt_sets = [f"data.path={train_glob}", f"data.eval_path={eval_glob}", f"train.batch_size={GPT_BATCH}",
                *(f"model.{key}={str(value).lower()}" for key, value in GPT_SHAPE.items())]
    # (label, measure, start_run's arguments besides the name and world): the GPT as in the GPT table.
    cases = [(model, "samples_per_s", dict(model=model)) for model in MODELS]
    cases.append(("gpt", "tokens_per_s", dict(model=None, extra=gpt_sets, config=GPT_CONFIG, steps=GPT_STEPS,
                                              log_every=GPT_LOG_EVERY)))
    print(f"ddprun against {theirs}: best of {REPEATS} alternating runs each, 1 thread per rank, {os.cpu_count()} "
          f"cores, {time.strftime('%Y-%m-%d %H:%M')}; ConvNet and MLP {STEPS} steps of batch 64 per rank, the GPT "
          f"{GPT_STEPS} steps of the GPT table's shape and batch\n")
    print("| model | world | measure | baseline | this build | this ÷ baseline |")
    print("|---|---:|---|---:|---:|---:|")
    for label, measure, arguments in cases:
        for nproc in (1, 2):
            results = {ours: [], theirs: []}
            for i in range(REPEATS):
                for which in (theirs, ours) if i % 2 == 0 else (ours, theirs):
                    BIN = which
                    tag = "this" if which == ours else "base"
                    results[which].append(finish_run(*start_run(work, f"{label}-w{nproc}-{tag}-{i}", nproc, **arguments)))
            BIN = ours
            base, now = best(results[theirs], measure)[measure], best(results[ours], measure)[measure]
            print(f"| {label} | {nproc} | {measure} | {base:.0f} | {now:.0f} | {now / base:.3f} |", flush=True)
    print()


def main():
    work = tempfile.mkdtemp(prefix="ddprun-bench-")
    only = {"multinode": multinode, "monitor": monitor_cost, "graph": graph, "gpt": gpt, "gpt_gpu": gpt_gpu, "gpu_profile": gpu_profile,
            "sharding": sharding,
            "pipeline": pipeline, "compare": compare, "tokenize": tokenize, "tables": tables,
            "threads": threads, "tensor": tensor}.get(os.environ.get("BENCH_ONLY", ""))
    if only:
        try:
            only(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        print(f"ddprun benchmark: {STEPS} steps per run, best of {REPEATS} runs, batch 64 per rank, 1 thread per rank, "
              f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
        print("| model | world | samples/s | compute limit | efficiency | torchrun+DDP | vs torchrun "
              "| all-reduce ms/step | exposed ms/step | hidden | launch→first step | peak RSS/rank |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for model in MODELS:
            rows = [("1", train(work, f"{model}-w1", 1, model), None, None),
                    ("2", train(work, f"{model}-w2", 2, model), compute_limit(work, model, 2), torchrun(model, 2)),
                    ("2, overlap off", train(work, f"{model}-w2-sync", 2, model, ["dist.overlap=false"]), None, None)]
            rows.append(("2, Gloo all-reduce", train(work, f"{model}-w2-gloo", 2, model, ["dist.shared_memory=false"]),
                         None, None))
            if model == "convnet":  # a ConvNet as a TorchScript module, trained by ddprun and by Python DDP
                for label, flags in (("convnet.cpp's order", ["--pool-first"]), ("the tutorial's", [])):
                    scripted = os.path.join(work, f"convnet_scripted{len(flags)}.pt")
                    subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "ddp_models.py"), "script",
                                    scripted, "convnet", *flags], check=True)
                    sets = ["model.name=torchscript", f"model.path={scripted}"]
                    rows.append((f"2, TorchScript: {label}", train(work, f"convnet-w2-script{len(flags)}", 2, model, sets),
                                 compute_limit(work, model, 2, sets), torchrun(model, 2, scripted)))
            if model == "convnet":  # the NCHW layout the Python recipe uses; start-up without the dataset cache
                rows.append(("2, channels-last off", train(work, "convnet-w2-nchw", 2, model, ["model.channels_last=false"]),
                             None, None))
                rows.append(("2, dataset cache off", train(work, "convnet-w2-nocache", 2, model, ["data.cache_dir=none"]),
                             None, None))
            for world, r, limit, python in rows:
                hidden = 1 - r["exposed_ms"] / r["allreduce_ms"] if r["allreduce_ms"] > 0 else 0
                cells = [model, world, f"{r['samples_per_s']:.0f}",
                         f"{limit:.0f}" if limit else "", f"{r['samples_per_s'] / limit:.2f}" if limit else "",
                         f"{python:.0f}" if python else "", f"{r['samples_per_s'] / python:.2f}×" if python else "",
                         f"{r['allreduce_ms']:.2f}" if world != "1" else "", f"{r['exposed_ms']:.2f}" if world != "1" else "",
                         f"{hidden:.0%}" if world != "1" else "", f"{r['first_step_s']:.2f} s", f"{r['rss_mib']:.0f} MiB"]
                print("| " + " | ".join(cells) + " |", flush=True)
        print()
        multinode(work)
        monitor_cost(work)
        graph(work)
        gpt(work)
        tokenize(work)
        tables(work)
        result = subprocess.run([os.path.join(BIN, "ddprun"), "--standalone", "--nproc-per-node", "2",
                                 "--local-ranks-filter", "0", "--", os.path.join(BIN, "ddp-bench-allreduce")],
                                env=ENV, capture_output=True, text=True)
        print("\n".join(line.removeprefix("[rank 0] ") for line in result.stdout.splitlines()))
        if result.returncode != 0:
            sys.exit(f"bench: all-reduce benchmark failed:\n{result.stderr[-2000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
