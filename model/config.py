"""The shape and initialisation of a GPT: :class:`GPTConfig`, the ``[model]`` section of a run's config.

from model.config import GPTConfig
config = GPTConfig(n_layer=4, n_head=4, n_embd=128, tie_embeddings=False)
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import UserError
from core.settings import doc_field

INIT_POLICIES = ("gpt2", "pytorch")
GELU_APPROXIMATIONS = ("tanh", "none")  # F.gelu's `approximate` argument


@dataclass
class GPTConfig:
    """Shape of the model.  Validated on construction; a bad value raises :class:`UserError`."""

    vocab_size: int = doc_field(50257, "Vocabulary size; set from the tokenizer, never by hand.")
    block_size: int = doc_field(128, "Context length in tokens (T); also the number of learned positions.")
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
        "The MLP's GELU, as F.gelu's `approximate`: 'tanh' (GPT-2's gelu_new, Hendrycks & Gimpel 2016) or 'none' (the exact erf form: nanoGPT's nn.GELU, Hugging Face's 'gelu'; about half the cost on a CPU).",
    )
    init: str = doc_field(
        "gpt2",
        "Initialisation policy, the same for both arms: 'gpt2' (every weight N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)); GPT-2, nanoGPT) or 'pytorch' (PyTorch's layer defaults: nn.Linear Kaiming-uniform, nn.Embedding N(0, 1); a tied matrix is the embedding's).",
    )
    zero_init_head: bool = doc_field(
        False, "Start an untied lm_head at zero (nanochat, modded-nanogpt); needs tie_embeddings=false."
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
        if self.zero_init_head and self.tie_embeddings:
            raise UserError(
                "model.zero_init_head would zero the tied embedding too: set model.tie_embeddings=false, "
                "or drop model.zero_init_head"
            )
