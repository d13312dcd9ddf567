"""The scaling view's ``report.md``: the headline figure, one row per cell and arm, the model across cells,
the readouts asked for, what is missing; its sections and its figures.

    path = write_grid_report(Path("runs/shakespeare-grid"), command="python compare.py grid ... --axis ...")
    path = write_grid_report(grid_dir, readout=Readout(margin_bpb=0.02, contrasts=[("A", "B")]))
    lines = model_section(cross_cell_models(rows))                  # "## Across cells (random-effects model)"
    lines = readout_section(readout, rows, cells)                   # "## Readouts asked for" (contrast, slope)
    lines = lr_pick_section(lr_picks(cells))                        # "## Learning-rate picks"
    names = plot_grid(rows, cells, Path("runs/shakespeare-grid"))   # ["gap_vs_size.png", "loss_vs_params.png"]

Every claim in it is read off a row: the verdicts are the cells' own (each cell's ``report.md``
has its statistics) or, with a margin in bits per byte, the rule the header states; the model
across cells with its 95% intervals, the contrasts and the slopes are read off
:mod:`experiment.grid.model`: this module only words them.

The figures (matplotlib, Agg): the gap against model size, and loss against parameters.  ``rows``
are :func:`experiment.grid.run.gap_rows`; bits per byte throughout (comparable across tokenizers),
non-embedding parameters on a log-x axis.
"""

from __future__ import annotations

import math

import statistics
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from core.files import write_text_atomic

from experiment.style import interval, log_x, p_value, save_figure, signed
from experiment.ab.readout import ONE_SEED_TUNING
from experiment.runs.record import EVERY_SEED, record_look
from experiment.grid.run import NOT_STARTED, GridCell, LrPick, cells_vocab_use, gap_rows, load_grid, lr_picks, lr_tuning
from experiment.grid.model import (
    ArmModels,
    Contrast,
    Model,
    Readout,
    Slope,
    check_readout,
    contrasts,
    cross_cell_models,
    excludes_zero,
    never_seen_fraction,
    seen_often_fraction,
    selected_cells,
    slope,
)

matplotlib.use("Agg")


def _table(rows: list[dict]) -> list[str]:
    """One row per (cell, arm)."""
    head = [
        "cell",
        "vocab",
        "n_embd × n_layer",
        "params (ref)",
        "embedding share",
        "rows never seen (train)",
        "rows seen ≥ 5 (train)",
        "tokens (epochs)",
        "tuned LR ref / arm",
        "arm",
        "seeds",
        "Δ val bpb [95% CI]",
        "Δ nats/token",
        "verdict",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        epochs = f" ({r['epochs']:.2f})" if r["epochs"] else ""
        bpb = f"{signed(r['delta_bpb'])} {interval(r['ci_bpb'])}" if r["delta_bpb"] is not None else "n/a"
        needed = r["seeds_needed"]
        verdict = r["verdict"] + (f" (seeds to detect the margin: {needed.short()})" if needed else "")
        use = [never_seen_fraction(r["vocab_use"]), seen_often_fraction(r["vocab_use"])]
        never, often = (f"{v:.1%}" if v is not None else "n/a" for v in use)
        lines.append(
            f"| [{r['cell']}]({r['cell']}/report.md) | {r['vocab_size']:,} ({r['tokenizer']}) | {r['n_embd']} × "
            f"{r['n_layer']} | {r['parameters']:,} | {r['embedding_share']:.1%} | {never} | {often} | {r['tokens']:,}{epochs} | "
            f"{r['lr_reference']:.3g} / {r['lr_arm']:.3g} | {r['arm']} | {r['seeds']} | {bpb} | {signed(r['delta'])} | {verdict} |"
        )
    return lines


def _tally(rows: list[dict]) -> list[str]:
    """Per arm: how many cells gave each verdict."""
    lines = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        kinds = dict.fromkeys(["better", "worse", "equivalent", "inconclusive", *(r["verdict"] for r in mine)])
        counts = {v: sum(r["verdict"] == v for r in mine) for v in kinds}  # "not read", "no bpb" too
        said = ", ".join(f"{v} in {n}" for v, n in counts.items() if n)
        lines.append(f"- **{arm}** against {mine[0]['reference']}, over {len(mine)} cells: {said}.")
    return lines


def _seed_words(settings: dict, rows: list[dict]) -> str:
    """The seeds the cells hold: one count, or the range when cells differ (a cell grown with more --seeds)."""
    counts = sorted({r["seeds"] for r in rows}) or [settings["seeds"]]
    if len(counts) == 1:
        return f"{counts[0]} seeds"
    return f"{counts[0]}–{counts[-1]} paired seeds per cell (the table's seeds column)"


def _widen_words(widen: int) -> str:
    """How far past the grid's edges a best rate was followed (``--lr-widen``), in words; '' for none."""
    return (
        f", then up to {widen} rate{'s' if widen > 1 else ''} a side past an edge an arm's best sat on" if widen else ""
    )


SHARE_WORDS = (
    "Embedding share: the token and position embeddings (wte, vocab_size × n_embd, and wpe, block_size × "
    "n_embd) over all parameters of the reference model, a tied matrix counted once: 1 − non-embedding / "
    "parameters. The position embedding is included, so the share is not zero for a tiny vocabulary."
)
USE_WORDS = (
    "Rows never seen / seen ≥ 5: the fractions of the vocabulary's rows (token ids) that occur 0 times, and "
    "5 or more times, in the prepared training split, a property of tokenizer and corpus (counted from the "
    "data cache when it is there and kept in the cell's `vocab_use.json`; n/a when neither is)."
)


def _margin_words(settings: dict, readout: Readout, swept: bool) -> str:
    """The header's sentence on the equivalence margin and where the verdicts come from."""
    declared = f"equivalence margin ±{settings['margin']:g} nats/token, declared before the runs"
    if readout.margin_bpb is None:
        return declared + "."
    m = f"{readout.margin_bpb:g}"
    which, adjusted = (
        ("jackknife interval of the bests' Δ bpb", "Holm-adjusted across arms")
        if swept
        else ("paired t interval of Δ bpb", "not adjusted across arms")
    )
    return (
        f"{declared} and used by each cell's own report. This report's verdicts use a margin in bits per byte "
        f"instead, ±{m} bpb (`--margin-bpb {m}`): better or worse when the 95% {which} excludes "
        f"0 ({adjusted}), equivalent when its 90% interval lies inside ±{m} bpb (two one-sided "
        f"tests), otherwise inconclusive."
    )


def _not_calibrated_lines(done: list[GridCell]) -> list[str]:
    """The report's "Not calibrated" lines: every cell's verdict when rates were picked on one seed, and each
    cell whose runs were not drawn as declared or whose pairs differ in more than their arm."""
    lines = (
        [f"**Not calibrated:** every cell's verdict: {ONE_SEED_TUNING}.", ""]
        if any(gc.exp.tuning for gc in done)
        else []
    )
    for gc in done:
        reasons = gc.exp.provenance
        lines += [f"**Not calibrated:** cell {gc.cell.name}: {why}." for why in reasons] + ([""] if reasons else [])
    return lines


def render_grid(
    settings: dict,
    cells: list[GridCell],
    rows: list[dict],
    models: list[ArmModels],
    figures: list[str],
    command: str | None,
    readout: Readout | None = None,
) -> str:
    """The grid's markdown report."""
    readout = readout or Readout()
    done = [gc for gc in cells if gc.exp is not None]
    # A grid grown one axis value at a time crosses to cells no command trained: they are not "missing".
    unplanned = [gc.cell for gc in cells if gc.exp is None and gc.cell.error == NOT_STARTED]
    started = [gc for gc in cells if gc.cell not in unplanned]
    axes = ", ".join(f"`{k}` ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in settings["axes"].items())
    more = f"; {len(unplanned)} more not started" if unplanned else ""
    lines = [f"# Should the embedding be tied? The scaling view ({len(done)} of {len(started)} cells{more})", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    swept = lr_tuning(settings) == EVERY_SEED
    rates = ", ".join(f"{v:g}" for v in settings["lr_grid"])
    if swept:
        tuned = f"every rate of {rates} trained by every arm on every seed"
    elif rates:
        tuned = f"learning rate tuned per arm and cell on {rates}{_widen_words(settings.get('lr_widen', 0))}"
    else:
        tuned = "every arm at the config’s learning rate (none tuned)"
    lines += [
        f"Grid: {axes}. Arms: {', '.join(settings['arms'])}, each against `{settings['reference']}`, "
        f"{_seed_words(settings, rows)}, {tuned}; {_margin_words(settings, readout, swept)}",
        "",
    ]
    if readout.margin_bpb is not None:
        source = "Verdicts: the rule above, from each cell's bpb."
    elif swept:
        source = "Verdicts come from each cell's own report (best against best, jackknife interval, TOST, Holm)."
    else:
        source = "Verdicts come from each cell's own report (paired t interval, TOST, Holm)."
    how = (
        "each arm's best against the reference's best: the minimum of a quadratic in log rate through its seeds' "
        "mean losses, with the seeds left out one at a time for the interval (the seed-level Δ the model across "
        "cells reads are that jackknife's pseudo-values)"
        if swept
        else "paired by seed"
    )
    lines += [
        f"Δ = arm − reference in final val loss on the same val tokens for every run of a cell, {how}. "
        "Bits per byte (bpb) = loss / ln 2 × tokens / UTF-8 bytes of the scored text: comparable across "
        f"tokenizers. {source}",
        "",
        SHARE_WORDS,
        "",
        USE_WORDS,
        "",
    ]
    lines += _not_calibrated_lines(done)
    lines += _tally(rows) + [""]
    for name in figures:
        lines += [f"![{name}]({name})", "", f"*{caption(name, readout.margin_bpb)}*", ""]
    lines += ["## Every cell", ""] + (_table(rows) if rows else ["No finished cell yet."]) + [""]
    lines += model_section(models)
    lines += readout_section(readout, rows, cells)
    lines += lr_pick_section(lr_picks(cells))
    missing = [gc.cell for gc in started if gc.exp is None]
    if missing:
        lines += ["## Missing cells", ""]
        lines += [f"- `{c.name}`: {c.error or 'not run yet'}" for c in missing] + [""]
    if unplanned:
        lines += [
            "Not started: the axes also cross to "
            + ", ".join(f"`{c.name}`" for c in unplanned)
            + ", which no command has started (no folder): not planned, or queued behind a grid still running.",
            "",
        ]
    return "\n".join(lines)


def write_grid_report(
    grid_dir: Path, errors: dict[str, str] | None = None, command: str | None = None, readout: Readout | None = None
) -> Path:
    """Read every cell of ``grid_dir`` and write its ``report.md`` and figures; returns the report's path.

    ``errors``: cell name -> why its runs failed in this invocation (shown as missing).  ``readout``: the
    report options (a bpb margin for the verdicts, contrasts, a slope within cells); raises UserError,
    before anything is written, when it names a cell or an axis value the grid lacks.  Writes each
    finished cell's ``vocab_use.json`` where the data cache is on this machine
    (:func:`experiment.grid.model.cell_vocab_use`).
    """
    readout = readout or Readout()
    settings, cells = load_grid(grid_dir, errors)
    check_readout(readout, cells)
    rows = gap_rows(cells, cells_vocab_use(cells), readout.margin_bpb)
    figures = plot_grid(rows, cells, grid_dir)
    path = grid_dir / "report.md"
    write_text_atomic(path, render_grid(settings, cells, rows, cross_cell_models(rows), figures, command, readout))
    for cell in cells:  # each cell's verdicts read, ordered against grids declared later (experiment.runs.tries)
        if cell.exp is not None:
            record_look(cell.cell.folder, len(cell.exp.seeds))
    return path


# ----------------------------------------------------------------------------- the sections


MODEL_INTRO = (
    "Per arm, a linear mixed model of the seed-level Δ val bpb with a random intercept per cell "
    "(statsmodels `MixedLM`, REML): Δ_cs = β0 + β·x_c + u_c + e_cs, u_c ~ N(0, τ²), e_cs ~ N(0, σ²), one σ for "
    "all cells. τ is the between-cell sd of Δ that the moderator x leaves unexplained. Each moderator is fitted in "
    "its own model; none of them is a causal estimate, and share, tokenizer family and never-seen fraction move "
    "together across these cells. Estimates are in bpb per unit of the term, with 95% Wald intervals on a t "
    "quantile with cells − fixed terms df; an interval that covers 0 is not supported by these cells. Q_E: "
    "Cochran's Q of the same terms in a fixed-effect fit of the cell means (weights 1/SE²), on cells − fixed "
    "terms df; a small p says the cells differ by more than their seed noise even after the moderator. AIC: of "
    "maximum-likelihood refits (REML likelihoods are not comparable across fixed effects); lower is better, and "
    "a difference under about 2 does not separate two models. Each model is also refitted with one cell left out "
    "in turn: the range of each estimate and in how many of those fits its interval excludes 0."
)


def _model_rows(m: Model) -> list[str]:
    """The table rows of one model: its terms (the intercept only when there is no moderator)."""
    shown = m.terms if len(m.terms) == 1 else m.terms[1:]
    note = "" if m.converged else " (did not converge)"
    lines = []
    for i, t in enumerate(shown):
        sign = _support(t.ci, "supported")
        name = "intercept (the mean Δ)" if t.name == "intercept" else t.name
        loo = (
            f"{signed(t.loo_range[0])} to {signed(t.loo_range[1])}, supported in {t.loo_supported} of {m.loo_fits}"
            if t.name != "intercept" and m.loo_fits
            else ""
        )
        fit = f"{m.tau:.4f} | {m.q:.1f} ({m.q_df}), p = {p_value(m.q_p)} | {m.aic:.1f}{note}" if i == 0 else " | | "
        lines.append(
            f"| {m.moderator if i == 0 else ''} | {name} | {signed(t.coef)} {interval(t.ci)} ({sign}) | {loo} | {fit} |"
        )
    return lines


def _aic_words(models: list[Model]) -> str:
    """The models by AIC, lowest first, each with its distance from the lowest."""
    ranked = sorted(models, key=lambda m: m.aic)
    return (
        "By AIC: "
        + ", ".join(
            f"{m.moderator} {m.aic:.1f}" + (f" (+{m.aic - ranked[0].aic:.1f})" if k else "")
            for k, m in enumerate(ranked)
        )
        + "."
    )


def model_section(arms: list[ArmModels]) -> list[str]:
    """``## Across cells (random-effects model)``: per arm, every moderator's model in one table."""
    lines = ["## Across cells (random-effects model)", ""]
    if not any(a.models for a in arms):
        return lines + [
            "Too few finished cells for a model across cells (it needs more cells than terms, each "
            "with ≥ 2 paired seeds).",
            "",
        ]
    lines += [MODEL_INTRO, ""]
    for a in arms:
        if not a.models:
            continue
        sigma = a.models[0].sigma
        lines += [
            f"**{a.arm} − {a.reference}**: {len(a.cells)} cells, {a.seeds} seed-level Δs; within-cell sd of a "
            f"seed's Δ σ = {sigma:.4f} bpb.",
            "",
            "| moderator | term | estimate [95% CI] | one cell left out | τ (bpb) | Q_E (df), p | AIC (ML) |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in a.models:
            lines += _model_rows(m)
        lines += ["", _aic_words(a.models)]
        if a.left_out:
            lines.append("Left out: " + "; ".join(f"`{c}` ({why})" for c, why in a.left_out.items()) + ".")
        if a.not_fitted:
            lines.append("Not fitted: " + "; ".join(f"{k} ({why})" for k, why in a.not_fitted.items()) + ".")
        lines.append("")
    return lines


def _support(ci: tuple[float, float], word: str) -> str:
    """``word`` when a 95% interval lies on one side of 0, "covers 0" when it spans it, and "no interval"
    when it is not a number (a fit whose standard errors could not be computed)."""
    if not all(map(math.isfinite, ci)):
        return "no interval: its standard error could not be computed"
    return word if excludes_zero(*ci) else "covers 0"


def _contrast_line(c: Contrast, reference: str) -> str:
    head = f"- **{c.arm} − {reference}**: "
    if c.missing:
        return head + f"not available ({c.missing})."
    sign = _support(c.ci, "excludes 0")
    return (
        head + f"C = {signed(c.c)} {interval(c.ci)} (Welch, df {c.df:.1f}; {sign}); Δ(`{c.a}`) = {signed(c.delta_a)} "
        f"({c.n_a} seeds), Δ(`{c.b}`) = {signed(c.delta_b)} ({c.n_b} seeds)."
    )


def _slope_line(s: Slope, reference: str) -> str:
    head = f"- **{s.arm} − {reference}**: "
    cells = ", ".join(f"`{c}` (share {sh:.1%}, Δ {signed(d)})" for c, sh, d, _ in s.cells)
    if s.missing:
        return head + f"not available ({s.missing})" + (f"; cells: {cells}." if cells else ".")
    sign = _support(s.ci, "supported")
    return (
        head
        + f"{signed(s.slope)} bpb per 10 percentage points {interval(s.ci)} (t on {s.df} df; {sign}), over {cells}."
    )


def readout_section(readout: Readout, rows: list[dict], cells: list) -> list[str]:
    """``## Readouts asked for``: each ``--contrast`` and the ``--slope-within`` slope, per arm; [] if none asked."""
    if not (readout.contrasts or readout.slope_within):
        return []
    reference = rows[0]["reference"] if rows else "the reference"
    lines = ["## Readouts asked for", ""]
    for a, b in readout.contrasts:
        lines += [
            f"### Contrast C = Δ(`{a}`) − Δ(`{b}`)",
            "",
            "Δ = arm − reference, final val bpb, paired by seed within each cell; the two cells' seeds are not "
            "paired with each other, so the 95% interval is Welch's (scipy `ttest_ind`, unequal variances).",
            "",
        ]
        lines += [_contrast_line(c, reference) for c in contrasts(rows, a, b)] + [""]
    if readout.slope_within:
        chosen = selected_cells(cells, readout.slope_within)
        where = ", ".join(f"`{k}` ∈ {{{', '.join(vs)}}}" for k, vs in readout.slope_within.items())
        lines += [
            f"### Slope of Δ on embedding share within {where}",
            "",
            "Weighted least squares of each cell's Δ bpb on its embedding share (statsmodels `WLS`, each cell "
            "weighted by its paired seeds, scale estimated from the residuals), per 10 percentage points of "
            "share, with its 95% t interval on cells − 2 df.",
            "",
        ]
        lines += [_slope_line(s, reference) for s in slope(rows, [gc.cell.name for gc in chosen])]
        unfinished = [gc.cell for gc in chosen if gc.exp is None]
        if unfinished:
            lines.append(
                "- Chosen but not finished: "
                + ", ".join(f"`{c.name}` ({c.error or 'not run yet'})" for c in unfinished)
                + "."
            )
        lines.append("")
    return lines


def lr_pick_section(picks: list[LrPick]) -> list[str]:
    """ "## Learning-rate picks": the arms whose tuned rate led the runner-up by less than one seed's spread."""
    if not picks:
        return []
    close = [p for p in picks if p.within_noise]
    lines = [
        "## Learning-rate picks",
        "",
        f"Each arm's rate is the best of its grid on one tuning seed. In {len(close)} of {len(picks)} picks the "
        "chosen rate's final val loss beat the runner-up's by less than the sample sd of that arm's final val loss "
        "over its reported seeds, so a different tuning seed could have picked the runner-up; the arm's Δ is then "
        "read at a rate that is best within seed noise, not clearly best.",
        "",
    ]
    if close:
        lines += [
            "| cell | arm | chosen rate | runner-up | lead (nats) | seed sd (nats) |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.cell} | {p.arm} | {p.rate:g} | {p.runner_up:g} | {p.lead:.4f} | {p.seed_sd:.4f} |" for p in close
        ]
        lines.append("")
    return lines


# ----------------------------------------------------------------------------- the figures

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
