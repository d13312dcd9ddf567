"""A/A tests: arms whose true difference is zero, run through the project's own verdict functions.

Each test simulates many experiments (numpy, seeded, seconds) with noise of the committed budget record's
size (seed-to-seed sd of a final loss about 0.01, a seed effect shared by the arms and across rates) and
counts how often a verdict says better or worse.  A calibrated design keeps that at the 5% it claims, up to
the binomial wobble of the simulation (:func:`ceiling`).  The one design that is not calibrated (rates
picked on one tuning seed) is shown to miss it, and every verdict it gives is labelled so.  The table these
tests reproduce is in docs/experiment.md ("What α means here").

Run: ``python -m pytest -q tests/test_aa.py`` (CPU, offline, under a minute).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from statsmodels.stats.proportion import proportion_confint

from experiment import best, stats
from experiment.budget import readout as budget_readout
from experiment.ab import readout
from experiment.budget.readout import Score
from experiment.runs.folders import Experiment

ALPHA = 0.05
SD = 0.01  # per-seed noise of one run's final loss, nats (the budget record: 0.005-0.02)
SEED_SD = 0.03  # the seed's own effect, shared by every arm and rate (what pairing removes)
NOISES = ("normal", "t3")


def ceiling(rate: float, n: int) -> float:
    """The most a calibrated design's observed false-verdict rate may reach over ``n`` simulated experiments:
    ``rate`` plus 3 binomial standard errors (a test that fails by chance about once in 700 runs)."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / n)


def noise(rng: np.random.Generator, kind: str, size) -> np.ndarray:
    """Noise of sd :data:`SD`: normal, or Student t with 3 df scaled to the same sd (heavy tails)."""
    if kind == "normal":
        return rng.normal(0.0, SD, size)
    return rng.standard_t(3, size) * SD / math.sqrt(3.0)


def null_runs(rng: np.random.Generator, kind: str, arms: int, seeds: int, shift: float = 0.0) -> np.ndarray:
    """``(arms, seeds)`` final losses with no true difference between arms (``shift`` added to arms 1..)."""
    base = 3.0 + rng.normal(0.0, SEED_SD, seeds)
    values = base + noise(rng, kind, (arms, seeds))
    values[1:] += shift
    return values


def false_rate(verdicts: list[list[str]], design: str = "") -> float:
    """The share of experiments in which any verdict is better or worse; printed with its 95% Wilson interval
    under ``design`` (``pytest -s`` shows the A/A table of docs/experiment.md)."""
    rate = float(np.mean([any(v in ("better", "worse") for v in vs) for vs in verdicts]))
    if design:
        low, high = proportion_confint(round(rate * len(verdicts)), len(verdicts), method="wilson")
        print(f"\nA/A | {design} | {len(verdicts)} experiments | {rate:.1%} [{low:.1%}, {high:.1%}]")
    return rate


def one_rate(values: np.ndarray, alpha: float = ALPHA, margin: float = 0.01) -> list[str]:
    """The verdicts of the ordinary report at one rate: each arm against arm 0, paired t, Holm over the arms."""
    comps = [
        stats.compare_paired(f"a{i}", "ref", values[i], values[0], margin, descriptive=False)
        for i in range(1, len(values))
    ]
    return [c.verdict for c in stats.holm(comps, alpha)]


@pytest.mark.parametrize("kind", NOISES)
@pytest.mark.parametrize("seeds", [3, 5, 8])
def test_two_arms_at_one_rate_are_called_different_at_most_5_percent_of_the_time(kind, seeds):
    """Two arms, one rate, 3-8 paired seeds: false better/worse at or below 5%."""
    rng, n = np.random.default_rng(seeds), 1000
    rate = false_rate(
        [one_rate(null_runs(rng, kind, 2, seeds)) for _ in range(n)], f"one rate, 2 arms, {seeds} seeds, {kind}"
    )
    assert rate <= ceiling(ALPHA, n), rate


@pytest.mark.parametrize("kind", ["normal"])  # t noise ran lower in every other design; this one is the dearest
def test_five_arms_with_holm_stay_at_5_percent_for_the_whole_report(kind):
    """Five arms against one reference over 5 seeds: any false better/worse in a report at or below 5% (Holm)."""
    rng, n = np.random.default_rng(5), 1000
    rate = false_rate(
        [one_rate(null_runs(rng, kind, 5, 5)) for _ in range(n)], f"one rate, 5 arms, Holm, 5 seeds, {kind}"
    )
    assert rate <= ceiling(ALPHA, n), rate


@pytest.mark.parametrize("kind", NOISES)
def test_seeds_auto_stays_at_5_percent_over_all_its_looks(kind):
    """--seeds auto up to 9: looks at 3, 5, 7, 9 seeds, each at 0.05 / 4, stopping at the first decided look:
    a false better/worse at any look at or below 5% (the seeds of a later look include the earlier ones)."""
    rng, n = np.random.default_rng(9), 1000
    looks = stats.sequential_looks(9)
    alpha = stats.look_alpha(looks)
    verdicts = []
    for _ in range(n):
        values = null_runs(rng, kind, 2, looks[-1])
        for k in looks:
            found = one_rate(values[:, :k], alpha)
            if "inconclusive" not in found:
                break
        verdicts.append(found)
    assert false_rate(verdicts, f"--seeds auto, looks 3-5-7-9, {kind}") <= ceiling(ALPHA, n)


def test_seeds_added_by_hand_count_the_first_look_and_label_the_rest():
    """Manual growth 3 -> 5 -> 7 -> 9 seeds: the first look is an ordinary experiment (calibrated, at 5%); any
    later look re-tests data a verdict was read on, so it is labelled not calibrated, whatever its level.  The
    calibrated verdicts, the first look's, stay at 5%."""
    rng, n = np.random.default_rng(11), 1000
    first = [one_rate(null_runs(rng, "normal", 2, 9)[:, :3]) for _ in range(n)]
    assert false_rate(first, "seeds added by hand: the first look (calibrated), normal") <= ceiling(ALPHA, n)
    exp = Experiment(runs={}, seeds=[], reference="tied", margin=0.01, looks={"looks": [3, 5], "declared": False})
    assert readout.not_calibrated(exp)[0].startswith("seeds added after a verdict was read at 3 seeds")


@pytest.mark.parametrize("kind", NOISES)
def test_an_arm_exactly_at_the_margin_is_called_equivalent_at_most_5_percent_of_the_time(kind):
    """True difference = +margin: 'equivalent' (TOST) at or below 5% over 5 seeds."""
    rng, n, margin = np.random.default_rng(13), 1000, 0.01
    found = [one_rate(null_runs(rng, kind, 2, 5, shift=margin), margin=margin) for _ in range(n)]
    rate = float(np.mean([v == ["equivalent"] for v in found]))
    print(f"\nA/A | 'equivalent' with the true difference at +margin, 5 seeds, {kind} | {n} experiments | {rate:.1%}")
    assert rate <= ceiling(ALPHA, n), rate


RATES = [1e-3, 2e-3, 4e-3]
CURVE = {1e-3: 0.02, 2e-3: 0.0, 4e-3: 0.015}  # the loss above the best, by rate: the same for both arms


def tuned_scores(rng: np.random.Generator, kind: str, seeds: int, budget: str = "1M") -> list[Score]:
    """Every arm at every rate on every seed, true curves identical: the budget design's scores."""
    base = 1.5 + rng.normal(0.0, SEED_SD, seeds)
    rate_effect = {lr: rng.normal(0.0, SD / 2, seeds) for lr in RATES}  # a seed's effect differs a little by rate
    return [
        Score(
            budget=budget,
            tokens=1,
            arm=arm,
            lr=lr,
            seed=s,
            bpb=float(base[s] + CURVE[lr] + rate_effect[lr][s] + noise(rng, kind, 1)[0]),
            params=1,
            train_tokens=1,
        )
        for arm in ("tied", "untied")
        for lr in RATES
        for s in range(seeds)
    ]


@pytest.mark.parametrize("kind", NOISES)
def test_best_against_best_over_every_seed_stays_at_5_percent(kind):
    """Each arm at its fitted best over every seed (the --budgets design, leave-one-seed-out interval, Holm
    over 3 budgets): any false better/worse across the budgets at or below 5%."""
    rng, n = np.random.default_rng(17), 300
    verdicts = []
    for _ in range(n):
        results = [
            budget_readout.best_vs_best(tuned_scores(rng, kind, 6, b), "untied", "tied", 0.01) for b in ("a", "b", "c")
        ]
        verdicts.append([r.verdict for r in best.holm_verdicts(results)])
    assert false_rate(verdicts, f"best against best, every rate on 6 seeds, 3 budgets, Holm, {kind}") <= ceiling(
        ALPHA, n
    )


@pytest.mark.parametrize("kind", NOISES)
def test_an_ordinary_lr_grid_read_best_against_best_stays_at_5_percent(kind):
    """--lr-grid's default: every rate on the same 5 seeds as the one-seed pick below, one reading, two arms,
    through experiment.best as readout.best_comparisons runs it: false better/worse at or below 5%."""
    rng, n = np.random.default_rng(23), 400
    verdicts = []
    for _ in range(n):
        table = budget_readout.table_of(tuned_scores(rng, kind, 5))
        verdicts.append([r.verdict for r in best.holm_verdicts([best.best_vs_best(table, "untied", "tied", 0.01)])])
    assert false_rate(verdicts, f"--lr-grid best against best, every rate on 5 seeds, {kind}") <= ceiling(ALPHA, n)


def test_rates_picked_on_one_seed_miss_5_percent_which_is_why_they_are_labelled():
    """Each arm's rate picked on one tuning seed, then 5 reported seeds compared at the picks: false better or
    worse well above 5% (the picks differ by chance, and so do the rates' losses), so such verdicts carry the
    'not calibrated' label in every report and verdict.json."""
    rng, n = np.random.default_rng(19), 1000
    verdicts = []
    for _ in range(n):
        scores = tuned_scores(rng, "normal", 6)
        by = {(x.arm, x.lr, x.seed): x.bpb for x in scores}
        picks = {arm: min(RATES, key=lambda lr: by[(arm, lr, 5)]) for arm in ("tied", "untied")}  # seed 5 tunes
        values = np.array([[by[(arm, picks[arm], s)] for s in range(5)] for arm in ("tied", "untied")])
        verdicts.append(one_rate(values))
    assert false_rate(verdicts, "rates picked on one seed, 5 seeds, normal (labelled not calibrated)") > ceiling(
        ALPHA, n
    )
    exp = Experiment(runs={}, seeds=[], reference="tied", margin=0.01, tuning={"tied": ["a run"]})
    assert readout.not_calibrated(exp) == [readout.ONE_SEED_TUNING]
