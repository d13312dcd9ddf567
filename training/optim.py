"""The optimizer of a run, by ``train.optimizer``: AdamW on everything, or Muon on the blocks' matrices and AdamW on the rest.

    optimizer = build_optimizer(model, cfg.train, device)
    optimizer.param_groups      # each carries lr_scale: train_step sets lr = schedule(step) * lr_scale
    optimizer.step(); optimizer.zero_grad(set_to_none=True); optimizer.state_dict()

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks",
kellerjordan.github.io/posts/muon; modded-nanogpt, nanochat) is SGD with Nesterov momentum whose
update, for a 2-D weight matrix, is orthogonalised by a Newton-Schulz iteration.  It is
``torch.optim.Muon`` here (:class:`Muon` runs its Newton-Schulz iteration in the run's compute
dtype), given only the 2-D weights inside the transformer blocks (the q/k/v/out projections and the
MLP's matrices).  Everything else stays with AdamW and today's groups and
decay rules (:meth:`model.gpt.GPT.param_groups`): the embeddings, ``lm_head``, the norms' gains and
the biases.  A tied matrix is an embedding, so it is AdamW's in both arms of a tied-vs-untied
comparison, and the ``lm_head`` a tie-then-untie run splits off joins AdamW too.
"""

from __future__ import annotations

import collections

import torch

from model.gpt import GPT
from training.config import TrainConfig


class MuonAdamW:
    """Muon on some parameters and AdamW on the others, stepped, zeroed, saved and restored as one optimizer.

    ``param_groups`` lists AdamW's groups then Muon's (the same dicts, so setting a group's ``lr``
    sets the optimizer's); ``state`` reads both optimizers' states and a new entry goes to AdamW's;
    :meth:`add_param_group` adds to AdamW (a tie-then-untie run's new ``lm_head``).  The state dict
    is ``{"adamw": ..., "muon": ...}``, each that optimizer's own.
    """

    def __init__(self, adamw: torch.optim.AdamW, muon: torch.optim.Muon) -> None:
        self.adamw, self.muon = adamw, muon

    @property
    def param_groups(self) -> list[dict]:
        """AdamW's groups, then Muon's."""
        return self.adamw.param_groups + self.muon.param_groups

    @property
    def state(self) -> collections.ChainMap:
        """Per-parameter state of both optimizers (a parameter is in one of them); writes go to AdamW's."""
        return collections.ChainMap(self.adamw.state, self.muon.state)

    def add_param_group(self, group: dict) -> None:
        """Add ``group`` to AdamW: a parameter that joins mid-run is an embedding (the untied ``lm_head``)."""
        self.adamw.add_param_group(group)

    def step(self) -> None:
        """One update of every parameter: AdamW's, then Muon's (they share no parameter, so the order is immaterial)."""
        self.adamw.step()
        self.muon.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient."""
        self.adamw.zero_grad(set_to_none=set_to_none)
        self.muon.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        """``{"adamw": AdamW's state dict, "muon": Muon's}``."""
        return {"adamw": self.adamw.state_dict(), "muon": self.muon.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore both from :meth:`state_dict`'s form; ``KeyError`` / ``ValueError`` for another form (e.g. AdamW's alone)."""
        self.adamw.load_state_dict(state["adamw"])
        self.muon.load_state_dict(state["muon"])


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` whose Newton-Schulz iteration runs in ``ns_dtype`` instead of always bfloat16.

    torch's iteration casts each update to bfloat16, which suits GPUs and CPUs with bf16 matmul
    instructions.  A CPU without them emulates bf16 matmuls: on a family-25 EPYC a (128, 512) matrix's
    three products took 14.7 ms in bf16 against 0.89 ms in float32, which made a Muon step of the char
    recipe 18x an AdamW step.  So a float32 run orthogonalises in float32 (more exact, too), and a
    bf16 run as torch does.  Everything else (validation, groups, ``momentum_buffer`` state, the update
    rule of torch's docs) is torch's, so checkpoints load either way.
    """

    def __init__(self, params, *, ns_dtype: torch.dtype = torch.bfloat16, **kwargs) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype  # not a group key: a loaded state dict replaces the groups

    @torch.no_grad()
    def step(self, closure=None):
        """One Muon update of every parameter with a gradient (torch.optim.Muon's rule); returns ``closure()``'s loss.

        The updates of a group's matrices of one shape (after turning tall ones wide) are orthogonalised
        together, as one batch of matrix products: a small model's 24 matrices cost 2 batched iterations
        instead of 24, which is most of the optimizer's time outside the products themselves.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            params = [p for p in group["params"] if p.grad is not None]
            updates = []
            for p in params:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p.grad))
                buf.lerp_(p.grad, 1 - momentum)
                updates.append(p.grad.lerp(buf, momentum) if group["nesterov"] else buf)
            ns = (group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype)
            for p, update in zip(params, orthogonalise_all(updates, *ns), strict=True):
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-lr * shape_scale(p.shape, group["adjust_lr_fn"]))
        return loss


def shape_scale(shape: torch.Size, rule: str | None) -> float:
    """torch.optim.Muon's learning-rate factor for a (rows, cols) matrix: sqrt(max(1, rows / cols)) by default
    ("original", Jordan et al. 2024), 0.2 sqrt(max(rows, cols)) for "match_rms_adamw" (Liu et al. 2025, arXiv 2502.16982)."""
    rows, cols = shape[:2]
    return 0.2 * max(rows, cols) ** 0.5 if rule == "match_rms_adamw" else max(1.0, rows / cols) ** 0.5


def orthogonalise(
    g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration: ``g`` (m, n) or a batch (k, m, n) -> about U S' V^T, S' near 1,
    in ``dtype``, each matrix on its own.

    The iteration of Jordan et al. 2024 (kellerjordan.github.io/posts/muon) and torch.optim.Muon,
    with its coefficients (a, b, c): X <- a X + (b A + c A^2) X, A = X X^T, on the wider side's
    transpose, after scaling each X to Frobenius norm 1 so its spectral norm is at most 1.
    """
    if g.dim() == 2:
        return orthogonalise(g.unsqueeze(0), coefficients, steps, eps, dtype).squeeze(0)
    a, b, c = coefficients
    x = g.to(dtype)
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT  # (k, m, m), m the shorter side
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def orthogonalise_all(
    updates: list[torch.Tensor], coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> list[torch.Tensor]:
    """:func:`orthogonalise` of each 2-D tensor in ``updates``, in their order, the ones of one shape (tall ones
    turned wide) and device stacked into one batch."""
    batches: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, u in enumerate(updates):
        rows, cols = u.shape
        batches[(min(rows, cols), max(rows, cols), u.device)].append(i)
    out: list[torch.Tensor] = [torch.empty(0)] * len(updates)
    for members in batches.values():
        wide = [updates[i].mT if updates[i].size(0) > updates[i].size(1) else updates[i] for i in members]
        for i, o in zip(members, orthogonalise(torch.stack(wide), coefficients, steps, eps, dtype), strict=True):
            out[i] = o.mT if updates[i].size(0) > updates[i].size(1) else o
    return out


def muon_matrices(model: GPT) -> list[torch.nn.Parameter]:
    """The parameters Muon trains: every 2-D weight inside ``model.blocks`` (projections and MLP matrices).

    Not the embeddings, ``lm_head`` (tied or not), norm gains (1-D, QK-norm's included) or biases.
    """
    return [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2]


def build_optimizer(
    model: GPT, tc: TrainConfig, device: torch.device, amp_dtype: torch.dtype | None = None
) -> torch.optim.Optimizer | MuonAdamW:
    """The optimizer ``tc.optimizer`` names for ``model``'s parameters, each group with its ``lr_scale``.

    ``'adamw'``: ``torch.optim.AdamW`` over :meth:`GPT.param_groups` (fused on CUDA and CPU).
    ``'muon'``: :class:`MuonAdamW`: :class:`Muon` (``tc.muon_momentum``, Nesterov, decoupled
    weight decay ``tc.weight_decay``) on :func:`muon_matrices`, at ``tc.muon_learning_rate`` times the
    schedule's factor (its group's ``lr_scale`` is ``muon_learning_rate / learning_rate``), and AdamW on
    the rest with the same groups as the ``'adamw'`` arm.  Muon orthogonalises in ``amp_dtype`` (the
    run's autocast dtype), in float32 when the run has none.
    """
    matrices = muon_matrices(model) if tc.optimizer == "muon" else []
    groups = model.param_groups(
        tc.weight_decay,
        tc.embedding_weight_decay,
        tc.embedding_lr_scale,
        tc.head_lr_scale,
        exclude={id(p) for p in matrices},
    )
    # The fused kernel exists on CPU too: 1.11x faster steps on the char recipe on 2 cores
    # (interleaved A/B, results/speed-cpu-2026-11-23/).
    adamw = torch.optim.AdamW(
        groups, lr=tc.learning_rate, betas=(tc.beta1, tc.beta2), fused=device.type in ("cuda", "cpu")
    )
    if not matrices:
        return adamw
    muon = Muon(
        [{"params": matrices, "lr_scale": tc.muon_learning_rate / tc.learning_rate}],
        lr=tc.muon_learning_rate,
        weight_decay=tc.weight_decay,
        momentum=tc.muon_momentum,
        nesterov=True,
        ns_dtype=amp_dtype or torch.float32,
    )
    return MuonAdamW(adamw, muon)
