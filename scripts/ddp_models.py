#!/usr/bin/env python3
"""The Python twins of ddprun's models (lib/ddp/model/*.cpp), with identical state_dict keys.

ddp-train writes model.pt with save_python_state_dict(); this module loads it with plain PyTorch:

    python3 scripts/ddp_models.py keys NAME [--num-classes N] [--hidden 256,128] [--no-batchnorm] [--no-relu]
    python3 scripts/ddp_models.py eval MODEL_PT NAME [model options] [--data DIR] [--mean M] [--std S]
    python3 scripts/ddp_models.py script OUT_PT NAME [model options]

`keys` prints "key shape" per state_dict entry; `eval` prints "accuracy 0.8912" on the Fashion-MNIST
(or any MNIST-format) t10k files in DIR; `script` saves torch.jit.script(model), for model.name: torchscript. Needs only torch and numpy: no torchvision, no downloads.
"""

import argparse
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

INPUT_SIZE = 1 * 28 * 28  # MNIST-format images, as kInputSize in model_registry.h


class ConvNet(nn.Module):
    """The DDP tutorials' ConvNet (C++: convnet.cpp)."""

    def __init__(self, num_classes=10, batchnorm=True, relu=True, pool_first=False):
        super().__init__()

        def block(cin, cout):
            layers = [nn.Conv2d(cin, cout, kernel_size=5, stride=1, padding=2)]
            if batchnorm:
                layers.append(nn.BatchNorm2d(cout))
            # pool_first: ReLU after max-pooling, as convnet.cpp computes it (the same values, a
            # quarter of the ReLUs; state_dict keys do not move, since neither layer has parameters).
            if relu and not pool_first:
                layers.append(nn.ReLU())
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            if relu and pool_first:
                layers.append(nn.ReLU())
            return nn.Sequential(*layers)

        self.layer1 = block(1, 16)
        self.layer2 = block(16, 32)
        self.fc = nn.Linear(7 * 7 * 32, num_classes)

    def forward(self, x):
        return self.fc(self.layer2(self.layer1(x)).reshape(x.size(0), -1))


class Linear3(nn.Module):
    """The DDP tutorials' SimpleModel (C++: linear3.cpp)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(INPUT_SIZE, 10)
        self.fc2 = nn.Linear(10, 10)
        self.fc3 = nn.Linear(10, num_classes)

    def forward(self, x):
        x = x.view(-1, INPUT_SIZE)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class MLP(nn.Module):
    """Flatten, Linear+ReLU per hidden width, Linear to the classes (C++: mlp.cpp).

    The flatten stays outside `layers` so the Linear weights are layers.0, layers.2, ...
    """

    def __init__(self, num_classes=10, hidden=(256, 128)):
        super().__init__()
        layers, width = [], INPUT_SIZE
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(torch.flatten(x, 1))


def build(name, num_classes=10, batchnorm=True, relu=True, hidden=(256, 128), pool_first=False):
    """The module ddprun's `model.name: NAME` builds, with the same parameters."""
    if name == "convnet":
        return ConvNet(num_classes=num_classes, batchnorm=batchnorm, relu=relu, pool_first=pool_first)
    if name == "linear3":
        return Linear3(num_classes=num_classes)
    if name == "mlp":
        return MLP(num_classes=num_classes, hidden=hidden)
    raise ValueError(f'unknown model "{name}"; available: convnet, linear3, mlp')


def read_idx(path):
    """An IDX file (optionally gzipped) as a numpy array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def find_file(data_dir, stem):
    for candidate in (stem + ".gz", stem):
        path = os.path.join(data_dir, candidate)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{data_dir}: no {stem}[.gz]")


def evaluate(model, data_dir, mean, std, batch_size=1000):
    """Top-1 accuracy on DIR's t10k images, normalised as the trainer does."""
    images = read_idx(find_file(data_dir, "t10k-images-idx3-ubyte"))
    labels = read_idx(find_file(data_dir, "t10k-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - mean) / std
    y = torch.from_numpy(labels.astype(np.int64))
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            logits = model(x[start:start + batch_size])
            correct += (logits.argmax(dim=1) == y[start:start + batch_size]).sum().item()
    return correct / len(y)


def parse_hidden(text):
    return tuple(int(w) for w in text.split(",") if w.strip())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(p):
        p.add_argument("name", choices=["convnet", "linear3", "mlp"])
        p.add_argument("--num-classes", type=int, default=10)
        p.add_argument("--hidden", type=parse_hidden, default=(256, 128), help="mlp widths, e.g. 256,128")
        p.add_argument("--no-batchnorm", dest="batchnorm", action="store_false")
        p.add_argument("--no-relu", dest="relu", action="store_false")

    keys = commands.add_parser("keys", help="print the state_dict's keys and shapes")
    model_options(keys)
    ev = commands.add_parser("eval", help="test-set accuracy of a saved model.pt")
    ev.add_argument("model_pt")
    model_options(ev)
    ev.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ev.add_argument("--mean", type=float, default=0.2860)
    ev.add_argument("--std", type=float, default=0.3530)
    sc = commands.add_parser("script", help="save the freshly initialised model as TorchScript")
    sc.add_argument("out_pt")
    model_options(sc)
    sc.add_argument("--seed", type=int, default=0)
    sc.add_argument("--pool-first", action="store_true", help="convnet: ReLU after pooling, as convnet.cpp")
    args = parser.parse_args(argv)
    if args.command == "script":
        torch.manual_seed(args.seed)

    model = build(args.name, num_classes=args.num_classes, batchnorm=args.batchnorm, relu=args.relu,
                  hidden=args.hidden, pool_first=getattr(args, "pool_first", False))
    if args.command == "script":
        torch.jit.script(model).save(args.out_pt)
        return 0
    if args.command == "keys":
        for key, tensor in model.state_dict().items():
            print(key, list(tensor.shape))
        return 0
    model.load_state_dict(torch.load(args.model_pt, map_location="cpu", weights_only=True), strict=True)
    print(f"accuracy {evaluate(model, args.data, args.mean, args.std):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
