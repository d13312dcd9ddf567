"""The scaling view's figures (matplotlib, Agg): the gap against model size, and loss against parameters.

    names = plot_grid(rows, cells, Path("runs/shakespeare-grid"))   # ["gap_vs_size.png", "loss_vs_params.png"]

``rows`` are :func:`experiment.grid_report.gap_rows`; bits per byte throughout (comparable
across tokenizers), non-embedding parameters on a log-x axis.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from experiment.figures import log_x, save_figure
from experiment.grid_report import GridCell

matplotlib.use("Agg")

GAP = "gap_vs_size.png"
LOSS_VS_PARAMS = "loss_vs_params.png"
CAPTIONS = {
    GAP: "Δ final val bits per byte (arm − reference, paired by seed; negative: the arm is better) against "
    "non-embedding parameters (log-x), one line per tokenizer, 95% t intervals; the zero line, and dotted "
    "in each tokenizer's colour the ±margin equivalence band converted to bits per byte. Tokenizers share "
    "each size; their lines are shifted about 5% sideways apart so the intervals do not hide each other.",
    LOSS_VS_PARAMS: "Final val bits per byte (mean over seeds) against total parameters (log-x), one colour per "
    "tokenizer and one marker per arm, lines joining the sizes: the Pareto view (lower-left is better).",
}
MARKERS = "osD^v<>"


def caption(name: str, margin_bpb: float | None = None) -> str:
    """A figure's caption; with a margin in bits per byte (``--margin-bpb``) the gap figure's band is that margin."""
    text = CAPTIONS.get(name, name)
    if name == GAP and margin_bpb is not None:
        text = text.replace(
            "the ±margin equivalence band converted to bits per byte",
            f"the ±{margin_bpb:g} bpb equivalence band of this report's verdicts",
        )
    return text


DODGE_DECADES = 0.02  # sideways shift between tokenizers in gap_vs_size.png, in decades of the log-x axis (~5%)


def _tokenizer_order(rows: list[dict]) -> list[str]:
    """Tokenizers by vocabulary size, smallest first (the legend's order)."""
    sizes = {r["tokenizer"]: r["vocab_size"] for r in rows}
    return sorted(sizes, key=sizes.get)


def gap_figure(rows: list[dict]) -> Figure | None:
    """One panel per non-reference arm: Δ val bpb with 95% CI vs non-embedding parameters, a line per tokenizer."""
    rows = [r for r in rows if r["delta_bpb"] is not None]
    if not rows:
        return None
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig = Figure(figsize=(6.5 * len(arms), 4.8), layout="constrained")
    tokenizers = _tokenizer_order(rows)
    for i, arm in enumerate(arms):
        ax = fig.add_subplot(1, len(arms), i + 1)
        ax.axhline(0, color="0.2", linewidth=1)
        for j, tok in enumerate(tokenizers):
            mine = sorted(
                (r for r in rows if r["arm"] == arm and r["tokenizer"] == tok),
                key=lambda r: r["non_embedding_parameters"],
            )
            if not mine:
                continue
            # Cells of one n_embd share their non-embedding size across tokenizers: shift each
            # tokenizer's line a few percent sideways (a dodge) so their intervals stay readable.
            dodge = 10 ** (DODGE_DECADES * (j - (len(tokenizers) - 1) / 2))
            x = [r["non_embedding_parameters"] * dodge for r in mine]
            y = [r["delta_bpb"] for r in mine]
            err = [[v - r["ci_bpb"][0] for v, r in zip(y, mine)], [r["ci_bpb"][1] - v for v, r in zip(y, mine)]]
            ax.errorbar(
                x,
                y,
                yerr=err,
                color=f"C{j}",
                marker="o",
                capsize=3,
                linewidth=1.6,
                label=f"{tok} (V = {mine[0]['vocab_size']:,})",
            )
            band = mine[0].get("band_bpb", mine[0]["margin"] * mine[0]["bpb_per_nat"])
            for sign in (1, -1):
                ax.axhline(sign * band, color=f"C{j}", linestyle=":", linewidth=1)
        log_x(ax)
        ax.set_xlabel("non-embedding parameters (log scale)")
        ax.set_ylabel(f"Δ val bits per byte ({arm} − {rows[0]['reference']})")
        ax.set_title(f"{arm} vs {rows[0]['reference']}: below 0, {arm} is better")
        ax.legend(fontsize="small", title="dotted: ±margin")
        ax.grid(True, which="both", alpha=0.25)
    return fig


def loss_figure(rows: list[dict], cells: list[GridCell]) -> Figure | None:
    """Final val bpb (mean over seeds) vs total parameters: colour = tokenizer, marker = arm."""
    points: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for gc in cells:
        if gc.exp is None:
            continue
        for arm, members in gc.exp.runs.items():
            if any(r.bpb is None for r in members):
                continue
            tok = members[0].config["data"]["tokenizer"]
            points.setdefault((tok, arm), []).append(
                (members[0].summary["parameters"], statistics.fmean(r.bpb for r in members))
            )
    if not points:
        return None
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.add_subplot()
    tokenizers = _tokenizer_order(rows) if rows else sorted({t for t, _ in points})
    arms = list(dict.fromkeys(a for _, a in points))
    for (tok, arm), pts in points.items():
        pts.sort()
        j = tokenizers.index(tok) if tok in tokenizers else len(tokenizers)
        ax.plot(
            [p for p, _ in pts],
            [v for _, v in pts],
            color=f"C{j}",
            marker=MARKERS[arms.index(arm) % len(MARKERS)],
            linewidth=1.2,
            label=f"{tok} · {arm}",
        )
    log_x(ax)
    ax.set_xlabel("parameters (log scale; a tied matrix counted once)")
    ax.set_ylabel("final val bits per byte (mean over seeds)")
    ax.set_title("Val bits per byte against parameters: every arm, every size, every tokenizer")
    ax.legend(fontsize="x-small", ncol=2)
    ax.grid(True, which="both", alpha=0.25)
    return fig


def plot_grid(rows: list[dict], cells: list[GridCell], out_dir: Path) -> list[str]:
    """Write the grid's figures into ``out_dir``; the names of those drawn."""
    names = [
        save_figure(gap_figure(rows), out_dir, GAP),
        save_figure(loss_figure(rows, cells), out_dir, LOSS_VS_PARAMS),
    ]
    return [n for n in names if n]
