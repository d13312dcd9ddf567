"""The learning-rate schedule: linear warmup, then cosine decay to ``min_lr`` (nanoGPT's)."""

from __future__ import annotations

import math

from training.config import TrainConfig


def get_lr(step: int, cfg: TrainConfig) -> float:
    """Learning rate at optimizer step ``step`` (0-based): linear warmup, then cosine decay.

    Warmup rises linearly to ``learning_rate`` over ``warmup_iters`` steps; a cosine then
    decays it to ``min_lr`` at ``lr_decay_iters`` and it stays there (nanoGPT's schedule;
    cosine from Loshchilov & Hutter, SGDR, 2017).  Pure: depends on its arguments only.
    """
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= decay_iters:
        return cfg.min_lr
    progress = (step - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def schedule_note(cfg: TrainConfig) -> str | None:
    """One line when ``max_iters`` and the cosine horizon ``lr_decay_iters`` disagree (after a resume
    that shortens or extends a run), saying what the learning rate will do and how to change it.

    Returns None when they agree.
    """
    steps, horizon = cfg.max_iters, cfg.lr_decay_iters or cfg.max_iters
    if steps > horizon:
        return (
            f"note: the cosine learning-rate schedule ends at step {horizon} (train.lr_decay_iters), so steps "
            f"{horizon}..{steps} train at min_lr={cfg.min_lr:g}; to decay over the whole run instead, "
            f"add --train.lr_decay_iters={steps}"
        )
    if steps < horizon:
        return (
            f"note: the run stops at step {steps} but its cosine decays until step {horizon} "
            f"(train.lr_decay_iters), so the last learning rate is {get_lr(steps - 1, cfg):.3g}, not "
            f"min_lr={cfg.min_lr:g}; to finish the decay at step {steps}, add --train.lr_decay_iters={steps}"
        )
    return None
