"""Causal self-attention through ``F.scaled_dot_product_attention``, in another kernel where PyTorch's choice is slow.

On a CPU, PyTorch picks its flash-attention kernel whenever it can.  In bfloat16 (autocast on a
CPU with AVX512-BF16 or AMX) that kernel's *backward* is slow for short sequences: on nanoGPT's
char recipe (T = 64) it was 47% of a training step's CPU time (``torch.profiler``, 40 steps),
and PyTorch's plain math kernel (the (T, T) score matrix, its softmax and the weighted sum of V,
all in memory) makes the whole step 1.41x faster (19.8 -> 14.0 ms, median of 40 steps on 2 cores of
an AMD EPYC with AVX512-BF16, torch 2.13.0+cpu).  From T = 256 on, flash is the faster one again
(0.90x at T = 256, 0.45x at T = 1024).  The table of kernels, shapes and dtypes is in
``results/speed-cpu-2026-11-24/README.md`` ("The attention kernel").

So the math kernel is used for bf16 on a CPU at T <= :data:`MATH_KERNEL_MAX_T` (64) when
gradients are on (the gain is in the backward), and PyTorch's choice everywhere else (GPUs,
float32, evaluation, generation, ``torch.compile``).  The two kernels compute the same function and differ in
rounding; on a trained default model their bf16 gradients are equally close to float64's (0.89%
and 0.93% relative error at T = 128).  T = 128 stays with flash although math was 1.05x faster
there: the one default run (seed 1337) trained with math ended 0.22 above the flash run's val loss
(4.7280 against 4.5096), two 300-step pairs lagged by 0.013 and 0.12, and that is not settled as
chance; at T = 64 nanoGPT's char recipe ended at 1.8886 against 1.8889.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

MATH_KERNEL_MAX_T = 64  # math is faster up to at least 128; see the module docstring for why 128 is left out


def uses_math_kernel(q: torch.Tensor) -> bool:
    """Whether :func:`causal_attention` picks the math kernel for queries ``q`` ``(B, n_head, T, head_size)``."""
    # Under torch.compile the choice is Inductor's (its attention pattern pass may fuse the math
    # kernel's pieces again), so the switch is only made in eager mode, where it was measured.
    return (
        q.device.type == "cpu"
        and q.dtype == torch.bfloat16
        and q.size(-2) <= MATH_KERNEL_MAX_T
        and torch.is_grad_enabled()
        and q.requires_grad
        and not torch.compiler.is_compiling()
    )


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal scaled-dot-product attention: q, k, v ``(B, n_head, T, head_size)`` -> ``(B, n_head, T, head_size)``.

    ``F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)``, in the math
    kernel where :func:`uses_math_kernel` says so (see the module docstring for the measurements).
    """
    with sdpa_kernel(SDPBackend.MATH) if uses_math_kernel(q) else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
