"""Picking the next token from logits: greedy, temperature, top-k and top-p, with no softmax.

Used by :meth:`model.gpt.GPT.generate_stream` (and so by ``sample.py``)::

    from model.sampling import sample_next
    next_id = sample_next(logits, temperature=0.8, top_k=50, top_p=0.95, generator=g)  # (B, vocab_size) -> (B,)

No probability vector is ever formed: the draw is Gumbel-max on the logits, and the nucleus
mass of top-p comes from ``torch.logcumsumexp`` / ``torch.logsumexp`` of the sorted logits.

Reproducibility: the Gumbel noise is drawn for the whole vocabulary in token-id order, and
top-k / top-p only mask tokens out.  The drawn token therefore depends on the logits' values,
never on the order a sort puts them in, so two code paths whose logits differ by float
rounding (the KV cache and the full forward, say) draw the same token unless the rounding
changes which tokens top-k / top-p keep, or flips an argmax between two near-equal scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from core.errors import UserError


# Below this, logits / temperature overflow float32 (max 3.4e38) for logits far from 0, the infinities
# tie and the lowest id wins instead of the argmax; at 1e-6 the draw is already the argmax in practice.
MIN_TEMPERATURE = 1e-6


def check_sampling(
    temperature: float, top_k: int | None, top_p: float | None, greedy: bool, as_flags: bool = False
) -> None:
    """Raise :class:`UserError` for ``temperature < MIN_TEMPERATURE`` (unless greedy), ``top_k < 1`` or ``top_p`` outside (0, 1].

    The one check of the sampling settings, for :meth:`GPT.generate` and ``sample.py``;
    ``as_flags`` names them as command-line flags (``--top-k``) instead of arguments (``top_k``).
    """

    def name(arg: str) -> str:
        return "--" + arg.replace("_", "-") if as_flags else arg

    if not greedy and not temperature >= MIN_TEMPERATURE:
        raise UserError(
            f"{name('temperature')} must be >= {MIN_TEMPERATURE:g}, got {temperature}: "
            "use --greedy for deterministic argmax decoding"
        )
    if top_k is not None and top_k < 1:
        raise UserError(f"{name('top_k')} must be >= 1, got {top_k}: omit it to sample from the whole vocabulary")
    if top_p is not None and not 0 < top_p <= 1:
        raise UserError(
            f"{name('top_p')} must be in (0, 1], got {top_p}: 1 keeps the whole distribution, 0.9 a typical nucleus"
        )


def row_generators(generator: torch.Generator, batch: int) -> list[torch.Generator]:
    """One CPU generator per batch row, seeded from ``generator``'s next ``batch`` draws.

    The seeds are drawn one after another, so row ``i``'s seed does not depend on how many
    rows follow it: sample ``i`` of a batch of N is the same text for every N > i.
    """
    seeds = torch.randint(0, 2**62, (batch,), generator=generator, device=generator.device).tolist()
    return [torch.Generator().manual_seed(s) for s in seeds]


def gumbel_noise(
    shape: tuple[int, int], generator: torch.Generator | Sequence[torch.Generator] | None, device: torch.device
) -> torch.Tensor:
    """Gumbel(0, 1) noise ``(B, vocab_size)`` in token-id order, on ``device``.

    ``generator`` is one generator for the whole batch, one per row (``len == B``), or None
    (torch's global generator).  Uses ``-log(-log(U))`` with U ~ Uniform(0, 1), clamped away
    from 0 and 1 so neither log is infinite.
    """
    if generator is None or isinstance(generator, torch.Generator):
        dev = generator.device if generator is not None else device
        uniform = torch.rand(shape, generator=generator, device=dev)  # (B, vocab_size)
    else:
        if len(generator) != shape[0]:
            raise ValueError(f"{len(generator)} generators for {shape[0]} rows")
        uniform = torch.stack(
            [torch.rand(shape[1], generator=g, device=g.device) for g in generator]
        )  # (B, vocab_size)
    return (-torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))).to(device)


def kept_tokens(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor | None:
    """Boolean mask ``(B, vocab_size)`` of the tokens top-k and top-p keep, or None when they keep all.

    top-k keeps the ``top_k`` largest logits.  top-p keeps the nucleus (Holtzman et al. 2020,
    "The Curious Case of Neural Text Degeneration"): the fewest most likely tokens whose
    probability reaches ``top_p``.  For logits sorted in decreasing order,
    ``log P(tokens 0..i) = logcumsumexp(sorted)[i] - logsumexp(sorted)``, and token i is kept
    while the mass before it is < ``top_p`` (HF's ``TopPLogitsWarper`` rule; the first token
    always stays).  ``logits`` are already divided by the temperature.
    """
    vocab = logits.size(-1)
    k = min(top_k or vocab, vocab)
    if k == vocab and (top_p is None or top_p >= 1):
        return None
    top_logits, top_ids = torch.topk(logits, k, dim=-1)  # (B, k) each, sorted in decreasing order
    keep_sorted = torch.ones_like(top_logits, dtype=torch.bool)  # (B, k)
    if top_p is not None and top_p < 1:
        log_mass = torch.logcumsumexp(top_logits, -1) - torch.logsumexp(top_logits, -1, keepdim=True)  # (B, k)
        mass_before = F.pad(log_mass[:, :-1], (1, 0), value=-math.inf)  # (B, k): log mass of the tokens ranked above
        keep_sorted = mass_before < math.log(top_p)
    return torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top_ids, keep_sorted)  # (B, vocab_size), id order


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> torch.Tensor:
    """Pick the next token from ``logits`` ``(B, vocab_size)`` -> ids ``(B,)``, with no softmax.

    Greedy is the argmax.  Otherwise the logits are divided by ``temperature`` and cut to the
    tokens :func:`kept_tokens` keeps (top-k, then the top-p nucleus); the draw is the
    Gumbel-max trick: ``argmax(logits + Gumbel noise)`` over the kept tokens is an exact sample
    of the categorical distribution they define (Gumbel 1954; Maddison et al. 2014).  The noise
    is drawn over the whole vocabulary in id order (:func:`gumbel_noise`), from ``generator``:
    one for the batch, one per row (see :func:`row_generators`), or None for torch's global one.
    """
    if greedy:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature  # (B, vocab_size)
    scores = logits + gumbel_noise(tuple(logits.shape), generator, logits.device)  # (B, vocab_size)
    keep = kept_tokens(logits, top_k, top_p)
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    return scores.argmax(dim=-1)  # (B,)
