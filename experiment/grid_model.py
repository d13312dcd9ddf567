"""The scaling view across cells: a random-effects model of Δ bpb, one moderator at a time.

    models = cross_cell_models(rows)      # per arm: no moderator, embedding share, tokenizer family, ...

The cells differ by more than their seed noise (a fixed-effect fit of the cell means is far outside
its χ²), so a fit that treats each cell's Δ as exact up to its own SE overstates what the cells
show.  Here each cell gets a random intercept: per arm, the seed-level Δ val bpb (arm − reference,
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
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from experiment.vocab_use import never_seen_fraction

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


def cross_cell_models(rows: list[dict]) -> list[ArmModels]:
    """Per non-reference arm: every moderator's model (:data:`MODERATORS`) over the cells with ≥ 2 paired seeds.

    ``rows`` are :func:`experiment.grid_report.gap_rows`; a cell without bits per byte or with fewer
    than 2 paired seeds is left out (and said so).  Raises nothing: a model that cannot be fitted is
    recorded in ``not_fitted`` with the reason.
    """
    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        left_out = {
            r["cell"]: ("no bits per byte" if r["delta_bpb"] is None else f"{r['seeds']} paired seed(s)")
            for r in mine
            if r["delta_bpb"] is None or r["seeds"] < MIN_SEEDS or not se_bpb(r) > 0
        }
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
