"""The PyTorch twin of dstrain's GPT (nanoGPT-style), used as the parity oracle
and as the PyTorch side of bench/bench_gpt.py.

Model spec JSON: {"type": "gpt", "vocab_size": V, "n_ctx": T, "n_layer": L,
"n_head": H, "d_model": C, "seed": S}. Parameter names and shapes (nn.Linear
weights are [out, in]) are exactly the engine's:

  transformer.wte.weight [V, C]           transformer.wpe.weight [n_ctx, C]
  transformer.h.{i}.ln_1.weight/bias [C]
  transformer.h.{i}.attn.c_attn.weight [3C, C], .bias [3C]
  transformer.h.{i}.attn.c_proj.weight [C, C], .bias [C]
  transformer.h.{i}.ln_2.weight/bias [C]
  transformer.h.{i}.mlp.c_fc.weight [4C, C], .bias [4C]
  transformer.h.{i}.mlp.c_proj.weight [C, 4C], .bias [C]
  transformer.ln_f.weight/bias [C]

The LM head is tied to wte (logits = x @ wte.T, no bias) and is not a tensor of
its own. LayerNorm eps 1e-5; GELU is the tanh approximation; the loss is mean
cross-entropy over targets != -1.
"""

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int
    n_ctx: int
    n_layer: int
    n_head: int
    d_model: int
    seed: int = 0

    @staticmethod
    def from_spec(spec):
        if spec.get("type", "gpt") != "gpt":
            raise ValueError(f"not a GPT spec: {spec!r}")
        cfg = GPTConfig(
            vocab_size=int(spec["vocab_size"]),
            n_ctx=int(spec["n_ctx"]),
            n_layer=int(spec["n_layer"]),
            n_head=int(spec["n_head"]),
            d_model=int(spec["d_model"]),
            seed=int(spec.get("seed", 0)),
        )
        if cfg.d_model % cfg.n_head != 0:
            raise ValueError("d_model must be divisible by n_head")
        return cfg


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg.d_model
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        mask = torch.tril(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.n_ctx, cfg.n_ctx), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)  # (B, H, T, hs)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg.d_model
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.d_model),
                wpe=nn.Embedding(cfg.n_ctx, cfg.d_model),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.d_model, eps=1e-5),
            )
        )

    def forward(self, idx, targets=None):
        """idx, targets: int64 [B, T]. Returns (logits [B, T, V], loss or None)."""
        _, t = idx.shape
        if t > self.cfg.n_ctx:
            raise ValueError(f"sequence length {t} > n_ctx {self.cfg.n_ctx}")
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = x @ self.transformer.wte.weight.t()  # tied LM head, no bias
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
            )
        return logits, loss


def expected_param_shapes(cfg):
    """The engine's parameter names and shapes, in model order."""
    c, v = cfg.d_model, cfg.vocab_size
    shapes = OrderedDict()
    shapes["transformer.wte.weight"] = (v, c)
    shapes["transformer.wpe.weight"] = (cfg.n_ctx, c)
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        shapes[p + "ln_1.weight"] = (c,)
        shapes[p + "ln_1.bias"] = (c,)
        shapes[p + "attn.c_attn.weight"] = (3 * c, c)
        shapes[p + "attn.c_attn.bias"] = (3 * c,)
        shapes[p + "attn.c_proj.weight"] = (c, c)
        shapes[p + "attn.c_proj.bias"] = (c,)
        shapes[p + "ln_2.weight"] = (c,)
        shapes[p + "ln_2.bias"] = (c,)
        shapes[p + "mlp.c_fc.weight"] = (4 * c, c)
        shapes[p + "mlp.c_fc.bias"] = (4 * c,)
        shapes[p + "mlp.c_proj.weight"] = (c, 4 * c)
        shapes[p + "mlp.c_proj.bias"] = (c,)
    shapes["transformer.ln_f.weight"] = (c,)
    shapes["transformer.ln_f.bias"] = (c,)
    return shapes


def gpt2_init_(model, seed=None):
    """GPT-2 initialisation: N(0, 0.02) for linear and embedding weights,
    N(0, 0.02/sqrt(2*n_layer)) for the residual projections (c_proj), zero
    biases, LayerNorm weight 1 / bias 0."""
    gen = torch.Generator().manual_seed(model.cfg.seed if seed is None else seed)
    std_proj = 0.02 / math.sqrt(2 * model.cfg.n_layer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, std_proj, generator=gen)
            elif name.endswith(".bias"):
                p.zero_()  # linear and LayerNorm biases
            elif ".ln_" in name:
                p.fill_(1.0)  # LayerNorm weights (ln_1, ln_2, ln_f)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model


def load_params_(model, tensors):
    """Copies name -> tensor into the model; names and shapes must match exactly."""
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise KeyError(f"parameter names differ: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in own.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{name}: shape {tuple(t.shape)} != {tuple(p.shape)}")
            p.copy_(t.to(p.dtype))
    return model


def accumulated_loss_backward(model, tokens, targets, accum):
    """Splits [n, T] into `accum` consecutive micro-batches, back-propagates
    loss_i / accum for each (gradients add up to the mean), and returns the
    mean of the per-micro-batch losses as a float. Does not zero gradients."""
    n = tokens.shape[0]
    if n % accum != 0:
        raise ValueError(f"{n} samples do not split into {accum} micro-batches")
    mb = n // accum
    total = 0.0
    for i in range(accum):
        _, loss = model(tokens[i * mb : (i + 1) * mb], targets[i * mb : (i + 1) * mb])
        (loss / accum).backward()
        total += loss.item()
    return total / accum


def flops_per_token_forward(cfg, seq_len=None):
    """Matmul FLOPs of one forward pass per token (full, unmasked attention)."""
    t = cfg.n_ctx if seq_len is None else seq_len
    c, v = cfg.d_model, cfg.vocab_size
    per_layer = 2 * c * (3 * c + c + 4 * c + 4 * c) + 2 * 2 * t * c
    return cfg.n_layer * per_layer + 2 * c * v
