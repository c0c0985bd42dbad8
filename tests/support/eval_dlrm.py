#!/usr/bin/python3
"""A pure-torch DLRM, written from the paper's description (arXiv 1906.00091, the dot interaction),
loaded strictly from ddprun's model.pt and evaluated on a click log in Criteo's layout, read here
with DLRM's preprocessing: counts as log(1 + max(x, 0)), empty fields 0, hashes modulo the table.

    eval_dlrm.py MODEL.pt LOG.tsv   prints the mean binary cross-entropy and the exact AUC
"""
import sys

import numpy as np
import torch

DENSE, TABLES = 13, 26


def read_log(path):
    labels, dense, hashes = [], [], []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\r\n").split("\t")
            assert len(fields) == 1 + DENSE + TABLES, line
            labels.append(float(fields[0]))
            dense.append([np.log1p(max(int(x), 0)) if x else 0.0 for x in fields[1:1 + DENSE]])
            hashes.append([int(x, 16) if x else 0 for x in fields[1 + DENSE:]])
    return (torch.tensor(dense, dtype=torch.float32), torch.tensor(hashes, dtype=torch.int64),
            torch.tensor(labels, dtype=torch.float32))


class Dlrm(torch.nn.Module):
    def __init__(self, state):
        super().__init__()
        rows = [state[f"embeddings.{f}.weight"].shape[0] for f in range(TABLES)]
        dim = state["embeddings.0.weight"].shape[1]
        self.rows = torch.tensor(rows)
        self.embeddings = torch.nn.ModuleList(torch.nn.Embedding(r, dim) for r in rows)

        def mlp(prefix):
            shapes = []
            while f"{prefix}.{len(shapes)}.weight" in state:
                shapes.append(state[f"{prefix}.{len(shapes)}.weight"].shape)
            return torch.nn.ModuleList(torch.nn.Linear(s[1], s[0]) for s in shapes)

        self.bottom, self.top = mlp("bottom"), mlp("top")

    def forward(self, dense, hashes):
        x = dense
        for layer in self.bottom:
            x = torch.relu(layer(x))
        ids = hashes % self.rows
        vectors = [x] + [table(ids[:, f]) for f, table in enumerate(self.embeddings)]
        z = torch.stack(vectors, dim=1)
        products = z @ z.transpose(1, 2)
        i, j = torch.tril_indices(TABLES + 1, TABLES + 1, offset=-1)  # below the diagonal, row by row
        y = torch.cat([x, products[:, i, j]], dim=1)
        for k, layer in enumerate(self.top):
            y = layer(y)
            if k + 1 < len(self.top):
                y = torch.relu(y)
        return y.squeeze(1)


def exact_auc(scores, labels):
    """The share of (click, no click) pairs ranked rightly, ties a half: the Mann-Whitney statistic."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):  # tied scores share their mean rank
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    positives = labels == 1
    p, n = positives.sum(), (~positives).sum()
    return (ranks[positives].sum() - p * (p + 1) / 2) / (p * n)


def main():
    state = torch.load(sys.argv[1])
    model = Dlrm(state)
    model.load_state_dict(state, strict=True)
    dense, hashes, labels = read_log(sys.argv[2])
    with torch.no_grad():
        logits = model(dense, hashes)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
    print(f"{loss:.6f} {exact_auc(logits.double().numpy(), labels.numpy()):.6f}")


if __name__ == "__main__":
    main()
