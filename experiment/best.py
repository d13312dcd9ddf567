"""Best against best: the verdict wherever arms are tuned, read the same way by every design.

Every arm trains every learning rate of its grid on every seed.  The table it reads is
``values[arm][rate][seed]``: one number per run, lower is better (final val bits per byte for
the budget axis, the declared outcome for an ordinary experiment).

- **An arm's best** is the minimum of a quadratic of its seeds' mean against log10 rate
  (:func:`fitted_best`: ``numpy.polyfit`` through the lowest mean and its two neighbours),
  clamped to the rates tried; with ``fit=False`` the lowest mean on the grid (a sensitivity check).
- **Δ** = arm's best − reference's best.  Its interval is the leave-one-seed-out jackknife
  (Quenouille 1949, Tukey 1958: refit without each seed; standard error
  sqrt((n-1)/n · Σ (Δ_(i) − mean Δ_(.))²), t with n − 1 degrees of freedom).
- **The verdict** (:func:`verdicts`): better / worse when the p-value, Holm-adjusted over
  the declared family (:func:`experiment.stats.holm_adjust`), is below 0.05 and the 95% interval
  excludes 0; equivalent when the 90% interval lies inside ±margin (TOST, Schuirmann 1987);
  otherwise inconclusive.  And **not read** (:data:`EDGE`) where an arm's or the reference's lowest
  mean sits at an end of a grid of 3 or more rates (:func:`at_edge`): its best may lie past it.  That
  rule comes first: a reading not read counts as p = 1 in the others' Holm family.

A rate picked on one seed can manufacture a verdict (an arm's pick off by one grid step: false
better/worse in 15-22% of A/A experiments, ``tests/test_aa.py``); the best of a fitted curve over
every seed, with the seeds left out one at a time, stays within 5% (the same tests).

    table = {"tied": {1e-3: {0: 3.10, 1: 3.12}, 2e-3: {...}, 4e-3: {...}}, "untied": {...}}
    b = best_vs_best(table, "untied", "tied", margin=0.01, label="16M")
    verdicts([b], [at_edge(...)]); b.verdict, b.ci, b.best_lr
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from core.errors import UserError
from experiment import stats

ALPHA = 0.05
EDGE = "not read: best at the grid's edge"

Table = dict[str, dict[float, dict[int, float]]]  # arm -> learning rate -> seed -> value (lower is better)


@dataclass
class BestVsBest:
    """Δ of the fitted bests (arm − reference) at one reading (a budget, or the experiment), its jackknife
    interval and verdict; in the unit of the values read."""

    arm: str
    budget: str  # what was read: a budget's label, or "" for an ordinary experiment
    delta: float
    se: float
    ci: tuple[float, float]
    ci90: tuple[float, float]
    p: float
    p_tost: float
    best_lr: dict[str, float]  # arm -> the rate of its best (fitted minimum, or lowest grid mean with fit=False)
    p_holm: float = math.nan
    verdict: str = "inconclusive"
    seeds: int = 0  # the seeds read
    # Seed-level Δ: the jackknife pseudo-values n·Δ − (n − 1)·Δ_(−i) (Tukey 1958), one per seed read.  Their
    # mean is the jackknife's bias-corrected Δ and their standard error is exactly ``se``, so a model of
    # per-seed Δ (the --grid mixed model) reads a tuned best as it reads a paired difference.
    pseudo: list[float] = dataclasses.field(default_factory=list)


def fitted_best(rates: list[float], means: list[float]) -> tuple[float, float]:
    """``(best value, its rate)``: the minimum of the quadratic in log10 rate through three ``(rate, mean)``
    points, clamped to their rates (with fewer than 3 rates, the best mean itself).

    With more than 3 rates (``rates`` ascending) the three are the lowest mean and its neighbours,
    the two nearest an end when it sits there: a local fit, not a least-squares one over rates
    the curve does not follow.  ``numpy.polyfit``, exact through 3 points.  A fit that opens
    downwards has its minimum at an end of the range.
    """
    x, y = np.log10(np.asarray(rates, dtype=float)), np.asarray(means, dtype=float)
    if len(x) < 3:
        i = int(np.argmin(y))
        return float(y[i]), float(rates[i])
    mid = int(np.clip(np.argmin(y), 1, len(x) - 2))
    x, y = x[mid - 1 : mid + 2], y[mid - 1 : mid + 2]
    a, b, c = np.polyfit(x, y, 2)
    candidates = [x.min(), x.max()]
    if a > 0:
        candidates.append(float(np.clip(-b / (2 * a), x.min(), x.max())))
    values = [a * v * v + b * v + c for v in candidates]
    i = int(np.argmin(values))
    return float(values[i]), float(10 ** candidates[i])


def means(table: Table, arm: str, seeds: list[int]) -> dict[float, float]:
    """``arm``'s mean value at each of its rates (ascending) over ``seeds``."""
    return {r: float(np.mean([table[arm][r][s] for s in seeds])) for r in sorted(table[arm])}


def best_of(table: Table, arm: str, seeds: list[int], fit: bool = True) -> tuple[float, float]:
    """An arm's best (value, rate) over ``seeds``: the fitted minimum (:func:`fitted_best`), or with
    ``fit=False`` the lowest mean on the grid."""
    m = means(table, arm, seeds)
    if not fit:
        rate = min(m, key=m.get)
        return m[rate], rate
    return fitted_best(list(m), list(m.values()))


def best_vs_best(
    table: Table, arm: str, reference: str, margin: float, label: str = "", fit: bool = True
) -> BestVsBest:
    """Δ of bests on the seeds every rate of both arms has, its jackknife interval, t-test p and TOST p
    against ±``margin``; the verdict is set by :func:`holm_verdicts`.

    Raises :class:`UserError` with fewer than 2 such seeds (no interval).
    """
    cells = [set(seeds) for a in (arm, reference) for seeds in table[a].values()]
    seeds = sorted(set.intersection(*cells))
    if len(seeds) < 2:
        raise UserError(f"{label or arm}: one seed at every rate gives no interval; train at least 2 (--seeds)")
    (best_a, lr_a), (best_r, lr_r) = best_of(table, arm, seeds, fit), best_of(table, reference, seeds, fit)
    delta = best_a - best_r

    def without(j: int) -> float:
        rest = [s for s in seeds if s != j]
        return best_of(table, arm, rest, fit)[0] - best_of(table, reference, rest, fit)[0]

    leave_out = np.array([without(j) for j in seeds])
    n = len(seeds)
    se = float(math.sqrt((n - 1) / n * np.sum((leave_out - leave_out.mean()) ** 2)))
    dist = sps.t(df=n - 1)
    ci = (delta - dist.ppf(0.975) * se, delta + dist.ppf(0.975) * se)
    ci90 = (delta - dist.ppf(0.95) * se, delta + dist.ppf(0.95) * se)
    if se > 0:
        p = float(2 * dist.sf(abs(delta) / se))
        p_tost = float(max(dist.sf((delta + margin) / se), dist.cdf((delta - margin) / se)))
    else:
        p, p_tost = (0.0 if delta else 1.0), (0.0 if abs(delta) < margin else 1.0)
    pseudo = [float(v) for v in n * delta - (n - 1) * leave_out]
    return BestVsBest(
        arm=arm,
        budget=label,
        delta=delta,
        se=se,
        ci=ci,
        ci90=ci90,
        p=p,
        p_tost=p_tost,
        best_lr={reference: lr_r, arm: lr_a},
        seeds=n,
        pseudo=pseudo,
    )


def holm_verdicts(results: list[BestVsBest], family: int | None = None, alpha: float = ALPHA) -> list[BestVsBest]:
    """Fill ``p_holm`` (Holm across ``results``, a family of ``family`` readings in all, the ones not read
    yet counted as p = 1) and the verdict (module docstring); returns ``results``."""
    if not results:
        return []
    padding = [1.0] * max(0, (family or len(results)) - len(results))
    adjusted = stats.holm_adjust([r.p for r in results] + padding)[: len(results)]
    for r, p_holm in zip(results, adjusted):
        r.p_holm = float(p_holm)
        r.verdict = stats.decide(r.ci, r.p_holm, r.p_tost, r.seeds, alpha)
    return results


def verdicts(
    results: list[BestVsBest], edge: list[bool], family: int | None = None, alpha: float = ALPHA
) -> list[BestVsBest]:
    """The edge rule, then Holm: a reading whose ``edge`` is true is "not read" (:data:`EDGE`, ``p_holm``
    NaN) and counts in the family as p = 1, as one not read yet does; the others get :func:`holm_verdicts`
    over a family of ``family`` (default: every reading).  So a best at the edge, whose Δ is not read,
    never makes another reading's adjustment milder.  Returns ``results``."""
    holm_verdicts([r for r, e in zip(results, edge) if not e], family or len(results), alpha)
    for r, e in zip(results, edge):
        if e:
            r.p_holm, r.verdict = math.nan, EDGE
    return results


def at_edge(means_of: dict[str, dict[float, float]], arms: list[str], rates: list[float]) -> bool:
    """Whether any of ``arms``' lowest mean sits on the first or last of 3 or more ``rates`` (a rate past it
    may be better, so the fitted best is clamped there and its Δ would be read as if it were interior).
    Widen the grid (a rate past that edge, on every seed) and the best can be read."""
    if len(rates) < 3:
        return False
    lows = [min(means_of[a], key=means_of[a].get) for a in arms if means_of.get(a)]
    return any(low in (rates[0], rates[-1]) for low in lows)
