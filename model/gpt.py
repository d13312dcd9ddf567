"""The GPT model: a GPT-2-style decoder-only transformer with an optional tied embedding.

One concept per class, as in nanoGPT: :class:`GPTConfig`, :class:`CausalSelfAttention`,
:class:`MLP`, :class:`Block`, :class:`GPT`.  Every projection is an ``nn.Linear``
(``y = x @ W.T + b``, weight shape ``(out_features, in_features)``).  The model returns
logits; there is no softmax module anywhere -- the loss is ``nn.CrossEntropyLoss`` on the
logits and sampling draws straight from them (see :meth:`GPT.generate`).

Use it from Python::

    from model import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64))
    logits, loss = model(idx, targets)        # idx, targets: (B, T) int64
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from errors import UserError


def doc_field(default, help: str):
    """A dataclass field whose ``help`` doubles as the CLI help text (litgpt-style).

    A list default is copied per instance (``default_factory``), as dataclasses require.
    """
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


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


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``(B, T, n_embd) -> (B, T, n_embd)``.

    Separate ``q_proj``/``k_proj``/``v_proj`` Linears (rather than nanoGPT's fused
    ``c_attn``) so every projection is a plain ``nn.Linear`` a reader can find by name.
    The attention itself is ``F.scaled_dot_product_attention(is_causal=True)``, which
    picks a flash / memory-efficient kernel where one exists.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_size = config.n_embd // config.n_head
        self.dropout = config.dropout
        self.q_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.k_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.v_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.out_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``; position t attends to positions <= t only."""
        B, T, C = x.shape
        # (B, T, C) -> (B, T, n_head, head_size) -> (B, n_head, T, head_size)
        q = self.q_proj(x).view(B, T, self.n_head, self.head_size).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_head, self.head_size).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, self.head_size).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )  # (B, n_head, T, head_size)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_dropout(self.out_proj(y))


class MLP(nn.Module):
    """The feed-forward network: ``Linear(n_embd, 4 n_embd) -> GELU -> Linear(4 n_embd, n_embd)``.

    Shapes ``(B, T, n_embd) -> (B, T, n_embd)``; the 4x width and tanh-approximate GELU are GPT-2's.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.down_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``, position-wise."""
        return self.dropout(self.down_proj(F.gelu(self.up_proj(x), approximate="tanh")))


class Block(nn.Module):
    """One pre-LayerNorm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``."""
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2-style language model: token ids ``(B, T)`` -> logits ``(B, T, vocab_size)``.

    Embedding tying: with ``config.tie_embeddings`` the head's weight *is* the token
    embedding (``self.lm_head.weight is self.wte.weight``): one ``Parameter`` of shape
    ``(vocab_size, n_embd)``, listed once by ``parameters()``, so the tied model has exactly
    ``vocab_size * n_embd`` fewer parameters than the untied one.

    Initialisation policy (the same for both arms; GPT-2 paper sec. 2.3 / nanoGPT):
    every Linear and Embedding weight ~ N(0, 0.02), biases zero, LayerNorm weight one;
    the residual projections (``attn.out_proj``, ``mlp.down_proj``) ~ N(0, 0.02 / sqrt(2 n_layer))
    so the residual stream's variance does not grow with depth.  Untied, the embedding
    and the head are two independent N(0, 0.02) draws; tied, the one shared matrix is drawn
    once from N(0, 0.02).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            # One Parameter in two places: nn.Linear computes x @ W.T with W (vocab_size, n_embd),
            # exactly the embedding's shape, so no transpose copy is needed.
            self.lm_head.weight = self.wte.weight
        self.loss_fn = nn.CrossEntropyLoss()
        self.apply(self._init_weights)
        residual_std = 0.02 / math.sqrt(2 * config.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.down_proj.weight, mean=0.0, std=residual_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self, non_embedding: bool = False) -> int:
        """Number of parameters, each shared ``Parameter`` counted once.

        With ``non_embedding=True`` the token and position embeddings are left out, and so is
        an *untied* ``lm_head`` (it is the output embedding): what remains is the transformer
        body, identical for a tied and an untied model of the same shape.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wte.weight.numel() + self.wpe.weight.numel()
            if self.lm_head.weight is not self.wte.weight:
                n -= self.lm_head.weight.numel()
        return n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``idx`` ``(B, T)`` int64 -> ``(logits (B, T, vocab_size), loss or None)``.

        ``loss`` is the mean ``nn.CrossEntropyLoss`` over all B*T positions when ``targets``
        ``(B, T)`` is given (computed in float32 even under bf16 autocast), else ``None``.
        Raises :class:`UserError` if ``T > block_size``.
        """
        B, T = idx.shape
        if T > self.config.block_size:
            raise UserError(
                f"sequence of {T} tokens is longer than block_size={self.config.block_size}: "
                "crop the input to the last block_size tokens"
            )
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, n_embd)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            # (B*T, vocab_size) against (B*T,); float32 so bf16 rounding never reaches the loss.
            loss = self.loss_fn(logits.float().view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def param_groups(self, weight_decay: float, embedding_weight_decay: bool = True) -> list[dict]:
        """AdamW parameter groups: decay weights with ``dim >= 2``; never biases or LayerNorm gains.

        ``embedding_weight_decay`` sets the policy for the embedding matrices -- ``wte``, ``wpe``
        and ``lm_head`` (the output embedding), tied or not, so both arms of a comparison get the
        same treatment: True decays them (nanoGPT), False does not (minGPT).  ``named_parameters()``
        de-duplicates shared parameters, so a tied matrix lands in exactly one group, once.
        """
        embeddings = {id(self.wte.weight), id(self.wpe.weight), id(self.lm_head.weight)}
        params = [p for _, p in self.named_parameters() if p.requires_grad]

        def decays(p: torch.Tensor) -> bool:
            return p.dim() >= 2 and (embedding_weight_decay or id(p) not in embeddings)

        return [
            {"params": [p for p in params if decays(p)], "weight_decay": weight_decay},
            {"params": [p for p in params if not decays(p)], "weight_decay": 0.0},
        ]

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token: ``6 N + 12 L H Q T`` (PaLM appendix B, as in nanoGPT).

        ``N`` counts matmul weights only, i.e. the weights of the ``nn.Linear`` layers (q/k/v/out
        projections, the MLP, the head): embedding lookups, LayerNorms and biases are not
        matmuls, and a tied head is counted once, as the head.  L, H, Q, T are n_layer, n_head,
        head size and the sequence length (``block_size`` by default).
        """
        c = self.config
        T = seq_len or c.block_size
        n_matmul = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        return 6 * n_matmul + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * T

    @torch.no_grad()
    def generate_stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Iterator[torch.Tensor]:
        """Yield ``max_new_tokens`` next-token tensors of shape ``(B,)``, one per step.

        ``idx`` ``(B, T)`` is the prompt; once it grows past ``block_size`` only the last
        ``block_size`` tokens are fed (the context is cropped, never overflowed).
        Greedy decoding is the argmax of the logits.  Otherwise the next token is drawn from
        ``logits / temperature`` restricted to the ``top_k`` largest (all if ``None``) by the
        Gumbel-max trick: ``argmax(logits + Gumbel noise)`` is an exact sample of the
        categorical distribution those logits define (Gumbel 1954; Maddison et al. 2014), so
        no softmax is computed and the draw is reproducible through ``generator``.
        Raises :class:`UserError` for ``temperature <= 0`` or ``top_k < 1``.
        """
        if not greedy and not temperature > 0:
            raise UserError(f"temperature must be > 0, got {temperature}: use --greedy for argmax decoding")
        if top_k is not None and top_k < 1:
            raise UserError(f"top_k must be >= 1, got {top_k}: omit it to sample from the full vocabulary")
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size :]  # (B, <= block_size)
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :].float()  # (B, vocab_size): only the last position predicts
            if greedy:
                next_id = logits.argmax(dim=-1)  # (B,)
            else:
                logits = logits / temperature
                k = min(top_k or logits.size(-1), logits.size(-1))
                top_logits, top_ids = torch.topk(logits, k, dim=-1)  # (B, k) each
                uniform = torch.rand(top_logits.shape, generator=generator, device=generator.device if generator else None)
                # -log(-log(U)) ~ Gumbel(0, 1); clamp keeps log away from 0 and 1.
                gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
                choice = (top_logits + gumbel.to(top_logits.device)).argmax(dim=-1, keepdim=True)  # (B, 1)
                next_id = top_ids.gather(-1, choice).squeeze(-1)  # (B,)
            idx = torch.cat([idx, next_id[:, None]], dim=1)  # (B, T + 1)
            yield next_id

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """``(B, T)`` -> ``(B, T + max_new_tokens)``: the prompt plus the generated tokens.

        Takes the same keyword arguments as :meth:`generate_stream`.
        """
        new = list(self.generate_stream(idx, max_new_tokens, **kwargs))
        if not new:
            return idx
        return torch.cat([idx, torch.stack(new, dim=1)], dim=1)
