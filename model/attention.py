"""Causal self-attention: :class:`CausalSelfAttention`, GPT-2's, with grouped-query heads, QK-norm and RoPE as choices.

    attn = CausalSelfAttention(config, layer_idx)
    y = attn(x, cache=None, rotary=None)      # (B, T, n_embd) -> (B, T, n_embd)

- ``model.n_kv_head`` (grouped-query attention; Ainslie et al. 2023, arXiv:2305.13245): ``k_proj``
  and ``v_proj`` make ``n_kv_head`` heads, each shared by ``n_head / n_kv_head`` query heads.
- ``model.qk_norm``: ``q_norm`` / ``k_norm``, RMSNorm over each head's queries and keys with a
  learned gain of ``head_size`` (Qwen3; Dehghani et al. 2023, arXiv:2302.05442; Wortsman et al.
  2023, arXiv:2309.14322).
- ``model.position='rope'``: the queries and keys rotated by their positions (:mod:`model.rope`),
  after QK-norm as in Qwen3; the KV cache holds the keys already rotated.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import GPTConfig
from model.kv_cache import KVCache
from model.norm import rms_norm
from model.rope import apply_rotary
from model.sdpa import causal_attention


def _norm_f32(norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)`` computed in float32 (input and gain), returned in ``x``'s dtype: ``(..., head_size)``."""
    return F.rms_norm(x.float(), norm.normalized_shape, norm.weight.float(), norm.eps).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention: ``(B, T, n_embd) -> (B, T, n_embd)``.

    Separate ``q_proj``/``k_proj``/``v_proj`` Linears (rather than nanoGPT's fused
    ``c_attn``) so every projection is a plain ``nn.Linear`` a reader can find by name;
    ``k_proj`` and ``v_proj`` have ``n_kv_head * head_size`` outputs.
    ``F.scaled_dot_product_attention`` picks a flash / memory-efficient kernel where one
    exists (and the math kernel where flash is slow: :mod:`model.sdpa`).  ``layer_idx`` is this block's slot in a :class:`KVCache`.
    """

    def __init__(self, config: GPTConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_size = config.n_head, config.kv_heads, config.head_size
        self.dropout = config.dropout
        self.layer_idx = layer_idx
        kv_width = self.n_kv_head * self.head_size
        self.q_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.k_proj = nn.Linear(config.n_embd, kv_width, bias=config.bias)
        self.v_proj = nn.Linear(config.n_embd, kv_width, bias=config.bias)
        self.out_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # Qwen3's names; None (no parameters, no state_dict keys) without QK-norm.
        self.q_norm = rms_norm(self.head_size) if config.qk_norm else None
        self.k_norm = rms_norm(self.head_size) if config.qk_norm else None
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``; position t attends to positions <= t only.

        Without ``cache`` the T positions are the whole sequence (training); with it they are
        positions ``cache.length ..``, their keys and values appended to the cache.  ``rotary``
        is ``(cos, sin)`` ``(T, head_size)`` of those T positions (:class:`model.rope.RotaryEmbedding`)
        under ``position='rope'``, else None.
        """
        B, T, C = x.shape
        kv_width = self.n_kv_head * self.head_size
        # Training and whole-window scoring: one matmul over the stacked weights, (B, T, C + 2 kv_width) -> 3 parts.
        # Cached generation runs a few positions a step, where copying the weights would cost more
        # than it saves (15-18% fewer tokens/s at GPT-2 124M on a CPU, measured): the three Linears.
        if cache is None:
            qkv = self._qkv(x).split([C, kv_width, kv_width], dim=2)
        else:
            qkv = (self.q_proj(x), self.k_proj(x), self.v_proj(x))
        # (B, T, heads * head_size) -> (B, T, heads, head_size) -> (B, heads, T, head_size)
        q, k, v = (t.view(B, T, -1, self.head_size).transpose(1, 2) for t in qkv)
        if self.q_norm is not None:  # over each head's head_size values, before the rotation (Qwen3)
            # In float32, as Qwen3's RMSNorm computes: under bf16 autocast q and k are bf16, which nn.RMSNorm
            # with a float32 gain would take through its slow unfused path (with a warning); so would a
            # float32 input with a bf16 gain (a model cast with .to(torch.bfloat16)): both go in as float32.
            q, k = _norm_f32(self.q_norm, q), _norm_f32(self.k_norm, k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if cache is None:
            k, v = self._shared(k), self._shared(v)  # (B, n_head, T, head_size) each
            y = causal_attention(q, k, v, self.dropout if self.training else 0.0)  # (B, n_head, T, head_size)
        else:
            start = cache.length
            k, v = cache.update(self.layer_idx, k, v)  # (B, n_kv_head, start + T, head_size) each
            k, v = self._shared(k), self._shared(v)  # (B, n_head, start + T, head_size)
            # Query i sits at position start + i and sees keys 0 .. start + i.  is_causal aligns its
            # mask top-left (query i sees keys 0 .. i), right only when nothing was cached before.
            causal = start == 0 and T > 1
            mask = None if T == 1 or causal else torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(start)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # (B, n_head, T, head_size)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_dropout(self.out_proj(y))

    def _shared(self, kv: torch.Tensor) -> torch.Tensor:
        """``(B, n_kv_head, T, head_size) -> (B, n_head, T, head_size)``: each key/value head repeated for its query heads.

        Query head h reads key/value head ``h // (n_head / n_kv_head)`` (Llama's ``repeat_kv``);
        a no-op for multi-head attention.
        """
        repeats = self.n_head // self.n_kv_head
        return kv if repeats == 1 else kv.repeat_interleave(repeats, dim=1)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, T, C + 2 kv_width)``: ``q_proj(x)``, ``k_proj(x)``, ``v_proj(x)`` side by side, in one matmul.

        The parameters stay the three Linears' own (checkpoints and the GPT-2 layout are
        unchanged); stacking their weights costs a ``(C + 2 kv_width, C)`` copy per call and saves two small
        matmuls forward and backward, which pays in training on a CPU (1.02x a step).
        """
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])  # (C + 2 kv_width, C)
        bias = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        return F.linear(x, weight, bias)
