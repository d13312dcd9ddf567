"""Model sizes of an experiment's arms: parameter counts without building weights, and --equal-params.

``count_params`` builds a model on the meta device (exact, no memory); ``equal_params_config``
grows a tied model to the untied parameter count (``compare.py --equal-params``); ``arm_params``
is the count an arm's checkpoints hold, for the disk estimate of ``experiment.plan``.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from core.errors import UserError
from experiment.arms import PRESETS, ArmSet
from model.config import GPTConfig
from model.gpt import GPT
from training.config import RunConfig


def count_params(cfg: GPTConfig) -> int:
    """Parameter count of a model with config ``cfg``, built on the meta device (no memory, exact)."""
    with torch.device("meta"):
        return GPT(cfg).num_params()


def equal_params_config(cfg: GPTConfig, how: str = "width") -> tuple[GPTConfig, int, int]:
    """A tied config grown until its parameter count is closest to the untied ``cfg``'s.

    ``how='width'`` searches ``n_embd`` over multiples of ``n_head`` (head size grows);
    ``how='depth'`` searches ``n_layer``.  Returns ``(tied config, tied count, untied count)``.
    Raises :class:`UserError` if the closest match is more than 2% off.
    """
    target = count_params(dataclasses.replace(cfg, tie_embeddings=False))
    if how not in ("width", "depth"):
        raise UserError(f"--equal-params must be 'width' or 'depth', got {how!r}")
    key, start, step_, limit = (
        ("n_embd", cfg.n_embd, cfg.n_head, 8 * cfg.n_embd)
        if how == "width"
        else ("n_layer", cfg.n_layer, 1, 64 * cfg.n_layer)
    )
    # The count grows monotonically with width and depth: bisect for the first value that reaches the
    # target, then take whichever of it and the value before is closer.
    values = list(range(start, limit + 1, step_))

    @functools.cache
    def count(i: int) -> int:
        return count_params(dataclasses.replace(cfg, tie_embeddings=True, **{key: values[i]}))

    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if count(mid) < target else (lo, mid)
    best_i = min({max(lo - 1, 0), lo}, key=lambda i: (abs(count(i) - target), i))
    best = dataclasses.replace(cfg, tie_embeddings=True, **{key: values[best_i]})
    best_count = count(best_i)
    if abs(best_count - target) > 0.02 * target:
        other = "depth" if how == "width" else "width"
        raise UserError(
            f"no tied model within 2% of the untied {target:,} parameters by {how} (closest {best_count:,}): "
            f"try --equal-params {other}"
        )
    return best, best_count, target


def arm_params(cfg: RunConfig, arm: str, equal_params: str | None = None, arm_set: ArmSet = PRESETS) -> int:
    """Parameters of ``arm``'s model under ``cfg`` (``model.vocab_size`` set from the data) at the end of its run.

    The arm's model settings apply, and with ``equal_params`` the grown width or depth of the arms
    that share one matrix.  Tie-then-untie ends untied: its last checkpoints hold two matrices.
    """
    settings = arm_set.settings[arm]
    model = dataclasses.replace(
        cfg.model, **{k.split(".")[1]: v for k, v in settings.items() if k.startswith("model.")}
    )
    if equal_params and arm in ("tied", "tied-bias"):
        grown, _, _ = equal_params_config(dataclasses.replace(cfg.model, tie_embeddings=False), equal_params)
        model = dataclasses.replace(model, n_embd=grown.n_embd, n_layer=grown.n_layer)
    if settings.get("train.untie_at") or settings.get("train.untie_at_cooldown"):
        model = dataclasses.replace(model, tie_embeddings=False)
    return count_params(model)
