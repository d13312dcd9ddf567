"""The optimizer of a run, by ``train.optimizer``: AdamW on everything, or Muon on the blocks' matrices and AdamW on the rest.

    optimizer = build_optimizer(model, cfg.train, device)
    optimizer.param_groups      # each carries lr_scale: train_step sets lr = schedule(step) * lr_scale
    optimizer.step(); optimizer.zero_grad(set_to_none=True); optimizer.state_dict()

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks",
kellerjordan.github.io/posts/muon; modded-nanogpt, nanochat) is SGD with Nesterov momentum whose
update, for a 2-D weight matrix, is orthogonalised by a Newton-Schulz iteration.  It is
``torch.optim.Muon`` here, given only the 2-D weights inside the transformer blocks (the q/k/v/out
projections and the MLP's matrices).  Everything else stays with AdamW and today's groups and
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


def muon_matrices(model: GPT) -> list[torch.nn.Parameter]:
    """The parameters Muon trains: every 2-D weight inside ``model.blocks`` (projections and MLP matrices).

    Not the embeddings, ``lm_head`` (tied or not), norm gains (1-D, QK-norm's included) or biases.
    """
    return [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2]


def build_optimizer(model: GPT, tc: TrainConfig, device: torch.device) -> torch.optim.Optimizer | MuonAdamW:
    """The optimizer ``tc.optimizer`` names for ``model``'s parameters, each group with its ``lr_scale``.

    ``'adamw'``: ``torch.optim.AdamW`` over :meth:`GPT.param_groups` (fused on CUDA and CPU).
    ``'muon'``: :class:`MuonAdamW`: ``torch.optim.Muon`` (``tc.muon_momentum``, Nesterov, decoupled
    weight decay ``tc.weight_decay``) on :func:`muon_matrices`, at ``tc.muon_learning_rate`` times the
    schedule's factor (its group's ``lr_scale`` is ``muon_learning_rate / learning_rate``), and AdamW on
    the rest with the same groups as the ``'adamw'`` arm.
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
    muon = torch.optim.Muon(
        [{"params": matrices, "lr_scale": tc.muon_learning_rate / tc.learning_rate}],
        lr=tc.muon_learning_rate,
        weight_decay=tc.weight_decay,
        momentum=tc.muon_momentum,
        nesterov=True,
    )
    return MuonAdamW(adamw, muon)
