"""The budget axis's readout: does the answer change with the training budget?  One verdict per budget.

Read from the finished branch folders of a ``compare.py budgets`` experiment
(:mod:`experiment.budget.run`), each scored by its final val bits per byte.  Two readouts, both
per budget and per arm against the reference, with ``margin`` in bits per byte, and a check
of the first beside them:

1. **Best against best (the verdict)** (:mod:`experiment.best`, the one readout of every tuned design).
   Every arm trained every learning rate on every seed; each arm's best is the minimum of a quadratic
   of the seeds' mean bpb against log10 rate, Δ the difference of the two bests, its interval the
   leave-one-seed-out jackknife.
2. **At each shared rate (beside it).**  Δ paired by seed at one learning rate
   (:func:`experiment.stats.compare_paired`).
3. **Sensitivity (not a verdict).**  Best against best with each arm's lowest grid mean in place
   of its fitted minimum (``fit=False``): a sharp curve's minimum sits further below its lowest
   mean than a flat one's, so Δ can move with the fit alone.

Also here: the trunks' val and val − train curves through the stable phase (:func:`trunk_curves`).

Verdict rule for all three: better / worse when the p-value, Holm-adjusted across the budgets
(:func:`experiment.stats.holm_adjust`; one family per arm, and per arm and rate), is below 0.05 and
the 95% interval excludes 0; equivalent when the 90% interval lies inside ±margin (TOST);
otherwise inconclusive; and "not read" where the arm's or the reference's lowest mean, over the seeds the
arm is read on, sits at an end of the grid (:func:`at_edge`: its best may lie past it; train the next
rate out on every seed).  That rule comes first, and a budget not read counts as p = 1 in Holm's
family, as one not trained yet does (:func:`experiment.best.verdicts`).  The shared-rate
lines are Holm-adjusted across budgets within each rate, not across rates: descriptive, not verdicts.
Where the two readouts disagree at a budget, the report says so in
its first lines.  At each budget an arm is read against the reference on the seeds that both
finished at every rate, once there are 2 such seeds.  A run that stopped on a non-finite loss
(``diverged.json``, :func:`load_diverged`) is a result, not a gap: its rate leaves that arm's
grid at each budget it did not reach, on every seed; where that leaves the arm or the reference
fewer than 3 rates, both bests there are lowest means (a fitted minimum is never above the lowest
mean, so one fitted against one not would favour the fitted arm).

    ro = readout(Path("results/tying-budget-cpu-2026-11-25"), budgets, "tied", 0.01, with_recorded(None))

:mod:`experiment.budget.markdown` words it and draws it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.errors import UserError
from core.files import read_json
from experiment import best, stats
from experiment.arms import ArmSet
from experiment.budget.run import TRUNKS, label, plan_budgets, trunk_arm
from experiment.best import BestVsBest, at_edge, verdicts
from experiment.runs.record import flatten
from training.config import RunConfig
from training.run_files import DIVERGED
from training.runs import read_metrics
from training.run_files import RunFolder, runs_in


@dataclass(frozen=True)
class Score:
    """One finished branch: its budget, arm, peak learning rate, seed and final val bits per byte."""

    budget: str
    tokens: int  # trained: train.max_iters x tokens a step
    arm: str
    lr: float
    seed: int
    bpb: float
    params: int  # at the end of the run (summary.json)
    train_tokens: int  # of the training split, for epochs


@dataclass(frozen=True)
class Diverged:
    """A budget an arm has no score at, at one rate and seed, because a run stopped on a non-finite loss:
    its trunk before the branch point, or the branch itself."""

    budget: str
    arm: str
    lr: float
    seed: int
    step: int  # the step whose loss or gradient was non-finite
    run: str  # the folder that diverged, in the experiment: trunks/<name> or <budget>/<name>


@dataclass
class BudgetRow:
    """What one budget shows: its seeds, each arm's mean bpb per rate, and both readouts per arm."""

    budget: str
    tokens: int
    seeds: dict[str, list[int]]  # arm -> the seeds it is read on against the reference
    means: dict[str, dict[float, float]]  # arm -> rate -> mean bpb over mean_seeds
    mean_seeds: list[int]  # the seeds every arm read here and the reference finished at every rate
    best: dict[str, BestVsBest] = field(default_factory=dict)  # arm -> best vs best
    grid: dict[str, BestVsBest] = field(default_factory=dict)  # arm -> lowest grid mean vs lowest (sensitivity)
    shared: dict[str, dict[float, stats.Comparison]] = field(default_factory=dict)  # arm -> rate -> paired Δ
    edge: dict[str, bool] = field(default_factory=dict)  # arm -> its or the reference's lowest mean at a grid end
    unfitted: list[str] = field(default_factory=list)  # arms read on lowest means: a diverged rate left < 3 rates


@dataclass
class BudgetReadout:
    """The whole axis: each budget read (``rows``), the ones not yet readable, and the scale for the figure."""

    reference: str
    arms: list[str]  # every arm but the reference
    rates: list[float]
    margin: float
    rows: list[BudgetRow]
    waiting: dict[str, str]  # budget -> why it is not read yet
    params: dict[str, int]  # arm -> parameters at the end of its runs
    train_tokens: int
    finished: dict[tuple[str, str, float], int] = field(default_factory=dict)  # (budget, arm, rate) -> seeds done
    labels: list[str] = field(default_factory=list)  # every declared budget, smallest first
    diverged: list[Diverged] = field(default_factory=list)  # out of their arm's grid at their budget
    no_rate: dict[str, list[str]] = field(default_factory=dict)  # budget -> arms every rate of which diverged there


def load_scores(out_dir: Path, budgets: list[int], arm_set: ArmSet) -> list[Score]:
    """Every finished branch (``summary.json``) under ``out_dir/<label>/`` for each of ``budgets`` (tokens).

    Raises :class:`UserError` for a run with no final bpb, one that trained another number of steps
    than its budget folder's (it would be read as that budget), or two copies of one run.
    """
    out, seen = [], {}
    for budget in budgets:
        lab = label(budget)
        for folder in runs_in(out_dir / lab, finished_only=True):
            run, config, summary, summary_path = folder.path, folder.config, folder.summary, folder.summary_path
            bpb = summary.get("final_val_bpb")
            missing = [k for k in ("parameters", "train_tokens") if not summary.get(k)]  # the figure's axes
            if not isinstance(bpb, (int, float)) or not math.isfinite(bpb):
                missing.insert(0, "a finite final_val_bpb")
            if missing:
                raise UserError(
                    f"{summary_path} has no {', '.join(missing)} (the budget report reads them): delete that "
                    "run folder and run the experiment's command again to retrain it"
                )
            tc = config["train"]
            per_step = tc["batch_size"] * tc["grad_accum_steps"] * config["model"]["block_size"]
            steps = max(1, round(budget / per_step))  # as plan_budgets sets a branch's max_iters
            if tc["max_iters"] != steps:
                raise UserError(
                    f"{run} trained {tc['max_iters']:,} steps, but the budget {lab} is {steps:,} steps of "
                    f"{per_step:,} tokens: move it out of {out_dir / lab}"
                )
            tokens = steps * per_step
            arm = arm_set.of(flatten(config), str(run))
            key = (lab, arm, tc["learning_rate"], tc["seed"])
            if key in seen:  # a copy would count its seed twice in a mean
                raise UserError(
                    f"{run} and {seen[key]} are the same run ({arm}, lr {key[2]:g}, seed {key[3]}, {lab}): "
                    "move one out of the experiment folder"
                )
            seen[key] = run
            params, split = summary["parameters"], summary["train_tokens"]
            out.append(
                Score(
                    budget=lab,
                    tokens=tokens,
                    arm=arm,
                    lr=tc["learning_rate"],
                    seed=tc["seed"],
                    bpb=float(bpb),
                    params=params,
                    train_tokens=split,
                )
            )
    return out


def load_diverged(out_dir: Path, budgets: list[int], arms: list[str], arm_set: ArmSet) -> list[Diverged]:
    """Every budget, arm, rate and seed left without a score by a run that stopped on a non-finite loss.

    A branch folder with ``diverged.json`` and no ``summary.json`` counts at its budget; a trunk's
    at each of ``budgets`` (tokens) whose branch point under the trunk's config
    (:func:`experiment.budget.run.plan_budgets`) it did not pass, for each of ``arms`` that branches
    from it (``tie-untie-cooldown`` from ``tied``).
    """

    def stopped(marker: Path) -> tuple[dict, int, str, dict]:
        """The diverged run's config, the step that stopped it, its arm and its train config."""
        run = RunFolder(marker.parent)
        config, step = run.config, read_json(marker, "divergence")["step"]
        return config, step, arm_set.of(flatten(config), str(run.path)), config["train"]

    out = []
    for lab in (label(t) for t in budgets):
        for marker in sorted((out_dir / lab).glob(f"*/{DIVERGED}")):
            if RunFolder(marker.parent).finished:  # resumed past it and finished
                continue
            _, step, arm, tc = stopped(marker)
            out.append(Diverged(lab, arm, tc["learning_rate"], tc["seed"], step, f"{lab}/{marker.parent.name}"))
    for marker in sorted((out_dir / TRUNKS).glob(f"*/{DIVERGED}")):
        run = marker.parent
        config, step, trunk, tc = stopped(marker)
        served = [a for a in dict.fromkeys([trunk, *arms]) if trunk_arm(a, arm_set) == trunk]
        for b in plan_budgets(budgets, RunConfig.from_dict(config, str(RunFolder(run).config_path))):
            if b.branch_step >= step:  # the checkpoint at the branch point, written after its step, never was
                out += [
                    Diverged(b.label, a, tc["learning_rate"], tc["seed"], step, f"{TRUNKS}/{run.name}") for a in served
                ]
    return out


def table_of(scores: list[Score]) -> best.Table:
    """``scores`` (one budget's) as best-against-best's table: arm -> rate -> seed -> bpb."""
    table: best.Table = {}
    for s in scores:
        table.setdefault(s.arm, {}).setdefault(s.lr, {})[s.seed] = s.bpb
    return table


def best_vs_best(scores: list[Score], arm: str, reference: str, margin: float, fit: bool = True) -> BestVsBest:
    """:func:`experiment.best.best_vs_best` at one budget (``scores`` of that budget, on seeds every arm and
    rate has).  Raises :class:`UserError` with fewer than 2 seeds (no interval)."""
    return best.best_vs_best(table_of(scores), arm, reference, margin, scores[0].budget, fit)


def shared_rate(scores: list[Score], arm: str, reference: str, lr: float, margin: float) -> stats.Comparison | None:
    """Δ paired by seed at learning rate ``lr`` (unadjusted); None when fewer than 2 seeds have both arms there."""
    a = {s.seed: s.bpb for s in scores if s.arm == arm and s.lr == lr}
    r = {s.seed: s.bpb for s in scores if s.arm == reference and s.lr == lr}
    seeds = sorted(a.keys() & r.keys())
    if len(seeds) < 2:
        return None
    return stats.compare_paired(arm, reference, [a[s] for s in seeds], [r[s] for s in seeds], margin)


def _complete_seeds(scores: list[Score], rates_of: dict[str, list[float]]) -> list[int]:
    """The seeds that finished each arm of ``rates_of`` at every one of its rates."""
    have: dict[int, set] = {}
    for s in scores:
        have.setdefault(s.seed, set()).add((s.arm, s.lr))
    need = {(a, r) for a, rates in rates_of.items() for r in rates}
    return sorted(seed for seed, cells in have.items() if need <= cells)


def readout(out_dir: Path, budgets: list[int], reference: str, margin: float, arm_set: ArmSet) -> BudgetReadout:
    """Both readouts at every budget of the experiment in ``out_dir`` (``experiment.json``'s budgets).

    Each arm is read against the reference on the seeds where both finished every rate; an arm
    with fewer than 2 such seeds at a budget waits.  Holm adjusts over every declared budget (a
    budget not read yet counts as p = 1), so an early verdict is no less strict than the last.
    Raises :class:`UserError` when no branch has finished, or the reference arm trained none.
    """
    labels = [label(t) for t in budgets]
    scores = load_scores(out_dir, budgets, arm_set)
    if not scores:
        raise UserError(f"{out_dir} holds no finished branch yet: run its compare.py budgets command")
    all_arms = sorted({s.arm for s in scores}, key=lambda a: (a != reference, a))
    if reference not in all_arms:
        raise UserError(f"{out_dir}: no finished branch of the reference arm {reference}: pick it with --reference")
    arms = all_arms[1:]
    scored = {(s.budget, s.arm, s.lr, s.seed) for s in scores}
    diverged = [
        d for d in load_diverged(out_dir, budgets, all_arms, arm_set) if (d.budget, d.arm, d.lr, d.seed) not in scored
    ]
    dropped = {(d.budget, d.arm, d.lr) for d in diverged}  # a rate that diverged leaves the arm's grid there
    rates = sorted({s.lr for s in scores} | {d.lr for d in diverged})
    rows, waiting, no_rate = [], {}, {}
    for lab, tokens in zip(labels, budgets):
        here = [s for s in scores if s.budget == lab and (lab, s.arm, s.lr) not in dropped]
        own = {a: [r for r in rates if (lab, a, r) not in dropped] for a in all_arms}
        gone = [a for a in all_arms if not own[a]]  # every rate diverged: a result, never read
        if gone:
            no_rate[lab] = gone
        live = [a for a in arms if own[a] and own[reference]]
        seeds = {a: _complete_seeds(here, {reference: own[reference], a: own[a]}) for a in live}
        short = [f"{a} {len(seeds[a])}" for a in live if len(seeds[a]) < 2]
        if short:
            waiting[lab] = f"seeds with the arm and {reference} at every rate: {', '.join(short)}; 2 needed"
        readable = [a for a in live if len(seeds[a]) >= 2]
        if not readable:
            continue
        common = sorted(set.intersection(*(set(seeds[a]) for a in readable)))  # one set of seeds for every row
        means = {a: _means(here, a, own[a], common) for a in [reference, *readable]} if common else {}
        row = BudgetRow(lab, tokens, {a: seeds[a] for a in readable}, means, common)
        _read_arms(row, here, own=own, rates=rates, reference=reference, margin=margin)
        rows.append(row)
    for a in arms:
        read = [row for row in rows if a in row.best]
        verdicts([row.best[a] for row in read], [row.edge[a] for row in read], len(budgets))
        verdicts([row.grid[a] for row in read], [row.edge[a] for row in read], len(budgets))
        for r in rates:
            family = [row for row in rows if r in row.shared.get(a, {})]
            for row, adjusted in zip(family, stats.holm([row.shared[a][r] for row in family], family=len(budgets))):
                row.shared[a][r] = adjusted
    params = {a: max(s.params for s in scores if s.arm == a) for a in all_arms}
    split = max(s.train_tokens for s in scores)
    finished: dict[tuple[str, str, float], int] = {}
    for s in scores:
        finished[s.budget, s.arm, s.lr] = finished.get((s.budget, s.arm, s.lr), 0) + 1
    return BudgetReadout(
        reference=reference,
        arms=arms,
        rates=rates,
        margin=margin,
        rows=rows,
        waiting=waiting,
        params=params,
        train_tokens=split,
        finished=finished,
        labels=labels,
        diverged=diverged,
        no_rate=no_rate,
    )


def _read_arms(
    row: BudgetRow, here: list[Score], *, own: dict[str, list[float]], rates: list[float], reference: str, margin: float
) -> None:
    """Fill ``row``'s readouts and edge flags for each arm it reads (``row.seeds``) against ``reference``.

    ``here``: the budget's scores, diverged rates out; ``own``: each arm's rates left there.
    """
    for a, seeds in row.seeds.items():
        used = [s for s in here if s.seed in seeds and s.arm in (a, reference)]
        # The edge rule on the seeds this arm is read on (the means table's may be fewer, or none).
        on_seeds = {x: _means(here, x, own[x], seeds) for x in (a, reference)}
        row.edge[a] = at_edge(on_seeds, [a, reference], rates)
        # A quadratic needs 3 rates on each side: where a diverged rate left fewer, both bests are the
        # lowest means, as a fitted minimum (never above the lowest mean) against a plain one is unfair.
        fit = min(len(own[a]), len(own[reference])) >= 3
        if not fit and len(rates) >= 3:
            row.unfitted.append(a)
        row.best[a] = best_vs_best(used, a, reference, margin, fit=fit)
        row.grid[a] = best_vs_best(used, a, reference, margin, fit=False)
        row.shared[a] = {r: c for r in rates if (c := shared_rate(used, a, reference, r, margin)) is not None}


def _means(scores: list[Score], arm: str, rates: list[float], seeds: list[int]) -> dict[float, float]:
    """``arm``'s mean final bpb at each rate over ``seeds``."""
    return {r: float(np.mean([s.bpb for s in scores if s.arm == arm and s.lr == r and s.seed in seeds])) for r in rates}


@dataclass(frozen=True)
class TrunkCurve:
    """One arm's trunks at one peak rate, averaged over seeds at each eval step of the stable phase."""

    arm: str
    lr: float
    seeds: int
    tokens: list[int]
    val_bpb: list[float]
    gap: list[float]  # val loss − train loss in nats, both the eval's estimate on its eval_iters batches


def trunk_curves(out_dir: Path, arm_set: ArmSet) -> list[TrunkCurve]:
    """Every arm's and rate's trunks under ``out_dir/trunks/``, averaged over their seeds at the eval steps
    all of them reached (a trunk still training shortens the curve); sorted by arm, then rate.

    The val − train gap grows as the trunks repeat the training split: a measure of how much
    each arm memorises, which the final bpb alone does not show.
    """
    groups: dict[tuple[str, float], list[dict[int, dict]]] = {}
    for run in runs_in(out_dir / TRUNKS):
        config = run.config
        arm = arm_set.of(flatten(config), str(run.path))
        rows = [r for r in read_metrics(run.metrics_path) if _trunk_row(r)]
        if rows:
            groups.setdefault((arm, config["train"]["learning_rate"]), []).append({r["step"]: r for r in rows})
    out = []
    for (arm, lr), runs in sorted(groups.items()):
        steps = sorted(set.intersection(*(set(r) for r in runs)))
        if not steps:  # seeds that share no eval step have no mean curve
            continue
        val = [float(np.mean([r[s]["val_bpb"] for r in runs])) for s in steps]
        gap = [float(np.mean([r[s]["val_loss"] - r[s]["train_loss"] for r in runs])) for s in steps]
        out.append(TrunkCurve(arm, lr, len(runs), [runs[0][s]["tokens"] for s in steps], val, gap))
    return out


def _trunk_row(row: dict) -> bool:
    """An eval row with the finite numbers a trunk curve needs (older or cut-short rows are left out)."""
    need = ("tokens", "val_bpb", "val_loss", "train_loss")
    return row["kind"] == "eval" and all(isinstance(row.get(k), (int, float)) and math.isfinite(row[k]) for k in need)
