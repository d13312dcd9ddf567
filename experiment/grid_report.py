"""The scaling view: read every cell of a ``compare.py --grid`` experiment, one row per (cell, arm), a regression.

    cells = load_grid(Path("runs/shakespeare-grid"))       # reads grid.json and every cell's runs
    rows = gap_rows(cells)                                  # Δ val bpb with its CI per cell and arm
    fits = regressions(rows)                                # Δ ~ log10(non-embedding params) + embedding share

Within one cell every run scores the same val tokens, so its bits per byte are its loss times
one constant (tokens / (bytes · ln 2)); the cell's paired statistics in nats
(:func:`experiment.report.comparisons`) therefore carry over to bits per byte exactly, and
bits per byte make cells with different tokenizers comparable.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from core.errors import UserError
from core.files import read_json
from experiment import report
from experiment.grid import GRID_FILE, Axis, Cell, cells_of
from experiment.report import Experiment
from experiment.tuning import best_lr, score as tuning_score


@dataclass
class GridCell:
    """A cell and, when its runs are all there and fair, its experiment."""

    cell: Cell
    exp: Experiment | None  # None: missing (``cell.error`` says why)


def at_best_rates(runs: list[report.Run], tuning: list[report.Run]) -> list[report.Run]:
    """The reported runs of each arm at its best tuned rate; an arm without tuning runs keeps all.

    A cell tuned again with a wider grid (a larger ``--lr-widen``) whose best rate moved trains the
    reported seeds at the new rate and leaves the old ones in the folder; the cell's report uses the
    new ones, and so must the grid's (the same seed twice in an arm is otherwise refused).
    """
    best: dict[str, float] = {}
    for arm in {r.arm for r in tuning}:
        scores = {r.config["train"]["learning_rate"]: tuning_score(r.path) for r in tuning if r.arm == arm}
        best[arm] = best_lr(arm, scores)
    return [r for r in runs if r.arm not in best or math.isclose(r.config["train"]["learning_rate"], best[r.arm],
                                                                 rel_tol=1e-9)]


def load_cell(cell: Cell, reference: str, margin: float) -> GridCell:
    """The cell's experiment from its folder (``tune-*`` runs are its learning-rate grid), or missing with the reason."""
    if cell.error:
        return GridCell(cell, None)
    folders = sorted(p for p in cell.folder.glob("*") if (p / "summary.json").is_file()) if cell.folder.is_dir() else []
    if not folders:
        cell.error = "no finished runs"
        return GridCell(cell, None)
    tuning = [p for p in folders if p.name.startswith("tune-")]
    if len(tuning) == len(folders):  # still on its learning-rate grid: no reported run has finished
        cell.error = f"in progress: only learning-rate grid runs have finished ({len(tuning)})"
        return GridCell(cell, None)
    try:
        tuned = report.load_runs(tuning)
        runs = at_best_rates(report.load_runs([p for p in folders if p not in tuning]), tuned)
        waiting = sorted({r.arm for r in tuned} - {r.arm for r in runs})
        if waiting:  # tuned, but its reported seeds have not trained yet
            cell.error = f"in progress: no reported run of {', '.join(waiting)} at its tuned rate yet"
            return GridCell(cell, None)
        exp = report.check_experiment(runs, reference, margin, tuned)
    except UserError as e:
        cell.error = str(e)
        return GridCell(cell, None)
    return GridCell(cell, exp)


def load_grid(grid_dir: Path, errors: dict[str, str] | None = None) -> tuple[dict, list[GridCell]]:
    """``(grid.json settings, every cell)`` of a grid folder; ``errors``: cell name -> why it failed this time."""
    settings = read_json(grid_dir / GRID_FILE, "grid settings")
    axes = [Axis(k, tuple(v)) for k, v in settings["axes"].items()]
    cells = cells_of(axes, grid_dir)
    for cell in cells:
        cell.error = (errors or {}).get(cell.name)
    return settings, [load_cell(c, settings["reference"], settings["margin"]) for c in cells]


def _bpb_per_nat(exp: Experiment) -> float | None:
    """The cell's bits per byte per nat/token (one constant: every run scores the same tokens), or None."""
    ratios = [r.bpb / r.score for members in exp.runs.values() for r in members if r.bpb is not None and r.score > 0]
    return statistics.fmean(ratios) if ratios else None


def _arm_lr(exp: Experiment, arm: str) -> float:
    """The learning rate an arm's reported runs used (its tuned one when the cell has a grid)."""
    return exp.runs[arm][0].learning_rate


def gap_rows(cells: list[GridCell]) -> list[dict]:
    """One row per (finished cell, non-reference arm): sizes, data, tuned learning rates, Δ (nats and bpb), verdict.

    Δ = arm − reference, final val loss, paired by seed; ``ci`` the 95% paired t interval.
    Cells whose runs carry no bits per byte (older runs) have ``delta_bpb`` None.
    """
    rows = []
    for gc in cells:
        if gc.exp is None:
            continue
        exp = gc.exp
        ref = exp.runs[exp.reference][0]
        params, non_emb = ref.summary["parameters"], ref.summary["non_embedding_parameters"]
        train_tokens = ref.summary.get("train_tokens")
        scale = _bpb_per_nat(exp)
        for c in report.comparisons(exp):
            rows.append({
                "cell": gc.cell.name, "arm": c.arm, "reference": exp.reference,
                "vocab_size": ref.config["model"]["vocab_size"], "tokenizer": ref.config["data"]["tokenizer"],
                "n_embd": ref.config["model"]["n_embd"], "n_layer": ref.config["model"]["n_layer"],
                "parameters": params, "non_embedding_parameters": non_emb,
                "embedding_share": 1 - non_emb / params,
                "tokens": ref.summary["tokens"], "epochs": ref.summary["tokens"] / train_tokens if train_tokens else None,
                "lr_reference": _arm_lr(exp, exp.reference), "lr_arm": _arm_lr(exp, c.arm),
                "delta": c.mean, "ci": c.ci, "verdict": c.verdict, "seeds": len(c.diffs),
                "seeds_needed": c.seeds_needed, "margin": c.margin, "bpb_per_nat": scale,
                "delta_bpb": None if scale is None else c.mean * scale,
                "ci_bpb": None if scale is None else (c.ci[0] * scale, c.ci[1] * scale),
            })
    return rows


@dataclass
class Fit:
    """Weighted least squares of one arm's Δ val bpb across cells (statsmodels ``WLS``), and how much it leans
    on single cells: the heaviest cell's share of the weight and the fit with each cell left out in turn."""

    arm: str
    terms: list[str]  # "intercept", "log10(non-embedding params)", "embedding share"
    coef: list[float]
    ci: list[tuple[float, float]]  # 95%
    cells: int
    r2: float
    heaviest: tuple[str, float]  # (cell, its share of the summed weights 1/SE²)
    loo_range: list[tuple[float, float]]  # per term: lowest and highest coefficient with one cell left out
    loo_supported: list[int]  # per term: leave-one-out fits whose 95% interval excludes 0
    loo_fits: int  # how many leave-one-out fits there were (cells whose removal leaves the terms fittable)


#: The regressors of the rule of thumb, each read off a gap row.
TERMS = {"log10(non-embedding params)": lambda r: math.log10(r["non_embedding_parameters"]),
         "embedding share": lambda r: r["embedding_share"]}


def _se(r: dict) -> float:
    """SE of a cell's Δ bpb from its 95% t interval (half-width / t_{0.975, n-1}); nan when there is none."""
    t = scipy_stats.t.ppf(0.975, r["seeds"] - 1) if r["seeds"] > 1 else math.inf
    half = (r["ci_bpb"][1] - r["ci_bpb"][0]) / 2
    return half / t if math.isfinite(half) and half > 0 else math.nan


def _wls(rows: list[dict], terms: list[str]):
    """``(statsmodels result, weights)`` of Δ bpb ~ 1 + terms weighted by 1/SE², or None when not fittable
    (no more cells than terms, a term constant across the cells, or a cell without an interval)."""
    import statsmodels.api as sm

    cols = np.array([[TERMS[t](r) for t in terms] for r in rows]).reshape(len(rows), len(terms))  # (cells, terms)
    if len(rows) <= len(terms) + 1 or np.any(np.ptp(cols, axis=0) <= 1e-9):
        return None
    se = np.array([_se(r) for r in rows])
    if not np.all(np.isfinite(se) & (se > 0)):
        return None
    weights = 1 / np.square(se)
    X = sm.add_constant(cols, has_constant="add")
    return sm.WLS(np.array([r["delta_bpb"] for r in rows]), X, weights=weights).fit(), weights


def excludes_zero(lo: float, hi: float) -> bool:
    """Whether a 95% interval supports a coefficient: it lies wholly above or wholly below 0."""
    return lo > 0 or hi < 0


def regressions(rows: list[dict]) -> list[Fit]:
    """Per arm: Δ val bpb ~ 1 + log10(non-embedding params) + embedding share, weighted by 1 / SE².

    Only terms that vary across the arm's cells are fitted, and a fit needs more cells than
    terms (otherwise the arm gets no fit).  Each cell is also left out in turn (the same terms),
    since with 1/SE² weights a few precise cells can carry the whole fit.  Source: ordinary
    weighted least squares, ``statsmodels.regression.linear_model.WLS``.
    """
    fits = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm and r["delta_bpb"] is not None]
        terms = [t for t, f in TERMS.items() if len(mine) > 1 and np.ptp([f(r) for r in mine]) > 1e-9]
        fitted = _wls(mine, terms)
        if fitted is None:
            continue
        res, weights = fitted
        top = int(np.argmax(weights))
        loo = [f[0] for f in (_wls(mine[:i] + mine[i + 1:], terms) for i in range(len(mine))) if f is not None]
        coefs = np.array([f.params for f in loo]).reshape(len(loo), len(terms) + 1)  # (fits, terms + 1)
        cis = [f.conf_int(0.05) for f in loo]  # each (terms + 1, 2)
        fits.append(Fit(
            arm, ["intercept", *terms], [float(c) for c in res.params],
            [(float(lo), float(hi)) for lo, hi in res.conf_int(0.05)], len(mine), float(res.rsquared),
            (mine[top]["cell"], float(weights[top] / weights.sum())),
            [(float(coefs[:, j].min()), float(coefs[:, j].max())) if loo else (math.nan, math.nan)
             for j in range(len(terms) + 1)],
            [int(sum(excludes_zero(*ci[j]) for ci in cis)) for j in range(len(terms) + 1)],
            len(loo)))
    return fits
