"""Report options of the scaling view: a margin in bits per byte, contrasts between cells, a slope within cells.

    readout = Readout(margin_bpb=0.02, contrasts=[parse_contrast("n_embd-128_tokenizer-gpt2,n_embd-128_tokenizer-bpe32768")],
                      slope_within=parse_slope_within(["data.tokenizer=bpe:1024,bpe:4096", "model.n_embd=128"]))
    check_readout(readout, cells)            # UserError (one line) for a cell or an axis value the grid lacks
    contrasts(rows, "n_embd-128_tokenizer-gpt2", "n_embd-128_tokenizer-bpe32768")   # per arm: C, Welch 95% CI
    slope(rows, selected_cells)              # per arm: Δ bpb per 10 percentage points of embedding share

These are the readouts a declaration can name before its runs (results/*/vocab-control.md is one):

* **contrast** C = Δ(A) − Δ(B) of two cells, Δ = arm − reference in final val bpb.  The two cells'
  seeds are not paired with each other, so its 95% interval is Welch's (unequal variances,
  Welch–Satterthwaite df): ``scipy.stats.ttest_ind(equal_var=False).confidence_interval``.
* **slope within** a subset of cells that differ in one axis only (e.g. the tokenizer at a fixed
  n_embd): the weighted least-squares slope of Δ bpb on the embedding share, weights 1/SE² of each
  cell's Δ (statsmodels ``WLS``, its scale estimated from the residuals, t interval on cells − 2 df),
  per 10 percentage points of share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from core.errors import UserError
from experiment.grid_model import se_bpb


@dataclass
class Readout:
    """The grid report's options: the bpb margin of its verdicts, contrasts asked for, the slope's subset."""

    margin_bpb: float | None = None  # bits per byte; None: each cell's own verdict (nats, its declared margin)
    contrasts: list[tuple[str, str]] = field(default_factory=list)  # (cell A, cell B) names
    slope_within: dict[str, tuple[str, ...]] = field(default_factory=dict)  # axis key -> values, as typed

    def __bool__(self) -> bool:
        return self.margin_bpb is not None or bool(self.contrasts) or bool(self.slope_within)


def parse_contrast(text: str) -> tuple[str, str]:
    """``"A,B"`` -> ``("A", "B")``, two distinct cell names; raises UserError otherwise."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise UserError(
            f"--contrast {text!r} is not two different cell names: e.g. "
            "--contrast n_embd-128_tokenizer-gpt2,n_embd-128_tokenizer-bpe32768"
        )
    return parts[0], parts[1]


def parse_slope_within(texts: list[str]) -> dict[str, tuple[str, ...]]:
    """``["data.tokenizer=bpe:1024,bpe:4096", "model.n_embd=128"]`` -> ``{key: values}``; raises UserError for a
    malformed clause or a key given twice."""
    out: dict[str, tuple[str, ...]] = {}
    for text in texts:
        key, sep, rest = text.partition("=")
        values = tuple(v.strip() for v in rest.split(",") if v.strip())
        if not sep or not key.strip() or not values:
            raise UserError(
                f"--slope-within {text!r} is not KEY=V1,V2,...: e.g. "
                "--slope-within data.tokenizer=bpe:1024,bpe:4096 --slope-within model.n_embd=128"
            )
        if key.strip() in out:
            raise UserError(f"--slope-within {key.strip()} is given twice: put all its values in one option")
        out[key.strip()] = values
    return out


def selected_cells(cells: list, within: dict[str, tuple[str, ...]]) -> list:
    """The grid's cells (``GridCell``, finished or not) whose values match every clause of ``within``."""
    return [gc for gc in cells if all(str(gc.cell.values[k]) in vs for k, vs in within.items())]


def check_readout(readout: Readout, cells: list) -> None:
    """Refuse (UserError, one line) a contrast naming a cell the grid lacks, a slope clause on a key that is no
    axis or a value the axis lacks, and a slope subset whose cells differ in an axis not named."""
    names = [gc.cell.name for gc in cells]
    for pair in readout.contrasts:
        for name in pair:
            if name not in names:
                raise UserError(f"--contrast: no cell {name!r} in this grid; its cells are {', '.join(names)}")
    if not readout.slope_within:
        return
    axes = {k: {str(gc.cell.values[k]) for gc in cells} for k in cells[0].cell.values} if cells else {}
    for key, values in readout.slope_within.items():
        if key not in axes:
            raise UserError(f"--slope-within {key}: not an axis of this grid; its axes are {', '.join(axes)}")
        unknown = [v for v in values if v not in axes[key]]
        if unknown:
            raise UserError(
                f"--slope-within {key}: {', '.join(unknown)} not among its values {', '.join(sorted(axes[key]))}"
            )
    chosen = selected_cells(cells, readout.slope_within)
    for key in axes:
        seen = list(dict.fromkeys(str(gc.cell.values[key]) for gc in chosen))  # in the grid's order
        if key not in readout.slope_within and len(seen) > 1:
            raise UserError(
                f"--slope-within: the cells chosen differ in {key} too ({', '.join(seen)}): "
                f"fix it with --slope-within {key}={seen[0]}"
            )


@dataclass
class Contrast:
    """C = Δ(A) − Δ(B) for one arm (bpb), with the Welch 95% interval; ``missing`` says why there is none."""

    arm: str
    a: str
    b: str
    delta_a: float = math.nan
    n_a: int = 0
    delta_b: float = math.nan
    n_b: int = 0
    c: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    df: float = math.nan
    missing: str | None = None


def contrasts(rows: list[dict], a: str, b: str) -> list[Contrast]:
    """Per non-reference arm: C = Δ(a) − Δ(b) in final val bpb with its Welch 95% interval (module docstring).

    A cell that is unfinished, lacks bits per byte or has fewer than 2 paired seeds gives a Contrast
    with ``missing`` set instead.
    """
    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        found = {r["cell"]: r for r in rows if r["arm"] == arm and r["cell"] in (a, b)}
        lacking = [n for n in (a, b) if n not in found or found[n]["diffs_bpb"] is None or found[n]["seeds"] < 2]
        if lacking:
            out.append(Contrast(arm, a, b, missing=f"{', '.join(lacking)}: not finished with ≥ 2 paired seeds in bpb"))
            continue
        da, db = np.array(found[a]["diffs_bpb"]), np.array(found[b]["diffs_bpb"])
        res = scipy_stats.ttest_ind(da, db, equal_var=False)
        lo, hi = res.confidence_interval(confidence_level=0.95)
        out.append(
            Contrast(
                arm,
                a,
                b,
                float(da.mean()),
                len(da),
                float(db.mean()),
                len(db),
                float(da.mean() - db.mean()),
                (float(lo), float(hi)),
                float(res.df),
            )
        )
    return out


@dataclass
class Slope:
    """One arm's WLS slope of Δ bpb on embedding share within a subset of cells, per 10 percentage points."""

    arm: str
    cells: list[tuple[str, float, float, float]]  # (cell, embedding share, Δ bpb, its SE), share ascending
    slope: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    df: int = 0
    missing: str | None = None


def slope(rows: list[dict], names: list[str]) -> list[Slope]:
    """Per non-reference arm: Δ bpb ~ 1 + (10 × embedding share) over the cells ``names``, weights 1/SE².

    Cells without bits per byte or with fewer than 2 paired seeds are left out; a Slope with
    ``missing`` set when fewer than 3 cells remain or their shares do not differ.
    """
    import statsmodels.api as sm

    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = sorted(
            (
                r
                for r in rows
                if r["arm"] == arm
                and r["cell"] in names
                and r["delta_bpb"] is not None
                and r["seeds"] >= 2
                and se_bpb(r) > 0
            ),
            key=lambda r: r["embedding_share"],
        )
        used = [(r["cell"], r["embedding_share"], r["delta_bpb"], se_bpb(r)) for r in mine]
        if len(used) < 3 or np.ptp([u[1] for u in used]) <= 1e-9:
            out.append(
                Slope(
                    arm,
                    used,
                    missing=f"{len(used)} finished cell(s) with ≥ 2 paired seeds; a slope with an "
                    "interval needs 3 with different shares",
                )
            )
            continue
        X = sm.add_constant(10 * np.array([u[1] for u in used]), has_constant="add")  # (cells, 2)
        res = sm.WLS(np.array([u[2] for u in used]), X, weights=1 / np.square([u[3] for u in used])).fit()
        lo, hi = res.conf_int(0.05)[1]
        out.append(Slope(arm, used, float(res.params[1]), (float(lo), float(hi)), int(res.df_resid)))
    return out
