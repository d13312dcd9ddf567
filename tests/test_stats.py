"""The paired multi-arm statistics (experiment/stats.py): verdicts, p-values, Holm, seeds needed.

Run: ``python -m pytest -q tests/test_stats.py``  (CPU, offline, about a second).  The losses are
written by hand (no randomness): a reference arm's final val losses per seed, in nats/token, and
an arm built from them by adding known per-seed differences.
"""

import dataclasses
import math

import numpy as np

import pytest

from core.errors import UserError
from experiment import stats
from experiment.stats import Comparison, SeedsFigure, compare_paired, compute_equivalent, holm, seeds_figure, seeds_for

REF5 = [3.50, 3.52, 3.48, 3.51, 3.49]
REF10 = REF5 + [3.47, 3.53, 3.50, 3.46, 3.54]
CLEAR = [0.10, 0.11, 0.09, 0.10, 0.12]  # a large, consistent difference (nats/token)


def paired(diffs, ref):
    """The arm's losses: the reference's plus ``diffs``, seed by seed."""
    return [r + d for r, d in zip(ref, diffs)]


def test_clear_improvement_over_five_seeds_is_better():
    """Every seed 0.09-0.12 nats lower: verdict better, the whole CI below 0, perplexity ratio < 1."""
    c = compare_paired("untied", "tied", paired([-d for d in CLEAR], REF5), REF5, margin=0.02)
    assert c.verdict == "better" and c.seeds_needed is None
    assert c.ci[0] < c.ci[1] < 0
    assert c.ppl_ratio < 1 and c.ppl_ratio == pytest.approx(math.exp(c.mean))
    assert c.mean == pytest.approx(-0.104) and c.d_z < 0 and c.p_holm == c.p_t < 0.05


def test_clear_regression_over_five_seeds_is_worse():
    """Every seed 0.09-0.12 nats higher: verdict worse, the whole CI above 0, perplexity ratio > 1."""
    c = compare_paired("untied", "tied", paired(CLEAR, REF5), REF5, margin=0.02)
    assert c.verdict == "worse" and c.seeds_needed is None
    assert 0 < c.ci[0] < c.ci[1]
    assert c.ppl_ratio > 1


def test_tiny_noisy_differences_inside_the_margin_are_equivalent():
    """Ten seeds differing by at most 0.004 nats around 0, margin 0.05: not different, TOST shows equivalence."""
    diffs = [0.003, -0.002, 0.001, -0.004, 0.002, 0.004, -0.001, -0.003, 0.002, -0.001]
    c = compare_paired("untied", "tied", paired(diffs, REF10), REF10, margin=0.05)
    assert c.p_t > 0.05 and c.p_tost < 0.05
    assert c.verdict == "equivalent" and c.seeds_needed is None


def test_three_noisy_seeds_near_the_margin_are_inconclusive_with_seeds_needed():
    """Three seeds, mean 0.05 = the margin, sd 0.026: neither shown; seeds_needed is a figure above 3 seeds
    whose range spans the spread's uncertainty on 2 degrees of freedom."""
    c = compare_paired("untied", "tied", paired([0.02, 0.07, 0.06], REF5[:3]), REF5[:3], margin=0.05)
    assert c.p_t > 0.05 and c.p_tost > 0.05
    assert c.verdict == "inconclusive"
    fig = c.seeds_needed
    assert isinstance(fig, SeedsFigure) and fig.seeds > 3 and fig.df == 2 and fig.low < fig.seeds < fig.high


def test_sign_test_for_five_of_five_negative_diffs_is_exact_binomial():
    """5 of 5 seeds lower: the exact two-sided sign test p is 2 * 0.5**5 (and so is exact Wilcoxon's)."""
    c = compare_paired("untied", "tied", paired([-d for d in CLEAR], REF5), REF5, margin=0.02)
    assert c.p_sign == pytest.approx(2 * 0.5**5)
    assert c.p_wilcoxon == pytest.approx(2 * 0.5**5)


def test_holm_makes_a_lone_significant_p_non_significant_and_changes_the_verdict():
    """p_t 0.013 is 'better' alone; Holm over 4 comparisons raises it above 0.05: now inconclusive."""
    weak = compare_paired("a", "ref", paired([-0.01, -0.05, -0.02, -0.04, -0.03], REF5), REF5, 0.02)
    assert weak.verdict == "better" and weak.p_t < 0.05
    noise = [[0.01, -0.02, 0.03, -0.01, 0.02], [0.02, -0.01, 0.005, -0.03, 0.015], [-0.02, 0.03, 0.01, -0.01, 0.005]]
    others = [compare_paired(f"b{i}", "ref", paired(d, REF5), REF5, 0.02) for i, d in enumerate(noise)]
    adjusted = holm([weak] + others)
    a = adjusted[0]
    assert a.p_holm > 0.05 and a.p_holm == pytest.approx(4 * weak.p_t)
    assert a.verdict == "inconclusive"
    assert a.seeds_needed.seeds > len(a.diffs)
    assert a.seeds_needed.seeds == seeds_for(0.02, a.sd, 0.05 / 4)  # planned at Holm's strictest step


def test_holm_returns_new_objects_and_leaves_its_inputs_alone():
    """holm() replaces p_holm/verdict on copies; the Comparisons passed in keep p_holm == p_t."""
    comps = [
        compare_paired(f"a{i}", "ref", paired([-0.01, -0.05, -0.02, -0.04, -0.03], REF5), REF5, 0.02) for i in range(3)
    ]
    before = [dataclasses.asdict(c) for c in comps]
    adjusted = holm(comps)
    assert [dataclasses.asdict(c) for c in comps] == before
    assert all(isinstance(c, Comparison) and c is not o for c, o in zip(adjusted, comps))
    assert adjusted[0].p_holm > adjusted[0].p_t


def test_holm_counts_a_single_seed_comparison_as_p_one():
    """A 1-seed comparison (p_t nan) counts as p 1.0 in Holm and stays inconclusive with no estimate."""
    single = compare_paired("a", "ref", [3.4], [3.5], 0.02)
    assert math.isnan(single.p_t) and single.verdict == "inconclusive" and single.seeds_needed is None
    clear = compare_paired("b", "ref", paired([-d for d in CLEAR], REF5), REF5, 0.02)
    one, two = holm([single, clear])
    assert one.p_holm == 1.0 and one.verdict == "inconclusive" and one.seeds_needed is None
    assert two.p_holm == pytest.approx(2 * clear.p_t) and two.verdict == "better"


def test_identical_shift_on_every_seed_is_handled_without_nan():
    """Every seed exactly 0.5 lower (sd 0): p_t 0, CI (mean, mean), better; d_z nan; all zeros give p 1."""
    ref = [3.5, 3.25, 3.0]
    c = compare_paired("a", "ref", [r - 0.5 for r in ref], ref, 0.02)
    assert c.sd == 0.0 and c.p_t == 0.0 and c.ci == (c.mean, c.mean) and c.verdict == "better"
    assert math.isnan(c.d_z)
    same = compare_paired("a", "ref", ref, ref, 0.02)
    assert same.p_t == 1.0 and same.p_wilcoxon is None and same.p_sign == 1.0
    assert same.verdict == "equivalent"


@pytest.mark.parametrize(
    "diffs", [[0.004, -0.003, 0.006, 0.001, -0.002], [0.015, 0.021, 0.009, 0.018, 0.012], [0.01, -0.01, 0.03]]
)
def test_the_90_percent_interval_inside_the_margin_is_the_tost_verdict(diffs):
    """ci90 lies inside ±margin exactly when statsmodels' TOST p < 0.05 (Schuirmann 1987), and it sits inside
    the 95% interval (scipy's ttest_rel intervals at both levels); one seed has no interval."""
    c = compare_paired("a", "ref", paired(diffs, REF5), REF5[: len(diffs)], 0.02)
    low, high = c.ci90
    assert (-0.02 < low and high < 0.02) == (c.p_tost < 0.05)
    assert c.ci[0] < low < high < c.ci[1]
    assert all(math.isnan(v) for v in compare_paired("a", "ref", [3.1], [3.0], 0.02).ci90)


def test_the_seeds_figure_is_the_power_at_the_margin_with_the_spreads_interval():
    """sd 0.026 over 5 seeds, margin 0.02: the point is seeds_for at the observed sd; the range is seeds_for at
    the ends of the sd's 95% chi-square interval on 4 df (sd × 0.599 and × 2.87); a zero or nan spread: None."""
    fig = seeds_figure(0.026, 5, 0.02)
    assert fig.seeds == seeds_for(0.02, 0.026) and fig.df == 4 and not fig.too_small
    assert fig.low == seeds_for(0.02, 0.026 * 0.5991, max_n=1000)
    assert fig.high == seeds_for(0.02, 0.026 * 2.8735, max_n=1000)
    assert seeds_figure(0.0, 5, 0.02) is None and seeds_figure(float("nan"), 5, 0.02) is None


def test_compute_equivalent_interpolates_between_bracketing_evals():
    """Curve 4.0, 3.6, 3.2, 3.0 at steps 100..400 reaches 3.4 halfway from 200 to 300: 250/400."""
    assert compute_equivalent(3.4, [100, 200, 300, 400], [4.0, 3.6, 3.2, 3.0]) == pytest.approx(0.625)
    assert compute_equivalent(3.0, [100, 200, 300, 400], [4.0, 3.6, 3.2, 3.0]) == pytest.approx(1.0)


def test_compute_equivalent_is_none_when_the_curve_never_reaches_the_target():
    """An arm whose best val loss (3.2) stays above the reference's final (3.1) has no equivalent step."""
    assert compute_equivalent(3.1, [100, 200, 300, 400], [4.0, 3.6, 3.2, 3.2]) is None


@pytest.mark.parametrize(
    "arm_values, ref_values, margin, words",
    [
        ([3.4, 3.5], [3.5, 3.6, 3.7], 0.02, "seeds"),  # unequal lengths
        ([], [], 0.02, "no seeds"),  # empty
        ([3.4, float("nan")], [3.5, 3.6], 0.02, "non-finite"),  # NaN loss
        ([3.4, 3.5], [3.5, 3.6], 0.0, "margin"),  # margin 0
    ],
)
def test_bad_input_raises_user_error(arm_values, ref_values, margin, words):
    """Unequal lengths, no seeds, NaN or margin <= 0 raise UserError with a one-line message naming it."""
    with pytest.raises(UserError, match=words) as info:
        compare_paired("untied", "tied", arm_values, ref_values, margin)
    assert "\n" not in str(info.value) and ":" in str(info.value)


def test_compute_equivalent_rejects_mismatched_or_unsorted_steps():
    """compute_equivalent raises UserError for a loss count unlike the step count or steps out of order."""
    with pytest.raises(UserError):
        compute_equivalent(3.0, [100, 200], [3.5])
    with pytest.raises(UserError):
        compute_equivalent(3.0, [200, 100], [3.5, 3.0])


def test_the_detectable_difference_is_the_t_test_power_effect_times_the_spread():
    """5 paired seeds, 80% power, 5% two-sided: 1.682 sd (statsmodels' TTestPower); doubling sd doubles it."""
    assert stats.detectable_difference(0.01, 5) == pytest.approx(0.016820, rel=1e-3)
    assert stats.detectable_difference(0.02, 5) == pytest.approx(2 * stats.detectable_difference(0.01, 5))
    assert stats.detectable_difference(0.01, 1) is None and stats.detectable_difference(0.0, 5) is None


def test_seeds_for_a_difference_is_the_fewest_that_detect_it():
    """seeds_for(d, sd) = n with detectable(n) <= d < detectable(n - 1); None past max_n or for sd 0."""
    n = stats.seeds_for(0.01, 0.012)
    assert stats.detectable_difference(0.012, n) <= 0.01 < stats.detectable_difference(0.012, n - 1)
    assert stats.seeds_for(0.01, 1.0, max_n=50) is None and stats.seeds_for(0.01, 0.0) is None
    assert stats.seeds_for(0.01, 0.0001) == 2


def test_holm_with_a_declared_family_counts_the_comparisons_not_made_yet_as_p_one():
    """p_t 0.013 alone in a declared family of 4: p_holm is 4 p_t (> 0.05), as it would be beside three
    comparisons with p 1, so the verdict is inconclusive, not better."""
    weak = compare_paired("a", "ref", paired([-0.01, -0.05, -0.02, -0.04, -0.03], REF5), REF5, 0.02)
    (alone,) = holm([weak], family=4)
    assert alone.p_holm == pytest.approx(4 * weak.p_t) and alone.verdict == "inconclusive"


def test_holm_adjust_gives_statsmodels_numbers():
    """holm_adjust equals statsmodels' multipletests(method='holm') on p-values with ties, ones and tiny values,
    in the order given."""
    from statsmodels.stats.multitest import multipletests

    from experiment.stats import holm_adjust

    rng = np.random.default_rng(0)
    for p in ([0.01, 0.04, 0.03, 0.005], [0.2, 0.2, 1.0, 0.001, 0.049], list(rng.uniform(0, 0.1, 9)), [0.3]):
        assert np.allclose(holm_adjust(p), multipletests(p, method="holm")[1], rtol=0, atol=1e-12), p


def test_missed_runs_bar_the_verdicts_the_pairing_would_favour():
    """A seed the arm alone missed bars better (its worst seed left the pairing), one the reference alone missed
    bars worse, and any miss bars equivalence; both missing on a seed bars equivalence only.  A barred verdict
    reads inconclusive, from compare_paired and again after Holm."""
    assert stats.barred_by_misses({3}, set()) == ("better", "equivalent")
    assert stats.barred_by_misses(set(), {3}) == ("worse", "equivalent")
    assert stats.barred_by_misses({3}, {3}) == ("equivalent",)
    assert stats.barred_by_misses(set(), set()) == ()
    arm, ref = [2.0, 2.01, 1.99, 2.0], [3.0, 3.0, 3.01, 2.99]
    assert stats.compare_paired("a", "r", arm, ref, 0.05).verdict == "better"
    c = stats.compare_paired("a", "r", arm, ref, 0.05, barred=("better", "equivalent"))
    assert c.verdict == "inconclusive" and stats.holm([c])[0].verdict == "inconclusive"
    near = [3.001, 2.999, 3.011, 2.9885]  # within ±0.002 of ref, either way
    assert stats.compare_paired("a", "r", ref, near, 0.05).verdict == "equivalent"
    assert stats.compare_paired("a", "r", ref, near, 0.05, barred=("equivalent",)).verdict == "inconclusive"
