"""The learning-rate schedules: linear warmup, then a cosine decay (nanoGPT's) or warmup-stable-decay (WSD).

- ``cosine``: warmup, then a cosine from ``learning_rate`` to ``min_lr`` at the horizon
  ``lr_decay_iters`` (Loshchilov & Hutter, SGDR, 2017; nanoGPT).
- ``wsd``: warmup, ``learning_rate`` held, then a cooldown to ``min_lr`` over the horizon's last
  ``cooldown_frac`` (MiniCPM, Hu et al. 2024; Hägele et al. 2024, arXiv:2405.18392, who show a
  short cooldown matches a cosine and that cooldowns branched from one stable run give many
  training lengths for the price of one).  The cooldown is linear or ``1-sqrt`` (their best).
"""

from __future__ import annotations

import math

from training.config import TrainConfig


def get_lr(step: int, cfg: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based) under ``cfg.lr_schedule``.

    Warmup rises linearly to ``learning_rate`` over ``warmup_iters`` steps.  Cosine then decays
    it to ``min_lr`` at ``lr_decay_iters``; WSD holds it until :meth:`TrainConfig.cooldown_start`
    and decays it to ``min_lr`` at ``lr_decay_iters``.  Past the horizon it stays at ``min_lr``.
    Pure: depends on its arguments only.
    """
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= decay_iters:
        return cfg.min_lr
    if cfg.lr_schedule == "wsd":
        start = max(cfg.cooldown_start(), cfg.warmup_iters)
        if step < start:
            return cfg.learning_rate
        progress = (step - start) / max(1, decay_iters - start)  # 0 at the cooldown's first step
        coeff = 1.0 - (math.sqrt(progress) if cfg.cooldown_shape == "1-sqrt" else progress)  # 1 -> 0
    else:
        progress = (step - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def schedule_note(cfg: TrainConfig) -> str | None:
    """One line when ``max_iters`` and the schedule's horizon ``lr_decay_iters`` disagree (after a resume
    that shortens or extends a run), saying what the learning rate will do and how to change it.

    A WSD run stopped before its cooldown starts is a trunk: the note says so and how to branch
    from it.  Returns None when they agree.
    """
    steps, horizon = cfg.max_iters, cfg.lr_decay_iters or cfg.max_iters
    name = "cosine" if cfg.lr_schedule == "cosine" else "WSD"
    if steps > horizon:
        return (
            f"note: the {name} learning-rate schedule ends at step {horizon} (train.lr_decay_iters), so steps "
            f"{horizon}..{steps} train at min_lr={cfg.min_lr:g}; to decay over the whole run instead, "
            f"add --train.lr_decay_iters={steps}"
        )
    if steps < horizon and cfg.lr_schedule == "wsd" and steps <= cfg.cooldown_start():
        return (
            f"note: the run stops at step {steps}, before its cooldown (steps {cfg.cooldown_start()}..{horizon}), so "
            f"it ends at learning_rate={cfg.learning_rate:g}: a trunk; give it a cooldown with "
            f"--train.lr_decay_iters={steps} (a cooldown over the last {cfg.cooldown_frac:g} of the run), or "
            "branch from a checkpoint it keeps (train.save_at) with train.py --branch-from"
        )
    if steps < horizon:
        return (
            f"note: the run stops at step {steps} but its {name} schedule decays until step {horizon} "
            f"(train.lr_decay_iters), so the last learning rate is {get_lr(steps - 1, cfg):.3g}, not "
            f"min_lr={cfg.min_lr:g}; to finish the decay at step {steps}, add --train.lr_decay_iters={steps}"
        )
    return None
