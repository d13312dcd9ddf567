"""The shape and initialisation of a GPT: :class:`GPTConfig`, the ``[model]`` section of a run's config.

from model.config import GPTConfig
config = GPTConfig(n_layer=4, n_head=4, n_embd=128, tie_embeddings=False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import UserError
from core.settings import doc_field

INIT_POLICIES = ("gpt2", "pytorch")
GELU_APPROXIMATIONS = ("tanh", "none")  # F.gelu's `approximate` argument
POSITIONS = ("learned", "rope")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu", "relu2")
# SwiGLU's automatic hidden width is rounded up to a multiple of this.  Llama rounds to 256, which
# would add up to 255 columns to a 128-wide model's 341; 32 keeps a tiny model within 3% of GELU's
# parameter count and still gives matmul sizes that are multiples of 32.
MLP_MULTIPLE_OF = 32
# The fields that choose a block other than GPT-2's: GPT-2 weights neither import into nor export from one.
CHOICE_FIELDS = ("position", "rope_theta", "norm", "qk_norm", "mlp", "mlp_hidden", "n_kv_head", "logit_softcap")
DEFAULT_ROPE_THETA = 10000.0


@dataclass
class GPTConfig:
    """Shape of the model.  Validated on construction; a bad value raises :class:`UserError`."""

    vocab_size: int = doc_field(50257, "Vocabulary size; set from the tokenizer, never by hand.")
    block_size: int = doc_field(
        128,
        "Context length in tokens (T); also the number of learned positions, and the length of the final score's windows (runs of another block_size are scored on other windows).",
    )
    n_layer: int = doc_field(4, "Number of transformer blocks.")
    n_head: int = doc_field(4, "Attention heads per block; must divide n_embd.")
    n_embd: int = doc_field(128, "Width of the residual stream (embedding size).")
    dropout: float = doc_field(0.0, "Dropout probability on attention weights and residual branches, in [0, 1).")
    bias: bool = doc_field(True, "Use biases in the Linear layers and LayerNorms (GPT-2 does).")
    tie_embeddings: bool = doc_field(True, "Share one matrix between the token embedding and lm_head (W = E).")
    lm_head_bias: bool = doc_field(
        False, "Learn a bias on lm_head: a free per-token logit offset (vocab_size parameters; GPT-2 has none)."
    )
    gelu_approximate: str = doc_field(
        "tanh",
        "The MLP's GELU, as F.gelu's `approximate`: 'tanh' (GPT-2's gelu_new, Hendrycks & Gimpel 2016) or 'none' (the exact erf form: nanoGPT's nn.GELU, Hugging Face's 'gelu'; about half the cost on a CPU). Unused by mlp='swiglu' and 'relu2'.",
    )
    init: str = doc_field(
        "gpt2",
        "Initialisation policy, the same for both arms: 'gpt2' (every weight N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)); GPT-2, nanoGPT) or 'pytorch' (PyTorch's layer defaults: nn.Linear Kaiming-uniform, nn.Embedding N(0, 1); a tied matrix is the embedding's).",
    )
    zero_init_head: bool = doc_field(
        False, "Start an untied lm_head at zero (nanochat, modded-nanogpt); needs tie_embeddings=false."
    )
    position: str = doc_field(
        "learned",
        "How the model knows positions: 'learned' (GPT-2's table wpe of block_size vectors added to the input) or 'rope' (rotary embeddings: each head's queries and keys rotated by their position, no table; Su et al. 2021, RoFormer, arXiv:2104.09864; Llama, Qwen3).",
    )
    rope_theta: float = doc_field(
        DEFAULT_ROPE_THETA,
        "With position='rope': the base of the rotation frequencies, theta^(-2i/head_size) (RoFormer's 10000; Hugging Face's rope_theta).",
    )
    norm: str = doc_field(
        "layernorm",
        "The normalisation before attention, before the MLP and before lm_head: 'layernorm' (GPT-2's; with model.bias a learned bias too) or 'rmsnorm' (torch.nn.RMSNorm, eps 1e-6, a gain and no bias or mean subtraction; Zhang & Sennrich 2019, arXiv:1910.07467; Llama, Qwen3).",
    )
    qk_norm: bool = doc_field(
        False,
        "RMSNorm each head's queries and keys (a learned gain of head_size, as Qwen3's q_norm / k_norm) before attention (and before RoPE): bounds the attention logits (Dehghani et al. 2023, arXiv:2302.05442; Wortsman et al. 2023, arXiv:2309.14322).",
    )
    mlp: str = doc_field(
        "gelu",
        "The feed-forward network: 'gelu' (GPT-2's up_proj, GELU, down_proj), 'swiglu' (down_proj(silu(gate_proj(x)) * up_proj(x)); Shazeer 2020, GLU Variants, arXiv:2002.05202; Llama, Qwen3) or 'relu2' (down_proj(relu(up_proj(x))^2); So et al. 2021, Primer, arXiv:2109.08668).",
    )
    mlp_hidden: int = doc_field(
        0,
        f"Hidden width of the MLP; 0 is automatic, GELU's parameter count: 4 n_embd for 'gelu' and 'relu2', 2/3 of 4 n_embd rounded up to a multiple of {MLP_MULTIPLE_OF} for 'swiglu' (its three matrices; Llama rounds to 256). Hugging Face's intermediate_size.",
    )
    n_kv_head: int = doc_field(
        0,
        "Key/value heads (grouped-query attention: each shares its keys and values with n_head / n_kv_head query heads; Ainslie et al. 2023, arXiv:2305.13245); 0 means n_head (multi-head attention). Must divide n_head. The KV cache holds n_kv_head heads.",
    )
    logit_softcap: float = doc_field(
        0.0,
        "Cap the logits smoothly at +-cap: cap * tanh(logits / cap), before the loss and before sampling (Gemma 2 report, arXiv:2408.00118, which caps at 30); 0 means no cap.",
    )

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"model.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise UserError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}: "
                "pick n_head that divides n_embd"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if self.gelu_approximate not in GELU_APPROXIMATIONS:
            raise UserError(f"model.gelu_approximate must be 'tanh' or 'none', got {self.gelu_approximate!r}")
        if self.init not in INIT_POLICIES:
            raise UserError(f"model.init must be one of {', '.join(INIT_POLICIES)}, got {self.init!r}")
        self._check_choices()
        if self.zero_init_head and self.tie_embeddings:
            raise UserError(
                "model.zero_init_head would zero the tied embedding too: set model.tie_embeddings=false, "
                "or drop model.zero_init_head"
            )

    def _check_choices(self) -> None:
        """The modern choices (position, norm, qk_norm, mlp, n_kv_head, logit_softcap): values and what they need."""
        for name, choices in (("position", POSITIONS), ("norm", NORMS), ("mlp", MLPS)):
            if getattr(self, name) not in choices:
                raise UserError(f"model.{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            raise UserError(f"model.rope_theta must be a finite number > 0, got {self.rope_theta!r}")
        if self.rope_theta != DEFAULT_ROPE_THETA and self.position != "rope":
            raise UserError(
                "model.rope_theta needs rotary positions: set model.position=rope, or drop model.rope_theta"
            )
        if self.position == "rope" and self.head_size % 2:
            raise UserError(
                f"model.position=rope rotates pairs of dimensions, but the head size n_embd / n_head = "
                f"{self.head_size} is odd: pick n_head so that n_embd / n_head is even"
            )
        for name in ("mlp_hidden", "n_kv_head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserError(f"model.{name} must be an integer >= 0 (0: automatic), got {value!r}")
        if self.n_head % self.kv_heads:
            raise UserError(
                f"model.n_kv_head={self.n_kv_head} does not divide model.n_head={self.n_head}: "
                "pick n_kv_head that divides n_head (0 means n_head)"
            )
        if not (self.logit_softcap >= 0 and math.isfinite(self.logit_softcap)):  # an infinite cap makes inf * 0
            raise UserError(f"model.logit_softcap must be a finite number >= 0 (0: no cap), got {self.logit_softcap!r}")

    @property
    def head_size(self) -> int:
        """Width of one attention head: ``n_embd // n_head``."""
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_kv_head``, or ``n_head`` where it is 0 (multi-head attention)."""
        return self.n_kv_head or self.n_head

    @property
    def mlp_width(self) -> int:
        """The MLP's hidden width: ``mlp_hidden``, or the automatic width of ``mlp`` (see the field's help)."""
        if self.mlp_hidden:
            return self.mlp_hidden
        if self.mlp == "swiglu":
            # 2/3 of 4 n_embd, so three matrices hold about the parameters of GELU's two (Shazeer 2020, sec. 2).
            return -(-(8 * self.n_embd) // (3 * MLP_MULTIPLE_OF)) * MLP_MULTIPLE_OF
        return 4 * self.n_embd

    def non_default_choices(self) -> list[str]:
        """``["model.position=rope", ...]``: the modern choices set away from GPT-2's block (empty for GPT-2's)."""
        return choices_set({n: getattr(self, n) for n in CHOICE_FIELDS})


def choices_set(model_values: dict) -> list[str]:
    """``["model.position=rope", ...]`` for the :data:`CHOICE_FIELDS` in ``model_values`` (a ``[model]`` table)
    that differ from GPT-2's block, in field order."""
    defaults = GPTConfig.__dataclass_fields__
    return [
        f"model.{n}={model_values[n]}"
        for n in CHOICE_FIELDS
        if model_values.get(n, defaults[n].default) != defaults[n].default
    ]
