#!/usr/bin/python3
"""A pure-torch GraphSAGE (PyG's layout: convs.N.lin_l with a bias, convs.N.lin_r without), loaded
strictly from ddprun's model.pt, evaluated with every neighbour on a graph directory.

    eval_graphsage.py MODEL.pt GRAPH_DIR SPLIT [mean|max|sum]   prints the split's accuracy
"""
import sys

import numpy as np
import torch


class SAGEConv(torch.nn.Module):
    def __init__(self, n_in, n_out, aggregation):
        super().__init__()
        self.lin_l = torch.nn.Linear(n_in, n_out, bias=True)
        self.lin_r = torch.nn.Linear(n_in, n_out, bias=False)
        self.aggregation = aggregation

    def forward(self, x, src, dst):
        messages = x[src]
        if self.aggregation == "max":
            out = torch.zeros(x.size(0), x.size(1)).scatter_reduce(0, dst.unsqueeze(1).expand_as(messages), messages,
                                                                    "amax", include_self=False)
        else:
            out = torch.zeros(x.size(0), x.size(1)).index_add_(0, dst, messages)
            if self.aggregation == "mean":
                count = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones(dst.size(0)))
                out = out / count.clamp(min=1).unsqueeze(1)
        return self.lin_l(out) + self.lin_r(x)


class SAGE(torch.nn.Module):
    def __init__(self, widths, aggregation):
        super().__init__()
        self.convs = torch.nn.ModuleList(SAGEConv(a, b, aggregation) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x, src, dst):
        for i, conv in enumerate(self.convs):
            x = conv(x, src, dst)
            if i + 1 < len(self.convs):
                x = x.relu()
        return x


def main(model_path, graph_dir, split, aggregation="mean"):
    state = torch.load(model_path, weights_only=True)
    layers = sorted({int(k.split(".")[1]) for k in state})
    widths = [state[f"convs.{layers[0]}.lin_l.weight"].shape[1]] + [state[f"convs.{i}.lin_l.weight"].shape[0] for i in layers]
    model = SAGE(widths, aggregation)
    model.load_state_dict(state, strict=True)  # PyG's names, nothing missing, nothing extra
    model.eval()
    x = torch.from_numpy(np.load(f"{graph_dir}/features.npy")).float()
    y = torch.from_numpy(np.load(f"{graph_dir}/labels.npy")).long()
    edges = torch.from_numpy(np.load(f"{graph_dir}/edge_index.npy")).long()
    nodes = torch.from_numpy(np.load(f"{graph_dir}/{split}_idx.npy")).long()
    with torch.no_grad():
        predicted = model(x, edges[0], edges[1]).argmax(1)
    print(f"{(predicted[nodes] == y[nodes]).float().mean().item():.6f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
