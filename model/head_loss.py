"""The language-model head and its cross-entropy, a slice of rows at a time: the loss without all the logits.

With a 50,257-token vocabulary the logits of a small model's batch are most of its memory:
``(16, 128, 50257)`` float32 is 412 MB, and ``nn.CrossEntropyLoss`` keeps its log-softmax (as
large again) for the backward pass, which adds the logits' gradient.  :func:`linear_cross_entropy`
computes the same mean loss ``lm_head`` + ``nn.CrossEntropyLoss`` would, but for one slice of
rows at a time, and computes the gradients of the head's input, weight and bias for that slice
at once (the gradient of the mean cross-entropy with respect to the logits is
``(softmax - onehot) / N``), so no more than one slice of logits ever exists.  The matmuls are
the three an ordinary forward and backward do; nothing is recomputed.  The idea is Liger-Kernel's
fused linear cross-entropy (Hsu et al., 2024, arXiv:2410.10989) and the "cut cross-entropy" of
Wijmans et al. (2024, arXiv:2411.09009), written here in plain PyTorch ops.

    loss = linear_cross_entropy(x, lm_head.weight, lm_head.bias, targets)  # x (N, n_embd), targets (N,)

With a logit soft-cap (``model.logit_softcap``, :func:`softcap`) the capped logits are what the
cross-entropy sees, here as in the logits path; the gradient passes through the cap's derivative.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Logit elements per slice: 16M float32 is 64 MB, 333 rows of GPT-2's 50,257-token vocabulary
# and the whole batch at once for a small one.  On a 2-core CPU, training the default config
# as it was then (batch 16: 2048 rows a step; medians of 20 interleaved steps, a noisy machine): 333-row slices took 0.97x
# the time of the plain logits path, 512 and 1024 rows 0.90x; 128 rows were slower.  The peak
# RSS of `python bench.py` was 1,008 MiB at 333 rows and 1,346 MiB at 667, against 2,921 MiB for the logits.
SLICE_ELEMENTS = 16 * 2**20


def slice_rows(vocab_size: int) -> int:
    """Rows per slice for a head of ``vocab_size`` outputs (:data:`SLICE_ELEMENTS` logits, at least 1 row)."""
    return max(1, SLICE_ELEMENTS // vocab_size)


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(logits / cap)``, any shape to the same shape; ``logits`` itself when ``cap`` is 0 (no cap).

    Gemma 2 report (Gemma Team 2024, arXiv:2408.00118, sec. 2): bounds every logit to ``(-cap, cap)``
    smoothly, near the identity for ``|logit| << cap``.  Still no softmax: the loss and sampling
    take these logits.
    """
    return logits if not cap else cap * torch.tanh(logits / cap)


def _capped(logits: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(softcap(logits), tanh(logits / cap))`` of a slice ``(r, V)``; ``(logits, None)`` without a cap.

    The tanh is kept for the backward: ``d softcap(z) / dz = 1 - tanh(z / cap)^2``.  A masked column
    (``-inf``, a padded head row's bias from :func:`padded_head`) stays ``-inf``: the tanh would move
    it to ``-cap`` and hand the padding a share of the softmax.
    """
    if not cap:
        return logits, None
    t = torch.tanh(logits / cap)  # (r, V)
    return (t * cap).masked_fill_(logits == float("-inf"), float("-inf")), t


def _slice_logits(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``(n, n_embd) -> (n, vocab_size)`` float32 logits (the matmul itself may run under autocast).

    With ``out`` (an ``(n, vocab_size)`` float32 buffer) they are written there: the same kernel
    ``F.linear`` calls (``addmm`` with a bias, ``mm`` without), so the same bits.
    """
    if out is None:
        return F.linear(x, weight, bias).float()
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


def _slice_buffers(x: torch.Tensor, weight: torch.Tensor, rows: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Two ``(min(rows, N), vocab_size)`` float32 buffers, for the logits and log-probabilities of every slice.

    Why: each slice's two 64 MB tensors, allocated and freed 2 x 7 times a step (the default config at batch 16),
    fragmented the heap that ``core.hardware.keep_freed_memory_on_cpu`` never hands back: a run's RSS
    crept up by 64 MB steps (1,293 -> 1,506 MiB over 60 steps of the untied default config).  Two
    buffers per call hold the same memory without the churn.  ``(None, None)`` under autocast or for
    weights that are not float32, where the slices are computed as before.
    """
    if torch.is_autocast_enabled(x.device.type) or x.dtype != torch.float32 or weight.dtype != torch.float32:
        return None, None
    shape = (min(rows, x.size(0)), weight.size(0))
    return x.new_empty(shape), x.new_empty(shape)


def _head(buf: torch.Tensor | None, r: int) -> torch.Tensor | None:
    """The first ``r`` rows of ``buf`` (contiguous), or None without a buffer."""
    return None if buf is None else buf[:r]


def _target_nll(probs: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed ``-log p(target)`` of a slice from its softmax ``probs`` ``(r, V)``: a float32 scalar.

    Why from the softmax: one fused softmax gives the gradient's probabilities, where log_softmax
    followed by ``exp`` computed every exponential twice (6.99 against 2.71 ms for 256 x 50,257
    rows on 2 cores of an AMD EPYC, 2026-11-24).  A probability that underflows (a target more
    than about 87 nats below the row's best) would give an infinite log: those rows take
    ``logsumexp(logits) - logit[target]`` instead, exactly.
    """
    p = probs.gather(1, targets[:, None]).squeeze(1)  # (r,)
    tiny = p < 1e-30
    nll = -torch.log(p)
    if bool(tiny.any()):
        rows = logits[tiny]  # (k, V)
        nll[tiny] = torch.logsumexp(rows, dim=1) - rows.gather(1, targets[tiny][:, None]).squeeze(1)
    return nll.sum()


def _matmul_operands(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """``(x, weight, bias)`` cast once to the autocast dtype when autocast is on (else as given), and that dtype or None.

    Why: under autocast every matmul casts its float32 operands anew, so each slice cast the whole
    ``(V, n_embd)`` weight twice and its ``(r, V)`` gradient twice (the head's forward and its two
    gradient matmuls).  Casting once per call and running the slices with autocast off does the
    same arithmetic with a fraction of the copies.
    """
    device = x.device.type
    if not torch.is_autocast_enabled(device):
        return x, weight, bias, None
    amp = torch.get_autocast_dtype(device)
    return x.to(amp), weight.to(amp), None if bias is None else bias.to(amp), amp


def _even_rows(n: int, rows: int) -> int:
    """Rows per slice so that ``n`` rows split into as few slices as ``rows`` allows, all about equal.

    1,024 rows at 333 per slice are 4 slices of 256, not 3 of 333 and a 25-row tail whose matmul is slow.
    """
    slices = -(-n // rows)
    return -(-n // slices) if n else rows


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``x @ weight.T + bias`` against ``targets``; gradients computed slice by slice in forward."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, rows, cap):  # noqa: D102 - see linear_cross_entropy
        n = x.size(0)
        want_x, want_w, want_b = ctx.needs_input_grad[:3]
        grad_x = torch.empty_like(x) if want_x else None  # (N, n_embd)
        grad_w = None  # (V, n_embd), the parameter's dtype: the first slice's product, then a running sum
        grad_b = torch.zeros_like(bias) if want_b else None  # (V,)
        x_mm, w_mm, b_mm, amp = _matmul_operands(x, weight, bias)
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        logits_buf, logp_buf = _slice_buffers(x_mm, w_mm, rows)
        with torch.autocast(x.device.type, enabled=False):  # the operands are cast already
            for start in range(0, n, rows):
                xs, ts = x_mm[start : start + rows], targets[start : start + rows]  # (r, n_embd), (r,)
                logits = _slice_logits(xs, w_mm, b_mm, _head(logits_buf, xs.size(0)))  # (r, V) float32
                logits, tanh = _capped(logits, cap)  # (r, V): what the cross-entropy sees
                # The cross-entropy's own gradient, inside the loss (no softmax layer: the model returns logits,
                # and sampling draws from logits): d(loss)/d(logits) = softmax(logits) - onehot. (r, V), one kernel.
                grad = torch.softmax(logits, dim=1, out=_head(logp_buf, xs.size(0)))
                total += _target_nll(grad, logits, ts)
                # d(summed loss)/d(logits) = softmax - onehot, written over the probabilities in place.
                grad.scatter_add_(1, ts[:, None], grad.new_full((ts.numel(), 1), -1.0))
                if tanh is not None:  # through the cap: d(cap tanh(z / cap)) / dz = 1 - tanh^2
                    grad.mul_(1 - tanh.square())
                if want_b:
                    grad_b += grad.sum(0)  # summed before the cast below: a float32 sum, as the bias is
                grad = grad.to(w_mm.dtype)  # one cast a slice under autocast (a no-op in float32)
                if want_x:
                    grad_x[start : start + rows] = grad @ w_mm  # (r, V) @ (V, n_embd)
                # (V, r) @ (r, n_embd).  The first slice's product is the sum so far (no zero-filled (V, n_embd)
                # to add it to); later ones add in place in float32, or in the parameter's dtype under autocast.
                if want_w and amp is None:
                    grad_w = torch.mm(grad.t(), xs) if grad_w is None else grad_w.addmm_(grad.t(), xs)
                elif want_w:
                    part = grad.t() @ xs  # the autocast dtype's product
                    grad_w = part.to(weight.dtype) if grad_w is None else grad_w.add_(part)
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.n = n
        return total / n

    @staticmethod
    @torch.autograd.function.once_differentiable  # the saved gradients are constants: no second derivative
    def backward(ctx, grad_loss):  # noqa: D102 - the saved gradients of the summed loss, scaled
        scale = grad_loss / ctx.n
        return (*(g * scale if g is not None else None for g in ctx.saved_tensors), None, None, None)


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    rows: int | None = None,
    cap: float = 0.0,
) -> torch.Tensor:
    """Mean ``nn.CrossEntropyLoss`` of the head ``x @ weight.T + bias`` against ``targets``, never holding all logits.

    ``x`` ``(N, n_embd)``, ``weight`` ``(vocab_size, n_embd)``, ``bias`` ``(vocab_size,)`` or None,
    ``targets`` ``(N,)`` int64 in ``[0, vocab_size)`` (every target counts: there is no
    ``ignore_index``) -> a float32 scalar, equal to ``F.cross_entropy(F.linear(x, weight, bias), targets)``
    up to float rounding, with the same gradients.  ``rows`` per slice defaults to :func:`slice_rows`.
    ``cap`` > 0 soft-caps the logits first (:func:`softcap`): then the loss of ``softcap(F.linear(...), cap)``.
    With gradients wanted, the gradients are computed during this call (it then costs a forward
    and backward's matmuls) and ``backward`` only scales them, so it cannot be differentiated
    twice; without (``torch.no_grad``, eval), only the loss is computed.  Raises ``ValueError``
    if the shapes disagree or ``rows < 1``.
    """
    if x.dim() != 2 or targets.shape != x.shape[:1] or weight.size(1) != x.size(1):
        raise ValueError(
            f"linear_cross_entropy: need x (N, C), weight (V, C), targets (N,); got "
            f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    if rows is not None and rows < 1:
        raise ValueError(f"linear_cross_entropy: rows per slice must be >= 1, got {rows}")
    rows = _even_rows(x.size(0), rows or slice_rows(weight.size(0)))
    targets = targets.long()  # gather and cross_entropy both index with int64
    wants_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    if wants_grad:
        return _LinearCrossEntropy.apply(x, weight, bias, targets, rows, cap)
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    x_mm, w_mm, b_mm, _ = _matmul_operands(x, weight, bias)
    logits_buf, logp_buf = _slice_buffers(x_mm, w_mm, rows)
    with torch.autocast(x.device.type, enabled=False):  # the operands are cast already
        for start in range(0, x.size(0), rows):
            xs = x_mm[start : start + rows]  # (r, n_embd)
            logits = _capped(_slice_logits(xs, w_mm, b_mm, _head(logits_buf, xs.size(0))), cap)[0]  # (r, V)
            # nll_loss(log_softmax) is what F.cross_entropy computes: the same sum, without a fresh (r, V) tensor.
            logp = torch.log_softmax(logits, dim=1, out=_head(logp_buf, xs.size(0)))
            total += F.nll_loss(logp, targets[start : start + rows], reduction="sum")
    return total / x.size(0)


def padded_head(
    weight: torch.Tensor, bias: torch.Tensor | None, multiple: int, mask: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head's ``weight`` ``(V, C)`` and ``bias`` ``(V,)`` with zero rows added up to a multiple of ``multiple``.

    -> ``(V + p, C)`` and ``(V + p,)`` (or the bias as given), ``p = -V % multiple``; both
    unchanged when ``p == 0``.  Why: GPU matmul kernels run fastest when every dimension is a
    multiple of 64 (GPT-2's 50,257 -> 50,304: +11% tokens/s for GPT-2 124M on an H100 in an
    earlier measurement, ``results/speed-h100-2026-11-23/``).  The padding is a copy made inside the
    autograd graph, so the gradient of the real rows flows back to the parameter and the
    padded rows' gradient is dropped: the parameter itself keeps ``V`` rows.

    A caller that builds all logits cuts them back to ``V`` columns.  One that cannot (a fused or
    chunked loss sees the whole row) passes ``mask=True``: the padded rows then get a bias of
    ``-inf``, so their softmax probability and gradient are exactly 0 and the loss is the
    unpadded head's (a zero bias is made for a head without one).
    """
    pad = -weight.size(0) % multiple
    if pad == 0:
        return weight, bias
    weight = F.pad(weight, (0, 0, 0, pad))  # (V + pad, C): zero rows at the end
    if mask:
        fill = torch.full((pad,), float("-inf"), dtype=weight.dtype, device=weight.device)
        bias = torch.cat([bias if bias is not None else weight.new_zeros(weight.size(0) - pad), fill])
    elif bias is not None:
        bias = F.pad(bias, (0, pad))
    return weight, bias


def fused_linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor
) -> torch.Tensor:
    """Liger-Kernel's fused linear cross-entropy (Hsu et al., 2024, arXiv:2410.10989): a Triton kernel on CUDA.

    ``x`` ``(N, n_embd)``, ``weight`` ``(V, n_embd)``, ``bias`` ``(V,)`` or None, ``targets`` ``(N,)``
    -> the mean cross-entropy, a float32 scalar, as :func:`linear_cross_entropy`.  Raises
    :class:`core.errors.UserError` when ``liger-kernel`` is not installed (training needs it only
    for ``train.head_loss='fused'``).  The model calls it through :func:`fused_loss_outside_compile`.
    """
    from core.optional import liger_fused_linear_cross_entropy

    return liger_fused_linear_cross_entropy()(x, weight, targets.long(), bias).float()


def fused_loss_outside_compile():
    """:func:`fused_linear_cross_entropy` wrapped in ``torch.compiler.disable``: same arguments and result.

    Kept out of ``torch.compile``'s graph (the model compiles around it, the kernel runs as Liger
    ships it): traced by Dynamo, Liger-Kernel 0.8.5 on PyTorch 2.11 failed both ways on an H100 on
    2026-11-27, a ``TypeError`` in its ``addmm(out_dtype=...)`` with an unpadded head and an
    illegal memory access with a padded one (``results/speed-h100-2026-11-27/``).  Made on request,
    not as a decorator: ``torch.compiler.disable`` imports Dynamo, about 1 s at every process start
    on a 2-core CPU, which no other head loss needs.
    """
    return torch.compiler.disable(fused_linear_cross_entropy)
