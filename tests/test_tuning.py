"""The learning-rate grid: widening past an edge an arm's best sits on (``--lr-widen``), and its bookkeeping."""

import json
import math

import pytest

import compare
from core.errors import UserError
from experiment import runner
from experiment.tuning import best_lr, lr_grid_refusals, next_rates

GRID = [2e-3, 4e-3, 8e-3]


@pytest.mark.parametrize("scores, widen, expected", [
    ({2e-3: 3.0, 4e-3: 2.0, 8e-3: 2.5}, 2, []),  # best inside the grid: nothing to add
    ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0}, 1, [1.6e-2]),  # best on the top edge: one step up, the grid's ratio
    ({2e-3: 2.0, 4e-3: 2.5, 8e-3: 3.0}, 1, [1e-3]),  # best on the bottom edge: one step down
    ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.1, 1.6e-2: 2.0}, 1, []),  # still on the edge, but the one allowed step is used
    ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.1, 1.6e-2: 2.0}, 2, [3.2e-2]),  # ... a second one allowed
    ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0, 1.6e-2: math.inf}, 3, []),  # the step past it diverged: best no longer on the edge
    ({2e-3: 3.0, 4e-3: 2.5, 8e-3: 2.0}, 0, []),  # --lr-widen 0: the grid as given
])
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


def test_compare_trains_past_the_edge_and_reports_at_the_new_best(tmp_path, monkeypatch):
    """With the optimum at 0.02, above a 2e-3..8e-3 grid, --lr-widen 2 trains 1.6e-2 and 3.2e-2 for every arm,
    picks 1.6e-2 (now inside what was tried) and trains the reported seeds there; experiment.json records it."""
    trained = []

    def fake_run_arm(base_argv, out_dir, name, extra, resume_argv):
        lr = float(next(a for a in extra if a.startswith("--train.learning_rate=")).split("=")[1])
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        (out_dir / name / "summary.json").write_text(json.dumps({"final_val_loss": 2 + math.log(lr / 0.02) ** 2}))
        trained.append(name)
        return out_dir / name

    monkeypatch.setattr(runner, "run_arm", fake_run_arm)
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be: that is the question.\n" * 300)
    args, overrides = compare.parse_args([
        "--config", "configs/debug.toml", "--seeds", "1", "--name", "exp", f"--data.source={corpus}",
        "--data.tokenizer=char", f"--data.cache_dir={tmp_path / 'cache'}", f"--train.out_dir={tmp_path}",
        "--lr-grid", "2e-3,4e-3,8e-3", "--lr-widen", "2"])
    plan = runner.Plan(args.config, overrides, args.arms, args.seeds, args.lr_grid, name=args.name, lr_widen=args.lr_widen)
    paths, tuning, out_dir = runner.run_experiment(plan)
    for arm in ("tied", "untied"):
        assert [n for n in trained if n.startswith(f"tune-{arm}-")] == [
            f"tune-{arm}-lr{lr}" for lr in ("0.002", "0.004", "0.008", "0.016", "0.032")]
    assert [p.name for p in paths] == ["tied-lr0.016-s0", "untied-lr0.016-s0"] and len(tuning) == 10
    assert json.loads((out_dir / "experiment.json").read_text())["lr_widen"] == 2
    trained.clear()
    runner.run_experiment(plan)  # a rerun makes the same decisions from the same scores
    assert trained[-2:] == ["tied-lr0.016-s0", "untied-lr0.016-s0"] and len(trained) == 12


def test_lr_widen_without_a_grid_is_refused(capsys):
    """--lr-widen means nothing without --lr-grid: a one-line error, exit 2."""
    assert compare.main(["--config", "configs/debug.toml", "--lr-widen", "1"]) == 2
    assert "--lr-widen 1 needs --lr-grid" in capsys.readouterr().err
