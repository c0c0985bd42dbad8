"""nanoGPT's model in plain PyTorch, the Python twin of ddprun's `model.name: gpt`, with the data and
optimizer helpers its scripts share (tests/support/eval_gpt.py, scripts/bench_gpt_reference.py):

    import nanogpt
    model = nanogpt.GPT(nanogpt.GPTConfig(block_size=128, vocab_size=256, n_layer=4, n_head=4, n_embd=128))
    data = nanogpt.Windows(["/tmp/kjv/kjv_train_000000.bin"], block_size=128)
    x, y = data.batch([0, 1, 2])
    logits, loss = model(x, y)

Parameter and buffer names are nanoGPT's, so a state_dict moves between nanoGPT, this module and ddprun
with load_state_dict(strict=True). As nanoGPT does, attention uses F.scaled_dot_product_attention
where torch has it (2.x); without it (Debian's torch 1.13) it masks with a persistent buffer
`transformer.h.N.attn.bias` (the lower triangle), which is then part of the state_dict.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HEADER_INTS = 256  # llm.c's shard header: 256 little-endian int32
SHARD_FORMATS = {20240520: (1, np.uint16), 20240801: (7, np.uint32)}  # magic: (version, token dtype)


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in the Linears and LayerNorms


class LayerNorm(nn.Module):
    """LayerNorm whose bias is optional (torch 1.13's nn.LayerNorm cannot drop it alone)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be a multiple of n_head"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in that order
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        if not HAS_SDPA:
            n = config.block_size
            self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, heads, T, head size)
        q, k, v = (heads(t) for t in self.c_attn(x).split(self.n_embd, dim=2))
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            scores = scores.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))  # no looking ahead
            y = self.attn_dropout(F.softmax(scores, dim=-1)) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()  # exact (erf), not the tanh approximation
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then the MLP, each added to the residual stream."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one tensor under both names
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2's scaling of the residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        """(logits (B, T, vocab) at every position, mean cross-entropy over B×T or None without targets).
        Unlike nanoGPT, logits are for every position even without targets."""
        B, T = idx.size()
        assert T <= self.config.block_size, f"sequence of {T} tokens, block_size is {self.config.block_size}"
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def decay_groups(model, weight_decay):
    """nanoGPT's AdamW groups: matrices and embeddings (dim >= 2) decay; biases and norm weights do not."""
    params = [p for p in model.parameters() if p.requires_grad]  # parameters() lists the tied weight once
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def lr_at(step, lr, warmup_steps, total_steps, min_lr=0.0):
    """ddprun's schedule.name: cosine (lib/ddp/optim/lr_schedule.cpp): a linear ramp to lr over
    warmup_steps (step 0 already at lr/warmup_steps), then a cosine to min_lr at total_steps."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def read_shard(path, dtype=None):
    """A shard's tokens as a read-only 1-D numpy array (memory-mapped). `.npy`: a 1-D integer array.
    `.bin`: llm.c's format (1,024-byte header: magic, version, token count; uint16 tokens for 20240520
    version 1, uint32 for 20240801 version 7), or with `dtype` a headerless file of that dtype."""
    if path.endswith(".npy"):
        tokens = np.load(path, mmap_mode="r")
        if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise ValueError(f"{path}: a token .npy must be 1-D integers, got {tokens.dtype} of shape {tokens.shape}")
        return tokens
    if dtype is not None:
        return np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header.size < HEADER_INTS or int(header[0]) not in SHARD_FORMATS:
        raise ValueError(f"{path}: not an llm.c token shard (magic {header[0] if header.size else None}; "
                         f"expected one of {sorted(SHARD_FORMATS)}); a raw file needs a dtype")
    magic, version, count = (int(v) for v in header[:3])
    want, token_dtype = SHARD_FORMATS[magic]
    if version != want:
        raise ValueError(f"{path}: magic {magic} needs version {want}, got {version}")
    tokens = np.memmap(path, dtype=np.dtype(token_dtype).newbyteorder("<"), mode="r", offset=4 * HEADER_INTS)
    if tokens.size != count:
        raise ValueError(f"{path}: header says {count} tokens, the file holds {tokens.size}")
    return tokens


class Windows:
    """The samples of causal-LM training, as ddprun numbers them: a shard of N tokens has (N-1)//T
    windows, window w being tokens[w*T : w*T+T+1] (inputs the first T, targets the last T); windows
    never cross shards and are numbered shard after shard, in the order of `paths`."""

    def __init__(self, paths, block_size, dtype=None):
        self.shards = [read_shard(p, dtype) for p in paths]
        self.block_size = block_size
        counts = [(s.size - 1) // block_size if s.size > 0 else 0 for s in self.shards]
        self.starts = np.cumsum([0] + counts)  # starts[i]: the first window of shard i

    def __len__(self):
        return int(self.starts[-1])

    def __getitem__(self, i):
        """Window i as T+1 int64 tokens."""
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} of {len(self)}")
        shard = int(np.searchsorted(self.starts, i, side="right")) - 1
        start = (i - int(self.starts[shard])) * self.block_size
        return torch.from_numpy(self.shards[shard][start:start + self.block_size + 1].astype(np.int64))

    def batch(self, indices):
        """(inputs, targets), each (len(indices), T) int64."""
        rows = torch.stack([self[int(i)] for i in indices])
        return rows[:, :-1], rows[:, 1:]
