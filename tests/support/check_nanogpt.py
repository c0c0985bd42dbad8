#!/usr/bin/python3
"""A self-check of scripts/nanogpt.py and tests/support/eval_gpt.py, standing in for a ddprun run:

    OMP_NUM_THREADS=1 /usr/bin/python3 tests/support/check_nanogpt.py

In a temporary directory: reads back shards of both llm.c formats (and rejects broken ones), checks that
windows are numbered shard after shard, trains the module a few steps, saves its state_dict as model.pt
beside a hand-written config.yaml, and checks that eval_gpt.py loads it strictly and prints the eval
loss that a direct computation gives (and fails, with a message, on a missing key). Prints "ok".
"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import nanogpt  # noqa: E402

T = 32


def write_shard(path, tokens, magic=20240520, version=1, dtype="<u2", count=None):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", magic, version, len(tokens) if count is None else count) + bytes(4 * 253))
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def eval_gpt(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "eval_gpt.py"), *args],
                          capture_output=True, text=True)


def main(work):
    text = np.frombuffer(b"In the beginning God created the heaven and the earth. " * 400, dtype=np.uint8)
    write_shard(f"{work}/t_val_000000.bin", text[:3201])                                  # 100 windows
    write_shard(f"{work}/t_val_000001.bin", text[5000:8030], 20240801, 7, "<u4")          # 94 windows
    write_shard(f"{work}/t_train_000000.bin", text)
    for name, args in (("count", dict(count=101)), ("version", dict(magic=20240801, dtype="<u4"))):
        write_shard(f"{work}/bad_{name}.bin", text[:100], **args)
        try:
            nanogpt.read_shard(f"{work}/bad_{name}.bin")
            sys.exit(f"check_nanogpt.py: bad_{name}.bin was read")
        except ValueError:
            pass
    np.save(f"{work}/t.npy", text[:3201].astype(np.int32))
    assert np.array_equal(nanogpt.read_shard(f"{work}/t.npy"), nanogpt.read_shard(f"{work}/t_val_000000.bin"))

    windows = nanogpt.Windows([f"{work}/t_val_000000.bin", f"{work}/t_val_000001.bin"], T)
    assert len(windows) == 100 + 94, len(windows)
    assert windows[99].tolist() == text[99 * T:100 * T + 1].tolist()
    assert windows[100].tolist() == text[5000:5000 + T + 1].tolist()

    torch.manual_seed(0)
    model = nanogpt.GPT(nanogpt.GPTConfig(block_size=T, vocab_size=256, n_layer=2, n_head=2, n_embd=32,
                                          dropout=0.1, bias=True))
    groups = nanogpt.decay_groups(model, 0.1)
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert len(groups[0]["params"]) + len(groups[1]["params"]) == len(list(model.parameters()))
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    train = nanogpt.Windows([f"{work}/t_train_000000.bin"], T)
    for step in range(3):
        _, loss = model(*train.batch(range(4 * step, 4 * step + 4)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    run = os.path.join(work, "run")
    os.makedirs(run)
    with open(os.path.join(run, "config.yaml"), "w") as f:
        f.write(f"# ddprun (check_nanogpt.py)\ndata:\n  path: {work}/t_train_*.bin\n  eval_path: {work}/t_val_*.bin\n"
                f"model:\n  name: gpt\n  block_size: {T}\n  vocab_size: 256\n  n_layer: 2\n  n_head: 2\n  n_embd: 32\n"
                f"  dropout: 0.1\n  bias: true\n")
    torch.save(model.state_dict(), os.path.join(run, "model.pt"))
    model.eval()
    with torch.no_grad():  # one window at a time: each window's mean cross-entropy, then their mean
        direct = np.mean([model(w[:-1].unsqueeze(0), w[1:].unsqueeze(0))[1].item()
                          for w in (windows[i] for i in range(len(windows)))], dtype=np.float64)
    for extra in ([], ["--batch", "7"]):
        out = eval_gpt(run, *extra)
        assert out.returncode == 0 and out.stdout.startswith("eval_loss ") and out.stdout.count("\n") == 1, out
        assert abs(float(out.stdout.split()[1]) - direct) < 1e-6, (out.stdout, direct)

    state = model.state_dict()
    state.pop("transformer.h.0.attn.bias" if not nanogpt.HAS_SDPA else "transformer.h.0.ln_1.bias")
    torch.save(state, os.path.join(run, "model.pt"))
    out = eval_gpt(run)
    assert out.returncode != 0 and "does not load strictly" in out.stderr and not out.stdout, out
    print("ok")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as work:
        main(work)
