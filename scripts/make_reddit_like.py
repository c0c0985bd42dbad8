#!/usr/bin/python3
"""A generated graph of the Reddit dataset's size, in PyG's Reddit raw format: the two files that
torch_geometric.datasets.Reddit reads from its raw directory (and DGL's reddit.zip holds).

    /usr/bin/python3 scripts/make_reddit_like.py OUT_DIR [--nodes 232965] [--edges 114615892]
        [--features 602] [--classes 41] [--seed 0] [--compressed]

  reddit_data.npz   feature float32 [N, F], label int64 [N], node_types int64 [N] (1/2/3: train/val/test,
                    in Reddit's proportions 153,431 / 23,831 / 55,703), node_ids int32 [N]
  reddit_graph.npz  scipy.sparse.coo_matrix [N, N] (scipy.sparse.save_npz): int32 row/col, float32 ones;
                    undirected (both directions stored), no self loops, no duplicates, sorted by (row, col)

The graph is Chung-Lu: each node has a Pareto weight (its expected degree, capped at Reddit's
max/mean degree ratio), and an edge's endpoints are drawn in proportion to weight. Labels matter
twice: features are the node's class centroid plus noise (an MLP gets a modest accuracy), and
a --homophily share of the pairs draw their second endpoint from the first one's class (neighbours help).
Duplicate pairs are removed and more are drawn until exactly --edges / 2 pairs remain. With the
defaults, 0.647 of the edges join a class, and 120 steps of batch 1024 reach a validation accuracy
of 0.56 without neighbours (fanouts [0, 0]) against 0.9998 with fanouts [25, 10].
Deterministic for a seed. At full size on two cores: about 70 s and 2.8 GB peak, 1.9 GB of files;
--compressed deflates them as the real files are (0.8 GB, about 110 s).
"""
import argparse
import math
import os
import time

import numpy as np
import scipy.sparse

# Reddit's split sizes (node_types 1, 2, 3) and max/mean degree (21,657 / 492).
REDDIT_SPLITS = (153431, 23831, 55703)
MAX_OVER_MEAN_DEGREE = 44.0
CHUNK = 1 << 23  # pairs drawn at a time: keeps the float64 temporaries near 64 MiB each


def log(start, message):
    print(f"[{time.time() - start:6.1f} s] {message}", flush=True)


def class_sizes(rng, classes):
    # Reddit's communities are unequal in size: Zipf-like class shares, shuffled.
    share = 1.0 / np.arange(1, classes + 1) ** 0.8
    return rng.permutation(share / share.sum())


def weights(rng, nodes, alpha):
    # Pareto(alpha) weights, capped so the largest is MAX_OVER_MEAN_DEGREE times the mean (found by
    # bisection, since the cap moves the mean).
    raw = rng.pareto(alpha, nodes) + 1.0
    lo, hi = 1.0, raw.max()
    for _ in range(60):
        cap = (lo + hi) / 2
        if cap / np.minimum(raw, cap).mean() > MAX_OVER_MEAN_DEGREE:
            hi = cap
        else:
            lo = cap
    return np.minimum(raw, lo)


def draw_pairs(rng, count, cumulative, class_start, class_end, class_of_position, homophily):
    """`count` endpoint pairs as int64 keys min * N + max over node positions (class-sorted order),
    self loops dropped."""
    total = cumulative[-1]
    n = len(cumulative)
    out = []
    for begin in range(0, count, CHUNK):
        m = min(CHUNK, count - begin)
        u = np.minimum(np.searchsorted(cumulative, rng.random(m) * total, side="right"), n - 1)
        # The second endpoint: within u's class (a contiguous range of positions) or anywhere.
        same = rng.random(m) < homophily
        cls = class_of_position[u]
        lo = np.where(same, class_start[cls], 0.0)
        hi = np.where(same, class_end[cls], total)
        v = np.minimum(np.searchsorted(cumulative, lo + rng.random(m) * (hi - lo), side="right"), n - 1)
        keep = u != v
        u, v = u[keep], v[keep]
        out.append(np.minimum(u, v) * n + np.maximum(u, v))
    return np.concatenate(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--nodes", type=int, default=232965)
    parser.add_argument("--edges", type=int, default=114615892, help="directed edges (both directions counted)")
    parser.add_argument("--features", type=int, default=602)
    parser.add_argument("--classes", type=int, default=41)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=1.0, help="Pareto tail index of the degree weights")
    parser.add_argument("--homophily", type=float, default=0.75,
                        help="share of pairs drawn within a class; same-class pairs repeat more often, so after "
                             "removing duplicates about 0.65 of the edges join a class (Reddit-sized defaults)")
    parser.add_argument("--signal", type=float, default=0.11,
                        help="class centroids' standard deviation per feature, against unit noise")
    parser.add_argument("--compressed", action="store_true", help="deflate the .npz files, as the real ones are")
    args = parser.parse_args()
    # One line each, as argparse says them (exit 2), not a traceback from numpy.
    for name, value, least in (("--nodes", args.nodes, 2), ("--edges", args.edges, 2), ("--features", args.features, 1),
                               ("--classes", args.classes, 2)):
        if value < least:
            parser.error(f"{name}: expected at least {least}, got {value}")
    if args.classes > args.nodes:
        parser.error(f"--classes: {args.classes} is more than the {args.nodes} nodes (--nodes)")
    if args.edges // 2 > args.nodes * (args.nodes - 1) // 2:
        parser.error(f"--edges: {args.edges} is more than the {args.nodes * (args.nodes - 1)} directed edges that "
                     f"{args.nodes} nodes have between them")
    if not (math.isfinite(args.alpha) and args.alpha > 0):
        parser.error(f"--alpha: expected a finite tail index above 0, got {args.alpha}")
    if not 0 <= args.homophily <= 1:
        parser.error(f"--homophily: expected a share from 0 to 1, got {args.homophily}")
    if not (math.isfinite(args.signal) and args.signal >= 0):
        parser.error(f"--signal: expected a finite standard deviation of 0 or more, got {args.signal}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"{args.out} is a file: name the directory to write the graph in")
    start = time.time()
    rng = np.random.default_rng(args.seed)
    n = args.nodes
    pairs = args.edges // 2

    labels = rng.choice(args.classes, n, p=class_sizes(rng, args.classes)).astype(np.int64)
    w = weights(rng, n, args.alpha)
    # Positions: the nodes sorted by class, so that "a node of class c" is a contiguous range of the
    # cumulative weights and one searchsorted draws both kinds of endpoint.
    order = np.argsort(labels, kind="stable")
    cumulative = np.cumsum(w[order])
    class_of_position = labels[order]
    bounds = np.searchsorted(class_of_position, np.arange(args.classes + 1))
    class_start = np.concatenate([[0.0], cumulative])[bounds[:-1]]
    class_end = np.concatenate([[0.0], cumulative])[bounds[1:]]

    keys = np.empty(0, dtype=np.int64)
    need = pairs
    for round_ in range(8):
        drawn = draw_pairs(rng, need, cumulative, class_start, class_end, class_of_position, args.homophily)
        before = len(keys)
        keys = np.unique(np.concatenate([keys, drawn]))
        del drawn
        log(start, f"round {round_}: drew {need:,} pairs, {len(keys):,} distinct (want {pairs:,})")
        if len(keys) >= pairs:
            break
        # The next round's draws are duplicates at least as often as this round's were.
        fresh = max((len(keys) - before) / need, 0.01)
        need = int((pairs - len(keys)) / fresh * 1.05) + 1000
    else:
        raise SystemExit(f"--edges {args.edges}: only {len(keys):,} distinct pairs after 8 rounds; "
                         "the graph is too dense for --nodes")
    if len(keys) > pairs:  # drop the surplus at random: cutting the sorted tail would bias the low ids
        keys = np.delete(keys, rng.choice(len(keys), len(keys) - pairs, replace=False))

    # Positions → node ids (order[position]); each pair in both directions, sorted by (row, col).
    a, b = np.divmod(keys, n)
    del keys
    a, b = order[a], order[b]
    label8 = labels.astype(np.int16)
    homophily = float((label8[a] == label8[b]).mean())
    directed = np.concatenate([a * n + b, b * n + a])
    del a, b
    directed.sort()
    row, col = np.divmod(directed, n)
    del directed
    row, col = row.astype(np.int32), col.astype(np.int32)
    log(start, f"graph: {len(row):,} directed edges")

    # Features: class centroid + unit Gaussian noise, drawn in float32 a block of nodes at a time.
    centroids = (rng.standard_normal((args.classes, args.features)) * args.signal).astype(np.float32)
    features = np.empty((n, args.features), dtype=np.float32)
    for begin in range(0, n, 65536):
        block = features[begin:begin + 65536]
        rng.standard_normal(block.shape, dtype=np.float32, out=block)
        block += centroids[labels[begin:begin + 65536]]
    node_types = np.full(n, 3, dtype=np.int64)
    counts = [round(n * s / sum(REDDIT_SPLITS)) for s in REDDIT_SPLITS[:2]]
    permutation = rng.permutation(n)
    node_types[permutation[:counts[0]]] = 1
    node_types[permutation[counts[0]:counts[0] + counts[1]]] = 2
    log(start, "features, labels and splits drawn; writing")

    os.makedirs(args.out, exist_ok=True)
    save = np.savez_compressed if args.compressed else np.savez
    save(os.path.join(args.out, "reddit_data.npz"), feature=features, label=labels, node_types=node_types,
         node_ids=np.arange(n, dtype=np.int32))
    del features
    adjacency = scipy.sparse.coo_matrix((np.ones(len(row), dtype=np.float32), (row, col)), shape=(n, n))
    scipy.sparse.save_npz(os.path.join(args.out, "reddit_graph.npz"), adjacency, compressed=args.compressed)
    degree = np.bincount(col, minlength=n)
    print(f"{args.out}: {n:,} nodes, {len(row):,} directed edges, degree max {degree.max():,} "
          f"mean {degree.mean():.1f} median {np.median(degree):.0f} min {degree.min()}, "
          f"{args.features} features, {args.classes} classes, edge homophily {homophily:.3f}, "
          f"{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
