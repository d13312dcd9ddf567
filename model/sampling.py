"""Picking the next token from logits: greedy, temperature, top-k and top-p, with no softmax.

Used by :meth:`model.gpt.GPT.generate_stream` (and so by ``sample.py``)::

    from model.sampling import sample_next
    next_id = sample_next(logits, temperature=0.8, top_k=50, top_p=0.95, generator=g)  # (B, vocab_size) -> (B,)

No probability vector is ever formed: the draw is Gumbel-max on the logits, and the nucleus
mass of top-p comes from ``torch.logcumsumexp`` / ``torch.logsumexp`` of the sorted logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from errors import UserError


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, greedy: bool) -> None:
    """Raise :class:`UserError` for ``temperature <= 0`` (unless greedy), ``top_k < 1`` or ``top_p`` outside (0, 1]."""
    if not greedy and not temperature > 0:
        raise UserError(f"temperature must be > 0, got {temperature}: use --greedy for argmax decoding")
    if top_k is not None and top_k < 1:
        raise UserError(f"top_k must be >= 1, got {top_k}: omit it to sample from the full vocabulary")
    if top_p is not None and not 0 < top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {top_p}: 1 keeps the whole distribution")


def sample_next(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
    greedy: bool = False, generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick the next token from ``logits`` ``(B, vocab_size)`` -> ids ``(B,)``, with no softmax.

    Greedy is the argmax.  Otherwise the logits are divided by ``temperature``, cut to the
    ``top_k`` largest, then to the nucleus of mass ``top_p`` (Holtzman et al. 2020, "The Curious
    Case of Neural Text Degeneration"): the fewest most-likely tokens whose probability reaches
    ``top_p``.  That mass comes from the logits by log-sum-exp: for logits sorted in decreasing
    order, ``log P(tokens 0..i) = logcumsumexp(sorted)[i] - logsumexp(sorted)``, and token i is
    kept while the mass before it is < ``top_p`` (HF's ``TopPLogitsWarper`` rule; the first
    token always stays).  The draw is the Gumbel-max trick: ``argmax(logits + Gumbel noise)`` is
    an exact sample of the categorical distribution the kept logits define (Gumbel 1954;
    Maddison et al. 2014), reproducible through ``generator``.
    """
    if greedy:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature
    k = min(top_k or logits.size(-1), logits.size(-1))
    top_logits, top_ids = torch.topk(logits, k, dim=-1)  # (B, k) each, sorted in decreasing order
    if top_p is not None and top_p < 1:
        log_mass = torch.logcumsumexp(top_logits, -1) - torch.logsumexp(top_logits, -1, keepdim=True)  # (B, k)
        mass_before = F.pad(log_mass[:, :-1], (1, 0), value=-math.inf)  # (B, k): log mass of the tokens ranked above
        top_logits = top_logits.masked_fill(mass_before >= math.log(top_p), -math.inf)
    uniform = torch.rand(top_logits.shape, generator=generator, device=generator.device if generator else None)
    # -log(-log(U)) ~ Gumbel(0, 1); clamp keeps log away from 0 and 1.
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
    choice = (top_logits + gumbel.to(top_logits.device)).argmax(dim=-1, keepdim=True)  # (B, 1)
    return top_ids.gather(-1, choice).squeeze(-1)  # (B,)
