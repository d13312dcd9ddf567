"""What a checked experiment shows: the outcome its verdict reads, the comparisons, the verdict record
a script can read, and the numbers per arm that the Markdown words and the figures draw.

Works on an :class:`experiment.runs.folders.Experiment` (run folders read and checked for fairness)::

    from experiment.runs.folders import load_runs, check_experiment
    from experiment.ab.readout import comparisons
    exp = check_experiment(load_runs(paths), reference="tied", margin=0.01)
    for c in comparisons(exp): print(c.arm, c.verdict, c.ci)

The per-arm numbers: losses as mean ± std over seeds, timings as median and range, the
learning-rate grid's table, each arm's mean val-loss curve and the compute-equivalent estimate.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path

from core.errors import UserError
from core.files import read_json
from experiment import best, stats
from experiment.runs.folders import TARGETS, Experiment, Run, code_versions, target_of
from training.run_files import RunFolder

# What a verdict may read, declared before the runs (``compare.py --outcome``): the final val loss
# (nats/token); a systems change's speed: each run's median tokens/s, compared as -ln(tokens/s) so
# that lower is better and a difference is a ratio (-0.02: 2% faster); or the training tokens a run
# needs to reach a val loss (``tokens-to:4.5``), compared as ln(tokens), or the training seconds
# (``time-to:1.88``, evaluation and checkpoints left out), compared as ln(seconds).  Their margins are fractions.
OUTCOMES = {
    "loss": "final val loss (nats/token)",
    "tokens-per-s": "speed (-ln of the median tokens/s)",
    "tokens-to:LOSS": "ln of the training tokens to reach val loss LOSS",
    "time-to:LOSS": "ln of the training seconds to reach val loss LOSS (evaluation and checkpoints left out)",
}


def parse_outcome(text: str) -> str:
    """``loss``, ``tokens-per-s``, ``tokens-to:<val loss>`` or ``time-to:<val loss>``; :class:`UserError` else."""
    if text in ("loss", "tokens-per-s"):
        return text
    head, _, target = text.partition(":")
    try:
        if head in TARGETS and float(target) > 0:
            return f"{head}:{float(target):g}"
    except ValueError:
        pass
    raise UserError(
        f"--outcome {text!r}: choose loss, tokens-per-s, tokens-to:<val loss> or time-to:<val loss>, e.g. time-to:1.88"
    )


def tokens_to(run: Run, target: float) -> float:
    """The training tokens at which ``run``'s periodic val loss first reaches ``target`` (nats/token), linear
    between the last eval above it and the first at or below it; ``math.inf`` when it never does."""
    before = None
    for r in run.evals:
        if r["val_loss"] <= target:
            if before is None or before["val_loss"] == r["val_loss"]:
                return float(r["tokens"])
            share = (before["val_loss"] - target) / (before["val_loss"] - r["val_loss"])
            return before["tokens"] + share * (r["tokens"] - before["tokens"])
        before = r
    return math.inf


def outcome_value(run: Run, outcome: str) -> float:
    """``run``'s value of ``outcome`` (:data:`OUTCOMES`), lower is better; ``inf`` for a target never reached."""
    if outcome == "tokens-per-s":
        return -math.log(run.summary["tokens_per_s_median"])
    target = target_of(outcome)
    if target is not None:
        tokens = tokens_to(run, target)
        if tokens <= 0:
            raise UserError(
                f"{run.path} is at val loss {target:g} or below before training (step 0): choose a lower target"
            )
        if outcome.startswith("time-to:") and math.isfinite(tokens):
            return math.log(run.train_seconds(tokens))
        return math.log(tokens)
    return run.score


def never_reached(exp: Experiment) -> dict[str, list[int]]:
    """With a ``tokens-to`` or ``time-to`` outcome, each arm's seeds whose runs never reached the target ({} otherwise)."""
    if target_of(exp.outcome) is None:
        return {}
    out = {
        arm: [r.seed for r in members if outcome_value(r, exp.outcome) == math.inf] for arm, members in exp.runs.items()
    }
    return {arm: seeds for arm, seeds in out.items() if seeds}


def qualifications(exp: Experiment) -> list[stats.Qualification]:
    """With a ``tokens-to`` or ``time-to`` outcome, whether each arm's final val loss is below the target at
    p < 0.01 (:func:`experiment.stats.below_target`, a speedrun record's rule); empty for other outcomes."""
    target = target_of(exp.outcome)
    if target is None:
        return []
    return [stats.below_target(arm, [r.score for r in members], target) for arm, members in exp.runs.items()]


def comparisons(exp: Experiment) -> list[stats.Comparison]:
    """Each arm against the reference on the declared outcome, paired by seed; Holm-adjusted over the arms.

    With a ``tokens-to`` or ``time-to`` outcome a run that never reached the target has no value: each arm
    is compared with the reference on the seeds where both runs reached it, an arm with no such seed has
    no verdict, and the report names the runs that missed (:func:`never_reached`) first.  A pairing on
    the runs that reached it favours the arm that missed, so the verdicts it would favour are barred
    (:func:`experiment.stats.barred_by_misses`).  The Holm family is every arm, an arm without a verdict
    counting as p = 1.
    """
    ref = {r.seed: outcome_value(r, exp.outcome) for r in exp.runs[exp.reference]}
    ref_missed = {s for s in exp.seeds if not math.isfinite(ref.get(s, math.inf))}
    found = []
    for arm, members in exp.runs.items():
        if arm == exp.reference:
            continue
        values = {r.seed: outcome_value(r, exp.outcome) for r in members}
        missed = {s for s in exp.seeds if not math.isfinite(values.get(s, math.inf))}
        seeds = [s for s in exp.seeds if s not in missed | ref_missed]
        if not seeds:
            continue
        found.append(
            stats.compare_paired(
                arm,
                exp.reference,
                [values[s] for s in seeds],
                [ref[s] for s in seeds],
                exp.margin,
                barred=stats.barred_by_misses(missed, ref_missed),
                seeds=tuple(seeds),
            )
        )
    return stats.holm(found, exp.alpha, family=len(exp.runs) - 1)


def bpb_comparison(exp: Experiment, arm: str, margin_bpb: float) -> stats.Comparison | None:
    """``arm`` against the reference on the final val bits per byte, paired by seed, margin in bpb; None without bpb.

    The verdict is :func:`stats.compare_paired`'s, unadjusted across arms (:func:`stats.holm` adjusts a
    family): better / worse when the 95% paired t interval of Δ bpb excludes 0, equivalent when its 90%
    interval lies inside ±margin_bpb (TOST). Its fields are in bits per byte where the docstring of
    :class:`stats.Comparison` says nats; its ``ppl_ratio`` (exp of a Δ bpb) means nothing here.
    """
    ref, mine = [r.bpb for r in exp.runs[exp.reference]], [r.bpb for r in exp.runs[arm]]
    if any(v is None for v in ref + mine):
        return None
    return stats.compare_paired(arm, exp.reference, mine, ref, margin_bpb, seeds=exp.seeds)


def best_table(exp: Experiment, bpb: bool = False) -> best.Table | None:
    """An every-seed experiment's runs as best against best's table (arm -> rate -> seed -> final val loss,
    or bits per byte); None where a run has no bpb."""
    table = {
        arm: {lr: {r.seed: r.bpb if bpb else r.score for r in members} for lr, members in rates.items()}
        for arm, rates in exp.swept.items()
    }
    values = [v for rates in table.values() for by_seed in rates.values() for v in by_seed.values()]
    return None if any(v is None for v in values) else table


def best_comparisons(exp: Experiment, margin_bpb: float | None = None) -> list[best.BestVsBest]:
    """Each arm's fitted best against the reference's over every seed (:mod:`experiment.best`), Holm-adjusted
    over the arms, "not read" where a lowest mean sits at the grid's edge; on the final val loss (nats/token),
    or with ``margin_bpb`` on bits per byte (empty without bpb).  For an every-seed experiment (``exp.swept``)."""
    table = best_table(exp, bpb=margin_bpb is not None)
    if table is None:
        return []
    margin = exp.margin if margin_bpb is None else margin_bpb
    found = [best.best_vs_best(table, arm, exp.reference, margin) for arm in exp.arms if arm != exp.reference]
    rates = sorted(table[exp.reference])
    means = {arm: best.means(table, arm, exp.seeds) for arm in table}
    edge = [best.at_edge(means, [b.arm, exp.reference], rates) for b in found]
    return best.verdicts(found, edge, alpha=exp.alpha)


def _best_record(b: best.BestVsBest, reference: str, margin: float) -> dict:
    """One best-against-best comparison's numbers for ``verdict.json``."""
    return {
        "arm": b.arm,
        "reference": reference,
        "readout": "best against best",
        "delta": b.delta,
        "ci95": list(b.ci),
        "ci90": list(b.ci90),
        "margin": margin,
        "p_t": b.p,
        "p_holm": b.p_holm,
        "p_tost": b.p_tost,
        "best_lr": b.best_lr,
        "seeds": b.seeds,
        "verdict": b.verdict,
    }


VERDICT_SCHEMA = 3  # docs/experiment.md, "A verdict a script can read"


def strict_json(value):
    """``value`` with every non-finite float (an interval of one seed, a p-value not read) as None, so that
    ``verdict.json`` is strict JSON (RFC 8259 has no NaN or Infinity, and JavaScript's and Go's parsers refuse them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _comparison_record(c: stats.Comparison) -> dict:
    """One comparison's numbers for ``verdict.json``."""
    return {
        "arm": c.arm,
        "reference": c.reference,
        "delta": c.mean,
        "delta_per_seed": c.diffs,
        "delta_seeds": list(c.seeds) or None,  # the seed of each delta_per_seed (seeds a missed run dropped are out)
        "ci95": list(c.ci),
        "ci90": list(c.ci90),
        "margin": c.margin,
        "p_t": c.p_t,
        "p_holm": c.p_holm,
        "p_tost": c.p_tost,
        "p_wilcoxon": c.p_wilcoxon,
        "p_sign": c.p_sign,
        "verdict": c.verdict,
        "seeds_needed": None if c.seeds_needed is None else dataclasses.asdict(c.seeds_needed),
    }


ONE_SEED_TUNING = (
    "rates picked on one seed: each arm's rate was the best of its grid on a single tuning seed, which favours "
    "an arm by chance (false better/worse in 15-22% of A/A experiments, docs/experiment.md); for a calibrated "
    "verdict train every rate on every seed and read best against best (--lr-grid without --lr-tuning one-seed)"
)


def not_calibrated(exp: Experiment) -> list[str]:
    """Why ``exp``'s verdicts do not hold their 5% error rate, in words (empty: they do): rates picked on one
    tuning seed, a verdict read before at another seed count (``exp.looks`` not declared), a sequential
    experiment read at a seed count none of its declared looks is, runs other than the ones its declaration
    drew, or pairs whose runs differ in more than their arm (``exp.provenance``, set where the runs are read:
    :func:`experiment.runs.ledger.problems`, :func:`experiment.runs.seeds.seeds_apart`)."""
    reasons = [ONE_SEED_TUNING] if exp.tuning else []
    looks = exp.looks
    if looks is not None and looks.get("declared") is False:
        earlier, read = looks["looks"][:-1], looks["looks"][-1]
        what = "seeds added after a verdict was read" if max(earlier) < read else "a verdict was read before"
        reasons.append(
            f"{what} at {', '.join(map(str, earlier))} seeds: that look spent the whole 5%, so no later look can "
            "stay within it; declare the looks before the runs (--seeds auto --max-seeds N)"
        )
    elif looks is not None and looks.get("seeds_read") not in (None, *looks["looks"]):
        reasons.append(
            f"read at {looks['seeds_read']} seeds, none of the looks declared before the runs "
            f"({', '.join(map(str, looks['looks']))}): an extra look, which the level per look does not cover; "
            "report when a declared look's seeds have all finished"
        )
    return reasons + exp.provenance


def verdict_record(exp: Experiment, margin_declared: bool, margin_bpb: float | None = None) -> dict:
    """What ``verdict.json`` holds: the arms and their settings, the outcome, every seed's value, and each
    comparison's Δ, intervals, p-values and verdict (nats/token; with ``margin_bpb`` the same in bits per
    byte).  ``margin_declared``: whether the margin was fixed before the runs (``experiment.json``)."""
    tuned, reasons = bool(exp.tuning), not_calibrated(exp)
    record = {
        "schema": VERDICT_SCHEMA,
        "outcome": {"loss": "final_val_loss", "tokens-per-s": "tokens_per_s"}.get(exp.outcome, exp.outcome),
        "unit": {
            "loss": "nats/token",
            "tokens-per-s": "-ln(tokens/s): lower is faster",
            "tokens-to": "ln(training tokens to the target): lower is sooner",
            "time-to": "ln(training seconds to the target, evaluation and checkpoints left out): lower is sooner",
        }[exp.outcome.partition(":")[0]],
        "never_reached": never_reached(exp),
        "reference": exp.reference,
        "arms": {arm: exp.arm_set.settings.get(arm, {}) for arm in exp.arms},
        "seeds": exp.seeds,
        "margin": exp.margin,
        "margin_declared": margin_declared,
        "learning_rates_tuned": tuned,
        "calibrated": not reasons,
        "not_calibrated": reasons,
        # Runs whose final score did not beat the unigram baseline (report.md: "not meaningful"), by name.
        "behind_unigram": sorted(r.path.name for runs in exp.runs.values() for r in runs if not r.learned),
        "runs": sorted({r.path.name for r in exp.every_run}),  # the run folders read, by name
        "alpha": exp.alpha,
        "sequential": exp.looks,
        "code": code_versions(exp),
        "values": {  # null for a run that never reached a tokens-to target (strict JSON has no infinity)
            arm: [v if math.isfinite(v := outcome_value(r, exp.outcome)) else None for r in members]
            for arm, members in exp.runs.items()
        },
        "qualifies": [
            {"arm": q.arm, "target": q.target, "mean": q.mean, "seeds": q.seeds, "p": q.p, "qualifies": q.qualifies}
            for q in qualifications(exp)
        ],
        # an every-seed experiment's verdicts are best against best (_swept_record), not paired at one rate
        "comparisons": [] if exp.swept else [_comparison_record(c) for c in comparisons(exp)],
    }
    if exp.swept:
        return _swept_record(exp, record, margin_bpb)
    if margin_bpb is not None:
        found = [bpb_comparison(exp, arm, margin_bpb) for arm in exp.arms if arm != exp.reference]
        record["comparisons_bpb"] = [
            _comparison_record(c) for c in stats.holm([c for c in found if c is not None], exp.alpha, family=len(found))
        ]
    return record


def _swept_record(exp: Experiment, record: dict, margin_bpb: float | None) -> dict:
    """:func:`verdict_record` for an every-seed experiment: the verdicts best against best, every run's value."""
    record["lr_tuning"] = "every-seed"
    record["learning_rates_tuned"] = True
    record["values"] = {
        arm: {f"{lr:g}": [r.score for r in members] for lr, members in rates.items()}
        for arm, rates in exp.swept.items()
    }
    record["comparisons"] = [_best_record(b, exp.reference, exp.margin) for b in best_comparisons(exp)]
    if margin_bpb is not None:
        record["comparisons_bpb"] = [
            _best_record(b, exp.reference, margin_bpb) for b in best_comparisons(exp, margin_bpb)
        ]
    return record


# ----------------------------------------------------------------------------- the numbers per arm


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
        ckpt = next((f.best_ckpt for f in map(RunFolder, (r.path for r in members)) if f.best_ckpt.is_file()), None)
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


# The exit status of a gate that will not decide (the verdicts are not calibrated): neither a pass (0), nor a
# failure of the change (1), nor bad input (2, which is given before any run trains).
UNGATED = 3


def gate(verdict_path: Path, fail_on: str | None) -> int:
    """The exit status ``--fail-on`` asks for: 1 when an arm's verdict is worse (``worse``) or anything but
    better (``not-better``) than the reference, read from ``verdict.json`` (in bits per byte with --margin-bpb);
    :data:`UNGATED` (3) when the verdicts are not calibrated, so a CI script tells "no gate" from a failed
    gate (1) and from bad input (2)."""
    if fail_on is None:
        return 0
    record = read_json(verdict_path, "verdict")
    if record.get("not_calibrated"):  # a gate on a verdict whose error rate is not 5% would pass or fail by chance
        print(
            f"error: --fail-on {fail_on} gates only on calibrated verdicts, and this one is not "
            f"({record['not_calibrated'][0].split(':')[0]}): see report.md's verdict section for the design that is",
            file=sys.stderr,
        )
        return UNGATED
    if record.get("behind_unigram"):  # a CI script should not read it as a model that learned
        print(
            f"[compare] warning: --fail-on {fail_on} gates on runs that did not beat the unigram baseline "
            f"({', '.join(record['behind_unigram'][:4])}): report.md calls this verdict not meaningful; "
            "train longer (--train.max_iters) for a verdict on a model that has learned",
            file=sys.stderr,
        )
    bpb = record.get("comparisons_bpb")
    found = bpb if bpb and len(bpb) == len(record["comparisons"]) else record["comparisons"]  # bpb only if complete
    if len(found) < len(record["arms"]) - 1:  # an arm with no verdict at all (every seed missed a target)
        print(f"[compare] --fail-on {fail_on}: an arm has no verdict to gate on", file=sys.stderr)
        return 1
    unread = [c for c in found if c["verdict"] not in stats.VERDICTS]  # "not read: best at the grid's edge"
    for c in unread:
        print(f"[compare] --fail-on {fail_on}: {c['arm']} has no verdict to gate on ({c['verdict']})", file=sys.stderr)
    failing = [
        c
        for c in found
        if c not in unread and (c["verdict"] == "worse" or (fail_on == "not-better" and c["verdict"] != "better"))
    ]
    for c in failing:
        print(f"[compare] --fail-on {fail_on}: {c['arm']} is {c['verdict']} against {c['reference']}", file=sys.stderr)
    return 1 if failing or unread else 0
