"""The learning-rate grid of a tuned experiment: scores, the best rate, widening past an edge, growth rules.

Each arm trains at every grid rate on the tuning seed (``train.seed + TUNING_SEED_OFFSET``,
never a reported seed); its best by final val loss is then used for the reported seeds.  With
``--lr-widen N`` an arm whose best sits on the grid's smallest or largest rate also trains one
grid step past that edge, up to N times a side, so a best on the edge is found rather than
only flagged (the practice of extending a sweep until the optimum is bracketed).
"""

from __future__ import annotations

import math
from pathlib import Path

from core.errors import UserError
from core.files import read_json

TUNING_SEED_OFFSET = 1000  # the grid trains on train.seed + this: never one of the reported seeds (seed + i)


def lr_flags(learning_rate: float, min_lr: float, lr: float) -> list[str]:
    """``train.py`` flags for peak rate ``lr``, with min_lr scaled alike so the schedule keeps its shape."""
    return [f"--train.learning_rate={lr:g}", f"--train.min_lr={lr * min_lr / learning_rate:g}"]


def score(run_dir: Path | None) -> float:
    """A finished run's final val loss (summary.json), the score the grid ranks by; inf for no result."""
    if run_dir is None:
        return math.inf
    summary = read_json(run_dir / "summary.json", "run summary")
    value = summary.get("final_val_loss", summary.get("val_loss"))
    return value if isinstance(value, (int, float)) and math.isfinite(value) else math.inf


def best_lr(arm: str, scores: dict[float, float]) -> float:
    """The rate with the lowest score (ties: the smaller rate) among ``scores`` (rate -> final val loss).

    Raises :class:`UserError` when none has a finite score (every point diverged or failed).
    """
    finite = {lr: s for lr, s in scores.items() if math.isfinite(s)}
    if not finite:
        raise UserError(f"every grid learning rate failed for the {arm} arm: widen --lr-grid towards smaller values")
    return min(finite, key=lambda lr: (finite[lr], lr))


def next_rates(grid: list[float], scores: dict[float, float], widen: int) -> list[float]:
    """The rates one arm trains at next: one step past each edge of ``scores`` that its best sits on.

    ``grid``: the declared rates; ``scores``: rate -> final val loss (inf: no result) of every
    rate tried so far, the grid's and earlier steps past it; ``widen``: at most this many rates
    below the grid and as many above.  A step keeps the grid's spacing at that end (the ratio
    of its two end rates; 2 for a one-point grid).  A failed rate past an edge ends the
    widening that way, since the best is then no longer on the edge.
    """
    finite = {lr: s for lr, s in scores.items() if math.isfinite(s)}
    if not finite or widen < 1:
        return []
    rates = sorted(grid)
    up = rates[-1] / rates[-2] if len(rates) > 1 else 2.0
    down = rates[1] / rates[0] if len(rates) > 1 else 2.0
    best, lo, hi = best_lr("", finite), min(scores), max(scores)
    out = []
    if best == lo and sum(lr < rates[0] for lr in scores) < widen:
        out.append(float(f"{lo / down:.6g}"))
    if best == hi and sum(lr > rates[-1] for lr in scores) < widen:
        out.append(float(f"{hi * up:.6g}"))
    # A step too small to change the rate's 6 digits (two grid ends that close) would repeat a rate forever.
    tried = {f"{lr:g}" for lr in scores}
    return [lr for lr in out if f"{lr:g}" not in tried]


def lr_grid_refusals(before: list[float], now: list[float], widen_before: int = 0, widen_now: int = 0) -> list[str]:
    """``[]`` if the learning-rate grid ``now`` may continue a folder made with ``before``; else ``[why not]``.

    A grid may grow -- widening it when a best learning rate sat on its edge -- as long as it
    keeps every point it had: the runs already made stay part of it, every arm trains at the new
    points alike, and an arm whose best rate moves trains its reported seeds at the new rate.
    A folder made without a grid (every arm at the config's rate) cannot gain one.  Likewise
    ``--lr-widen`` may rise (``widen_now``) but not fall below ``widen_before``.
    """
    out = []
    old, new = {f"{lr:g}" for lr in before}, {f"{lr:g}" for lr in now}
    if old != new and not (old and old <= new):
        out.append(
            "lr_grid (a folder made with a grid needs one, and one made without cannot gain one)"
            if not old or not new
            else f"lr_grid (it may grow but must keep {', '.join(sorted(old - new, key=float))})"
        )
    if widen_now < widen_before:
        out.append(f"lr_widen (it may rise but not fall below {widen_before})")
    return out
