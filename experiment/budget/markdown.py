"""The budget axis's report: the readout of :mod:`experiment.budget.readout` in Markdown, with its figures.

``report.md`` opens with the seeds it rests on (interim until the declared seeds are read) and
where the two readouts disagree, then the verdicts best against best, the Δ-against-tokens
figure, the shared-rate, sensitivity and means tables, the trunks' figure, what finished, the
compute, and the command that renders it again.

    path = write_budget_report(Path("results/tying-budget-cpu-2026-11-25"), "tied", command)
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from scipy import stats as sps

from core.errors import UserError
from core.files import write_text_atomic
from experiment import stats
from experiment.arms import with_recorded
from experiment.budget.readout import BestVsBest, BudgetReadout, TrunkCurve, readout, trunk_curves
from experiment.budget.run import TRUNKS, Compute, compute_used, label

from experiment.style import interval, p_value, save_figure, signed
from experiment.runs.record import EXPERIMENT_FILE, ExperimentRecord, flatten, record_look
from experiment.runs import ledger, tries
from experiment.runs.seeds import branches_apart
from training.run_files import runs_in

matplotlib.use("Agg")

DELTA_FIGURE = "delta_vs_tokens.png"
BESIDE_FIGURE = "delta_vs_tokens_beside.png"
TRUNK_FIGURE = "trunks.png"
EPOCH_TICKS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50]
REPORT = "report.md"


def _inside(verdict: str, ci: tuple[float, float], margin: float) -> bool:
    """Whether a verdict puts the difference inside ±margin: equivalent, or better or worse by less than it."""
    return verdict == "equivalent" or stats.size_against_margin(verdict, ci, margin) == "by less than the margin"


def disagreements(ro: BudgetReadout) -> tuple[list[str], list[str]]:
    """``(clashes, within)``: one line per budget and arm where a shared-rate verdict differs from the
    best-vs-best one.  ``within`` holds the lines where every verdict named puts the difference inside
    the margin (equivalent, or better or worse by less than the margin); any other difference, an
    inconclusive one included, is a clash."""
    clashes, within = [], []
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.best and not row.edge.get(a)]:  # a Δ not read clashes with none
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


def beside_figure(readouts: list[tuple[str, BudgetReadout]]) -> Figure | None:
    """Several records' Δ (arm − reference, bpb) against training tokens, log-x: one panel per arm, one colour
    per record, each budget's best against best with its 95% jackknife interval; the first record's margin
    shaded.  Does an answer carry from one recipe to another?  None when no record has a budget read.
    """
    shown = [(name, ro) for name, ro in readouts if ro.rows]
    if not shown:
        return None
    arms = list(dict.fromkeys(a for _, ro in shown for a in ro.arms))
    fig = Figure(figsize=(5.2 * len(arms), 4.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(arms), sharey=True))
    ticks = {row.tokens: row.budget for _, ro in shown for row in ro.rows}
    margin, reference = shown[0][1].margin, shown[0][1].reference
    for ax, arm in zip(axes, arms):
        ax.axhspan(-margin, margin, color="0.9", label=f"±{margin:g} bpb ({shown[0][0]}'s margin)")
        ax.axhline(0, color="0.4", linewidth=0.8)
        for k, (name, ro) in enumerate(shown):
            rows = [row for row in ro.rows if arm in row.best]
            if not rows:
                continue
            d = np.array([row.best[arm].delta for row in rows])
            err = [d - [row.best[arm].ci[0] for row in rows], [row.best[arm].ci[1] for row in rows] - d]
            xs = np.array([row.tokens for row in rows], dtype=float)
            seeds = "/".join(map(str, sorted({len(row.seeds[arm]) for row in rows})))
            shift = xs * (1 + 0.04 * (k - (len(shown) - 1) / 2))  # side by side, not on top of each other
            ax.errorbar(shift, d, yerr=err, marker="o", capsize=3, color=f"C{k}", label=f"{name} ({seeds} seeds)")
        ax.set_xscale("log")
        ax.set_xticks(list(ticks), list(ticks.values()), minor=False)
        ax.set_xticks([], minor=True)
        ax.set(xlabel="training tokens (log)", title=f"{arm} − {reference}")
        ax.grid(True, which="both", alpha=0.25)
    axes[0].set_ylabel("Δ final val bits per byte, best vs best")
    axes[-1].legend(fontsize="small")
    return fig


def read_beside(folders: list[Path], reference: str) -> list[tuple[str, BudgetReadout]]:
    """Each budget experiment in ``folders`` read against ``reference`` as its own report reads it, named by its
    folder.  Raises :class:`UserError` for a folder that is no budget experiment, or has nothing finished."""
    out = []
    for folder in folders:
        record = ExperimentRecord.read(folder)
        if record is None or record.kind != "budget":
            raise UserError(f"--beside {folder}: not a compare.py budgets experiment; give a budgets folder")
        out.append((folder.name, readout(folder, record.budgets, reference, record.margin, with_recorded(record.arms))))
    return out


def trunk_figure(curves: list[TrunkCurve], train_tokens: int, reference: str) -> Figure | None:
    """Two panels against training tokens (log x) through the trunks' stable phase: val bits per byte, and
    val − train loss in nats (what repeating the training split lets an arm memorise).  One colour per
    arm (the reference's first), one line style per rate; epochs of the training split on a top axis.
    None without curves."""
    if not curves:
        return None
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    arms = sorted({c.arm for c in curves}, key=lambda a: (a != reference, a))
    rates = sorted({c.lr for c in curves})
    styles = [":", "-", "--", "-."]
    for c in curves:
        x = np.array(c.tokens, dtype=float)
        keep = x > 0  # log axis
        colour, style = f"C{arms.index(c.arm)}", styles[rates.index(c.lr) % len(styles)]
        label_ = f"{c.arm}, lr {c.lr:g} ({c.seeds} seed{'s' if c.seeds != 1 else ''})"
        for ax, y in zip(axes, (c.val_bpb, c.gap)):
            ax.plot(x[keep], np.array(y)[keep], color=colour, linestyle=style, label=label_)
    for ax, ylabel in zip(axes, ("val bits per byte", "val − train loss (nats)")):
        ax.set_xscale("log")
        ax.set_xlabel("training tokens (log)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.25)
        top = ax.secondary_xaxis("top", functions=(lambda t: t / train_tokens, lambda e: e * train_tokens))
        top.set_xticks(EPOCH_TICKS, [f"{e:g}" for e in EPOCH_TICKS], minor=False)
        top.set_xticks([], minor=True)
        top.set_xlabel(f"epochs of the training split ({train_tokens / 1e6:.2f}M tokens)")
    axes[1].legend(fontsize="small")
    fig.suptitle("The trunks at their stable rate: val loss, and how far it lags the train loss")
    return fig


def _sized(verdict: str, ci: tuple[float, float], margin: float) -> str:
    """:func:`experiment.stats.size_against_margin` in parentheses after a space, or ""."""
    size = stats.size_against_margin(verdict, ci, margin)
    return f" ({size})" if size else ""


def _verdict(b: BestVsBest, margin: float) -> str:
    """The verdict in bold and, when better or worse, its size against the margin
    (:func:`experiment.stats.size_against_margin`)."""
    size = stats.size_against_margin(b.verdict, b.ci, margin)
    return f"**{b.verdict}**" + (f", {size}" if size else "")


def _readout_cells(b: BestVsBest, margin: float) -> str:
    """Δ, its 95% and 90% intervals, Holm p and the verdict: the cells both best-against-best tables end with."""
    return f"{signed(b.delta)} | {interval(b.ci)} | {interval(b.ci90)} | {p_value(b.p_holm)} | {_verdict(b, margin)}"


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
                f"{len(row.seeds[a])} | {a} | {lr} | {_readout_cells(b, ro.margin)} |"
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
                f"| {row.budget} | {a} | {g.best_lr[ro.reference]:g} / {g.best_lr[a]:g} | {_readout_cells(g, ro.margin)} |"
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
                cells.append(
                    "n/a" if c is None else f"{signed(c.mean)} {interval(c.ci)} p {p_value(c.p_holm)} {c.verdict}"
                )
            lines.append(f"| {row.budget} | {a} | {' | '.join(cells)} |")
    return lines


def _per_seed_table(ro: BudgetReadout) -> list[str]:
    """Each seed's Δ at each shared rate, in seed order, inside a collapsed block: with few seeds they say
    more than an interval does."""
    head = " | ".join(f"lr {r:g}" for r in ro.rates)
    lines = [
        "<details><summary>Each seed's Δ at each shared rate</summary>",
        "",
        f"Δ = arm − {ro.reference} in final val bpb, one value per seed in the order of the seeds column.",
        "",
        f"| budget | arm | seeds | {head} |",
        "|---|---|---|" + "---|" * len(ro.rates),
    ]
    for row in ro.rows:
        for a in [a for a in ro.arms if a in row.shared]:
            cells = [
                ", ".join(signed(d) for d in row.shared[a][r].diffs) if r in row.shared[a] else "n/a" for r in ro.rates
            ]
            seeds = ", ".join(str(s) for s in row.seeds[a])
            lines.append(f"| {row.budget} | {a} | {seeds} | {' | '.join(cells)} |")
    return [*lines, "", "</details>"]


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
            cells = [f"**{m[r]:.4f}**" if r == low else f"{m[r]:.4f}" if r in m else "—" for r in ro.rates]
            lines.append(f"| {row.budget} | {len(row.mean_seeds)} | {a} | {' | '.join(cells)} |")
    if ro.diverged:
        lines += ["", "—: out of the arm's grid at that budget (a run diverged there; see the top)."]
    if edges:
        lines += ["", f"Best on the grid's edge (a rate past it may be better): {'; '.join(edges)}."]
    missing = [row.budget for row in ro.rows if not row.means]
    if missing:
        lines += ["", f"Not shown: {', '.join(missing)} (no seed has finished every arm at every rate there)."]
    return lines


def _diverged_lines(ro: BudgetReadout) -> list[str]:
    """The runs that stopped on a non-finite loss, each with the arms, rate, seed and budgets it takes out."""
    if not ro.diverged:
        return []
    by_run: dict[str, list] = {}
    for d in ro.diverged:
        by_run.setdefault(d.run, []).append(d)
    lines = [
        "**Diverged** (a run stopped on a non-finite loss): that rate leaves the arm's grid at each budget "
        "the run did not reach, on every seed.",
        "",
    ]
    for run, ds in by_run.items():
        arms, budgets = ", ".join(dict.fromkeys(d.arm for d in ds)), ", ".join(dict.fromkeys(d.budget for d in ds))
        lines.append(f"- `{run}` ({arms}; lr {ds[0].lr:g}, seed {ds[0].seed}) at step {ds[0].step:,}: {budgets}")
    gone = [f"{', '.join(arms)} at {lab}" for lab, arms in ro.no_rate.items()]
    if gone:
        lines += ["", f"Every rate diverged, so there is nothing to read, for {'; '.join(gone)}."]
    plain = [f"{a} at {row.budget}" for row in ro.rows for a in row.unfitted]
    if plain:
        lines += [
            "",
            f"Fewer than 3 rates were left to fit for {'; '.join(plain)}: there both bests, the arm's and "
            f"{ro.reference}'s, are their lowest means (the sensitivity readout), not fitted minima.",
        ]
    return [*lines, ""]


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
        f"Threads a run: {', '.join(map(str, c.threads)) or 'not recorded'}. Hardware: {'; '.join(c.cpus) or 'not recorded'}. Commit: "
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
    if declared and n < declared:
        narrower = (sps.t.ppf(0.975, n - 1) / sps.t.ppf(0.975, declared - 1)) * math.sqrt(declared / n)  # t s / sqrt(n)
        head = (
            f"{n} of the {declared} declared seeds read (at {declared}, the same seed-to-seed spread would give "
            f"intervals about {narrower:.1f}× narrower)"
        )
    elif declared and ro.waiting:
        head = f"{', '.join(ro.waiting)} not read yet"
    else:
        return lines
    return [f"**Interim: {head}; these verdicts are not the answer.**", "", *lines]


def _disagreement_lines(ro: BudgetReadout) -> list[str]:
    """Where best against best and a shared rate disagree, and where they differ only inside the margin."""
    clash, within = disagreements(ro)
    md = []
    if clash:
        md += [
            "**The two readouts disagree** (best against best is the verdict; the shared-rate ones are descriptive, "
            "not adjusted across rates):",
            "",
        ]
        md += [f"- {line}" for line in clash] + [""]
    if within:
        md += ["Verdicts that differ but agree that the difference lies inside the margin:", ""]
        md += [f"- {line}" for line in within] + [""]
    return md


def _beside_section(beside: tuple[str, list[str]], reference: str) -> list[str]:
    """The section naming the records drawn beside this one (``beside``: the figure's name, their names)."""
    return [
        f"## Beside {', '.join(beside[1])}",
        "",
        f"![Δ against training tokens, this record beside the others]({beside[0]})",
        "",
        f"Δ best against best with its 95% jackknife interval in each record, {reference} the reference in "
        "all, each record read on its own seeds and rates as its own report reads it; the grey band is this "
        "record's margin. Records compare where their designs match (arms, budgets, readout).",
        "",
    ]


def render(
    ro: BudgetReadout,
    title: str,
    command: str,
    figure: str | None,
    compute: Compute,
    declared_seeds: int | None = None,
    trunks: str | None = None,
    beside: tuple[str, list[str]] | None = None,
    provenance: list[str] | tuple = (),
) -> str:
    """The budget report in Markdown: runs not as declared (``provenance``: :func:`experiment.runs.ledger.problems`),
    how many seeds (interim or not), disagreements, the verdicts, the
    figure, the tables, the other records beside this one (``beside``: their figure and names), the
    trunks' figure, what finished, the compute, how to rebuild."""
    md = [f"# {title}", "", *(f"**Not calibrated:** {why}." for why in provenance), *([""] if provenance else [])]
    md += [*_seeds_note(ro, declared_seeds), *_disagreement_lines(ro), *_diverged_lines(ro)]
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
            "with a Holm p above 0.05 is not better or worse. Descriptive: the rates are not adjusted against "
            "each other, so with several rates one of them says better or worse by chance more often than 5%.",
            "",
        ]
        md += [*_shared_table(ro), "", *_per_seed_table(ro), "", *_sensitivity_section(ro), ""]
        md += ["## Mean final val bpb", "", *_means_table(ro), ""]
    if beside:
        md += _beside_section(beside, ro.reference)
    if trunks:
        md += [
            "## The trunks",
            "",
            f"![The trunks' val bits per byte and val − train loss against tokens]({trunks})",
            "",
            "Each arm's trunks at each rate, mean over their seeds, at every eval of the stable phase (no "
            "cooldown). Right: val loss minus the train loss, both estimated by the same eval on its batches of "
            "each split: it grows as the trunks repeat the training split, and shows how much an arm memorises, "
            "which its final val loss alone does not.",
            "",
        ]
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


def write_budget_report(out_dir: Path, reference: str, command: str, beside: list[Path] | None = None) -> Path:
    """Read the budget experiment in ``out_dir`` and write its ``report.md`` and figures there; the report's path.
    With ``beside`` (other budget experiments' folders), a figure of their Δ beside this one's joins it.

    Raises :class:`UserError` when ``out_dir`` or a ``beside`` folder is no budget experiment or has nothing
    finished.
    """
    record = ExperimentRecord.read(out_dir)
    if record is None or record.kind != "budget":
        raise UserError(f"{out_dir} is not a compare.py budgets experiment (its {EXPERIMENT_FILE} lists no budgets)")
    others = read_beside(beside or [], reference)
    arm_set = with_recorded(record.arms)
    ro = readout(out_dir, record.budgets, reference, record.margin, arm_set)
    figure = save_figure(delta_figure(ro), out_dir, DELTA_FIGURE)
    shown = save_figure(beside_figure([(out_dir.name, ro), *others]) if others else None, out_dir, BESIDE_FIGURE)
    title = f"Does the answer change with the training budget? {out_dir.name}"
    path = out_dir / REPORT
    compute = compute_used(out_dir, [label(b) for b in record.budgets])
    curves = trunk_curves(out_dir, arm_set)
    trunks = save_figure(trunk_figure(curves, ro.train_tokens, reference), out_dir, TRUNK_FIGURE)
    names = [name if other.rows else f"{name} (no budget read yet: not drawn)" for name, other in others]
    side = (shown, names) if shown else None
    branches = [(label(b), f) for b in record.budgets for f in runs_in(out_dir / label(b), finished_only=True)]
    # A budget report reads every branch and no trunk (a trunk may go once its branches have finished).
    provenance = ledger.reported(
        out_dir, [f.path for _, f in branches], read_whole=False, reads=lambda name: not name.startswith(TRUNKS)
    )
    provenance += branches_apart(
        [(lab, f.config["train"]["seed"], arm_set.of(flatten(f.config), str(f.path)), f.path) for lab, f in branches]
    )
    provenance += tries.earlier_reads(out_dir)
    md = render(ro, title, command, figure, compute, record.seeds, trunks, beside=side, provenance=provenance)
    write_text_atomic(path, md)
    if branches:  # a read of its verdicts, ordered against folders declared later (experiment.runs.tries)
        record_look(out_dir, len({f.config["train"]["seed"] for _, f in branches}))
    return path
