"""AdamW parameter groups for a :class:`model.gpt.GPT`: which matrices decay, and at which learning-rate scale.

The policy lives here so :meth:`model.gpt.GPT.param_groups` stays one call; both arms of a
tied-vs-untied comparison get their groups from this one function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # model.gpt imports this module: the name is for annotations only
    from model.gpt import GPT


def adamw_groups(
    model: GPT,
    weight_decay: float,
    embedding_weight_decay: bool = True,
    embedding_lr_scale: float = 1.0,
    head_lr_scale: float = 1.0,
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
    """
    embeddings = {id(model.wte.weight), id(model.wpe.weight), id(model.lm_head.weight)}
    params = [p for _, p in model.named_parameters() if p.requires_grad]

    def decays(p: torch.Tensor) -> bool:
        return p.dim() >= 2 and (embedding_weight_decay or id(p) not in embeddings)

    def group(ps: list, scale: float = 1.0) -> dict:
        return {"params": ps, "weight_decay": weight_decay if decays(ps[0]) else 0.0, "lr_scale": scale}

    if embedding_lr_scale == 1.0 and head_lr_scale == 1.0:
        return [
            {"params": [p for p in params if decays(p)], "weight_decay": weight_decay, "lr_scale": 1.0},
            {"params": [p for p in params if not decays(p)], "weight_decay": 0.0, "lr_scale": 1.0},
        ]
    own = {id(model.wte.weight), id(model.lm_head.weight)}
    body = [p for p in params if id(p) not in own]
    groups = [
        {"params": [p for p in body if decays(p)], "weight_decay": weight_decay, "lr_scale": 1.0},
        {"params": [p for p in body if not decays(p)], "weight_decay": 0.0, "lr_scale": 1.0},
        group([model.wte.weight], embedding_lr_scale),
    ]
    if not model.tied:
        groups.append(group([model.lm_head.weight], head_lr_scale))
    return groups
