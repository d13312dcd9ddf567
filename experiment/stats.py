"""Statistics of a paired multi-arm experiment: is an arm better, worse or equivalent to the reference?

Several arms (model variants, e.g. tied / untied embeddings) are trained with the same seeds;
for each seed there is one final validation loss per arm, in nats/token (lower is better).
Each arm is compared with a reference arm, paired by seed (:func:`compare_paired`), and the
p-values of one report are adjusted together for multiple comparisons (:func:`holm`)::

    comps = [compare_paired("untied", "tied", untied_losses, tied_losses, margin=0.02), ...]
    comps = holm(comps)                    # p_holm, verdict and seeds_needed over the family

Every statistical computation is done by scipy or statsmodels, not by hand:

* paired t test and its 95% and 90% intervals: ``scipy.stats.ttest_rel`` (``.confidence_interval``);
* Wilcoxon signed-rank test: ``scipy.stats.wilcoxon`` (exact where scipy does it);
* exact sign test: ``scipy.stats.binomtest``;
* equivalence (TOST, Schuirmann 1987): ``statsmodels.stats.weightstats.ttost_paired``;
* Holm step-down adjustment (Holm 1979): :func:`holm_adjust`, checked against
  ``statsmodels.stats.multitest.multipletests`` in the tests;
* the seeds-needed planning figure: statsmodels' ``TTestPower`` and the sd's interval from ``scipy.stats.chi2``.

Verdict rule (alpha = 0.05 unless told otherwise), per comparison:

* **better**: p_holm < alpha and the whole 95% CI of the mean difference is below 0
  (the arm's loss is lower than the reference's);
* **worse**: p_holm < alpha and the whole 95% CI is above 0;
* otherwise **equivalent**: p_tost < alpha, the 90% two one-sided tests at the margin
  (declared before the runs) show the difference lies within (-margin, +margin);
* otherwise **inconclusive**, with ``seeds_needed`` the seeds that would detect a difference of
  the margin with 80% power, and the range the spread's own uncertainty allows (:func:`seeds_figure`).

With fewer than 2 seeds the verdict is always inconclusive (seeds_needed None).

A verdict the data cannot support is **barred** (``Comparison.barred``, :func:`barred_by_misses`):
it reads inconclusive instead.  With a target outcome, a run that never reached the target has no
value and its seed leaves the pairing; were that the arm's seed alone, the arm would lose its worst
seed, so better is barred, and symmetrically worse; equivalence is barred by any such seed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from core.errors import FlagError, UserError

VERDICTS = ("better", "worse", "equivalent", "inconclusive")


@dataclass
class Comparison:
    """One arm against the reference arm, paired by seed.  Losses and differences in nats/token.

    ``diffs`` are arm - reference per seed, in the order given; negative means the arm's loss is
    lower (better).  ``ci`` is the 95% paired t interval of the mean difference
    (``scipy.stats.ttest_rel(...).confidence_interval``), ``ci90`` the 90% one (inside ±margin exactly
    when p_tost < 0.05, Schuirmann 1987); ``p_t`` the two-sided paired t p-value;
    ``p_wilcoxon`` the two-sided Wilcoxon signed-rank p (``scipy.stats.wilcoxon``), None when it
    cannot be computed; ``p_sign`` the exact two-sided sign test (``scipy.stats.binomtest``);
    ``d_z`` = mean / sd (Cohen's d_z, unitless); ``ppl_ratio`` = exp(mean), the arm's perplexity
    over the reference's; ``margin`` the equivalence margin (nats/token); ``p_tost`` the TOST p
    (Schuirmann 1987; ``statsmodels.stats.weightstats.ttost_paired``); ``p_holm`` the Holm (1979)
    adjusted p_t across one report (equals p_t until :func:`holm` fills it); ``verdict`` one of
    "better", "worse", "equivalent", "inconclusive" (rule in the module docstring);
    ``seeds_needed`` for "inconclusive", how many seeds would detect a difference of the margin and how
    sure that figure is (:func:`seeds_figure`), else None.
    """

    arm: str
    reference: str
    diffs: list[float]
    mean: float
    sd: float
    ci: tuple[float, float]
    ci90: tuple[float, float]
    p_t: float
    p_wilcoxon: float | None
    p_sign: float
    d_z: float
    ppl_ratio: float
    margin: float
    p_tost: float
    p_holm: float
    verdict: str
    plan_alpha: float = 0.05  # the level the seeds figure plans at (alpha over the family: Holm's strictest step)
    barred: tuple[str, ...] = ()  # verdicts read as inconclusive whatever the numbers (:func:`barred_by_misses`)
    seeds: tuple[int, ...] = ()  # the seed of each of ``diffs``, where the caller names them

    @property
    def seeds_needed(self) -> SeedsFigure | None:
        """For "inconclusive" with 2 or more seeds, :func:`seeds_figure` at the margin; else None.  Computed when
        read: a verdict alone (an A/A simulation, a gate) never pays for it."""
        if self.verdict != "inconclusive" or len(self.diffs) < 2:
            return None
        return seeds_figure(self.sd, len(self.diffs), self.margin, self.plan_alpha)


def barred_by_misses(arm_missed: set[int], ref_missed: set[int]) -> tuple[str, ...]:
    """The verdicts a target outcome cannot give when runs missed the target (seeds in each set).

    A seed where one run missed leaves the pairing, and the missing value is at least that run's
    whole length, so the pairing kept is biased toward the arm that missed: better is barred when the
    arm missed where the reference reached, worse when the reference missed where the arm reached,
    and equivalent when either missed (the dropped difference may be any size).  Seeds where both
    missed bar equivalence only.  The other verdicts stay as the t test gives them: the dropped seed's
    difference would have favoured that same direction, though dropping it can also shrink the spread
    (an outlier gone) and so reach a verdict the full set would not.
    """
    out = []
    if arm_missed - ref_missed:
        out.append("better")
    if ref_missed - arm_missed:
        out.append("worse")
    if arm_missed | ref_missed:
        out.append("equivalent")
    return tuple(out)


def _allowed(verdict: str, barred: tuple[str, ...]) -> str:
    """``verdict``, or inconclusive when it is barred."""
    return "inconclusive" if verdict in barred else verdict


def _check_inputs(
    arm: str, reference: str, arm_values: Sequence[float], ref_values: Sequence[float], margin: float
) -> tuple[np.ndarray, np.ndarray]:
    """The two loss sequences as float arrays; raises UserError (one line: problem and fix)."""
    a = np.asarray(list(arm_values), dtype=float)
    r = np.asarray(list(ref_values), dtype=float)
    if len(a) != len(r):
        raise UserError(
            f"{arm!r} has {len(a)} seeds but {reference!r} has {len(r)}: "
            "pass one final val loss per seed for both arms, in the same seed order"
        )
    if len(a) == 0:
        raise UserError(f"no seeds to compare for {arm!r} vs {reference!r}: pass at least one final val loss per arm")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
        raise UserError(
            f"non-finite val loss in {arm!r} vs {reference!r} (NaN or inf, a diverged run?): "
            "rerun or drop that seed from both arms"
        )
    check_margin(margin)
    return a, r


def check_margin(margin: float) -> None:
    """Raise :class:`FlagError` unless ``margin`` (nats/token) is a finite number > 0."""
    if not (math.isfinite(margin) and margin > 0):
        raise FlagError(
            f"equivalence margin must be a positive number of nats/token, got {margin!r}: "
            "declare a margin > 0 (e.g. 0.02) before the runs"
        )


def decide(ci: tuple[float, float], p_adj: float, p_tost: float, n: int, alpha: float) -> str:
    """The verdict (rule in the module docstring), the one rule every design reads with (:mod:`experiment.best`
    too): better / worse when ``p_adj`` < ``alpha`` and the 95% interval ``ci`` excludes 0, equivalent when
    ``p_tost`` < ``alpha``, else inconclusive; inconclusive with fewer than ``n`` = 2 seeds.

    ``p_adj`` is the p-value to test the difference with (p_t, or p_holm after :func:`holm`).
    """
    if n < 2:
        return "inconclusive"
    p = 1.0 if math.isnan(p_adj) else p_adj
    if p < alpha and ci[1] < 0:
        return "better"
    if p < alpha and ci[0] > 0:
        return "worse"
    if not math.isnan(p_tost) and p_tost < alpha:
        return "equivalent"
    return "inconclusive"


def size_against_margin(verdict: str, ci: tuple[float, float], margin: float) -> str:
    """For better or worse: where the 95% interval ``ci`` lies against ±margin.  Wholly inside, "by less than the
    margin" (a real difference too small to matter); only its end nearest 0, "possibly by less than the
    margin"; neither, or no difference found, ""."""
    if verdict not in ("better", "worse"):
        return ""
    near, far = (ci[1], ci[0]) if verdict == "better" else ci
    if abs(far) < margin:
        return "by less than the margin"
    return "possibly by less than the margin" if abs(near) < margin else ""


def _p_wilcoxon(diffs: np.ndarray) -> float | None:
    """Two-sided Wilcoxon signed-rank p of ``diffs`` (``scipy.stats.wilcoxon``, default zero
    handling: zeros dropped; exact where scipy does it); None for n < 2, all-zero diffs or a
    result scipy cannot give."""
    if len(diffs) < 2 or not np.any(diffs != 0):
        return None
    try:
        p = float(stats.wilcoxon(diffs).pvalue)
    except ValueError:
        return None
    return None if math.isnan(p) else p


def compare_paired(
    arm: str,
    reference: str,
    arm_values: Sequence[float],
    ref_values: Sequence[float],
    margin: float,
    descriptive: bool = True,
    barred: tuple[str, ...] = (),
    seeds: Sequence[int] = (),
) -> Comparison:
    """Compare ``arm`` with ``reference`` from final val losses (nats/token) paired by seed.

    ``arm_values[i]`` and ``ref_values[i]`` come from the same seed.  ``margin`` (nats/token,
    declared before the runs) is the equivalence margin for TOST (Schuirmann 1987,
    ``statsmodels.stats.weightstats.ttost_paired``).  The t test and its 95% CI come from
    ``scipy.stats.ttest_rel``, the Wilcoxon p from ``scipy.stats.wilcoxon``, the sign test from
    ``scipy.stats.binomtest``.  When every diff is the same (sd 0) the t quantities are defined
    directly: CI (mean, mean), p_t 0.0 (1.0 if all diffs are 0), p_tost 0.0 if |mean| < margin
    else 1.0.  The verdict uses the unadjusted p_t; :func:`holm` re-derives it for a family.

    ``descriptive=False`` leaves out the Wilcoxon and sign tests (None and 1.0), which the verdict does not
    read: for simulations that call this thousands of times (tests/test_aa.py).  ``barred``: verdicts
    that read inconclusive whatever the numbers (:func:`barred_by_misses`); ``seeds``: the seed of each pair, for
    the record.

    Raises UserError when the sequences differ in length, are empty, hold a NaN/inf, or when
    margin <= 0.
    """
    a, r = _check_inputs(arm, reference, arm_values, ref_values, margin)
    diffs = a - r
    n = len(diffs)
    mean = float(np.mean(diffs))
    nan = float("nan")
    if n < 2:
        sd, ci, ci90, p_t, p_tost = nan, (nan, nan), (nan, nan), nan, nan
    elif np.ptp(diffs) == 0:  # every seed moved by exactly the same amount: no spread
        sd, ci, ci90 = 0.0, (mean, mean), (mean, mean)
        p_t = 1.0 if mean == 0 else 0.0
        p_tost = 0.0 if abs(mean) < margin else 1.0
    else:
        sd = float(np.std(diffs, ddof=1))  # the verdict's statistics; the descriptive ones follow
        with warnings.catch_warnings():  # near-constant diffs: scipy warns of precision loss
            warnings.simplefilter("ignore", RuntimeWarning)
            res = stats.ttest_rel(a, r)
            low, high = res.confidence_interval(confidence_level=0.95)
            ci, p_t = (float(low), float(high)), float(res.pvalue)
            ci90 = tuple(float(v) for v in res.confidence_interval(confidence_level=0.90))
            p_tost = float(ttost_paired(a, r, -margin, margin)[0])
    nonzero = int(np.count_nonzero(diffs))
    negative = int(np.sum(diffs < 0))
    p_sign = float(stats.binomtest(negative, nonzero, 0.5).pvalue) if nonzero and descriptive else 1.0
    d_z = mean / sd if (not math.isnan(sd) and sd > 0) else nan
    verdict = _allowed(decide(ci, p_t, p_tost, n, alpha=0.05), barred)
    return Comparison(
        arm=arm,
        reference=reference,
        diffs=[float(d) for d in diffs],
        mean=mean,
        sd=sd,
        ci=ci,
        ci90=ci90,
        p_t=p_t,
        p_wilcoxon=_p_wilcoxon(diffs) if descriptive else None,
        p_sign=p_sign,
        d_z=d_z,
        ppl_ratio=math.exp(mean),
        margin=float(margin),
        p_tost=p_tost,
        p_holm=p_t,
        verdict=verdict,
        barred=tuple(barred),
        seeds=tuple(seeds),
    )


def holm_adjust(p: Sequence[float]) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values, in the order given: the i-th smallest p times (m - i), made
    non-decreasing in that order, capped at 1.  The same numbers as statsmodels' ``multipletests(p,
    method="holm")[1]`` (tests/test_stats.py checks), without its ``gc.collect()`` per call, which costs a
    quarter of a second in a process holding PyTorch."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = stepped
    return out


def holm(comparisons: list[Comparison], alpha: float = 0.05, family: int | None = None) -> list[Comparison]:
    """Holm-adjust (Holm 1979) the p_t of one report's comparisons; new Comparison objects.

    ``p_holm`` comes from :func:`holm_adjust` (statsmodels' ``multipletests(p_t, method="holm")`` numbers); a
    nan p_t (fewer than 2 seeds) counts as 1.0.  ``family`` (at least ``len(comparisons)``)
    counts comparisons declared but not made yet, each as p = 1, so that an early verdict is no
    less strict than the last.  Verdict and seeds_needed are re-derived with the
    adjusted p (rule in the module docstring); for "inconclusive" the seeds-needed figure is
    planned at alpha over the family's size, the strictest Holm step, so it errs on the high side.
    The inputs are not modified (``dataclasses.replace``).  Raises nothing for an empty list
    (returns []).
    """
    if not comparisons:
        return []
    size = max(family or 0, len(comparisons))
    p = [1.0 if math.isnan(c.p_t) else c.p_t for c in comparisons] + [1.0] * (size - len(comparisons))
    adjusted = holm_adjust(p)
    out = []
    for c, p_holm in zip(comparisons, adjusted):
        verdict = _allowed(decide(c.ci, float(p_holm), c.p_tost, len(c.diffs), alpha), c.barred)
        # The seeds figure plans at alpha over the family (Bonferroni, Holm's strictest step): conservative.
        out.append(replace(c, p_holm=float(p_holm), verdict=verdict, plan_alpha=alpha / size))
    return out


QUALIFY_ALPHA = 0.01  # modded-nanogpt's record rule: a new record's mean loss below the target at p < 0.01


@dataclass(frozen=True)
class Qualification:
    """Whether an arm's runs reach a target val loss as a speedrun record must: their mean final val loss below
    ``target`` by a one-sided one-sample t-test at p < :data:`QUALIFY_ALPHA` (nats/token)."""

    arm: str
    target: float
    mean: float
    seeds: int
    p: float  # one-sided: the chance of a mean this far below the target if the true mean were the target

    @property
    def qualifies(self) -> bool:
        return self.p < QUALIFY_ALPHA


def below_target(arm: str, values: Sequence[float], target: float) -> Qualification:
    """The one-sample t-test of modded-nanogpt's records (``scipy.stats.ttest_1samp``, ``alternative="less"``,
    n − 1 df) that the mean of ``values`` (final val losses, one per seed) lies below ``target``.

    p is NaN with fewer than 2 finite values, or when every value is the same (no spread to test on),
    and then the arm does not qualify.
    """
    finite = [float(v) for v in values if math.isfinite(v)]
    mean = float(np.mean(finite)) if finite else math.nan
    if len(finite) < 2 or len(finite) < len(values) or np.ptp(finite) == 0:
        return Qualification(arm, target, mean, len(finite), math.nan)
    p = float(stats.ttest_1samp(finite, target, alternative="less").pvalue)
    return Qualification(arm, target, mean, len(finite), p)


MIN_PLANNING_DF = 4  # a spread from fewer degrees of freedom (a pilot under 5 seeds) is too uncertain to plan on


@dataclass(frozen=True)
class SeedsFigure:
    """How many paired seeds would detect a difference the size of the margin, and how sure that figure is.

    ``seeds``: the fewest seeds whose paired t test detects a true difference of ``margin`` with 80%
    power (:func:`seeds_for`) if the per-seed differences spread by the observed sd; ``low`` and
    ``high``: the same at the ends of the sd's 95% interval (chi-square on ``df`` degrees of freedom),
    so a spread from a small pilot shows how little it knows (2 df: sd × 0.52 to × 6.3, seeds × 0.27
    to × 40).  A count above :data:`MAX_SEEDS` is None.
    """

    seeds: int | None
    low: int | None
    high: int | None
    df: int

    @property
    def too_small(self) -> bool:
        """Whether the spread came from too few seeds to plan on (fewer than :data:`MIN_PLANNING_DF` df)."""
        return self.df < MIN_PLANNING_DF

    def short(self) -> str:
        """``"8 (4–190)"``: the figure and its 95% range, for a table cell."""

        def count(n: int | None) -> str:
            return f"{n}" if n is not None else f">{MAX_SEEDS}"

        if self.low is None:  # even the spread's low end needs more than the most counted
            return count(None)
        return f"{count(self.seeds)} ({count(self.low)}–{count(self.high)})"

    def words(self, margin: str) -> str:
        """``"about 8 seeds (95% range 4 to 190, from a spread on 2 degrees of freedom) detect ±0.01 with 80%
        power"``; ``margin`` is the margin as the caller writes it, unit included."""

        def count(n: int | None) -> str:
            return f"{n}" if n is not None else f"more than {MAX_SEEDS}"

        head = f"about {count(self.seeds)} seeds" if self.seeds is not None else f"more than {MAX_SEEDS} seeds"
        text = (
            f"{head} (95% range {count(self.low)} to {count(self.high)}, from a spread on {self.df} degree"
            f"{'s' if self.df != 1 else ''} of freedom) would detect a difference of {margin} with 80% power"
        )
        if self.too_small:
            text += f"; a spread from {self.df + 1} seeds is too uncertain to plan on: {MIN_PLANNING_DF + 1} or more"
        return text


MAX_SEEDS = 1000  # the most seeds a planning figure counts to


def seeds_figure(sd: float, n: int, margin: float, alpha: float = 0.05) -> SeedsFigure | None:
    """The :class:`SeedsFigure` for per-seed differences of sample sd ``sd`` over ``n`` seeds, a difference of
    ``margin`` (same unit) and a two-sided level ``alpha``.

    The sd's 95% interval is ``sd * sqrt(df / chi2.ppf(0.975 or 0.025, df))`` with df = n - 1 (the textbook
    interval for a normal sd, ``scipy.stats.chi2``).  None for n < 2, or an sd or margin that is not finite
    and > 0.  Raises nothing.
    """
    if n < 2 or not (math.isfinite(sd) and sd > 0 and math.isfinite(margin) and margin > 0):
        return None
    df = n - 1
    lo_sd = sd * math.sqrt(df / stats.chi2.ppf(0.975, df))
    hi_sd = sd * math.sqrt(df / stats.chi2.ppf(0.025, df))
    return SeedsFigure(
        seeds_for(margin, sd, alpha, max_n=MAX_SEEDS),
        seeds_for(margin, lo_sd, alpha, max_n=MAX_SEEDS),
        seeds_for(margin, hi_sd, alpha, max_n=MAX_SEEDS),
        df,
    )


def compute_equivalent(ref_final: float, steps: Sequence[int], arm_curve: Sequence[float]) -> float | None:
    """Fraction of its run at which the arm first reaches the reference's final val loss.

    ``steps`` are the eval steps, ascending, the last one the full run; ``arm_curve`` the arm's
    mean val loss (nats/token) at each of them; ``ref_final`` the reference arm's mean final val
    loss (nats/token).  Returns step / last step, in (0, 1], at which the curve first gets down to
    ``ref_final``, linearly interpolated between the two eval points that bracket it (the first
    eval point's own fraction if it is already there, 0.0 only for a step-0 eval); None if the
    arm never gets down to it.

    This is an estimate: the mid-schedule points are not annealed (the learning rate is still
    high there), so a mid-run loss is worse than a run of that length would reach, and the
    fraction overstates the compute needed, i.e. understates the speed-up.

    Raises UserError when the sequences are empty, differ in length, hold NaN/inf, or the steps
    are not strictly ascending with a positive last step.
    """
    s = np.asarray(list(steps), dtype=float)
    y = np.asarray(list(arm_curve), dtype=float)
    if len(s) == 0 or len(s) != len(y):
        raise UserError(
            f"compute_equivalent needs one loss per eval step, got {len(s)} steps and "
            f"{len(y)} losses: pass matching, non-empty sequences"
        )
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(y)) and math.isfinite(ref_final)):
        raise UserError(
            "non-finite step or val loss in compute_equivalent: drop diverged runs before averaging the curves"
        )
    if np.any(np.diff(s) <= 0) or s[-1] <= 0:
        raise UserError(
            "eval steps must be strictly ascending with a positive last step: "
            "pass the eval steps in order, the last one the full run"
        )
    reached = np.flatnonzero(y <= ref_final)
    if len(reached) == 0:
        return None
    i = int(reached[0])
    if i == 0:
        return float(s[0] / s[-1])
    frac = (y[i - 1] - ref_final) / (y[i - 1] - y[i])  # y[i-1] > ref_final >= y[i]
    step = s[i - 1] + frac * (s[i] - s[i - 1])
    return float(step / s[-1])


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest mean paired difference ``n`` seeds would detect (two-sided paired t test at ``alpha``,
    with probability ``power``), if the per-seed differences spread with standard deviation ``sd``.

    Effect size from statsmodels' ``TTestPower.solve_power`` (a one-sample t test on the differences),
    times ``sd``; same units as ``sd``.  None for ``n`` < 2 or an ``sd`` that is not finite and > 0.
    """
    if n < 2 or not (math.isfinite(sd) and sd > 0):
        return None
    # solve_power returns a 1-element array for some n (statsmodels 0.15): read its one value either way.
    effect = np.ravel(TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power))[0]
    return float(effect) * sd


def power_of(n: np.ndarray, difference: float, sd: float, alpha: float = 0.05) -> np.ndarray:
    """The power of a two-sided paired t test at ``alpha`` with ``n`` seeds (an array) to detect a mean paired
    difference ``difference`` when the per-seed differences spread by ``sd``: the noncentral t's mass beyond
    the critical values (``scipy.stats.nct``), as statsmodels' ``TTestPower.power`` computes it."""
    df = n - 1
    nc = difference / sd * np.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    return stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)


def seeds_for(difference: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 1000) -> int | None:
    """The fewest seeds (>= 2) whose paired t test detects ``difference`` with probability ``power`` (the first
    n where :func:`power_of` reaches it, over every n up to ``max_n`` at once); None when ``sd`` or
    ``difference`` is not > 0, or more than ``max_n`` are needed."""
    if not (math.isfinite(sd) and sd > 0 and math.isfinite(difference) and difference > 0):
        return None
    ns = np.arange(2, max_n + 1)
    hits = np.flatnonzero(power_of(ns, difference, sd, alpha) >= power)
    return int(ns[hits[0]]) if len(hits) else None


FIRST_LOOK = 3  # seeds at the first look of a sequential experiment (compare.py --seeds auto)


def sequential_looks(max_seeds: int, first: int = FIRST_LOOK, step: int = 2) -> list[int]:
    """The seed counts at which a sequential experiment looks: ``first``, then every ``step`` more, and
    ``max_seeds`` last (``3, 5, 7, 8`` for 8).  Raises :class:`UserError` when ``max_seeds < first``."""
    if max_seeds < first:
        raise UserError(f"--max-seeds {max_seeds} is below the first look's {first} seeds: give {first} or more")
    return [*range(first, max_seeds, step), max_seeds]


def look_alpha(looks: list[int], alpha: float = 0.05) -> float:
    """The level each look tests at so that the chance of any false verdict over all ``looks`` stays at
    most ``alpha``: ``alpha / len(looks)`` (Bonferroni over the looks; valid however the looks'
    statistics are correlated, and more conservative than a Pocock or O'Brien-Fleming design)."""
    return alpha / len(looks)
