"""A tiny Llama written from the architecture's description alone, in plain PyTorch: RMSNorm in float32,
rotary positions over the two halves of each head with Llama 3.1's llama3 frequency scaling,
grouped-query attention (each key/value head repeated for its query heads), causal softmax in float32,
a SwiGLU MLP, an untied head. It draws random weights, writes them and a batch of token ids with its
logits as safetensors files by its own writer (the format's description: a little-endian u64 header
length, a JSON header, the raw bytes), for tests/model/test_llama.cpp to compare ddprun against.

usage: llama_reference.py OUT_DIR
"""
import json
import math
import struct
import sys

import torch

V, D, H, KV, L, F, T, B = 97, 48, 6, 2, 2, 128, 80, 2
HD = D // H
THETA, FACTOR, LOW, HIGH, ORIGINAL, EPS = 100.0, 8.0, 1.0, 4.0, 32, 1e-5


def save(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        data = tensor.contiguous().numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[tensor.dtype]
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rms_norm(x, weight):
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rotary_tables():
    inv = 1.0 / THETA ** (torch.arange(0, HD, 2).float() / HD)
    wavelength = 2 * math.pi / inv
    low_freq = wavelength > ORIGINAL / LOW  # slow rotations: slowed down by FACTOR
    scaled = torch.where(low_freq, inv / FACTOR, inv)
    smooth = (ORIGINAL / wavelength - LOW) / (HIGH - LOW)
    medium = (wavelength >= ORIGINAL / HIGH) & (wavelength <= ORIGINAL / LOW)  # in between: blended
    inv = torch.where(medium, (1 - smooth) * scaled / FACTOR + smooth * scaled, scaled)
    assert medium.any() and low_freq.any() and not low_freq.all(), "the test should exercise every band"
    angles = torch.arange(T).float()[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    half = HD // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def forward(w, ids):
    cos, sin = rotary_tables()
    above = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, HD).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV, HD).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV, HD).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(HD)).masked_fill(above, float("-inf"))
        attended = torch.softmax(scores.float(), -1) @ v
        x = x + attended.transpose(1, 2).reshape(B, T, H * HD) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    w = {"model.embed_tokens.weight": torch.randn(V, D)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(D)
        w[p + "self_attn.q_proj.weight"] = torch.randn(H * HD, D) * 0.2
        w[p + "self_attn.k_proj.weight"] = torch.randn(KV * HD, D) * 0.2
        w[p + "self_attn.v_proj.weight"] = torch.randn(KV * HD, D) * 0.2
        w[p + "self_attn.o_proj.weight"] = torch.randn(D, H * HD) * 0.2
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(D)
        w[p + "mlp.gate_proj.weight"] = torch.randn(F, D) * 0.2
        w[p + "mlp.up_proj.weight"] = torch.randn(F, D) * 0.2
        w[p + "mlp.down_proj.weight"] = torch.randn(D, F) * 0.2
    w["model.norm.weight"] = 1 + 0.1 * torch.randn(D)
    w["lm_head.weight"] = torch.randn(V, D) * 0.2
    ids = torch.randint(0, V, (B, T))
    with torch.no_grad():
        logits = forward(w, ids)
    save(out + "/weights.safetensors", w)
    save(out + "/io.safetensors", {"ids": ids, "logits": logits})
    print("logits", tuple(logits.shape), float(logits.abs().max()))


if __name__ == "__main__":
    main()
