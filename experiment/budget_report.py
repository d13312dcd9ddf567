"""The budget axis's report: does the answer change with the training budget?  One verdict per budget.

Read from the finished branch folders of a ``compare.py --budgets`` experiment
(:mod:`experiment.budgets`), each scored by its final val bits per byte.  Two readouts, both
per budget and per arm against the reference, with ``margin`` in bits per byte:

1. **Best against best (the verdict).**  Every arm trained every learning rate on every seed.
   Each arm's best is the minimum of a quadratic fit of the seeds' mean bpb against log10 rate
   (``numpy.polyfit``), clamped to the rates tried; Δ is the difference of the two bests.  Its
   interval is the leave-one-seed-out jackknife (Quenouille 1949, Tukey 1958: refit without
   each seed; standard error sqrt((n-1)/n * sum (Δ_(i) - mean Δ_(.))^2), t with n - 1 degrees
   of freedom).  A learning rate picked on one seed can manufacture a verdict (an arm's pick
   off by one grid step); the best of a fitted curve over every seed cannot.
2. **At each shared rate (beside it).**  Δ paired by seed at one learning rate
   (:func:`experiment.stats.compare_paired`).

Verdict rule for both: better / worse when the p-value, Holm-adjusted across the budgets
(statsmodels' ``multipletests``; one family per arm, and per arm and rate), is below 0.05 and
the 95% interval excludes 0; equivalent when the 90% interval lies inside ±margin (TOST);
otherwise inconclusive.  Where the two readouts disagree at a budget, the report says so in
its first lines.  At each budget an arm is read against the reference on the seeds that both
finished at every rate, once there are 2 such seeds.

    path = write_budget_report(Path("results/tying-budget-cpu-2026-11-25"), "tied", command)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from core.errors import UserError
from core.files import read_json, write_text_atomic
from experiment import stats
from experiment.arms import ArmSet, with_recorded
from experiment.budgets import Compute, compute_used, label
from experiment.figures import save_figure
from experiment.report import flatten

matplotlib.use("Agg")

DELTA_FIGURE = "delta_vs_tokens.png"
REPORT = "report.md"
ALPHA = 0.05


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


@dataclass
class BestVsBest:
    """Δ of the fitted best bpb (arm − reference) at one budget, with its jackknife interval and verdict."""

    arm: str
    budget: str
    delta: float
    se: float
    ci: tuple[float, float]
    ci90: tuple[float, float]
    p: float
    p_tost: float
    best_lr: dict[str, float]  # arm -> the rate of its fitted minimum
    p_holm: float = math.nan
    verdict: str = "inconclusive"


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


def load_scores(out_dir: Path, labels: list[str], arm_set: ArmSet) -> list[Score]:
    """Every finished branch (``summary.json``) under ``out_dir/<label>/``; a run with no final bpb is refused."""
    out, seen = [], {}
    for lab in labels:
        for summary_path in sorted((out_dir / lab).glob("*/summary.json")):
            run = summary_path.parent
            config = read_json(run / "config.json", "run config")
            summary = read_json(summary_path, "run summary")
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
            tokens = tc["max_iters"] * tc["batch_size"] * tc["grad_accum_steps"] * config["model"]["block_size"]
            arm = arm_set.of(flatten(config), str(run))
            key = (lab, arm, tc["learning_rate"], tc["seed"])
            if key in seen:  # a copy would count its seed twice in a mean
                raise UserError(
                    f"{run} and {seen[key]} are the same run ({arm}, lr {key[2]:g}, seed {key[3]}, {lab}): "
                    "move one out of the experiment folder"
                )
            seen[key] = run
            params, split = summary["parameters"], summary["train_tokens"]
            out.append(Score(lab, tokens, arm, tc["learning_rate"], tc["seed"], float(bpb), params, split))
    return out


def fitted_best(rates: list[float], means: list[float]) -> tuple[float, float]:
    """``(best bpb, its rate)``: the minimum of the quadratic in log10 rate through three ``(rate, mean
    bpb)`` points, clamped to their rates (with fewer than 3 rates, the best mean itself).

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


def _best(scores: list[Score], arm: str, seeds: list[int], fit: bool = True) -> tuple[float, float]:
    """An arm's best (bpb, rate) from the mean over ``seeds`` at each of its rates: the fitted minimum
    (:func:`fitted_best`), or with ``fit=False`` the lowest mean on the grid."""
    rates = sorted({s.lr for s in scores if s.arm == arm})
    means = [float(np.mean([s.bpb for s in scores if s.arm == arm and s.lr == r and s.seed in seeds])) for r in rates]
    if not fit:
        i = int(np.argmin(means))
        return means[i], rates[i]
    return fitted_best(rates, means)


def best_vs_best(scores: list[Score], arm: str, reference: str, margin: float, fit: bool = True) -> BestVsBest:
    """Δ of fitted bests at one budget (``scores`` of that budget, on seeds every arm and rate has),
    its jackknife interval, t-test p and TOST p against ±``margin``.  With ``fit=False`` each best
    is the lowest mean on the grid instead (the report's sensitivity check).

    Raises :class:`UserError` with fewer than 2 seeds (no interval).
    """
    seeds = sorted({s.seed for s in scores})
    if len(seeds) < 2:
        raise UserError(f"{scores[0].budget}: one seed gives no interval; train at least 2 (--seeds)")
    (best_a, lr_a), (best_r, lr_r) = _best(scores, arm, seeds, fit), _best(scores, reference, seeds, fit)
    delta = best_a - best_r

    def without(j: int) -> float:
        rest = [s for s in seeds if s != j]
        return _best(scores, arm, rest, fit)[0] - _best(scores, reference, rest, fit)[0]

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
    return BestVsBest(arm, scores[0].budget, delta, se, ci, ci90, p, p_tost, {reference: lr_r, arm: lr_a})


def holm_verdicts(results: list[BestVsBest], family: int | None = None) -> list[BestVsBest]:
    """Fill ``p_holm`` (Holm across ``results``: one arm's budgets, a family of ``family`` budgets in all,
    the unread ones counted as p = 1) and the verdict (module docstring)."""
    if not results:
        return []
    padding = [1.0] * max(0, (family or len(results)) - len(results))
    adjusted = multipletests([r.p for r in results] + padding, method="holm")[1][: len(results)]
    for r, p_holm in zip(results, adjusted):
        r.p_holm = float(p_holm)
        if p_holm < ALPHA and r.ci[1] < 0:
            r.verdict = "better"
        elif p_holm < ALPHA and r.ci[0] > 0:
            r.verdict = "worse"
        elif r.p_tost < ALPHA:
            r.verdict = "equivalent"
        else:
            r.verdict = "inconclusive"
    return results


def shared_rate(scores: list[Score], arm: str, reference: str, lr: float, margin: float) -> stats.Comparison | None:
    """Δ paired by seed at learning rate ``lr`` (unadjusted); None when fewer than 2 seeds have both arms there."""
    a = {s.seed: s.bpb for s in scores if s.arm == arm and s.lr == lr}
    r = {s.seed: s.bpb for s in scores if s.arm == reference and s.lr == lr}
    seeds = sorted(a.keys() & r.keys())
    if len(seeds) < 2:
        return None
    return stats.compare_paired(arm, reference, [a[s] for s in seeds], [r[s] for s in seeds], margin)


def _complete_seeds(scores: list[Score], arms: list[str], rates: list[float]) -> list[int]:
    """The seeds that finished each of ``arms`` at every rate."""
    have: dict[int, set] = {}
    for s in scores:
        have.setdefault(s.seed, set()).add((s.arm, s.lr))
    need = {(a, r) for a in arms for r in rates}
    return sorted(seed for seed, cells in have.items() if need <= cells)


def readout(out_dir: Path, budgets: list[int], reference: str, margin: float, arm_set: ArmSet) -> BudgetReadout:
    """Both readouts at every budget of the experiment in ``out_dir`` (``experiment.json``'s budgets).

    Each arm is read against the reference on the seeds where both finished every rate; an arm
    with fewer than 2 such seeds at a budget waits.  Holm adjusts over every declared budget (a
    budget not read yet counts as p = 1), so an early verdict is no less strict than the last.
    Raises :class:`UserError` when no branch has finished, or the reference arm trained none.
    """
    labels = [label(t) for t in budgets]
    scores = load_scores(out_dir, labels, arm_set)
    if not scores:
        raise UserError(f"{out_dir} holds no finished branch yet: run its compare.py --budgets command")
    all_arms = sorted({s.arm for s in scores}, key=lambda a: (a != reference, a))
    if reference not in all_arms:
        raise UserError(f"{out_dir}: no finished branch of the reference arm {reference}: pick it with --reference")
    arms, rates = all_arms[1:], sorted({s.lr for s in scores})
    rows, waiting = [], {}
    for lab, tokens in zip(labels, budgets):
        here = [s for s in scores if s.budget == lab]
        seeds = {a: _complete_seeds(here, [reference, a], rates) for a in arms}
        short = [f"{a} {len(seeds[a])}" for a in arms if len(seeds[a]) < 2]
        if short:
            waiting[lab] = f"seeds with the arm and {reference} at every rate: {', '.join(short)}; 2 needed"
        readable = [a for a in arms if len(seeds[a]) >= 2]
        if not readable:
            continue
        common = sorted(set.intersection(*(set(seeds[a]) for a in readable)))  # one set of seeds for every row
        means = {a: _means(here, a, rates, common) for a in [reference, *readable]}
        row = BudgetRow(lab, tokens, {a: seeds[a] for a in readable}, means, common)
        for a in readable:
            used = [s for s in here if s.seed in seeds[a] and s.arm in (a, reference)]
            row.best[a] = best_vs_best(used, a, reference, margin)
            row.grid[a] = best_vs_best(used, a, reference, margin, fit=False)
            row.shared[a] = {r: c for r in rates if (c := shared_rate(used, a, reference, r, margin)) is not None}
        rows.append(row)
    for a in arms:
        holm_verdicts([row.best[a] for row in rows if a in row.best], len(budgets))
        holm_verdicts([row.grid[a] for row in rows if a in row.grid], len(budgets))
        for r in rates:
            family = [row for row in rows if r in row.shared.get(a, {})]
            for row, adjusted in zip(family, stats.holm([row.shared[a][r] for row in family], family=len(budgets))):
                row.shared[a][r] = adjusted
    params = {a: max(s.params for s in scores if s.arm == a) for a in all_arms}
    split = max(s.train_tokens for s in scores)
    finished: dict[tuple[str, str, float], int] = {}
    for s in scores:
        finished[s.budget, s.arm, s.lr] = finished.get((s.budget, s.arm, s.lr), 0) + 1
    return BudgetReadout(reference, arms, rates, margin, rows, waiting, params, split, finished, labels)


def _means(scores: list[Score], arm: str, rates: list[float], seeds: list[int]) -> dict[float, float]:
    """``arm``'s mean final bpb at each rate over ``seeds``."""
    return {r: float(np.mean([s.bpb for s in scores if s.arm == arm and s.lr == r and s.seed in seeds])) for r in rates}


def _inside(verdict: str, ci: tuple[float, float], margin: float) -> bool:
    """Whether a verdict puts the difference inside ±margin: equivalent, or better or worse by less than it."""
    return verdict == "equivalent" or _size(verdict, ci, margin) == "by less than the margin"


def disagreements(ro: BudgetReadout) -> tuple[list[str], list[str]]:
    """``(clashes, within)``: one line per budget and arm where a shared-rate verdict differs from the
    best-vs-best one, split by whether the two could both hold (``within``: each puts the difference
    inside the margin, one calling it better or worse by less than the margin, the other equivalent)."""
    clashes, within = [], []
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.best]:
            b = row.best[a]
            other = {f"{r:g}": c for r, c in row.shared[a].items() if c.verdict != b.verdict}
            if not other:
                continue
            at = ", ".join(f"{c.verdict}{_sized(c.verdict, c.ci, ro.margin)} at lr {r}" for r, c in other.items())
            line = f"{row.budget}: {a} is {b.verdict} best against best{_sized(b.verdict, b.ci, ro.margin)}, but {at}"
            both_inside = _inside(b.verdict, b.ci, ro.margin) and all(
                _inside(c.verdict, c.ci, ro.margin) for c in other.values()
            )
            (within if both_inside else clashes).append(line)
    return clashes, within


def _fmt(x: float, digits: int = 4) -> str:
    """``-0.0123`` -> ``−0.0123`` (a real minus sign), ``+`` for positive."""
    return f"{x:+.{digits}f}".replace("-", "−")


def _interval(ci: tuple[float, float]) -> str:
    """``[−0.0123, +0.0045]``."""
    return f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _p(p: float) -> str:
    """A p-value in 3 significant digits (2 would print 0.0496 as 0.05, beside a verdict of better)."""
    return "n/a" if math.isnan(p) else f"{p:.3g}"


def delta_figure(ro: BudgetReadout) -> Figure | None:
    """Δ (arm − reference) in bpb against training tokens, log-x; best-vs-best with its 95% jackknife interval.

    Second x-axis on top: tokens per parameter (of the reference) and epochs of the training
    split.  The ±margin band is shaded.  None when no budget is read yet.
    """
    if not ro.rows:
        return None
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")
    ax = fig.subplots()
    x = np.array([row.tokens for row in ro.rows], dtype=float)
    ax.axhspan(-ro.margin, ro.margin, color="0.9", label=f"±{ro.margin:g} bpb (declared margin)")
    ax.axhline(0, color="0.4", linewidth=0.8)
    for k, a in enumerate(ro.arms):
        rows = [row for row in ro.rows if a in row.best]
        d = np.array([row.best[a].delta for row in rows])
        lo = d - np.array([row.best[a].ci[0] for row in rows])
        hi = np.array([row.best[a].ci[1] for row in rows]) - d
        xs = np.array([row.tokens for row in rows], dtype=float)
        shift = xs * (1 + 0.04 * (k - (len(ro.arms) - 1) / 2))  # side by side, not on top of each other
        ax.errorbar(shift, d, yerr=[lo, hi], marker="o", capsize=3, label=f"{a} − {ro.reference}, best vs best")
    ax.set_xscale("log")
    ax.set_xticks(x, [row.budget for row in ro.rows], minor=False)
    ax.set_xticks([], minor=True)
    ax.set_xlabel("training tokens (log)")
    ax.set_ylabel(f"Δ final val bits per byte (arm − {ro.reference})")
    per_param, split = ro.params[ro.reference], ro.train_tokens
    top = ax.secondary_xaxis("top", functions=(lambda t: t / per_param, lambda q: q * per_param))
    top.set_xticks(x / per_param, [f"{v:.3g}" for v in x / per_param], minor=False)  # as the verdict table
    top.set_xticks([], minor=True)
    top.set_xlabel(f"tokens per parameter of {ro.reference} ({per_param / 1e6:.2f}M parameters)")
    low = ax.secondary_xaxis(-0.22, functions=(lambda t: t / split, lambda e: e * split))
    low.set_xticks(x / split, [f"{v:.3g}" for v in x / split], minor=False)
    low.set_xticks([], minor=True)
    low.set_xlabel(f"epochs of the training split ({split / 1e6:.2f}M tokens)")
    seeds = sorted({len(s) for row in ro.rows for s in row.seeds.values()})
    ax.set_title(f"Does the tying answer change with the budget? ({'/'.join(map(str, seeds))} paired seeds)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize="small")
    return fig


def _size(verdict: str, ci: tuple[float, float], margin: float) -> str:
    """For better or worse: where the 95% interval ``ci`` lies against ±margin.  Wholly inside, "by less than the
    margin" (a real difference too small to matter); only its end nearest 0, "by less than the margin not
    ruled out"; neither, or no difference found, ""."""
    if verdict not in ("better", "worse"):
        return ""
    near, far = (ci[1], ci[0]) if verdict == "better" else ci
    if abs(far) < margin:
        return "by less than the margin"
    return "by less than the margin not ruled out" if abs(near) < margin else ""


def _sized(verdict: str, ci: tuple[float, float], margin: float) -> str:
    """:func:`_size` in parentheses after a space, or ""."""
    size = _size(verdict, ci, margin)
    return f" ({size})" if size else ""


def _verdict(b: BestVsBest, margin: float) -> str:
    """The verdict in bold and, when better or worse, its size against the margin (:func:`_size`)."""
    size = _size(b.verdict, b.ci, margin)
    return f"**{b.verdict}**" + (f", {size}" if size else "")


def _verdict_table(ro: BudgetReadout) -> list[str]:
    """The verdict table: one row per budget and arm, best against best."""
    lines = [
        f"| budget (tokens) | tokens / param | epochs | seeds | arm | best lr ({ro.reference} / arm) | Δ bpb | "
        "95% interval | 90% interval | Holm p | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.best]:
            b = row.best[a]
            lr = f"{b.best_lr[ro.reference]:.2g} / {b.best_lr[a]:.2g}"
            lines.append(
                f"| {row.budget} | {row.tokens / ro.params[ro.reference]:.3g} | {row.tokens / ro.train_tokens:.3g} | "
                f"{len(row.seeds[a])} | {a} | {lr} | {_fmt(b.delta)} | {_interval(b.ci)} | {_interval(b.ci90)} | "
                f"{_p(b.p_holm)} | {_verdict(b, ro.margin)} |"
            )
    return lines


def _sensitivity_section(ro: BudgetReadout) -> list[str]:
    """Best against best with each arm's lowest grid mean in place of its fitted minimum: not the verdict."""
    lines = [
        "## Sensitivity: the lowest grid mean instead of the fitted minimum",
        "",
        "Not the declared readout. A quadratic's minimum falls further below an arm's lowest mean when its "
        "curve is sharp than when it is flat, so Δ can move with the fit alone; here each best is the lowest "
        "mean on the grid, with the same jackknife, Holm and rule. Each leave-one-seed-out refit picks its own "
        "lowest rate, so an interval can differ from the shared-rate one at the same Δ.",
        "",
        f"| budget | arm | lowest lr ({ro.reference} / arm) | Δ bpb | 95% interval | 90% interval | Holm p | "
        "verdict by the same rule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.grid]:
            g = row.grid[a]
            lines.append(
                f"| {row.budget} | {a} | {g.best_lr[ro.reference]:g} / {g.best_lr[a]:g} | {_fmt(g.delta)} | "
                f"{_interval(g.ci)} | {_interval(g.ci90)} | {_p(g.p_holm)} | {_verdict(g, ro.margin)} |"
            )
    return lines


def _shared_table(ro: BudgetReadout) -> list[str]:
    """Δ paired by seed at each shared learning rate (Holm across budgets per arm and rate)."""
    head = " | ".join(f"lr {r:g}" for r in ro.rates)
    lines = [f"| budget | arm | {head} |", "|---|---|" + "---|" * len(ro.rates)]
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.shared]:
            cells = []
            for r in ro.rates:
                c = row.shared[a].get(r)
                cells.append("n/a" if c is None else f"{_fmt(c.mean)} {_interval(c.ci)} p {_p(c.p_holm)} {c.verdict}")
            lines.append(f"| {row.budget} | {a} | {' | '.join(cells)} |")
    return lines


def _means_table(ro: BudgetReadout) -> list[str]:
    """Each arm's mean final val bpb at each rate and budget over the seeds every arm there finished, the
    lowest of an arm's row in bold."""
    arms = [ro.reference, *ro.arms]
    lines = [
        "| budget | seeds | arm | " + " | ".join(f"lr {r:g}" for r in ro.rates) + " |",
        "|---|---|---|" + "---|" * len(ro.rates),
    ]
    edges = []
    for row in ro.rows:
        for a in [a for a in arms if a in row.means]:
            m = row.means[a]
            low = min(m, key=m.get)
            if low in (ro.rates[0], ro.rates[-1]) and len(ro.rates) >= 3:
                edges.append(f"{row.budget} {a} (lr {low:g})")
            cells = [f"**{m[r]:.4f}**" if r == low else f"{m[r]:.4f}" for r in ro.rates]
            lines.append(f"| {row.budget} | {len(row.mean_seeds)} | {a} | {' | '.join(cells)} |")
    if edges:
        lines += ["", f"Best on the grid's edge (a rate past it may be better): {'; '.join(edges)}."]
    return lines


def _finished_table(ro: BudgetReadout) -> list[str]:
    """How many seeds finished at each budget, arm and rate: what the experiment has, read or not."""
    arms = [ro.reference, *ro.arms]
    lines = [
        "| budget | arm | " + " | ".join(f"lr {r:g}" for r in ro.rates) + " |",
        "|---|---|" + "---|" * len(ro.rates),
    ]
    for lab in ro.labels:
        for a in arms:
            counts = [ro.finished.get((lab, a, r), 0) for r in ro.rates]
            if any(counts):
                lines.append(f"| {lab} | {a} | {' | '.join(str(n) for n in counts)} |")
    return lines


def _compute_section(c: Compute) -> list[str]:
    """Tokens and run time of the trunks, the branches and both, then threads, CPU and commits."""

    def row(what: str, runs: int, tokens: float, seconds: float) -> str:
        return f"| {what} | {runs} | {tokens / 1e6:,.1f}M | {seconds / 3600:.1f} h |"

    return [
        "## Compute",
        "",
        "Run time is each run's elapsed wall time, summed (a branch from its branch point: the steps before it are "
        "its trunk's); runs trained side by side overlap, so the wall-clock was shorter.",
        "",
        "| runs | count | tokens trained | run time |",
        "|---|---|---|---|",
        row("trunks (warmup and stable phase)", c.trunks, c.trunk_tokens, c.trunk_s),
        row("branches (cooldowns)", c.branches, c.branch_tokens, c.branch_s),
        row("all", c.trunks + c.branches, c.trunk_tokens + c.branch_tokens, c.trunk_s + c.branch_s),
        "",
        f"Threads a run: {', '.join(map(str, c.threads))}. CPU: {'; '.join(c.cpus)}. Commit: "
        f"{', '.join(f'`{x}`' for x in c.commits) or 'not recorded'}.",
        "",
    ]


def _seeds_note(ro: BudgetReadout, declared: int | None) -> list[str]:
    """The report's first lines: how many paired seeds the verdicts rest on, and, with fewer than
    ``declared`` finished, that the report is interim."""
    counts = sorted({len(s) for row in ro.rows for s in row.seeds.values()})
    if not counts:
        return []
    n = counts[0]
    df = f"{n - 1} degree{'s' if n != 2 else ''}" if len(counts) == 1 else "n − 1 degrees"
    lines = [
        f"Read on {'–'.join(map(str, (counts[0], counts[-1]) if len(counts) > 1 else counts))} paired seeds a "
        f"budget (jackknife and t with {df} of freedom)."
        + (" With so few, an interval can be narrow only because the seeds happened to agree." if n < 4 else ""),
        "",
    ]
    if declared and (n < declared or ro.waiting):
        lines = [
            f"**Interim: {n} of the {declared} declared seeds read; these verdicts are not the answer.**",
            "",
        ] + lines
    return lines


def render(
    ro: BudgetReadout, title: str, command: str, figure: str | None, compute: Compute, declared_seeds: int | None = None
) -> str:
    """The budget report in Markdown: how many seeds (interim or not), disagreements, the verdicts, the
    figure, the tables, what finished, the compute, how to rebuild."""
    md = [f"# {title}", "", *_seeds_note(ro, declared_seeds)]
    clash, within = disagreements(ro)
    if clash:
        md += ["**The two readouts disagree** (best against best is the verdict):", ""]
        md += [f"- {line}" for line in clash] + [""]
    if within:
        md += ["Verdicts that differ but agree that the difference lies inside the margin:", ""]
        md += [f"- {line}" for line in within] + [""]
    if ro.waiting:
        md += ["Not read yet: " + "; ".join(f"{b} ({why})" for b, why in ro.waiting.items()) + ".", ""]
    if ro.rows:  # before the first budget is read there is no verdict, figure or mean to show
        md += [
            "## Verdicts: best against best",
            "",
            f"Δ = arm − {ro.reference} in final val bits per byte (negative: the arm is better). Each arm's best is "
            "the minimum of a quadratic fit of its mean bpb against log10 learning rate; the interval is the "
            "leave-one-seed-out jackknife (t, n − 1 df); p is Holm-adjusted across all the declared budgets (one not read yet counts as p = 1). Better or worse: the "
            f"95% interval excludes 0 and Holm p < 0.05; equivalent: the 90% interval lies inside ±{ro.margin:g} "
            "bpb (TOST); otherwise inconclusive.",
            "",
            *_verdict_table(ro),
            "",
        ]
        if figure:
            md += [
                f"![Δ against training tokens]({figure})",
                "",
                "Δ best against best with its 95% jackknife interval (t, n − 1 df), log tokens; the grey band is the "
                "declared margin. The top axis gives tokens per parameter of the reference arm; epochs are tokens over "
                "the training split.",
                "",
            ]
        md += [
            "## At each shared learning rate",
            "",
            "Δ paired by seed, its 95% t interval (not adjusted) and Holm-adjusted p across all the declared budgets "
            "(one not read yet counts as p = 1), then the verdict by the same rule: an interval that excludes 0 "
            "with a Holm p above 0.05 is not better or worse.",
            "",
        ]
        md += [*_shared_table(ro), "", *_sensitivity_section(ro), ""]
        md += ["## Mean final val bpb", "", *_means_table(ro), ""]
    md += [
        "## Finished so far",
        "",
        "Seeds finished at each budget, arm and learning rate.",
        "",
        *_finished_table(ro),
        "",
        *_compute_section(compute),
    ]
    md += ["## Rebuild this report", "", "```bash", command, "```", ""]
    return "\n".join(md)


def write_budget_report(out_dir: Path, reference: str, command: str) -> Path:
    """Read the budget experiment in ``out_dir`` and write its ``report.md`` and figure there; the report's path.

    Raises :class:`UserError` when ``out_dir`` is no budget experiment or nothing finished.
    """
    settings = read_json(out_dir / "experiment.json", "experiment settings")
    if not settings.get("budgets"):
        raise UserError(f"{out_dir} is not a --budgets experiment (its experiment.json lists no budgets)")
    margin = settings.get("margin_bpb", settings.get("margin"))
    ro = readout(out_dir, settings["budgets"], reference, margin, with_recorded(settings.get("arms")))
    figure = save_figure(delta_figure(ro), out_dir, DELTA_FIGURE)
    title = f"Does the answer change with the training budget? {out_dir.name}"
    path = out_dir / REPORT
    compute = compute_used(out_dir, [label(b) for b in settings["budgets"]])
    write_text_atomic(path, render(ro, title, command, figure, compute, settings.get("seeds")))
    return path
