#!/usr/bin/python3
"""Your own model and data, the way a PyTorch user has them: a small ResNet scripted to TorchScript,
and Fashion-MNIST exported to NumPy arrays. ddprun then trains both with no Python at run time.

    /usr/bin/python3 examples/byo/make_byo.py examples/byo/data   # writes resnet.pt and *.npy there
    build/bin/ddprun --nproc-per-node 2 examples/byo/resnet.yaml

Needs Debian's python3-torch (torch 1.13) and the dataset-fashion-mnist package; downloads nothing.
"""

import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class Block(nn.Module):
    """A basic residual block: two 3x3 convs with BatchNorm, and a 1x1 projection when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """28x28 → 16 channels, then blocks at 28x28, 14x14 and 7x7, global pooling, dropout, classifier."""

    def __init__(self, num_classes=10, width=16, dropout=0.2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = Block(width, width, 1)
        self.layer2 = Block(width, 2 * width, 2)
        self.layer3 = Block(2 * width, 4 * width, 2)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(self.dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def find(stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(FASHION_MNIST, name)):
            return os.path.join(FASHION_MNIST, name)
    sys.exit(f"{FASHION_MNIST}: no {stem}[.gz]; install dataset-fashion-mnist")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(find(f"{prefix}-images-idx3-ubyte"))[:, None, :, :]  # uint8 [N, 1, 28, 28]
        labels = read_idx(find(f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        np.save(os.path.join(out, f"{split}_images.npy"), np.ascontiguousarray(images))
        np.save(os.path.join(out, f"{split}_labels.npy"), labels)
    torch.manual_seed(0)
    torch.jit.script(SmallResNet()).save(os.path.join(out, "resnet.pt"))
    print(f"wrote {out}/resnet.pt and {out}/{{train,test}}_{{images,labels}}.npy")


if __name__ == "__main__":
    main()
