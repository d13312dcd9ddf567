"""The feed-forward network of a block, by ``model.mlp``: GELU (GPT-2), SwiGLU or ReLU².

Each is ``(B, T, n_embd) -> (B, T, n_embd)``, position-wise, with ``config.mlp_width`` hidden
units (:attr:`model.config.GPTConfig.mlp_width`: by default the hidden width that gives GELU's
parameter count) and the Llama / Qwen3 names: ``gate_proj``, ``up_proj``, ``down_proj``.

    mlp = make_mlp(config)
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import GPTConfig


class MLP(nn.Module):
    """GPT-2's feed-forward network: ``Linear(n_embd, 4 n_embd) -> GELU -> Linear(4 n_embd, n_embd)``.

    Shapes ``(B, T, n_embd) -> (B, T, n_embd)``; the 4x width and the tanh-approximate GELU are
    GPT-2's (Hendrycks & Gimpel 2016; ``config.gelu_approximate='none'`` takes the exact one, as nanoGPT).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.gelu_approximate = config.gelu_approximate
        self.up_proj = nn.Linear(config.n_embd, config.mlp_width, bias=config.bias)
        self.down_proj = nn.Linear(config.mlp_width, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``, position-wise."""
        return self.dropout(self.down_proj(F.gelu(self.up_proj(x), approximate=self.gelu_approximate)))


class SwiGLU(nn.Module):
    """Gated feed-forward network: ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    Shazeer 2020, "GLU Variants Improve Transformer" (arXiv:2002.05202), eq. 6 (FFN_SwiGLU);
    Llama's and Qwen3's MLP.  Three matrices, so the automatic hidden width is 2/3 of GELU's
    (paper sec. 2) and the parameters about GELU's.  ``(B, T, n_embd) -> (B, T, n_embd)``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.n_embd, config.mlp_width, bias=config.bias)
        self.up_proj = nn.Linear(config.n_embd, config.mlp_width, bias=config.bias)
        self.down_proj = nn.Linear(config.mlp_width, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``, position-wise."""
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))


class ReLU2(nn.Module):
    """Squared-ReLU feed-forward network: ``down_proj(relu(up_proj(x))^2)``.

    So et al. 2021, "Primer: Searching for Efficient Transformers for Language Modeling"
    (arXiv:2109.08668), sec. 3; modded-nanogpt's MLP.  GELU's shape (two matrices, 4 n_embd
    wide), another activation.  ``(B, T, n_embd) -> (B, T, n_embd)``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(config.n_embd, config.mlp_width, bias=config.bias)
        self.down_proj = nn.Linear(config.mlp_width, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``, position-wise."""
        return self.dropout(self.down_proj(F.relu(self.up_proj(x)).square()))


MLPS = {"gelu": MLP, "swiglu": SwiGLU, "relu2": ReLU2}


def make_mlp(config: GPTConfig) -> nn.Module:
    """The ``config.mlp`` network (:class:`MLP`, :class:`SwiGLU` or :class:`ReLU2`): ``(B, T, n_embd) -> (B, T, n_embd)``."""
    return MLPS[config.mlp](config)
