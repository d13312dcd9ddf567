"""The learning-rate grid: widening past an edge an arm's best sits on (``--lr-widen``), and its bookkeeping."""

import json
import math

import pytest

import compare
from experiment.ab import cli as ab_cli
from core.errors import UserError
from experiment.runs import launch
from experiment.ab import run as ab_run
from experiment.runs.plan import Plan
from experiment.runs.plan import best_lr, next_rates
from experiment.runs.record import ONE_SEED, lr_grid_refusals

GRID = [2e-3, 4e-3, 8e-3]


@pytest.mark.parametrize(
    "scores, widen, expected",
    [
        ({2e-3: 3.0, 4e-3: 2.0, 8e-3: 2.5}, 2, []),  # best inside the grid: nothing to add
        ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0}, 1, [1.6e-2]),  # best on the top edge: one step up, the grid's ratio
        ({2e-3: 2.0, 4e-3: 2.5, 8e-3: 3.0}, 1, [1e-3]),  # best on the bottom edge: one step down
        ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.1, 1.6e-2: 2.0}, 1, []),  # still on the edge, but the one allowed step is used
        ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.1, 1.6e-2: 2.0}, 2, [3.2e-2]),  # ... a second one allowed
        (
            {2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0, 1.6e-2: math.inf},
            3,
            [],
        ),  # the step past it diverged: best no longer on the edge
        ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0}, 0, []),  # --lr-widen 0: the grid as given
    ],
)
def test_next_rates_step_past_the_edge_the_best_sits_on(scores, widen, expected):
    """One grid step past an edge holding the best, at most ``widen`` a side; never past a failed rate."""
    assert next_rates(GRID, scores, widen) == pytest.approx(expected)


def test_a_one_point_grid_widens_both_ways_by_a_factor_of_two():
    """With one rate its best is both edges: try half and double."""
    assert sorted(next_rates([1e-3], {1e-3: 2.0}, 1)) == pytest.approx([5e-4, 2e-3])


def test_best_rate_ignores_failures_and_refuses_when_all_failed():
    """The best is the lowest finite score (ties: the smaller rate); an arm with none is a one-line error."""
    assert best_lr("tied", {1e-3: 2.0, 2e-3: 2.0, 4e-3: math.inf}) == 1e-3
    with pytest.raises(UserError, match="every grid learning rate failed for the untied arm"):
        best_lr("untied", {1e-3: math.inf})


def test_lr_widen_may_rise_but_not_fall():
    """An experiment tuned with --lr-widen 1 continues with 2 (more points past an edge) but not with 0."""
    assert lr_grid_refusals(GRID, GRID, 1, 2) == []
    assert lr_grid_refusals(GRID, GRID, 1, 0) == ["lr_widen (it may rise but not fall below 1)"]


def test_lr_widen_without_a_grid_is_refused(capsys):
    """--lr-widen means nothing without --lr-grid: a one-line error, exit 2."""
    assert compare.main(["--config", "configs/debug.toml", "--lr-widen", "1"]) == 2
    assert "--lr-widen 1 needs --lr-grid" in capsys.readouterr().err


def test_a_step_too_small_to_change_the_rate_is_not_taken():
    """Two grid ends equal to 6 digits after one step: the step would give a rate already tried, so none."""
    assert next_rates([0.00999999, 0.01], {0.00999999: 3.0, 0.01: 2.0}, 5) == []


@pytest.fixture
def fake_experiment(tmp_path, monkeypatch):
    """``make(widen, fail_above=inf, on_run=None) -> Plan`` for a tiny char experiment whose runs are faked:
    each writes summary.json with loss 2 + ln(lr / 0.02)^2 (optimum 0.02), or fails above ``fail_above``."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be: that is the question.\n" * 300)
    state = {"fail_above": math.inf, "on_run": None}

    def fake_run_arm(base_argv, out_dir, name, extra, resume_argv, train_py=launch.TRAIN_PY):
        lr = float(next(a for a in extra if a.startswith("--train.learning_rate=")).split("=")[1])
        if lr > state["fail_above"]:
            raise UserError(f"training {name} failed (diverged)")
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        (out_dir / name / "summary.json").write_text(json.dumps({"final_val_loss": 2 + math.log(lr / 0.02) ** 2}))
        make.trained.append(name)
        if state["on_run"]:
            state["on_run"](out_dir)
        return out_dir / name

    monkeypatch.setattr(launch, "run_arm", fake_run_arm)

    def make(widen, fail_above=math.inf, on_run=None):
        state.update(fail_above=fail_above, on_run=on_run)
        args, overrides = ab_cli.parse_args(
            [
                "--config",
                "configs/debug.toml",
                "--seeds",
                "1",
                "--name",
                "exp",
                f"--data.source={corpus}",
                "--data.tokenizer=char",
                f"--data.cache_dir={tmp_path / 'cache'}",
                f"--train.out_dir={tmp_path}",
                "--lr-grid",
                "2e-3,4e-3,8e-3",
            ]
        )
        return Plan(
            config=args.config,
            overrides=overrides,
            arms=args.arms,
            seeds=1,
            lr_grid=args.lr_grid,
            name="exp",
            lr_widen=widen,
            lr_tuning=ONE_SEED,
        )

    make.trained = []  # run names, in the order they were trained
    return make


def test_compare_trains_past_the_edge_and_reports_at_the_new_best(fake_experiment, tmp_path):
    """With the optimum at 0.02, above a 2e-3..8e-3 grid, --lr-widen 2 trains 1.6e-2 and 3.2e-2 for every arm,
    picks 1.6e-2 (now inside what was tried) and trains the reported seeds there; experiment.json records it."""
    plan = fake_experiment(widen=2)
    paths, tuning, out_dir = ab_run.run_experiment(plan)
    for arm in ("tied", "untied"):
        assert [n for n in fake_experiment.trained if n.startswith(f"tune-{arm}-")] == [
            f"tune-{arm}-lr{lr}" for lr in ("0.002", "0.004", "0.008", "0.016", "0.032")
        ]
    assert [p.name for p in paths] == ["tied-lr0.016-s0", "untied-lr0.016-s0"] and len(tuning) == 10
    assert json.loads((out_dir / "experiment.json").read_text())["lr_widen"] == 2
    fake_experiment.trained.clear()
    ab_run.run_experiment(plan)  # a rerun makes the same decisions from the same scores
    assert (
        fake_experiment.trained[-2:] == ["tied-lr0.016-s0", "untied-lr0.016-s0"] and len(fake_experiment.trained) == 12
    )


def test_a_diverged_rate_past_the_edge_ends_the_widening(fake_experiment):
    """1.6e-2 fails: it counts as no result, the best stays 8e-3, and nothing past 1.6e-2 is tried."""
    paths, tuning, _ = ab_run.run_experiment(fake_experiment(widen=3, fail_above=1e-2))
    assert [p.name for p in paths] == ["tied-lr0.008-s0", "untied-lr0.008-s0"]
    assert sorted(p.name for p in tuning) == sorted(
        f"tune-{a}-lr{lr}" for a in ("tied", "untied") for lr in ("0.002", "0.004", "0.008")
    )


def test_an_older_experiment_without_lr_widen_continues_but_lr_widen_cannot_fall(fake_experiment, tmp_path):
    """experiment.json from before --lr-widen (no key) reads as 0, so the same command goes on and a
    larger N is accepted; going back to a smaller N is refused before any training."""
    ab_run.run_experiment(fake_experiment(widen=0))
    saved = tmp_path / "exp" / "experiment.json"
    settings = json.loads(saved.read_text())
    del settings["lr_widen"]
    saved.write_text(json.dumps(settings))
    ab_run.run_experiment(fake_experiment(widen=0))
    ab_run.run_experiment(fake_experiment(widen=1))
    with pytest.raises(UserError, match=r"lr_widen \(it may rise but not fall below 1\)"):
        ab_run.run_experiment(fake_experiment(widen=0))


def test_settings_changed_by_another_process_during_tuning_stop_the_reported_runs(fake_experiment):
    """Another compare.py that widens the folder's settings while this one tunes: this one stops before
    training reported runs at a best rate the other may not share."""

    def widen_elsewhere(out_dir):
        settings = json.loads((out_dir / "experiment.json").read_text())
        settings["lr_widen"] = 2
        (out_dir / "experiment.json").write_text(json.dumps(settings))

    with pytest.raises(UserError, match="another compare.py changed"):
        ab_run.run_experiment(fake_experiment(widen=0, on_run=widen_elsewhere))
