#!/usr/bin/python3
"""The k-nearest-neighbour graph of Fashion-MNIST, as a graph directory ddprun reads
(data.dataset: graph): 70,000 nodes (the 60,000 training images, then the 10,000 test images),
each with an edge from each of its k nearest neighbours in a PCA space of the pixels.

    /usr/bin/python3 scripts/make_fashion_knn.py OUT_DIR [--k 10] [--pca 50] [--val 10000] [--data IDX_DIR]

Node features are the PCA coordinates (float32 [70000, pca]), labels the classes. Splits: the last
--val training images are val_idx, the rest train_idx, the official test images test_idx.
Deterministic: the same command writes the same files. About half a minute on two cores.
"""
import argparse
import gzip
import os

import numpy as np
import torch

def idx(data, name):
    with gzip.open(os.path.join(data, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--pca", type=int, default=50)
    parser.add_argument("--val", type=int, default=10000)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST's IDX files")
    args = parser.parse_args()
    torch.manual_seed(0)
    pixels = np.concatenate([idx(args.data, "train-images-idx3-ubyte.gz"), idx(args.data, "t10k-images-idx3-ubyte.gz")])
    labels = np.concatenate([idx(args.data, "train-labels-idx1-ubyte.gz"),
                             idx(args.data, "t10k-labels-idx1-ubyte.gz")]).astype(np.int64)
    x = torch.from_numpy(pixels.reshape(len(pixels), -1).astype(np.float32) / 255.0)
    x = x - x.mean(0)
    # PCA by the covariance's eigenvectors (exact and deterministic, unlike randomised SVD).
    _, vectors = torch.linalg.eigh(x.T.double() @ x.double())
    z = (x.double() @ vectors[:, -args.pca:].flip(1)).float()
    z = z / z[:60000].std(0)  # unit variance per component, by the training images
    n = len(z)
    neighbours = torch.empty(n, args.k, dtype=torch.int64)
    norms = (z * z).sum(1)
    # One buffer for every block's distances: a fresh 0.5 GiB each time made the kernel zero pages for
    # as long as the arithmetic took, and minutes of it on a loaded machine.
    buffer = torch.empty(2048, n)
    for start in range(0, n, 2048):
        block = z[start:start + 2048]
        distances = torch.addmm(norms[None, :], block, z.T, alpha=-2, out=buffer[:len(block)])
        distances += norms[start:start + len(block), None]
        distances[torch.arange(len(block)), torch.arange(start, start + len(block))] = float("inf")  # not itself
        neighbours[start:start + 2048] = distances.topk(args.k, largest=False).indices
    dst = torch.arange(n).repeat_interleave(args.k)
    edge_index = torch.stack([neighbours.reshape(-1), dst])
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "features.npy"), z.numpy())
    np.save(os.path.join(args.out, "labels.npy"), labels)
    np.save(os.path.join(args.out, "edge_index.npy"), edge_index.numpy())
    train_end = 60000 - args.val
    np.save(os.path.join(args.out, "train_idx.npy"), np.arange(0, train_end, dtype=np.int64))
    np.save(os.path.join(args.out, "val_idx.npy"), np.arange(train_end, 60000, dtype=np.int64))
    np.save(os.path.join(args.out, "test_idx.npy"), np.arange(60000, n, dtype=np.int64))
    same = (torch.from_numpy(labels)[edge_index[0]] == torch.from_numpy(labels)[edge_index[1]]).float().mean()
    print(f"{args.out}: {n} nodes, {edge_index.shape[1]} edges, {args.pca} features, label homophily {same:.3f}")


if __name__ == "__main__":
    main()
