"""A tiny Llama written from the architecture's description alone, in plain PyTorch: RMSNorm in float32,
rotary positions over the two halves of each head with Llama 3.1's llama3 frequency scaling,
grouped-query attention (each key/value head repeated for its query heads), causal softmax in float32,
a SwiGLU MLP, a tied or untied head. Its modules carry Hugging Face's LlamaForCausalLM names and it is
shaped by a config.json of theirs, so load_state_dict(strict=True) checks a file's names and shapes.

usage: llama_reference.py OUT_DIR
  draws random weights, writes them and a batch of token ids with its logits as safetensors files by
  its own writer (the format's description: a little-endian u64 header length, a JSON header, the
  raw bytes), for tests/model/test_llama.cpp to compare ddprun against.
"""
import json
import math
import struct
import sys

import torch
from torch import nn

# The test's model, in config.json's names.
TEST_CONFIG = {"vocab_size": 97, "hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "intermediate_size": 128, "rope_theta": 100.0, "rms_norm_eps": 1e-5,
               "tie_word_embeddings": False,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 32}}
T, B = 80, 2

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


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


def load(path):
    """A safetensors file's tensors, read by the format's description."""
    with open(path, "rb") as f:
        blob = f.read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    header.pop("__metadata__", None)
    data = bytearray(blob[8 + size:])
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(data[begin:end], dtype=DTYPES[entry["dtype"]]) if end > begin else torch.empty(0)
        out[name] = flat.reshape(entry["shape"]).clone()
    return out


class RmsNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def inverse_frequencies(config):
    head = config["hidden_size"] // config["num_attention_heads"]
    inv = 1.0 / config.get("rope_theta", 10000.0) ** (torch.arange(0, head, 2).float() / head)
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv
    low_freq = wavelength > original / low  # slow rotations: slowed down by the factor
    scaled = torch.where(low_freq, inv / factor, inv)
    smooth = (original / wavelength - low) / (high - low)
    medium = (wavelength >= original / high) & (wavelength <= original / low)  # in between: blended
    return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def rotate(x, cos, sin):
    half = x.size(-1) // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, self.h = config["hidden_size"], config["num_attention_heads"]
        self.kv, self.hd = config.get("num_key_value_heads", self.h), d // self.h
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = k.repeat_interleave(self.h // self.kv, dim=1), v.repeat_interleave(self.h // self.kv, dim=1)
        above = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(self.hd)).masked_fill(above, float("-inf"))
        attended = torch.softmax(scores.float(), -1).to(v.dtype) @ v
        return self.o_proj(attended.transpose(1, 2).reshape(b, t, self.h * self.hd))


class Mlp(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, f = config["hidden_size"], config["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-6)
        self.input_layernorm, self.self_attn = RmsNorm(config["hidden_size"], eps), Attention(config)
        self.post_attention_layernorm, self.mlp = RmsNorm(config["hidden_size"], eps), Mlp(config)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.layers = nn.ModuleList(Layer(config) for _ in range(config["num_hidden_layers"]))
        self.norm = RmsNorm(config["hidden_size"], config.get("rms_norm_eps", 1e-6))


class Llama(nn.Module):
    """Shaped by a config.json's dict; its state_dict has LlamaForCausalLM's names (lm_head left out when tied)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        self.tied = config.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)
        self.register_buffer("inv_freq", inverse_frequencies(config), persistent=False)

    def forward(self, ids):
        angles = torch.arange(ids.size(1)).float()[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], -1)
        cos, sin = angles.cos(), angles.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        head = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return self.model.norm(x) @ head.T


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = Llama(TEST_CONFIG)
    unscaled, scaled = inverse_frequencies({**TEST_CONFIG, "rope_scaling": None}), model.inv_freq
    factor = TEST_CONFIG["rope_scaling"]["factor"]
    slowed, kept = torch.isclose(scaled, unscaled / factor), scaled == unscaled
    assert slowed.any() and kept.any() and not (slowed | kept).all(), "the test should exercise every band"
    w = {"model.embed_tokens.weight": torch.randn(model.model.embed_tokens.weight.shape)}
    for name, tensor in model.state_dict().items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            w[name] = 1 + 0.1 * torch.randn(tensor.shape)
        elif name not in w:
            w[name] = torch.randn(tensor.shape) * 0.2
    model.load_state_dict(w, strict=True)
    ids = torch.randint(0, TEST_CONFIG["vocab_size"], (B, T))
    with torch.no_grad():
        logits = model(ids)
    save(out + "/weights.safetensors", w)
    save(out + "/io.safetensors", {"ids": ids, "logits": logits})
    print("logits", tuple(logits.shape), float(logits.abs().max()))


if __name__ == "__main__":
    main()
