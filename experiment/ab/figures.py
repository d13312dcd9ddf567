"""The experiment's figures as PNG files, drawn with matplotlib (Agg backend: no display needed).

Each ``plot_*`` function takes an :class:`experiment.runs.folders.Experiment` and a folder, writes one
PNG there and returns its file name (None when there is nothing to draw); :func:`plot_all` draws
every figure that has data.  Each figure is built by a ``*_figure`` function returning the
matplotlib ``Figure`` (None when empty), so tests can inspect the axes without reading a PNG::

    names = plot_all(exp, Path("runs/exp"))       # ["val_loss_vs_step.png", ...]
    fig = val_loss_figure(exp); fig.axes[0].get_ylim()

Losses are in nats/token, x in optimizer steps (every arm of one experiment takes the same
tokens per step, so a tokens axis would be the same plot).  Step axes are log-scale, so step 0
(loss about ln(vocab_size), a uniform prediction) is left out and said so on the axis.  Bands
are 95% t intervals of the mean over seeds (n - 1 degrees of freedom), never min-max.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import stats

from experiment.style import log_x, save_figure
from experiment.ab.readout import lr_table, mean_curves
from experiment.runs.folders import Experiment

matplotlib.use("Agg")

VAL_LOSS = "val_loss_vs_step.png"
PAIRED = "paired_difference_vs_step.png"
LOSS_VS_LR = "loss_vs_lr.png"
# One line each, for the report's figure captions.
CAPTIONS = {
    VAL_LOSS: "Val loss (nats/token) vs optimizer step, log-x: thin lines single seeds, thick lines each arm's "
    "mean; dashed line the unigram baseline.",
    PAIRED: "Per-seed difference arm − reference in val loss at each eval step (thin), its mean (thick) with a "
    "95% t interval, the zero line and the ±margin equivalence band: the figure that matches the paired test.",
    LOSS_VS_LR: "Final val loss vs peak learning rate on the tuning seed (not a reported seed); the chosen "
    "learning rate of each arm is the highlighted point.",
}


def _colour(exp: Experiment, arm: str) -> str:
    """The arm's colour, the same in every figure (matplotlib's default cycle, by arm order)."""
    return f"C{exp.arms.index(arm) % 10}"


def _step_label(exp: Experiment, width_in: float) -> str:
    """The log-x axis label, saying what the hidden step 0 would read, wrapped to a figure ``width_in`` inches wide.

    Constrained layout makes room for a label's height but cannot shorten a line wider than
    the figure, so the label is broken into lines that fit (about 10 characters per inch at
    matplotlib's default 10-point font, with room to spare).
    """
    vocab = exp.runs[exp.reference][0].config["model"]["vocab_size"]
    label = (
        f"optimizer step (log scale; step 0, not shown, is about ln({vocab:,}) = {math.log(vocab):.2f} "
        "nats/token, a uniform prediction)"
    )
    return textwrap.fill(label, width=max(30, int(width_in * 10)))


def _after_zero(steps: list[int], curves: list[list[float]]) -> tuple[list[int], list[list[float]]]:
    """The eval steps after step 0 (a log axis cannot show 0) and each curve at them."""
    keep = [i for i, s in enumerate(steps) if s > 0]
    return [steps[i] for i in keep], [[c[i] for i in keep] for c in curves]


def _t_band(columns: list[tuple[float, ...]]) -> tuple[list[float], list[float]] | None:
    """Lower and upper 95% t interval of the mean of each column (``scipy.stats.t.ppf``, n - 1 df); None for n < 2."""
    n = len(columns[0]) if columns else 0
    if n < 2:
        return None
    q = stats.t.ppf(0.975, n - 1)
    half = [q * statistics.stdev(c) / math.sqrt(n) for c in columns]
    means = [statistics.fmean(c) for c in columns]
    return [m - h for m, h in zip(means, half)], [m + h for m, h in zip(means, half)]


def _unigram(exp: Experiment) -> float | None:
    """The mean unigram-baseline val loss over every reported run that recorded one, else None."""
    values = [r.unigram_val_loss for members in exp.runs.values() for r in members if r.unigram_val_loss is not None]
    return statistics.fmean(values) if values else None


def val_loss_figure(exp: Experiment) -> Figure | None:
    """Val loss (nats/token) vs optimizer step (log-x), one colour per arm: each seed a thin line, the
    arm's mean a thick one; a dashed line at the unigram baseline (when recorded).  The y-limits cover
    every plotted value (no curve enters from the edge).  None when no eval lies after step 0.
    """
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    plotted: list[float] = []
    for arm, members in exp.runs.items():
        steps, curves = _after_zero(*mean_curves(members))
        if not steps:
            continue
        colour = _colour(exp, arm)
        for curve in curves:
            ax.plot(steps, curve, color=colour, linewidth=0.8, alpha=0.45)
        ax.plot(steps, [statistics.fmean(v) for v in zip(*curves)], color=colour, linewidth=2.4, label=arm)
        plotted += [v for curve in curves for v in curve]
    if not plotted:
        return None
    baseline = _unigram(exp)
    if baseline is not None:
        ax.axhline(
            baseline,
            color="0.3",
            linestyle="--",
            linewidth=1.2,
            label=f"unigram baseline ({baseline:.2f}, token frequencies alone)",
        )
        plotted.append(baseline)
    low, high = min(plotted), max(plotted)
    pad = 0.04 * (high - low) or 0.05
    ax.set_ylim(low - pad, high + pad)
    log_x(ax)
    ax.set_xlabel(_step_label(exp, fig.get_figwidth()))
    ax.set_ylabel("val loss (nats/token)")
    ax.set_title(f"Val loss vs step, {len(exp.arms)} arms × {len(exp.seeds)} seeds (periodic evals)")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.5", linewidth=0.8))
    labels.append("thin lines: single seeds")
    ax.legend(handles, labels, title=f"mean of {len(exp.seeds)} seeds", fontsize="small")
    ax.grid(True, which="both", alpha=0.25)
    return fig


def _paired_panel(ax, exp: Experiment, arm: str) -> bool:
    """Draw arm − reference on ``ax``: per-seed thin lines, mean thick with its 95% t band, zero line,
    ±margin band.  False (nothing drawn) when the two arms share no eval step after 0."""
    ref_steps, ref_curves = mean_curves(exp.runs[exp.reference])
    arm_steps, arm_curves = mean_curves(exp.runs[arm])
    steps = sorted(set(ref_steps) & set(arm_steps) - {0})
    if not steps:
        return False
    ref_at = [dict(zip(ref_steps, c)) for c in ref_curves]
    arm_at = [dict(zip(arm_steps, c)) for c in arm_curves]
    diffs = [[a[s] - r[s] for s in steps] for a, r in zip(arm_at, ref_at)]  # paired by seed (both sorted by seed)
    colour = _colour(exp, arm)
    for i, d in enumerate(diffs):
        ax.plot(steps, d, color=colour, linewidth=0.8, alpha=0.45, label="single seeds" if i == 0 else None)
    columns = list(zip(*diffs))
    ax.plot(
        steps, [statistics.fmean(c) for c in columns], color=colour, linewidth=2.4, label=f"mean of {len(diffs)} seeds"
    )
    band = _t_band(columns)
    if band is not None:
        ax.fill_between(
            steps, *band, color=colour, alpha=0.2, linewidth=0, label="95% t interval of the mean (n − 1 df)"
        )
    ax.axhline(0.0, color="black", linewidth=0.9)
    ax.axhspan(
        -exp.margin,
        exp.margin,
        color="0.5",
        alpha=0.15,
        linewidth=0,
        label=f"equivalence margin ±δ (δ = {exp.margin:g} nats)",
    )
    log_x(ax)
    ax.set_title(f"{arm} − {exp.reference}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize="small")
    return True


def paired_difference_figure(exp: Experiment) -> Figure | None:
    """One panel per non-reference arm: the per-seed difference arm − reference in val loss
    (nats/token; negative = the arm is better) at each shared eval step (log-x), thin; the mean,
    thick, with a 95% t confidence band (``scipy.stats.t.ppf``, n - 1 df; none with one seed);
    a zero line; the ±margin equivalence band shaded.  None when no panel has data.
    """
    others = [arm for arm in exp.arms if arm != exp.reference]
    fig = Figure(figsize=(5.5 * len(others), 4.5), layout="constrained")
    axes = fig.subplots(1, len(others), sharey=True, squeeze=False)[0]
    drawn = [_paired_panel(ax, exp, arm) for ax, arm in zip(axes, others)]
    if not any(drawn):
        return None
    axes[0].set_ylabel("Δ val loss, arm − reference (nats/token)")
    fig.supxlabel(_step_label(exp, fig.get_figwidth()), fontsize="medium")
    return fig


def loss_vs_lr_figure(exp: Experiment) -> Figure | None:
    """Final val loss (nats/token) vs peak learning rate (log-x) of the tuning-seed grid runs, one
    line per tuned arm with a marker per grid point and the chosen (lowest-loss) point highlighted.
    None when the experiment has no tuning runs.
    """
    table = lr_table(exp)
    if not table:
        return None
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for arm in [a for a in exp.arms if a in table]:
        points, best = table[arm]["points"], table[arm]["best"]
        colour = _colour(exp, arm)
        edge = " (best at the grid's edge)" if table[arm]["edge"] else ""
        ax.plot([p[0] for p in points], [p[1] for p in points], color=colour, marker="o", label=f"{arm}{edge}")
        ax.plot(
            [best],
            [dict(points)[best]],
            color=colour,
            marker="*",
            markersize=16,
            markeredgecolor="black",
            linestyle="none",
        )
    ax.plot(
        [],
        [],
        color="0.5",
        marker="*",
        markersize=12,
        markeredgecolor="black",
        linestyle="none",
        label="chosen learning rate",
    )
    seeds = sorted({r.seed for members in exp.tuning.values() for r in members})
    log_x(ax)
    ax.set_xlabel("peak learning rate (log scale)")
    ax.set_ylabel("final val loss (nats/token)")
    ax.set_title(f"Learning-rate grid: tuning-seed runs only (seed {', '.join(map(str, seeds))})")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize="small")
    return fig


def plot_val_loss(exp: Experiment, out_dir: Path) -> str | None:
    """Write ``val_loss_vs_step.png`` (:func:`val_loss_figure`); its name, or None."""
    return save_figure(val_loss_figure(exp), out_dir, VAL_LOSS)


def plot_paired_difference(exp: Experiment, out_dir: Path) -> str | None:
    """Write ``paired_difference_vs_step.png`` (:func:`paired_difference_figure`); its name, or None."""
    return save_figure(paired_difference_figure(exp), out_dir, PAIRED)


def plot_loss_vs_lr(exp: Experiment, out_dir: Path) -> str | None:
    """Write ``loss_vs_lr.png`` (:func:`loss_vs_lr_figure`); its name, or None without tuning runs."""
    return save_figure(loss_vs_lr_figure(exp), out_dir, LOSS_VS_LR)


def plot_all(exp: Experiment, out_dir: Path) -> list[str]:
    """Every figure that has something to draw, in report order: val loss, paired difference, loss vs LR."""
    names = [plot(exp, out_dir) for plot in (plot_val_loss, plot_paired_difference, plot_loss_vs_lr)]
    return [n for n in names if n]
