"""The scaling view's ``report.md``: the headline figure, one row per cell and arm, the regression, what is missing.

    path = write_grid_report(Path("runs/shakespeare-grid"), command="python compare.py ... --grid ...")

Every claim in it is read off a row: the verdicts are the cells' own (each cell's ``report.md``
has its statistics), the rule of thumb is the regression with its 95% intervals.
"""

from __future__ import annotations

from pathlib import Path

from core.files import write_text_atomic
from experiment.grid_figures import CAPTIONS, plot_grid
from experiment.grid_report import Fit, GridCell, excludes_zero, gap_rows, load_grid, regressions


def _ci(lo: float, hi: float, digits: int = 4) -> str:
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _table(rows: list[dict]) -> list[str]:
    """One row per (cell, arm)."""
    head = ["cell", "vocab", "n_embd × n_layer", "params (ref)", "embedding share", "tokens (epochs)",
            "tuned LR ref / arm", "arm", "seeds", "Δ val bpb [95% CI]", "Δ nats/token", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        epochs = f" ({r['epochs']:.2f})" if r["epochs"] else ""
        bpb = f"{r['delta_bpb']:+.4f} {_ci(*r['ci_bpb'])}" if r["delta_bpb"] is not None else "n/a"
        verdict = r["verdict"] + (f" (~{r['seeds_needed']} seeds would settle it)" if r["seeds_needed"] else "")
        lines.append(
            f"| [{r['cell']}]({r['cell']}/report.md) | {r['vocab_size']:,} ({r['tokenizer']}) | {r['n_embd']} × "
            f"{r['n_layer']} | {r['parameters']:,} | {r['embedding_share']:.1%} | {r['tokens']:,}{epochs} | "
            f"{r['lr_reference']:g} / {r['lr_arm']:g} | {r['arm']} | {r['seeds']} | {bpb} | {r['delta']:+.4f} | {verdict} |")
    return lines


def _fits(fits: list[Fit], rows: list[dict]) -> list[str]:
    """The regression per arm, worded with its intervals."""
    lines = ["## Rule of thumb (regression across cells)", ""]
    if not fits:
        return lines + ["Too few finished cells for a regression (it needs more cells than terms, with seeds ≥ 2).", ""]
    lines += ["Weighted least squares (weights 1/SE² of each cell's Δ; statsmodels `WLS`) of Δ val bpb on the terms "
              "that vary across cells. A coefficient whose interval covers 0 is not supported by these cells. "
              "The weights favour the precise cells, so each fit is also redone with one cell left out in turn: "
              "the range of the coefficient over those fits, and in how many its interval excludes 0.", ""]
    for f in fits:
        ref = rows[0]["reference"]
        cell, share = f.heaviest
        lines.append(f"- **{f.arm} − {ref}** ({f.cells} cells, R² {f.r2:.2f}; the heaviest cell, `{cell}`, carries "
                     f"{share:.0%} of the weight):")
        for j, (term, coef, (lo, hi)) in enumerate(zip(f.terms, f.coef, f.ci)):
            sign = "supported" if excludes_zero(lo, hi) else "interval covers 0"
            loo = ""
            if term != "intercept" and f.loo_fits:
                low, high = f.loo_range[j]
                loo = (f"; one cell left out: {low:+.4f} to {high:+.4f}, supported in {f.loo_supported[j]} of "
                       f"{f.loo_fits} fits")
            lines.append(f"  - {term}: {coef:+.4f} {_ci(lo, hi)} ({sign}{loo})")
    return lines + [""]


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
    return f", then up to {widen} rate{'s' if widen > 1 else ''} a side past an edge an arm's best sat on" if widen else ""


def render_grid(settings: dict, cells: list[GridCell], rows: list[dict], fits: list[Fit], figures: list[str],
                command: str | None) -> str:
    """The grid's markdown report."""
    done = [gc for gc in cells if gc.exp is not None]
    axes = ", ".join(f"`{k}` ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in settings["axes"].items())
    lines = [f"# Should the embedding be tied? The scaling view ({len(done)} of {len(cells)} cells)", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    lines += [f"Grid: {axes}. Arms: {', '.join(settings['arms'])}, each against `{settings['reference']}`, "
              f"{_seed_words(settings, rows)}, learning rate tuned per arm and cell on "
              f"{', '.join(f'{v:g}' for v in settings['lr_grid']) or 'no grid (the config’s)'}"
              f"{_widen_words(settings.get('lr_widen', 0))}; "
              f"equivalence margin ±{settings['margin']:g} nats/token, declared before the runs.", ""]
    lines += ["Δ = arm − reference in final val loss on the same val tokens for every run of a cell, paired by seed. "
              "Bits per byte (bpb) = loss / ln 2 × tokens / UTF-8 bytes of the scored text: comparable across "
              "tokenizers. Verdicts come from each cell's own report (paired t interval, TOST, Holm).", ""]
    lines += _tally(rows) + [""]
    for name in figures:
        lines += [f"![{name}]({name})", "", f"*{CAPTIONS.get(name, name)}*", ""]
    lines += ["## Every cell", ""] + (_table(rows) if rows else ["No finished cell yet."]) + [""]
    lines += _fits(fits, rows)
    missing = [gc.cell for gc in cells if gc.exp is None]
    if missing:
        lines += ["## Missing cells", ""]
        lines += [f"- `{c.name}`: {c.error or 'not run yet'}" for c in missing] + [""]
    return "\n".join(lines)


def write_grid_report(grid_dir: Path, errors: dict[str, str] | None = None, command: str | None = None) -> Path:
    """Read every cell of ``grid_dir`` and write its ``report.md`` and figures; returns the report's path.

    ``errors``: cell name -> why its runs failed in this invocation (shown as missing).
    """
    settings, cells = load_grid(grid_dir, errors)
    rows = gap_rows(cells)
    figures = plot_grid(rows, cells, grid_dir)
    path = grid_dir / "report.md"
    write_text_atomic(path, render_grid(settings, cells, rows, regressions(rows), figures, command))
    return path
