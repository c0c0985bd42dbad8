#!/usr/bin/python3
"""The political blogs of Adamic & Glance (2005), as a graph directory ddprun reads (data.dataset:
graph): the largest connected component, 1,222 blogs and their 16,714 links, each blog labelled
liberal (0) or conservative (1). Read from graph-tool's collection in Debian's python3-graph-tool
package, without installing graph-tool: the .deb is fetched with apt-get download (or given by
--deb), only polblogs.gt.gz is taken from its data tarball, and graph-tool's binary "gt" format is
parsed here.

    /usr/bin/python3 scripts/make_polblogs.py OUT_DIR [--deb PATH]

Labels are the vertex property "value"; the others ("label": the URL, "source": the blog directory
that gave the leaning, "pos": a drawing's coordinates) are not used, since the directory leaks the
label and the drawing is made from the links. The 19,090 links are made undirected (both directions
of each), without self loops or duplicates. Only the largest connected component is kept, the usual
choice on this graph: the 268 blogs outside it (266 without a link to another blog, and one pair)
give a graph model nothing to go on. Features: a one-hot identity per node, so each blog learns its
own embedding (this graph has no content features; the identity is what GraphSAGE needs for ~95%,
degrees alone give ~65%), then log(1 + in-degree) and log(1 + out-degree) of the directed links:
float32 [1222, 1224]. Splits: 60/20/20 train/val/test, stratified by class, seed 0. Deterministic:
the same package writes the same files. A few seconds.
"""
import argparse
import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

MEMBER = "graph_tool/collection/polblogs.gt.gz"  # path in the package, under .../dist-packages/
MAGIC = "\u26fe gt".encode()  # "⛾ gt"
# gt value types, by their code: bool, int16, int32, int64, double, long double (16 bytes as
# written on x86-64), then vectors of each (7..12), string (6) and vector<string> (13).
SCALARS = {0: "u1", 1: "i2", 2: "i4", 3: "i8", 4: "f8", 5: "V16"}


def fail(message):
    sys.exit(f"make_polblogs.py: {message}")


def download_deb(folder):
    try:
        result = subprocess.run(["apt-get", "download", "python3-graph-tool"], cwd=folder,
                                capture_output=True, text=True)
        error = result.stderr.strip() if result.returncode != 0 else ""
    except OSError as e:  # no apt-get: not Debian or Ubuntu
        error = str(e)
    debs = [name for name in os.listdir(folder) if name.endswith(".deb")]
    if error or not debs:
        fail("apt-get download python3-graph-tool failed (no network, no apt-get update yet, or not Debian?); "
             f"give a downloaded .deb with --deb.\n{error}")
    return os.path.join(folder, debs[0])


def data_tarball(deb):
    """The data member of a .deb (an ar archive), as bytes or, where Python cannot decompress it,
    None: zstd (newer Debian and Ubuntu) is beyond this Python's tarfile, dpkg-deb unpacks it."""
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            fail(f"{deb}: not a .deb (no ar header)")
        while header := f.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            if name.startswith("data.tar"):
                return f.read(size) if name.endswith((".tar", ".xz", ".gz", ".bz2")) else None
            f.seek(size + size % 2, os.SEEK_CUR)  # members are 2-byte aligned
    fail(f"{deb}: no data.tar member")


def find_member(tar):
    for info in tar:
        if info.name.endswith(MEMBER):
            return gzip.decompress(tar.extractfile(info).read())
    return None


def read_member(deb):
    data = data_tarball(deb)
    if data is not None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            member = find_member(tar)
    else:
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE) as unpack:
            try:
                with tarfile.open(fileobj=unpack.stdout, mode="r|") as tar:  # a stream: ~350 MB unpacked
                    member = find_member(tar)
            except tarfile.TarError as e:
                fail(f"{deb}: dpkg-deb --fsys-tarfile gave no readable tarball ({e})")
            unpack.kill()  # found or not, the rest of the tarball is not needed
    if member is None:
        fail(f"{deb}: no {MEMBER} (is it python3-graph-tool?)")
    return member


class Reader:
    """Little cursor over gt bytes, in the file's byte order, that names the file when it runs short."""

    def __init__(self, data, order="<"):
        self.data, self.at, self.order = data, 0, order

    def take(self, n):
        if self.at + n > len(self.data):
            fail(f"polblogs.gt: truncated at byte {self.at} (wanted {n} more of {len(self.data)})")
        self.at += n
        return self.data[self.at - n:self.at]

    def array(self, dtype, count):
        typed = dtype if dtype[0] == "V" else self.order + dtype  # raw bytes (long double) have no order
        return np.frombuffer(self.take(np.dtype(dtype).itemsize * count), dtype=typed)

    def u64(self):
        return int(self.array("u8", 1)[0])

    def string(self):
        return self.take(self.u64()).decode("utf-8", errors="replace")


def parse_gt(data):
    """graph-tool's binary format (graph-tool.skewed.de/static/doc/gt_format.html): magic, version,
    byte order, comment, directed flag, N, each vertex's out-neighbours, then the property maps.
    Returns (N, directed, src, dst, {(key type, name): values})."""
    if data[:6] != MAGIC:
        fail(f"polblogs.gt: not graph-tool's gt format (starts {data[:8]!r})")
    if data[6] != 1:
        fail(f"polblogs.gt: gt version {data[6]}, this reads version 1")
    r = Reader(data, ">" if data[7] else "<")
    r.take(8)
    r.string()  # the comment: a human-readable summary
    directed, n = r.take(1)[0] != 0, r.u64()
    width = "u1" if n < 2**8 else "u2" if n < 2**16 else "u4" if n < 2**32 else "u8"
    src, dst = [], []
    for v in range(n):
        neighbours = r.array(width, r.u64())
        src.append(np.full(len(neighbours), v, dtype=np.int64))
        dst.append(neighbours.astype(np.int64))
    src, dst = np.concatenate(src), np.concatenate(dst)
    if len(dst) and dst.max() >= n:
        fail(f"polblogs.gt: neighbour id {dst.max()} out of range for {n} vertices")
    props = {}
    for _ in range(r.u64()):
        key, name, value = r.take(1)[0], r.string(), r.take(1)[0]
        if key > 2 or value > 13:
            fail(f"polblogs.gt: property {name!r} has key type {key} / value type {value}, not gt's")
        count = (1, n, len(src))[key]  # graph, vertex, edge
        if value in SCALARS:
            values = r.array(SCALARS[value], count)
        elif 7 <= value <= 12:
            values = [r.array(SCALARS[value - 7], r.u64()) for _ in range(count)]
        elif value == 6:
            values = [r.string() for _ in range(count)]
        else:
            values = [[r.string() for _ in range(r.u64())] for _ in range(count)]
        props[("graph", "vertex", "edge")[key], name] = values
    if r.at != len(data):
        fail(f"polblogs.gt: {len(data) - r.at} bytes left over after the property maps")
    return n, directed, src, dst, props


def largest_component(n, src, dst):
    """Labels of the undirected components by union-find; returns the sorted nodes of the largest."""
    parent = np.arange(n)

    def root(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in zip(src, dst):
        parent[root(a)] = root(b)
    roots = np.array([root(v) for v in range(n)])
    return np.flatnonzero(roots == np.bincount(roots).argmax())


def stratified_split(labels, fractions, seed):
    rng = np.random.default_rng(seed)
    parts = [[] for _ in fractions]
    for c in np.unique(labels):
        nodes = rng.permutation(np.flatnonzero(labels == c))
        ends = np.round(np.cumsum(fractions) * len(nodes)).astype(int)
        for part, chunk in zip(parts, np.split(nodes, ends[:-1])):
            part.append(chunk)
    return [np.sort(np.concatenate(part)).astype(np.int64) for part in parts]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--deb", help="python3-graph-tool .deb; default: apt-get download it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        data = read_member(args.deb or download_deb(folder))
    n, directed, src, dst, props = parse_gt(data)
    if not directed or n != 1490 or len(src) != 19090:
        fail(f"polblogs.gt: expected the directed 1490-vertex, 19090-edge graph, got "
             f"{'directed' if directed else 'undirected'} {n} vertices, {len(src)} edges")
    if ("vertex", "value") not in props:
        fail(f"polblogs.gt: no vertex property 'value' (the leaning); has {sorted(props)}")
    value = np.asarray(props["vertex", "value"], dtype=np.float64)
    if not np.isin(value, (0, 1)).all():
        fail("polblogs.gt: vertex property 'value' is not all 0 or 1")
    # Directed simple graph: no self loops, each link once.
    links = np.unique(np.stack([src, dst])[:, src != dst], axis=1)
    in_degree, out_degree = np.bincount(links[1], minlength=n), np.bincount(links[0], minlength=n)
    keep = largest_component(n, links[0], links[1])
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[keep] = np.arange(len(keep))
    both = new_id[np.concatenate([links, links[::-1]], axis=1)]
    # A component is closed: both ends kept or neither. unique(axis=1) answers in Fortran order.
    edge_index = np.ascontiguousarray(np.unique(both[:, both[0] >= 0], axis=1))
    m = len(keep)
    features = np.concatenate([np.eye(m, dtype=np.float32),
                               np.log1p(np.stack([in_degree[keep], out_degree[keep]], 1)).astype(np.float32)], 1)
    labels = value[keep].astype(np.int64)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "features.npy"), features)
    np.save(os.path.join(args.out, "labels.npy"), labels)
    np.save(os.path.join(args.out, "edge_index.npy"), edge_index)
    for name, nodes in zip(("train", "val", "test"), stratified_split(labels, (0.6, 0.2, 0.2), seed=0)):
        np.save(os.path.join(args.out, f"{name}_idx.npy"), nodes)
    same = (labels[edge_index[0]] == labels[edge_index[1]]).mean()
    print(f"{args.out}: {m} nodes (largest component of {n}), {edge_index.shape[1]} edges (both directions), "
          f"{features.shape[1]} features, 2 classes, label homophily {same:.3f}")


if __name__ == "__main__":
    main()
