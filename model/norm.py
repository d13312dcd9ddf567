"""The normalisation layer of a block (and before the head): GPT-2's LayerNorm or RMSNorm, by ``model.norm``.

    norm = make_norm(config, config.n_embd)   # nn.LayerNorm or nn.RMSNorm over the last dimension

RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", arXiv:1910.07467)
divides by the root mean square and multiplies by a learned gain: LayerNorm without the mean
subtraction and the bias, what Llama and Qwen3 use.  It is ``torch.nn.RMSNorm`` itself.
"""

from __future__ import annotations

import torch.nn as nn

from model.config import GPTConfig

# Qwen3's rms_norm_eps.  Fixed rather than torch's default (the dtype's machine epsilon), so a
# model normalises the same way in float32 and under bf16 autocast, as an export will need to state.
RMS_NORM_EPS = 1e-6


def rms_norm(size: int) -> nn.RMSNorm:
    """``nn.RMSNorm(size)`` with :data:`RMS_NORM_EPS`: ``(..., size) -> (..., size)``, ``x / rms(x) * weight``."""
    return nn.RMSNorm(size, eps=RMS_NORM_EPS)


def make_norm(config: GPTConfig, size: int) -> nn.Module:
    """The ``config.norm`` layer over a last dimension of ``size``: ``(..., size) -> (..., size)``.

    ``'layernorm'`` is ``nn.LayerNorm`` with a bias when ``config.bias`` (GPT-2); ``'rmsnorm'``
    is :func:`rms_norm`, which has no bias whatever ``config.bias`` says (there is no mean to restore).
    """
    if config.norm == "rmsnorm":
        return rms_norm(size)
    return nn.LayerNorm(size, bias=config.bias)
