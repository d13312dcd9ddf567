"""The GPT model: a GPT-2-style decoder-only transformer with an optional tied embedding.

One concept per class, as in nanoGPT: :class:`GPTConfig` (``model/config.py``),
:class:`CausalSelfAttention` (``model/attention.py``), the MLPs (``model/mlp.py``), the norms
(``model/norm.py``), rotary positions (``model/rope.py``), :class:`Block`, :class:`GPT`.  The
default config is GPT-2's block; the modern choices (RoPE, RMSNorm, QK-norm, SwiGLU / ReLU²,
grouped-query attention, a logit soft-cap) are config values (``docs/model.md``).  Every projection is an
``nn.Linear`` (``y = x @ W.T + b``, weight shape ``(out_features, in_features)``).  The model
returns logits; there is no softmax module anywhere -- the loss is ``nn.CrossEntropyLoss`` on
the logits (or the same cross-entropy a slice of rows at a time, ``model/head_loss.py``) and
sampling draws straight from them (``model/sampling.py``).

Use it from Python::

    from model import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64))
    logits, loss = model(idx, targets)        # idx, targets: (B, T) int64
    out = model.eval().generate(idx, 100, top_k=50)   # (B, T + 100), with a KV cache
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.errors import UserError
from model.attention import CausalSelfAttention
from model.config import GPTConfig
from model.head_loss import fused_loss_outside_compile, linear_cross_entropy, padded_head, softcap
from model.kv_cache import KVCache
from model.mlp import MLP, make_mlp
from model.norm import make_norm
from model.rope import RotaryEmbedding
from model.sampling import check_sampling, row_generators, sample_next

__all__ = ["GPT", "Block", "CausalSelfAttention", "MLP"]


class Block(nn.Module):
    """One pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``.

    ``ln_1``/``ln_2`` are LayerNorm or RMSNorm (``config.norm``), ``mlp`` GELU, SwiGLU or ReLU² (``config.mlp``).
    """

    def __init__(self, config: GPTConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = make_mlp(config)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``(B, T, n_embd) -> (B, T, n_embd)``; ``cache`` and ``rotary`` as in :meth:`CausalSelfAttention.forward`."""
        x = x + self.attn(self.ln_1(x), cache, rotary)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2-style language model: token ids ``(B, T)`` -> logits ``(B, T, vocab_size)``.

    Embedding tying: with ``config.tie_embeddings`` the head's weight *is* the token
    embedding (``self.lm_head.weight is self.wte.weight``): one ``Parameter`` of shape
    ``(vocab_size, n_embd)``, listed once by ``parameters()``, so the tied model has exactly
    ``vocab_size * n_embd`` fewer parameters than the untied one.

    Initialisation policy (``config.init``, the same for both arms).  ``'gpt2'`` (GPT-2 paper
    sec. 2.3 / nanoGPT): every Linear and Embedding weight ~ N(0, 0.02), biases zero,
    LayerNorm weight one; the residual projections (``attn.out_proj``, ``mlp.down_proj``)
    ~ N(0, 0.02 / sqrt(2 n_layer)) so the residual stream's variance does not grow with depth.
    Untied, the embedding and the head are two independent N(0, 0.02) draws; tied, the one
    shared matrix is drawn once.  ``'pytorch'``: the layers' own defaults (``nn.Linear``
    Kaiming-uniform U(-1/sqrt(in), 1/sqrt(in)), ``nn.Embedding`` N(0, 1)); a tied matrix is then
    the embedding's N(0, 1) draw, so its initial logits are about sqrt(3 n_embd) times larger
    than an untied head's (whose U(-a, a) draw has std a / sqrt(3), a = 1 / sqrt(n_embd)).  ``config.zero_init_head`` zeroes an untied head (nanochat).

    ``config.lm_head_bias`` adds a learned ``(vocab_size,)`` bias to the head: a free unigram
    offset, which a tied model otherwise has to encode in its shared matrix.
    :meth:`untie` turns a tied model into an untied one mid-run (tie-then-untie).

    How the head runs, not what it computes, is given at construction (``training.setup.new_model``
    passes the run's resolved ``train.*``): ``pad_vocab_multiple`` pads the head's rows to that
    multiple for the matmul alone (:func:`model.head_loss.padded_head`), and ``head_loss`` is the
    loss used when ``forward`` is asked for no logits: ``'chunked'`` or ``'fused'``.  Raises
    ``ValueError`` for another ``head_loss`` or a multiple below 1.
    """

    def __init__(self, config: GPTConfig, pad_vocab_multiple: int = 1, head_loss: str = "chunked") -> None:
        super().__init__()
        if head_loss not in ("chunked", "fused") or pad_vocab_multiple < 1:
            raise ValueError(
                f"head_loss must be 'chunked' or 'fused' and pad_vocab_multiple >= 1, got {head_loss!r}, {pad_vocab_multiple}"
            )
        if head_loss == "fused" and config.logit_softcap:
            raise ValueError("the fused head loss has no logit soft-cap: use head_loss='chunked'")
        self.config = config
        self.pad_vocab_multiple, self.head_loss = pad_vocab_multiple, head_loss
        self.fused_loss = fused_loss_outside_compile() if head_loss == "fused" else None
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        # Learned positions are a table; rotary ones are computed (no parameters, no state_dict keys).
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.position == "learned" else None
        self.rotary = (
            RotaryEmbedding(config.head_size, config.rope_theta, config.block_size)
            if config.position == "rope"
            else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.ln_f = make_norm(config, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=config.lm_head_bias)
        if config.tie_embeddings:
            # One Parameter in two places: nn.Linear computes x @ W.T with W (vocab_size, n_embd),
            # exactly the embedding's shape, so no transpose copy is needed.
            self.lm_head.weight = self.wte.weight
        self.loss_fn = nn.CrossEntropyLoss()
        if config.init == "gpt2":
            self.apply(self._init_weights)
            residual_std = 0.02 / math.sqrt(2 * config.n_layer)
            for block in self.blocks:
                nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
                nn.init.normal_(block.mlp.down_proj.weight, mean=0.0, std=residual_std)
        if self.lm_head.bias is not None:
            nn.init.zeros_(self.lm_head.bias)  # the offset starts neutral under either policy
        if config.zero_init_head:
            nn.init.zeros_(self.lm_head.weight)

    @property
    def tied(self) -> bool:
        """Whether ``lm_head.weight`` *is* ``wte.weight`` now (False after :meth:`untie`)."""
        return self.lm_head.weight is self.wte.weight

    def untie(self) -> torch.nn.Parameter:
        """Give ``lm_head`` its own copy of the tied matrix; returns the new Parameter.

        The logits do not change at this moment; from now on the head and the embedding train
        apart.  ``self.config`` becomes a copy with ``tie_embeddings=False`` (the run's config
        still says how the run began).  Raises :class:`UserError` if the model is not tied.
        """
        if not self.tied:
            raise UserError("untie() needs a tied model: this one's lm_head is already its own matrix")
        self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())
        self.config = dataclasses.replace(self.config, tie_embeddings=False)
        return self.lm_head.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self, non_embedding: bool = False) -> int:
        """Number of parameters, each shared ``Parameter`` counted once.

        With ``non_embedding=True`` the token and (learned) position embeddings are left out, and so is
        an *untied* ``lm_head`` (it is the output embedding): what remains is the transformer
        body, identical for a tied and an untied model of the same shape.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wte.weight.numel() + (self.wpe.weight.numel() if self.wpe is not None else 0)
            if not self.tied:
                n -= self.lm_head.weight.numel()
            if self.lm_head.bias is not None:
                n -= self.lm_head.bias.numel()
        return n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``idx`` ``(B, T)`` int64 -> ``(logits (B, T, vocab_size), loss or None)``.

        ``loss`` is the mean ``nn.CrossEntropyLoss`` over all B*T positions when ``targets``
        ``(B, T)`` int64 in ``[0, vocab_size)`` is given (computed in float32 even under bf16
        autocast), else ``None``.  (This path would also skip targets of -100, the loss's
        ``ignore_index``; the sliced path below has none and raises on them: the data never makes one.)
        ``return_logits=False`` (with ``targets``) returns ``(None, loss)`` and computes the same
        loss without ever holding all ``(B, T, vocab_size)`` logits: a slice of rows at a time
        (:func:`model.head_loss.linear_cross_entropy`, what training and evaluation use on a CPU),
        or Liger-Kernel's fused kernel when ``self.head_loss == 'fused'``.  With
        ``self.pad_vocab_multiple > 1`` the head's matmul runs on rows padded to that multiple
        (:func:`model.head_loss.padded_head`); logits and loss are the unpadded head's.  With
        ``config.logit_softcap`` the logits are ``cap * tanh(logits / cap)`` (:func:`model.head_loss.softcap`)
        in every path, before the loss.
        Raises :class:`UserError` if ``T > block_size``, ``ValueError`` for ``return_logits=False`` without targets.
        """
        B, T = idx.shape
        x = self.ln_f(self.hidden(idx))  # (B, T, n_embd)
        if not return_logits:
            if targets is None:
                raise ValueError("return_logits=False needs targets: the loss is all it returns")
            # The padded rows are masked (-inf bias), not cut: these losses see whole rows of logits.
            weight, bias = padded_head(self.lm_head.weight, self.lm_head.bias, self.pad_vocab_multiple, mask=True)
            x, targets = x.view(B * T, -1), targets.reshape(B * T)  # (B*T, n_embd), (B*T,)
            if self.fused_loss is not None:
                return None, self.fused_loss(x, weight, bias, targets)
            return None, linear_cross_entropy(x, weight, bias, targets, cap=self.config.logit_softcap)
        weight, bias = padded_head(self.lm_head.weight, self.lm_head.bias, self.pad_vocab_multiple)
        # (B, T, vocab_size): the padded columns are cut off, so no padded id is ever scored or sampled.
        logits = softcap(F.linear(x, weight, bias)[..., : self.lm_head.out_features], self.config.logit_softcap)
        loss = None
        if targets is not None:
            # (B*T, vocab_size) against (B*T,); float32 so bf16 rounding never reaches the loss.
            loss = self.loss_fn(logits.float().view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def hidden(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """``idx`` ``(B, T)`` -> the residual stream ``(B, T, n_embd)`` before ``ln_f`` and the head.

        The tokens sit at positions ``0 .. T-1``, or after the ``cache.length`` cached ones: the
        learned table's rows, or (``position='rope'``) the angles their queries and keys are rotated by.
        Raises :class:`UserError` if the positions would pass ``block_size``.
        """
        T = idx.size(1)
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise UserError(
                f"sequence of {start + T} tokens is longer than block_size={self.config.block_size}: "
                "crop the input to the last block_size tokens"
            )
        x = self.wte(idx)  # (B, T, n_embd)
        rotary = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(start, start + T, device=idx.device))  # + (T, n_embd)
        else:  # (cos, sin) (T, head_size) of positions start ..: every block rotates its queries and keys by them
            rotary = self.rotary(start, T, idx.device)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, cache, rotary)
        return x

    @torch.no_grad()
    def decode(self, idx: torch.Tensor, cache: KVCache, head_t: torch.Tensor | None = None) -> torch.Tensor:
        """``idx`` ``(B, T)`` after the cached positions -> next-token logits ``(B, vocab_size)``; fills ``cache``.

        Only the last position goes through the head (nanoGPT's inference shortcut): with a
        50257-token vocabulary the head is most of a small model's work.  ``head_t``, the
        contiguous ``lm_head.weight.T`` ``(n_embd, vocab_size)``, gives the same logits up to
        rounding, 4x faster for one row on a CPU (0.9 vs 3.5 ms at 128 x 50257, measured).
        """
        x = self.hidden(idx, cache)  # (B, T, n_embd)
        cache.length += idx.size(1)
        x = self.ln_f(x[:, -1])  # (B, n_embd)
        if head_t is None:
            return softcap(self.lm_head(x), self.config.logit_softcap)  # (B, vocab_size)
        logits = x @ head_t  # (B, vocab_size)
        return softcap(logits if self.lm_head.bias is None else logits + self.lm_head.bias, self.config.logit_softcap)

    def param_groups(
        self,
        weight_decay: float,
        embedding_weight_decay: bool = True,
        embedding_lr_scale: float = 1.0,
        head_lr_scale: float = 1.0,
        exclude: set[int] | frozenset[int] = frozenset(),
    ) -> list[dict]:
        """AdamW parameter groups: decay weights with ``dim >= 2``; never biases or LayerNorm gains.

        ``embedding_weight_decay`` sets the policy for the embedding matrices -- ``wte``, ``wpe``
        and ``lm_head`` (the output embedding), tied or not, so both arms of a comparison get the
        same treatment: True decays them (nanoGPT), False does not (minGPT).  ``named_parameters()``
        de-duplicates shared parameters, so a tied matrix lands in exactly one group, once.

        Each group carries ``lr_scale``, its learning rate as a multiple of the schedule's.  With
        both scales 1 there are two groups (decayed, not decayed).  Otherwise ``wte`` (the tied
        matrix, if tied) gets a group at ``embedding_lr_scale`` and an untied ``lm_head.weight``
        one at ``head_lr_scale`` (nanochat's separate embedding / unembedding learning rates).
        Parameters whose ``id`` is in ``exclude`` are left out (another optimizer trains them:
        Muon, :mod:`training.optim`).
        """
        embeddings = {id(m.weight) for m in (self.wte, self.wpe, self.lm_head) if m is not None}
        params = [p for _, p in self.named_parameters() if p.requires_grad and id(p) not in exclude]

        def decays(p: torch.Tensor) -> bool:
            return p.dim() >= 2 and (embedding_weight_decay or id(p) not in embeddings)

        def group(ps: list, scale: float = 1.0) -> dict:
            return {"params": ps, "weight_decay": weight_decay if decays(ps[0]) else 0.0, "lr_scale": scale}

        if embedding_lr_scale == 1.0 and head_lr_scale == 1.0:
            return [
                {"params": [p for p in params if decays(p)], "weight_decay": weight_decay, "lr_scale": 1.0},
                {"params": [p for p in params if not decays(p)], "weight_decay": 0.0, "lr_scale": 1.0},
            ]
        own = {id(self.wte.weight), id(self.lm_head.weight)}
        body = [p for p in params if id(p) not in own]
        groups = [
            {"params": [p for p in body if decays(p)], "weight_decay": weight_decay, "lr_scale": 1.0},
            {"params": [p for p in body if not decays(p)], "weight_decay": 0.0, "lr_scale": 1.0},
            group([self.wte.weight], embedding_lr_scale),
        ]
        if not self.tied:
            groups.append(group([self.lm_head.weight], head_lr_scale))
        return groups

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token: ``6 N + 12 L H Q T`` (PaLM appendix B, as in nanoGPT).

        ``N`` counts matmul weights only, i.e. the weights of the ``nn.Linear`` layers (q/k/v/out
        projections, the MLP, the head): embedding lookups, LayerNorms and biases are not
        matmuls, and a tied head is counted once, as the head.  L, H, Q, T are n_layer, n_head,
        head size and the sequence length (``block_size`` by default).  The model choices need
        nothing more: SwiGLU's three matrices and grouped-query attention's narrower ``k_proj`` /
        ``v_proj`` are Linears, counted as they are; the attention term has ``n_head`` query heads
        with or without GQA.  RoPE's rotations, the norms (QK-norm's too) and the logit soft-cap are
        elementwise, O(n_embd) or O(vocab_size) a token against the matmuls' O(n_embd^2) and
        O(vocab_size n_embd), and are left out as LayerNorm always was.
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
        top_p: float | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        stop_token: int | None = None,
        use_cache: bool = True,
    ) -> Iterator[torch.Tensor]:
        """Yield up to ``max_new_tokens`` next-token tensors ``(B,)`` for the prompts ``idx`` ``(B, T)``.

        The model sees the last ``block_size`` tokens at positions ``0 ..``.  With ``use_cache``
        the prompt is prefilled in one :meth:`decode`, then each step runs one position.  Once
        the window slides, every token moves to another (absolute, learned) position, changing
        every cached key and value: each step then re-prefills the cropped window, so the tokens
        are the uncached model's.  Under ``position='rope'`` the same holds: a cached key is
        rotated by its position in the window, and after the window slides the re-prefill rotates
        every key by its new position, as the uncached forward does.  (Rotary scores depend on
        relative positions only, so the old keys would be right up to rounding; re-prefilling keeps
        the cached and uncached tokens equal bit for bit, as for learned positions.)  :func:`sample_next` picks them, with Gumbel noise keyed to token
        ids, so the same ``generator`` seed gives the same tokens with and without the cache, and
        row i gives the same tokens in any batch of more than i rows (up to logit rounding that
        changes which tokens top-k / top-p keep or flips a near-tie).  A row that produced
        ``stop_token`` repeats it until every row has.  Raises :class:`UserError` for bad sampling arguments.
        """
        check_sampling(temperature, top_k, top_p, greedy)
        # One noise stream per row: row i's tokens do not depend on the batch size (see row_generators).
        rows = row_generators(generator, idx.size(0)) if generator is not None and not greedy else None
        block_size = self.config.block_size
        finished = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)  # (B,)
        cache = KVCache(self.config)
        head_t = self.lm_head.weight.t().contiguous() if use_cache else None  # (n_embd, vocab_size), see decode
        for step in range(max_new_tokens):
            if not use_cache:
                logits = self(idx[:, -block_size:])[0][:, -1]  # (B, vocab_size): the whole window each step
            elif step == 0 or cache.length == block_size:  # the prompt, or the window slid
                cache.length = 0
                logits = self.decode(idx[:, -block_size:], cache, head_t)
            else:
                logits = self.decode(idx[:, -1:], cache, head_t)  # one new position
            next_id = sample_next(logits.float(), temperature, top_k, top_p, greedy, rows)  # (B,)
            if stop_token is not None:
                next_id = next_id.masked_fill(finished, stop_token)
                finished |= next_id == stop_token
            idx = torch.cat([idx, next_id[:, None]], dim=1)  # (B, T + 1)
            yield next_id
            if stop_token is not None and bool(finished.all()):
                return

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """``(B, T)`` -> ``(B, T + n)``: the prompt and ``n <= max_new_tokens`` tokens; ``kwargs`` as :meth:`generate_stream`."""
        new = list(self.generate_stream(idx, max_new_tokens, **kwargs))
        if not new:
            return idx
        return torch.cat([idx, torch.stack(new, dim=1)], dim=1)
