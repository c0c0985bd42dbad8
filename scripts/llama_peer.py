"""The Python peer's Llama for the GPU bench (scripts/bench_gpt_reference.py --model llama): ddprun's
model.name llama (lib/ddp/model/llama.cpp), written as plain PyTorch writes one for speed, torchtitan's
way: RMSNorm computed in float32, rotary positions over the two halves of each head, grouped-query
attention through scaled_dot_product_attention (each key/value head repeated for its query heads), a
SwiGLU MLP of Llama's width rule, an untied head unless asked. The same matrices, so the same work
per token, as ddprun's; the bench compares their speed, not their values (tests/support/
llama_reference.py is the one whose values are checked against ddprun's).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    n_layer: int = 12
    n_head: int = 12
    n_kv_heads: int = 4
    dim: int = 768
    multiple_of: int = 256
    block_size: int = 1024
    vocab_size: int = 32000
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False


def ffn_dim(config):
    """Llama's rule (llama_ffn_dim in lib/ddp/model/llama.cpp): 8·dim/3 rounded up to multiple_of."""
    width = 8 * config.dim // 3
    return config.multiple_of * ((width + config.multiple_of - 1) // config.multiple_of)


class RmsNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = c.n_head, c.n_kv_heads, c.dim // c.n_head
        self.q_proj = nn.Linear(c.dim, c.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c.dim, c.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c.dim, c.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c.n_head * self.head_dim, c.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        repeat = self.n_head // self.n_kv
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2.x: fused
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # Debian's 1.13 (the bench's smoke run): the explicit form
            scores = (q @ k.transpose(-2, -1)) / self.head_dim ** 0.5
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        width = ffn_dim(c)
        self.gate_proj = nn.Linear(c.dim, width, bias=False)
        self.up_proj = nn.Linear(c.dim, width, bias=False)
        self.down_proj = nn.Linear(width, c.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RmsNorm(c.dim, c.norm_eps), RmsNorm(c.dim, c.norm_eps)
        self.self_attn, self.mlp = Attention(c), Mlp(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.n_layer))
        self.norm = RmsNorm(c.dim, c.norm_eps)
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        head_dim = c.dim // c.n_head
        inverse = 1.0 / (c.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(c.block_size).float(), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        cos, sin = self.cos[:t].to(self.embed_tokens.weight.dtype), self.sin[:t].to(self.embed_tokens.weight.dtype)
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
