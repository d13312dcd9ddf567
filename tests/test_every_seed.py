"""--lr-grid's calibrated design: every arm trains every rate on every seed and the verdict reads each arm's
fitted best against the reference's (experiment.best), as the budget axis does.

Run: ``python -m pytest -q tests/test_every_seed.py``  (CPU; the end-to-end test is ``slow``).
"""

import json

import numpy as np
import pytest
from fake_runs import arm_run
from helpers import error_line, tiny_compare_args

import compare
from core.errors import UserError
from experiment import best
from experiment.ab import readout
from experiment.runs import folders

RATES = (1e-3, 2e-3, 4e-3)


def swept_runs(root, curve, seeds=3, arms=("tied", "untied"), skip=()):
    """Fake finished runs of every arm at every rate on every seed: final val loss ``curve[arm](lr) + seed noise``."""
    noise = np.random.default_rng(0).normal(0, 0.01, size=seeds)
    return [
        arm_run(root, arm, s, curve[arm](lr) + noise[s], name=f"{arm}-lr{lr:g}-s{s}", train__learning_rate=lr)
        for arm in arms
        for lr in RATES
        for s in range(seeds)
        if (arm, lr) not in skip
    ]


def bowl(low: float, at: float):
    """A loss curve with its minimum ``low`` at rate ``at``, a parabola in log10 rate."""
    return lambda lr: low + 0.5 * (np.log10(lr) - np.log10(at)) ** 2


def test_runs_at_several_rates_are_read_best_against_best(tmp_path):
    """An arm with runs at several rates (no tune-* runs) is an every-seed experiment: the verdict is
    experiment.best's on the table of every run, the shown runs are each arm's lowest mean, and it is calibrated."""
    paths = swept_runs(tmp_path, {"tied": bowl(3.0, 2e-3), "untied": bowl(2.9, 2e-3)})
    exp = folders.check_experiment(folders.load_runs(paths), "tied", 0.01)
    assert set(exp.swept["untied"]) == set(RATES) and exp.seeds == [0, 1, 2]
    assert {r.learning_rate for r in exp.runs["untied"]} == {2e-3}
    (b,) = readout.best_comparisons(exp)
    want = best.best_vs_best(readout.best_table(exp), "untied", "tied", 0.01)
    assert b.delta == pytest.approx(want.delta) and b.ci == pytest.approx(want.ci)
    assert b.delta == pytest.approx(-0.1, abs=1e-6) and b.verdict == "better"
    record = readout.verdict_record(exp, True)
    assert record["calibrated"] and record["lr_tuning"] == "every-seed"
    assert record["comparisons"][0]["verdict"] == "better" and set(record["values"]["untied"]) == {
        "0.001",
        "0.002",
        "0.004",
    }


def test_a_best_at_the_grid_edge_is_not_read(tmp_path):
    """Where an arm's lowest mean sits on the grid's first or last rate, its verdict is "not read", never better."""
    paths = swept_runs(tmp_path, {"tied": bowl(3.0, 2e-3), "untied": bowl(2.9, 8e-3)})
    (b,) = readout.best_comparisons(folders.check_experiment(folders.load_runs(paths), "tied", 0.01))
    assert b.verdict == best.EDGE


def test_an_arm_missing_a_rate_is_refused(tmp_path):
    """Every arm trains every rate: a missing (arm, rate) names itself and the fix."""
    paths = swept_runs(tmp_path, {"tied": bowl(3.0, 2e-3), "untied": bowl(2.9, 2e-3)}, skip={("untied", 4e-3)})
    with pytest.raises(UserError, match="no run of untied at lr 0.004"):
        folders.check_experiment(folders.load_runs(paths), "tied", 0.01)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--lr-widen", "1"], "--lr-widen does not go with --lr-grid's every-seed design"),
        (["--seeds", "auto", "--max-seeds", "5"], "--seeds auto does not go with"),
    ],
)
def test_what_the_every_seed_design_cannot_take_is_refused_before_training(tmp_path, capsys, extra, words):
    """Options that read a one-seed pick, or a design of their own, are one error line, exit 2, nothing trained."""
    argv = [*tiny_compare_args(tmp_path, 6), "--lr-grid", "1e-3,2e-3", *extra]
    assert compare.main(argv) == 2
    assert words in error_line(capsys)
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_compare_trains_every_rate_on_every_seed_and_gates_on_it(tmp_path):
    """--lr-grid 1e-3,4e-3 --seeds 2: 8 runs named <arm>-lr<lr>-s<i>, no tuning seed; experiment.json declares the
    design; the report reads best against best, calibrated, and --fail-on gates on it (exit 0 or 1, not 2)."""
    argv = [*tiny_compare_args(tmp_path), "--seeds", "2", "--lr-grid", "1e-3,4e-3", "--fail-on", "worse"]
    assert compare.main(argv) in (0, 1)
    exp = tmp_path / "exp"
    folders = {p.name for p in exp.iterdir() if p.is_dir() and p.name != ".claims"}
    assert folders == {f"{a}-lr{lr}-s{i}" for a in ("tied", "untied") for lr in ("0.001", "0.004") for i in (0, 1)}
    assert json.loads((exp / "experiment.json").read_text())["lr_tuning"] == "every-seed"
    verdict = json.loads((exp / "verdict.json").read_text())
    assert verdict["calibrated"] and verdict["comparisons"][0]["readout"] == "best against best"
    md = (exp / "report.md").read_text()
    assert "untied vs tied (reference): **" in md and "Every arm trained every rate on every seed" in md
    assert md.count("learning rate 0.004)") == 4  # the runs section lists every run, each rate's
    assert compare.main([*argv, "--lr-tuning", "one-seed"]) == 2  # the design was declared
