"""Rotary position embeddings (RoPE): each head's queries and keys rotated by their position.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding" (arXiv:2104.09864):
dimension pair ``i`` of a head is rotated by the angle ``pos * theta^(-2i/head_size)``, so the
dot product of a query at position m and a key at position n depends on ``m - n`` only.  The
pairs are (i, i + head_size/2), the "rotate half" layout of Llama and Qwen3 in Hugging Face
``transformers``, so their weights will carry over without permuting q_proj / k_proj.

    rotary = RotaryEmbedding(head_size, theta=10000.0, max_positions=block_size)
    cos, sin = rotary(start, T)              # (T, head_size) each: positions start .. start + T - 1
    q = apply_rotary(q, cos, sin)            # (B, n_head, T, head_size), same shape
"""

from __future__ import annotations

import torch
import torch.nn as nn


class RotaryEmbedding(nn.Module):
    """The cos and sin of every position's rotation angles; no parameters and no state_dict entries.

    The table for positions ``0 .. max_positions - 1`` is computed in float32 on each call and
    sliced, so a position gets the same bits whether it is scored in a whole window or one at a
    time from a KV cache (an elementwise ``cos`` may round differently in a vector's tail).
    Computing it costs ``max_positions * head_size`` sines and cosines, nothing next to a block's matmuls.
    """

    def __init__(self, head_size: int, theta: float, max_positions: int) -> None:
        super().__init__()
        self.head_size, self.theta, self.max_positions = head_size, theta, max_positions

    def forward(self, start: int, length: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``(length, head_size)`` float32, for positions ``start .. start + length - 1``.

        Raises ``ValueError`` past ``max_positions`` (the model refuses such a sequence first).
        """
        if start + length > self.max_positions:
            raise ValueError(f"positions up to {start + length} asked of a rotary table of {self.max_positions}")
        half = torch.arange(0, self.head_size, 2, dtype=torch.float32, device=device) / self.head_size
        inv_freq = self.theta**-half  # (head_size/2,): theta^(-2i/head_size)
        pos = torch.arange(self.max_positions, dtype=torch.float32, device=device)
        angles = torch.outer(pos, inv_freq)  # (max_positions, head_size/2)
        # (max_positions, head_size) -> (length, head_size): dimension i and i + head_size/2 share an angle
        angles = torch.cat([angles, angles], dim=-1)[start : start + length]
        return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(..., head_size) -> (..., head_size)``: ``[x1, x2] -> [-x2, x1]`` for the halves x1, x2."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(B, heads, T, head_size)`` by the angles of ``cos``, ``sin`` ``(T, head_size)``: same shape.

    ``x * cos + rotate_half(x) * sin`` (RoFormer eq. 34, in the rotate-half layout), in ``x``'s
    dtype (bf16 under autocast, like the projections that made ``x``).
    """
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin
