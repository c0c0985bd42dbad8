#!/usr/bin/python3
"""Fixtures for the TorchScript and NPY/CSV tests, written by Python's own torch and numpy.

    /usr/bin/python3 tests/support/python_fixtures.py OUT_DIR

OUT_DIR gets NPY data (4 classes of 20 features; regression targets too), a CSV of the same, and
modules saved the ways users save them: scripted (plain MLP, with BatchNorm and dropout, regression),
and the ones ddprun must refuse or warn about (frozen, parameters without grad, traced, from a
"newer" PyTorch, returning a tuple, an int or a detached tensor, replacing a buffer with one of another shape).
"""

import os
import sys
import zipfile
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self, inputs=20, hidden=32, outputs=4):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.fc2 = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class BnMlp(nn.Module):
    def __init__(self, inputs=20, hidden=32, outputs=4):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


class IntParameter(nn.Module):
    """A count kept as a parameter (requires_grad=False), where a buffer belongs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)
        self.counts = nn.Parameter(torch.zeros(4, dtype=torch.int64), requires_grad=False)

    def forward(self, x):
        return self.fc(x)


class Tied(nn.Module):
    """Two layers sharing one weight, as weight tying does."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(20, 20)
        self.l2 = nn.Linear(20, 20)
        self.l2.weight = self.l1.weight
        self.out = nn.Linear(20, 4)

    def forward(self, x):
        return self.out(torch.relu(self.l2(torch.relu(self.l1(x)))))


class Unused(nn.Module):
    """An aux layer forward never uses (issue 22: stepped anyway, weight decay shrank it)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.aux = nn.Linear(20, 4)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Branchy(nn.Module):
    """A branch used only on batches whose first sample's first feature is positive."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.branch = nn.Linear(32, 4)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        y = self.fc2(h)
        if bool(x[0, 0] > 0):
            y = y + self.branch(h)
        return y


class RunningCenter(nn.Module):
    """Subtracts a running mean of its inputs, updated in place in training: a buffer a training
    forward reads, which each rank's own batches change (DDP shares rank 0's before each forward)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)
        self.register_buffer("center", torch.zeros(20))

    def forward(self, x):
        if self.training:
            self.center.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return self.fc2(torch.relu(self.fc1(x - self.center)))


class Reassign(nn.Module):
    """Replaces its buffer in forward, as hand-written running statistics do (issue 22, item 2)."""

    def __init__(self, keepdim: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)
        self.keepdim = keepdim
        self.register_buffer("running_mean", torch.zeros(32))

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.training:
            self.running_mean = 0.9 * self.running_mean + 0.1 * h.detach().mean(0, keepdim=self.keepdim)
        return self.fc2(h - self.running_mean)


class ViewCnn(nn.Module):
    """An ordinary CNN that flattens with .view, which a channels-last tensor cannot take."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 26 * 26, 10)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        return self.fc(h.view(h.size(0), -1))


class ReturnsInt(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)

    def forward(self, x) -> int:
        return int(self.fc(x).argmax())


class ReturnsLong(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)

    def forward(self, x):
        return self.fc(x).argmax(1)


class Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)

    def forward(self, x):
        return self.fc(x).detach()


class TinyLm(nn.Module):
    """A language model as train.task causal_lm takes one: int64 tokens [B, T] in, logits [B, T, V] out."""

    def __init__(self, vocab: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.head = nn.Linear(16, vocab)

    def forward(self, x):
        return self.head(torch.tanh(self.emb(x)))


class FlatLm(nn.Module):
    """Logits per sequence [B, V], not per position: not a model train.task causal_lm can train."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 8)
        self.head = nn.Linear(8, 256)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


class Attention(nn.Module):
    """Causal self-attention whose head count comes from its input (view(b, t, -1, head_dim)), as
    torchtitan's Llama writes it, so that a tensor-parallel rank can run it on a slice of the heads."""

    def __init__(self, dim: int, heads: int, fixed_heads: int = 0):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        # 0: the head count from the input; 1: from the constant (a slice runs as narrower heads:
        # another model); 2: head count and width from constants (a slice fails to view).
        self.fixed_heads = fixed_heads
        self.q = nn.Linear(dim, dim)
        # No bias for k: softmax ignores a shift of a row's scores, so its gradient is zero but for
        # rounding, on which Adam would take full steps (and layouts round apart).
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def split_heads(self, y, b: int, t: int):
        if self.fixed_heads == 1:
            return y.view(b, t, self.heads, -1).transpose(1, 2)
        if self.fixed_heads == 2:
            return y.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        return y.view(b, t, -1, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.split_heads(self.q(x), b, t)
        k = self.split_heads(self.k(x), b, t)
        v = self.split_heads(self.v(x), b, t)
        scores = (q @ k.transpose(-2, -1)) / (self.head_dim ** 0.5)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.o((weights @ v).transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fixed_heads: int = 0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, fixed_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    """A pre-norm transformer language model of the user's own, for dist.tensor_plan."""

    def __init__(self, vocab: int = 256, dim: int = 32, heads: int = 4, layers: int = 2, block: int = 32,
                 fixed_heads: int = 0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(block, dim) * 0.02)
        self.layers = nn.ModuleList([Block(dim, heads, fixed_heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        h = self.embed(x) + self.pos[: x.shape[1]]
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)

    def forward(self, x):
        return self.fc(x), x


class Stack(nn.Module):
    """A forward that chains its submodules: embed, a loop over an nn.ModuleList, head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(20, 32)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(3)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class TiedChain(nn.Module):
    """A chain whose first and third layers share a weight, beside a layer forward never calls."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(20, 20)
        self.act = nn.Tanh()
        self.l2 = nn.Linear(20, 20)
        self.l2.weight = self.l1.weight
        self.out = nn.Linear(20, 4)
        self.spare = nn.Linear(20, 4)

    def forward(self, x):
        x = self.l1(x)
        x = self.act(x)
        x = self.l2(x)
        return self.out(x)


class PairOut(nn.Module):
    def forward(self, x):
        return x, x


class First(nn.Module):
    def forward(self, pair: Tuple[torch.Tensor, torch.Tensor]):
        return pair[0]


def data(out):
    rng = np.random.default_rng(7)
    teacher = rng.normal(size=(20, 4))
    for split, n in (("train", 1024), ("test", 512)):
        x = rng.normal(size=(n, 20)).astype(np.float32)
        y = (x @ teacher).argmax(1).astype(np.int64)
        np.save(f"{out}/{split}_x.npy", x)
        np.save(f"{out}/{split}_y.npy", y)
        np.save(f"{out}/{split}_y32.npy", y.astype(np.int32))
        np.save(f"{out}/{split}_y_negative.npy", np.where(np.arange(n) == 5, -1, y).astype(np.int64))
        np.save(f"{out}/{split}_target.npy", (x @ teacher[:, 0]).astype(np.float32))
        np.save(f"{out}/{split}_x64.npy", x.astype(np.float64))
        header = ",".join([f"f{i}" for i in range(20)] + ["label"])
        np.savetxt(f"{out}/{split}.csv", np.column_stack([x, y]), delimiter=",", header=header, comments="",
                   fmt=["%.9g"] * 20 + ["%d"])
    images = rng.integers(0, 256, size=(64, 1, 28, 28), dtype=np.uint8)
    np.save(f"{out}/images_u8.npy", images)
    np.save(f"{out}/labels_u8.npy", rng.integers(0, 10, size=64).astype(np.int64))


def modules(out):
    torch.manual_seed(0)
    torch.jit.script(Mlp()).save(f"{out}/mlp.pt")
    torch.jit.script(BnMlp()).save(f"{out}/bn.pt")
    torch.jit.script(Mlp(outputs=1)).save(f"{out}/regressor.pt")
    torch.jit.freeze(torch.jit.script(Mlp()).eval()).save(f"{out}/frozen.pt")
    partly = Mlp()
    partly.fc1.weight.requires_grad_(False)
    torch.jit.script(partly).save(f"{out}/nograd.pt")
    torch.jit.trace(BnMlp(), torch.randn(8, 20), check_trace=False).save(f"{out}/traced.pt")
    torch.jit.script(Pair()).save(f"{out}/tuple.pt")
    torch.jit.script(Tied()).save(f"{out}/tied.pt")
    torch.jit.script(Unused()).save(f"{out}/unused.pt")
    torch.jit.script(Branchy()).save(f"{out}/branchy.pt")
    torch.jit.script(Reassign()).save(f"{out}/reassign.pt")
    torch.jit.script(RunningCenter()).save(f"{out}/running_center.pt")
    torch.jit.script(Reassign(keepdim=True)).save(f"{out}/reassign_shape.pt")
    torch.jit.script(ViewCnn()).save(f"{out}/view_cnn.pt")
    torch.jit.script(ReturnsInt()).save(f"{out}/returns_int.pt")
    torch.jit.script(Detached()).save(f"{out}/detached.pt")
    torch.jit.script(ReturnsLong()).save(f"{out}/returns_long.pt")
    torch.jit.script(nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                                   nn.Linear(32, 4))).save(f"{out}/sequential.pt")
    torch.jit.script(Stack()).save(f"{out}/stack.pt")
    torch.jit.script(TiedChain()).save(f"{out}/tied_chain.pt")
    torch.jit.script(nn.Sequential(nn.Linear(20, 4), PairOut(), First(), nn.Linear(4, 4))).save(f"{out}/tuple_chain.pt")
    torch.jit.script(TinyLm(256)).save(f"{out}/tiny_lm.pt")
    torch.jit.script(TinyLm(64)).save(f"{out}/tiny_lm_64.pt")
    torch.jit.script(FlatLm()).save(f"{out}/flat_lm.pt")
    torch.jit.script(Transformer()).save(f"{out}/transformer.pt")
    torch.jit.script(Transformer(fixed_heads=1)).save(f"{out}/transformer_fixed_heads.pt")
    torch.jit.script(Transformer(fixed_heads=2)).save(f"{out}/transformer_fixed_shape.pt")
    # Last: each module's weights come from the one seeded stream, so a module made before the
    # others would change all theirs (AdamW's comparison with Python is within 1e-6 at theirs).
    torch.jit.script(nn.Sequential(nn.Linear(20, 4)).half()).save(f"{out}/half.pt")
    torch.jit.script(nn.Sequential(nn.Linear(20, 4)).bfloat16()).save(f"{out}/bf16.pt")
    torch.jit.script(IntParameter()).save(f"{out}/int_parameter.pt")
    torch.jit.script(nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2),
                                   nn.Linear(32, 4))).save(f"{out}/dropout_chain.pt")
    # A newer PyTorch's operator: the same module calling an op this LibTorch lacks.
    with zipfile.ZipFile(f"{out}/mlp.pt") as src, zipfile.ZipFile(f"{out}/unknown_op.pt", "w") as dst:
        for item in src.infolist():
            payload = src.read(item.filename)
            if item.filename.endswith("modules/linear.py"):
                payload = payload.replace(b"torch.linear(", b"torch.linear_from_the_future(")
            dst.writestr(item, payload)
    # A newer PyTorch's archive: the same module with a file format version this LibTorch lacks.
    with zipfile.ZipFile(f"{out}/mlp.pt") as src, zipfile.ZipFile(f"{out}/newer.pt", "w") as dst:
        for item in src.infolist():
            payload = src.read(item.filename)
            if item.filename.endswith("/version"):
                payload = b"99\n"
            dst.writestr(item, payload)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    data(out)
    modules(out)
