"""The scaling view's ``report.md``: the headline figure, one row per cell and arm, the model across cells,
the readouts asked for, what is missing.

    path = write_grid_report(Path("runs/shakespeare-grid"), command="python compare.py ... --grid ...")
    path = write_grid_report(grid_dir, readout=Readout(margin_bpb=0.02, contrasts=[("A", "B")]))

Every claim in it is read off a row: the verdicts are the cells' own (each cell's ``report.md``
has its statistics) or, with a margin in bits per byte, the rule the header states; the model
across cells is :mod:`experiment.grid_model` with its 95% intervals.
"""

from __future__ import annotations

from pathlib import Path

from core.files import write_text_atomic
from experiment.grid_figures import caption, plot_grid
from experiment.grid_model import ArmModels, cross_cell_models
from experiment.grid_readout import Readout, check_readout
from experiment.grid_report import NOT_STARTED, GridCell, cells_vocab_use, gap_rows, load_grid, lr_picks
from experiment.grid_sections import lr_pick_section, model_section, readout_section
from experiment.vocab_use import never_seen_fraction, seen_often_fraction


def _ci(lo: float, hi: float, digits: int = 4) -> str:
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


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
        bpb = f"{r['delta_bpb']:+.4f} {_ci(*r['ci_bpb'])}" if r["delta_bpb"] is not None else "n/a"
        verdict = r["verdict"] + (f" (~{r['seeds_needed']} seeds would settle it)" if r["seeds_needed"] else "")
        use = [never_seen_fraction(r["vocab_use"]), seen_often_fraction(r["vocab_use"])]
        never, often = (f"{v:.1%}" if v is not None else "n/a" for v in use)
        lines.append(
            f"| [{r['cell']}]({r['cell']}/report.md) | {r['vocab_size']:,} ({r['tokenizer']}) | {r['n_embd']} × "
            f"{r['n_layer']} | {r['parameters']:,} | {r['embedding_share']:.1%} | {never} | {often} | {r['tokens']:,}{epochs} | "
            f"{r['lr_reference']:g} / {r['lr_arm']:g} | {r['arm']} | {r['seeds']} | {bpb} | {r['delta']:+.4f} | {verdict} |"
        )
    return lines


def _tally(rows: list[dict]) -> list[str]:
    """Per arm: how many cells gave each verdict."""
    lines = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        counts = {v: sum(r["verdict"] == v for r in mine) for v in ("better", "worse", "equivalent", "inconclusive")}
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


def _margin_words(settings: dict, readout: Readout) -> str:
    """The header's sentence on the equivalence margin and where the verdicts come from."""
    declared = f"equivalence margin ±{settings['margin']:g} nats/token, declared before the runs"
    if readout.margin_bpb is None:
        return declared + "."
    m = f"{readout.margin_bpb:g}"
    return (
        f"{declared} and used by each cell's own report. This report's verdicts use a margin in bits per byte "
        f"instead, ±{m} bpb (`--margin-bpb {m}`): better or worse when the 95% paired t interval of Δ bpb excludes "
        f"0 (not adjusted across arms), equivalent when its 90% interval lies inside ±{m} bpb (two one-sided "
        f"tests), otherwise inconclusive."
    )


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
    lines += [
        f"Grid: {axes}. Arms: {', '.join(settings['arms'])}, each against `{settings['reference']}`, "
        f"{_seed_words(settings, rows)}, learning rate tuned per arm and cell on "
        f"{', '.join(f'{v:g}' for v in settings['lr_grid']) or 'no grid (the config’s)'}"
        f"{_widen_words(settings.get('lr_widen', 0))}; {_margin_words(settings, readout)}",
        "",
    ]
    source = (
        "Verdicts: the rule above, from each cell's paired bpb."
        if readout.margin_bpb is not None
        else "Verdicts come from each cell's own report (paired t interval, TOST, Holm)."
    )
    lines += [
        "Δ = arm − reference in final val loss on the same val tokens for every run of a cell, paired by seed. "
        "Bits per byte (bpb) = loss / ln 2 × tokens / UTF-8 bytes of the scored text: comparable across "
        f"tokenizers. {source}",
        "",
        SHARE_WORDS,
        "",
        USE_WORDS,
        "",
    ]
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
    finished cell's ``vocab_use.json`` where the data cache is on this machine (:mod:`experiment.vocab_use`).
    """
    readout = readout or Readout()
    settings, cells = load_grid(grid_dir, errors)
    check_readout(readout, cells)
    rows = gap_rows(cells, cells_vocab_use(cells), readout.margin_bpb)
    figures = plot_grid(rows, cells, grid_dir)
    path = grid_dir / "report.md"
    write_text_atomic(path, render_grid(settings, cells, rows, cross_cell_models(rows), figures, command, readout))
    return path
