"""The report's numbers per arm, from a checked :class:`experiment.report.Experiment`.

The per-arm table (losses as mean ± std over seeds, timings as median and range), the
learning-rate grid's table, each arm's mean val-loss curve and the compute-equivalent estimate:
what :mod:`experiment.report_markdown` words and :mod:`experiment.figures` draws.
"""

from __future__ import annotations

import math
import statistics

from experiment import stats
from experiment.report import Experiment, Run


def mean_curves(members: list[Run]) -> tuple[list[int], list[list[float]]]:
    """The eval steps every run of ``members`` has, and each run's val loss at them (one list per run)."""
    by_step = [{r["step"]: r["val_loss"] for r in m.evals} for m in members]
    steps = sorted(set.intersection(*(set(b) for b in by_step)))
    return steps, [[b[st] for st in steps] for b in by_step]


def compute_equivalent(exp: Experiment, arm: str) -> float | None:
    """The fraction of the reference's tokens after which ``arm``'s mean curve reaches the reference's
    final mean val loss (:func:`experiment.stats.compute_equivalent`; an estimate), or None."""
    _, ref_curves = mean_curves(exp.runs[exp.reference])
    steps, curves = mean_curves(exp.runs[arm])
    ref_final = statistics.fmean(c[-1] for c in ref_curves)
    return stats.compute_equivalent(ref_final, steps, [statistics.fmean(v) for v in zip(*curves)])


def lr_table(exp: Experiment) -> dict[str, dict]:
    """Per tuned arm: ``{"points": [(lr, final score)], "best": lr, "edge": bool}``; edge when the best is a grid end."""
    out = {}
    for arm, members in exp.tuning.items():
        points = [(r.learning_rate, r.score) for r in members]
        best = min(points, key=lambda p: p[1])[0]
        out[arm] = {"points": points, "best": best, "edge": len(points) > 1 and best in (points[0][0], points[-1][0])}
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def median_range(values: list[float]) -> tuple[float, float, float] | None:
    """``(median, min, max)`` of the finite ``values``, or None if there are none.

    For timings (tokens/s, seconds), measured under whatever load the machine had: one busy
    moment makes a mean and standard deviation say little, the median and the range do not.
    """
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return (statistics.median(finite), min(finite), max(finite)) if finite else None


def arm_table(exp: Experiment) -> list[dict]:
    """One row per arm with the report's per-arm figures: losses as (mean, std) over seeds,
    timings (tokens/s, wall seconds) as :func:`median_range`, the unigram baseline's mean or None.
    """
    rows = []
    for arm, members in exp.runs.items():
        final = [r.score for r in members]
        best = [r.best_val_loss for r in members]
        s0 = members[0].summary
        ckpt = next((r.path / "ckpt_best.pt" for r in members if (r.path / "ckpt_best.pt").is_file()), None)
        baselines = [r.unigram_val_loss for r in members if r.unigram_val_loss is not None]
        rows.append(
            {
                "arm": arm,
                "parameters": s0["parameters"],
                "non_embedding_parameters": s0["non_embedding_parameters"],
                "final_val_loss": mean_std(final),
                "final_val_bpb": mean_std([r.bpb for r in members])
                if all(r.bpb is not None for r in members)
                else None,
                "learning_rate": members[0].learning_rate,
                "best_val_loss": mean_std(best),
                "final_val_ppl": math.exp(
                    mean_std(final)[0]
                ),  # exp of the mean loss: the geometric mean of perplexities
                "unigram_val_loss": statistics.fmean(baselines) if baselines else None,
                "tokens_per_s": median_range([r.summary["tokens_per_s_median"] for r in members]),
                "wall_time_s": median_range([r.summary.get("elapsed_s") for r in members]),
                "peak_memory_mib": mean_std([r.summary.get("peak_memory_mib", float("nan")) for r in members]),
                # Committed run folders (results/) keep no checkpoints: then the size is unknown here.
                "checkpoint_mib": ckpt.stat().st_size / 2**20 if ckpt is not None else float("nan"),
                # Skipped (non-finite) steps are updates an arm did not get: a fairness caveat when non-zero.
                "skipped_steps": sum(r.summary.get("skipped_steps", 0) for r in members),
                "seeds": len(members),
            }
        )
    return rows
