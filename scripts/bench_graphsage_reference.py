#!/usr/bin/python3
"""The pure-PyTorch reference of ddprun's GraphSAGE training, for the bench rows: what a Python user
writes without PyG (not installable here), the way PyG's multi-process GraphSAGE example trains.
Same sampling semantics and model as ddprun; DDP over Gloo, one thread per rank. Run under torchrun:

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \\
        scripts/bench_graphsage_reference.py --data DIR --fanouts 25 10 --batch-size 1024 --hidden 256 \\
        --steps 20 [--warmup 3] [--split distributed|chunk] [--device cpu|cuda] [--precision fp32|bf16] [--json OUT]

DIR: PyG's Reddit raw files (reddit_data.npz, reddit_graph.npz; scripts/make_reddit_like.py writes
them) or a ddprun graph directory (edge_index.npy, features.npy, labels.npy, train_idx.npy or
train_mask.npy). Every rank loads its own copy of the graph and builds its own CSR.

(Debian's torch 1.13 torchrun fails at start under Python 3.11 unless --redirects and --tee are given
a value other than 0; these keep stdout on the console, each line prefixed with the rank.)

Rank 0 prints one line `bench-result {json}` (and writes the JSON to --json): world; seed_nodes_per_s
and sampled_edges_per_s (all ranks together, over the timed steps after --warmup); first_step_s
(process start to the end of the first optimizer step, the slowest rank); peak_rss_mib (per rank);
sample_s_per_step (sampling and gathering features) and step_s (the whole step), means over ranks.
"""
import time

START = time.time()  # before importing torch: time to first step counts the imports, as ddprun's counts its start

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def load_graph(path):
    """(indptr, indices, features, labels, train_idx): in-neighbours in CSR by destination."""
    if os.path.exists(os.path.join(path, "reddit_data.npz")):
        import scipy.sparse
        # As torch_geometric.datasets.Reddit.process: edge_index = [row, col], messages row → col.
        data = np.load(os.path.join(path, "reddit_data.npz"))
        features = torch.from_numpy(data["feature"]).float()
        labels = torch.from_numpy(data["label"]).long()
        train_idx = (torch.from_numpy(data["node_types"]) == 1).nonzero().view(-1)
        adjacency = scipy.sparse.load_npz(os.path.join(path, "reddit_graph.npz"))
        src, dst = torch.from_numpy(adjacency.row).long(), torch.from_numpy(adjacency.col).long()
        del adjacency
    else:
        features = torch.from_numpy(np.load(os.path.join(path, "features.npy"))).float()
        labels = torch.from_numpy(np.load(os.path.join(path, "labels.npy"))).long()
        if os.path.exists(os.path.join(path, "train_idx.npy")):
            train_idx = torch.from_numpy(np.load(os.path.join(path, "train_idx.npy"))).long()
        else:
            train_idx = torch.from_numpy(np.load(os.path.join(path, "train_mask.npy"))).bool().nonzero().view(-1)
        edge_index = torch.from_numpy(np.load(os.path.join(path, "edge_index.npy"))).long()
        src, dst = edge_index[0], edge_index[1]
    n = features.size(0)
    # CSR by destination: a stable sort keeps each node's in-edges in file order, as ddprun's build_csr.
    order = torch.sort(dst, stable=True).indices
    indices = src[order]
    del order
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return indptr, indices, features, labels, train_idx


def floyd(degree, k, generator):
    """A uniform k-subset of [0, degree) per row (every degree > k), sorted: Floyd's algorithm, one
    vectorised draw per element of the subset, so its cost is rows * k^2, not the sum of the degrees."""
    rows = degree.numel()
    chosen = torch.empty(rows, k, dtype=torch.long)
    for i in range(k):
        j = degree - k + i
        t = torch.minimum((torch.rand(rows, dtype=torch.float64, generator=generator) * (j + 1)).long(), j)
        if i:
            t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(1), j, t)
        chosen[:, i] = t
    return chosen.sort(1).values


class NeighbourSampler:
    """ddprun's sampling: per hop, each destination node draws min(fanout, degree) distinct
    in-neighbours (-1: all); DGL-style blocks whose destinations are a prefix of their sources, new
    nodes appended in order of first appearance."""

    def __init__(self, indptr, indices, fanouts, seed):
        self.indptr, self.indices, self.fanouts = indptr, indices, fanouts
        self.generator = torch.Generator().manual_seed(seed)
        self.local = torch.full((indptr.numel() - 1,), -1, dtype=torch.long)  # global id → local id, -1: absent

    def neighbours(self, nodes, fanout):
        """(sources as global ids, destinations as local ids), grouped by destination in CSR order."""
        start = self.indptr[nodes]
        degree = self.indptr[nodes + 1] - start
        count = degree if fanout < 0 else degree.clamp(max=fanout)
        offset = count.cumsum(0) - count
        dst = torch.repeat_interleave(torch.arange(nodes.numel()), count)
        position = torch.arange(dst.numel()) - offset[dst]  # all neighbours: the i-th slot takes the i-th
        sampled = (count < degree).nonzero().view(-1)
        if sampled.numel():
            slots = offset[sampled].unsqueeze(1) + torch.arange(fanout)
            position[slots.view(-1)] = floyd(degree[sampled], fanout, self.generator).view(-1)
        return self.indices[start[dst] + position], dst

    def sample(self, seeds):
        """(input nodes as global ids, seeds first; blocks as (src, dst, num_dst), first layer first)."""
        nodes = seeds
        self.local[seeds] = torch.arange(seeds.numel())
        hops = []
        for fanout in self.fanouts:
            num_dst = nodes.numel()
            src, dst = self.neighbours(nodes, fanout)
            new = src[self.local[src] < 0]
            if new.numel():
                # The distinct new ids in order of first appearance: a stable sort puts each id's
                # first occurrence first in its run.
                ids, at = torch.sort(new, stable=True)
                first = torch.ones_like(ids, dtype=torch.bool)
                first[1:] = ids[1:] != ids[:-1]
                unique = new[at[first].sort().values]
                self.local[unique] = torch.arange(nodes.numel(), nodes.numel() + unique.numel())
                nodes = torch.cat([nodes, unique])
            hops.append((self.local[src], dst, num_dst))
        self.local[nodes] = -1
        return nodes, hops[::-1]  # the last hop feeds the first layer


class SAGEConv(torch.nn.Module):
    """PyG's SAGEConv with mean aggregation: lin_l (bias) on the neighbours' mean, lin_r on the node."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.lin_l = torch.nn.Linear(n_in, n_out, bias=True)
        self.lin_r = torch.nn.Linear(n_in, n_out, bias=False)

    def forward(self, x, src, dst, num_dst):
        total = x.new_zeros(num_dst, x.size(1)).index_add_(0, dst, x.index_select(0, src))
        count = x.new_zeros(num_dst).index_add_(0, dst, x.new_ones(dst.numel()))
        return self.lin_l(total / count.clamp(min=1).unsqueeze(1)) + self.lin_r(x[:num_dst])


class GraphSAGE(torch.nn.Module):
    def __init__(self, widths, dropout):
        super().__init__()
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = dropout

    def forward(self, x, blocks):
        for i, (conv, (src, dst, num_dst)) in enumerate(zip(self.convs, blocks)):
            x = conv(x, src, dst, num_dst)
            if i + 1 < len(self.convs):
                x = F.dropout(x.relu(), self.dropout, self.training)
        return x


def seed_batches(train_idx, args, rank, world):
    """This rank's batches of seeds, epoch after epoch."""
    if args.split == "distributed":
        sampler = DistributedSampler(train_idx, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    else:  # PyG's multi-GPU example: a fixed chunk per rank, shuffled each epoch
        mine = train_idx.split(train_idx.size(0) // world)[rank]
    epoch = 0
    while True:
        if args.split == "distributed":
            sampler.set_epoch(epoch)
            seeds = train_idx[torch.tensor(list(sampler))]
        else:
            seeds = mine[torch.randperm(mine.numel(), generator=torch.Generator().manual_seed(args.seed + epoch))]
        yield from seeds.split(args.batch_size)
        epoch += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[25, 10], help="from the seeds outward; -1: all")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256])
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps, after --warmup")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--split", choices=["distributed", "chunk"], default="distributed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: the model on cuda:LOCAL_RANK; sampling and the feature gather stay on the CPU")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: forward and loss under torch.autocast, as ddprun's train.precision")
    parser.add_argument("--json")
    args = parser.parse_args()
    if len(args.fanouts) != len(args.hidden) + 1:
        parser.error(f"--fanouts: one per layer, {len(args.hidden) + 1} with --hidden {args.hidden}")
    torch.set_num_threads(1)  # as ddprun's bench: OMP_NUM_THREADS=1 per rank
    if args.device == "cuda":
        gpus, local = torch.cuda.device_count(), int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local % gpus)
        torch.cuda.set_device(device)
        # NCCL wants a GPU per rank; ranks sharing one sum through Gloo, as ddprun's dist.backend auto.
        dist.init_process_group("nccl" if int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= gpus else "gloo")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    indptr, indices, features, labels, train_idx = load_graph(args.data)
    if rank == 0:
        print(f"loaded {features.size(0):,} nodes, {indices.numel():,} edges, {train_idx.numel():,} training nodes "
              f"in {time.time() - START:.1f} s", flush=True)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    widths = [features.size(1)] + args.hidden + [int(labels.max()) + 1]
    model = GraphSAGE(widths, args.dropout).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    sampler = NeighbourSampler(indptr, indices, args.fanouts, seed=args.seed * 1000 + rank)
    batches = seed_batches(train_idx, args, rank, world)

    seeds_done = edges_done = 0
    sample_s = step_s = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            timed_start = time.time()
        begin = time.time()
        seeds = next(batches)
        nodes, blocks = sampler.sample(seeds)
        x, y = features.index_select(0, nodes), labels.index_select(0, seeds)
        sampled = time.time()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        blocks = [(src.to(device), dst.to(device), num_dst) for src, dst, num_dst in blocks]
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = F.cross_entropy(model(x, blocks), y)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        end = time.time()
        if step == 0:
            first_step_s = end - START
        if step >= args.warmup:
            seeds_done += seeds.numel()
            edges_done += sum(src.numel() for src, _, _ in blocks)
            sample_s += sampled - begin
            step_s += end - begin
    dist.barrier()
    elapsed = time.time() - timed_start

    mine = {"elapsed": elapsed, "seeds": seeds_done, "edges": edges_done, "first_step_s": first_step_s,
            "sample_s": sample_s / args.steps, "step_s": step_s / args.steps, "loss": loss.item(),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        wall = max(r["elapsed"] for r in ranks)
        result = {"world": world, "seed_nodes_per_s": sum(r["seeds"] for r in ranks) / wall,
                  "sampled_edges_per_s": sum(r["edges"] for r in ranks) / wall,
                  "first_step_s": max(r["first_step_s"] for r in ranks),
                  "peak_rss_mib": [round(r["peak_rss_mib"], 1) for r in ranks],
                  "sample_s_per_step": sum(r["sample_s"] for r in ranks) / world,
                  "step_s": sum(r["step_s"] for r in ranks) / world,
                  "steps": args.steps, "batch_size": args.batch_size, "fanouts": args.fanouts,
                  "split": args.split, "device": args.device, "precision": args.precision,
                  "loss": ranks[0]["loss"]}
        line = json.dumps(result)
        print(f"bench-result {line}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    del model  # DDP's reducer before its process group: the other order hangs at exit on the full graph
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
