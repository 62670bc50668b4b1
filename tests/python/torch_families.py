"""PyTorch twins of dstrain's LLaMA and BLOOM families, written from the
published formulas of Hugging Face transformers' LlamaForCausalLM and
BloomForCausalLM (modeling_llama.py, modeling_bloom.py), with the same
module and parameter names, so that a checkpoint's tensors load by name:

  LLaMA  model.embed_tokens.weight [V, C]
         model.layers.{i}.input_layernorm.weight [C]            RMSNorm, in fp32
         model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (.bias with attention_bias)
         model.layers.{i}.post_attention_layernorm.weight [C]
         model.layers.{i}.mlp.{gate,up,down}_proj.weight (.bias with mlp_bias)
         model.norm.weight [C]          lm_head.weight [V, C] (absent when tied)
  BLOOM  transformer.word_embeddings.weight [V, C]
         transformer.word_embeddings_layernorm.weight/bias [C]
         transformer.h.{i}.input_layernorm.weight/bias
         transformer.h.{i}.self_attention.query_key_value.weight [3C, C] (rows: per head q, k, v)
         transformer.h.{i}.self_attention.dense.weight [C, C]
         transformer.h.{i}.post_attention_layernorm.weight/bias
         transformer.h.{i}.mlp.dense_h_to_4h.weight [4C, C], dense_4h_to_h.weight [C, 4C]
         transformer.ln_f.weight/bias  (the LM head is the word embeddings)

Both take the engine's model spec (Hugging Face config field names). The
loss is the mean cross-entropy over targets != -1 of the logits of every
position (dstrain's targets are already the next tokens).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# LLaMA
# ---------------------------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(_at_least_fp32(input_dtype))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rope_inv_freq(spec, head_dim):
    """transformers' _compute_default_rope_parameters, then the linear or
    llama3 scaling (modeling_rope_utils), in float32 as it computes them."""
    base = float(spec.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = spec.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context_len = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low
        high_freq_wavelen = old_context_len / high
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    return inv_freq


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen,
                                                           head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c = spec["hidden_size"]
        self.num_heads = spec["num_attention_heads"]
        self.num_kv = spec.get("num_key_value_heads", self.num_heads)
        self.head_dim = spec.get("head_dim") or c // self.num_heads
        bias = spec.get("attention_bias", False)
        self.q_proj = nn.Linear(c, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(c, self.num_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(c, self.num_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, c, bias=bias)
        self.scaling = self.head_dim ** -0.5

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        shape = (b, t, -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.num_heads // self.num_kv)
        v = repeat_kv(v, self.num_heads // self.num_kv)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=_at_least_fp32(scores.dtype)).to(q.dtype)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c, i = spec["hidden_size"], spec["intermediate_size"]
        bias = spec.get("mlp_bias", False)
        self.gate_proj = nn.Linear(c, i, bias=bias)
        self.up_proj = nn.Linear(c, i, bias=bias)
        self.down_proj = nn.Linear(i, c, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, spec):
        super().__init__()
        eps = spec.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(spec)
        self.mlp = LlamaMLP(spec)
        self.input_layernorm = LlamaRMSNorm(spec["hidden_size"], eps)
        self.post_attention_layernorm = LlamaRMSNorm(spec["hidden_size"], eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed_tokens = nn.Embedding(spec["vocab_size"], spec["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(spec)
                                    for _ in range(spec["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(spec["hidden_size"], spec.get("rms_norm_eps", 1e-6))


class LlamaForCausalLM(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.model = LlamaModel(spec)
        self.tied = spec.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(spec["hidden_size"], spec["vocab_size"], bias=False)
        attn = self.model.layers[0].self_attn if self.model.layers else None
        self.head_dim = attn.head_dim if attn else 0

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        inv_freq = rope_inv_freq(self.spec, self.head_dim)
        # positions x frequencies in float32, as LlamaRotaryEmbedding multiplies them
        freqs = (inv_freq[None, :, None].float() @ torch.arange(t).float()[None, None, :])
        freqs = freqs.transpose(1, 2)  # [1, t, hs/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [1, 1, t, hs]
        x = self.model.embed_tokens(idx)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = x @ weight.t()
        return logits, _loss(logits, targets)


# ---------------------------------------------------------------------------
# BLOOM
# ---------------------------------------------------------------------------


def build_alibi_slopes(num_heads):
    """transformers' build_alibi_tensor's slopes, for any head count."""
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))),
                                  dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


def bloom_gelu(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class BloomAttention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c = _bloom(spec, "hidden_size", "n_embed")
        self.num_heads = _bloom(spec, "n_head", "num_attention_heads")
        self.head_dim = c // self.num_heads
        self.query_key_value = nn.Linear(c, 3 * c, bias=True)
        self.dense = nn.Linear(c, c)
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)

    def forward(self, x, alibi):
        b, t, _ = x.shape
        fused = self.query_key_value(x).view(b, t, self.num_heads, 3, self.head_dim)
        q = fused[..., 0, :].transpose(1, 2).reshape(b * self.num_heads, t, self.head_dim)
        k = fused[..., 1, :].permute(0, 2, 3, 1).reshape(b * self.num_heads, self.head_dim, t)
        v = fused[..., 2, :].transpose(1, 2).reshape(b * self.num_heads, t, self.head_dim)
        scores = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=self.inv_norm_factor)
        scores = scores.view(b, self.num_heads, t, t)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=_at_least_fp32(scores.dtype)).to(x.dtype)
        context = torch.bmm(probs.view(b * self.num_heads, t, t), v)
        context = context.view(b, self.num_heads, t, self.head_dim).permute(0, 2, 1, 3)
        return self.dense(context.reshape(b, t, -1))


class BloomMLP(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c = _bloom(spec, "hidden_size", "n_embed")
        self.dense_h_to_4h = nn.Linear(c, 4 * c)
        self.dense_4h_to_h = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.dense_4h_to_h(bloom_gelu(self.dense_h_to_4h(x)))


class BloomBlock(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c = _bloom(spec, "hidden_size", "n_embed")
        eps = spec.get("layer_norm_epsilon", 1e-5)
        self.input_layernorm = nn.LayerNorm(c, eps=eps)
        self.self_attention = BloomAttention(spec)
        self.post_attention_layernorm = nn.LayerNorm(c, eps=eps)
        self.mlp = BloomMLP(spec)

    def forward(self, x, alibi):
        x = x + self.self_attention(self.input_layernorm(x), alibi)
        return x + self.mlp(self.post_attention_layernorm(x))


class BloomModel(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c = _bloom(spec, "hidden_size", "n_embed")
        eps = spec.get("layer_norm_epsilon", 1e-5)
        self.word_embeddings = nn.Embedding(spec["vocab_size"], c)
        self.word_embeddings_layernorm = nn.LayerNorm(c, eps=eps)
        self.h = nn.ModuleList(BloomBlock(spec) for _ in range(_bloom(spec, "n_layer",
                                                                        "num_hidden_layers")))
        self.ln_f = nn.LayerNorm(c, eps=eps)


class BloomForCausalLM(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.transformer = BloomModel(spec)
        self.num_heads = _bloom(spec, "n_head", "num_attention_heads")

    def forward(self, idx, targets=None):
        b, t = idx.shape
        positions = torch.arange(t, dtype=torch.float32)  # (cumsum(mask) - 1) * mask, no padding
        alibi = build_alibi_slopes(self.num_heads)[:, None] * positions[None, :]  # [H, t]
        alibi = alibi[None].expand(b, -1, -1).reshape(b * self.num_heads, 1, t)
        x = self.transformer.word_embeddings_layernorm(self.transformer.word_embeddings(idx))
        alibi = alibi.to(x.dtype)
        for block in self.transformer.h:
            x = block(x, alibi)
        x = self.transformer.ln_f(x)
        logits = x @ self.transformer.word_embeddings.weight.t()
        return logits, _loss(logits, targets)


def _at_least_fp32(dtype):
    """transformers upcasts 16-bit values to fp32 here; the float64 twin (the
    gradient checks) stays float64."""
    return torch.promote_types(dtype, torch.float32)


def _bloom(spec, name, alias):
    return spec[name] if name in spec else spec[alias]


def _loss(logits, targets):
    if targets is None:
        return None
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).to(_at_least_fp32(logits.dtype)),
                           targets.reshape(-1),
                           ignore_index=-1)


def model_for(spec):
    kind = spec.get("type", spec.get("model_type"))
    if kind in ("llama", "mistral"):
        return LlamaForCausalLM(spec)
    if kind == "bloom":
        return BloomForCausalLM(spec)
    raise ValueError(f"not a LLaMA or BLOOM spec: {spec!r}")
