"""compare.py as a command: its flags and refusals, the experiment folder's settings, the declared margin, end to end.

Run: ``python -m pytest -q tests/test_compare_command.py``  (CPU, offline; seconds, but for one slow
test that trains all five arms on a 2-point learning-rate grid through compare.py in-process).
Run folders written by hand (``fake_runs``) stand in for trained runs where only the report is under test;
the experiment-folder tests stop before any training. The statistics themselves are in ``tests/test_compare.py``.
"""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_runs import UNIGRAM, fake_experiment
from helpers import tiny_compare_args

import compare
from experiment.ab import cli as ab_cli
from core.errors import UserError
from experiment.arms import define_arms
from experiment.runs import commands, launch
from experiment.runs import folders
from experiment.ab import run as ab_run
from experiment.runs.plan import Plan, with_shared_config


# ----------------------------------------------------------------------------- the command and its experiment folder


@pytest.mark.parametrize("final, warned", [(3.0, False), (10.0, True)])
def test_compare_prints_the_warning_only_when_a_run_is_behind_the_baseline(
    tmp_path, capsys, monkeypatch, final, warned
):
    """compare.py on run folders: below the unigram loss the verdict stands alone; above it, the report
    opens with the warning and a last line on stderr repeats it."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    paths = fake_experiment(tmp_path, [(final, final + 0.1), (final + 0.1, final + 0.22)], [(UNIGRAM, UNIGRAM)] * 2)
    assert compare.main([str(p) for p in paths]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Should the embedding be tied?") and "untied vs tied (reference): **" in out
    assert ("**Warning: this comparison is not meaningful.**" in out) == warned
    assert ("[compare] warning: a run did not beat the unigram baseline" in err) == warned


def test_compare_help_shows_defaults_and_not_what_compare_sets_per_run(capsys):
    """`python compare.py --help` shows --seeds' default and no --model.tie_embeddings / --train.seed;
    giving one anyway is a one-line error, exit 2."""
    proc = subprocess.run(
        [sys.executable, "compare.py", "ab", "--help"],
        cwd=Path(compare.__file__).parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split("options:")[1].split())  # the option list, after the usage lines
    assert "(default: 5)" in text[text.index("--seeds SEEDS") : text.index("--lr-grid LR_GRID")]
    assert "--model.n_layer" in text and "--model.tie_embeddings" not in text and "--train.seed" not in text
    for flag in ("--model.tie_embeddings=false", "--train.seed=3"):
        assert compare.main(["--config", "configs/debug.toml", flag]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"error: {flag.split('=')[0]} does not apply to compare.py ab: drop it"


def test_orphan_run_folder_says_to_delete_it(tmp_path):
    """A run folder with no checkpoint (its start failed) is named, with the fix; nothing is deleted."""
    (tmp_path / "tied-s0").mkdir()
    (tmp_path / "tied-s0" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="delete that folder"):
        launch.run_arm([], tmp_path, "tied-s0", [], [])
    assert (tmp_path / "tied-s0" / "config.json").exists()


def test_experiment_folder_refuses_other_settings(tmp_path, capsys):
    """Re-running into an experiment folder with a different config is refused before any training."""
    path = tmp_path / "c.txt"
    path.write_text("To be, or not to be: that is the question.\n" * 300)
    base = [
        "--config",
        "configs/debug.toml",
        "--seeds",
        "1",
        "--name",
        "exp",
        f"--data.source={path}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
    ]
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "experiment.json").write_text(
        json.dumps({"config": {"train.max_iters": 1}, "equal_params": None})
    )
    assert compare.main(base) == 2
    err = capsys.readouterr().err
    assert "made with other settings" in err and "train.max_iters" in err
    assert not (tmp_path / "exp" / "tied-s0").exists()


class Reached(Exception):
    """Raised instead of training: the experiment got past its settings checks."""


@pytest.fixture
def no_training(tmp_path, monkeypatch):
    """``(args, overrides)`` of a tiny compare.py command into ``tmp_path/exp``; ``run_arm`` raises :class:`Reached`."""
    path = tmp_path / "c.txt"
    path.write_text("To be, or not to be: that is the question.\n" * 300)
    argv = [
        "--config",
        "configs/debug.toml",
        "--seeds",
        "1",
        "--name",
        "exp",
        f"--data.source={path}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
    ]

    def stop_before_training(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(launch, "run_arm", stop_before_training)
    return ab_cli.parse_args(argv)


def test_experiment_folder_from_an_older_tinygpt_is_still_accepted(tmp_path, no_training):
    """An experiment.json written before a setting existed (it ran at the default) or while a key was
    not yet bookkeeping still matches the same command: the runs in it are reused, not refused."""
    args, overrides = no_training
    plan = Plan(config=args.config, overrides=overrides, arms=args.arms, seeds=args.seeds, name=args.name)
    with pytest.raises(Reached):  # first run writes experiment.json
        ab_run.run_experiment(plan)
    saved = tmp_path / "exp" / "experiment.json"
    old = json.loads(saved.read_text())
    del old["config"]["train.max_skipped_steps"]  # added to tinygpt later; it ran at its default, 0
    old["config"]["train.checkpoint_interval"] = 10  # once part of the settings, now bookkeeping
    saved.write_text(json.dumps(old))
    with pytest.raises(Reached):
        ab_run.run_experiment(plan)
    old["config"]["train.max_skipped_steps"] = 3  # but a real difference is still refused
    saved.write_text(json.dumps(old))
    with pytest.raises(UserError, match="train.max_skipped_steps"):
        ab_run.run_experiment(plan)


def test_fewer_seeds_than_the_folder_holds_are_refused(tmp_path, no_training):
    """--seeds 1 on a folder holding its arms' runs at 2 seeds would report a subset over the whole folder's
    report (and count as another look): refused before anything trains; --seeds 2 goes on."""
    args, overrides = no_training
    plan = Plan(config=args.config, overrides=overrides, arms=args.arms, seeds=1, name=args.name)
    for arm in args.arms:
        for i in range(2):
            (tmp_path / "exp" / f"{arm}-s{i}").mkdir(parents=True)
            (tmp_path / "exp" / f"{arm}-s{i}" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="holds runs of these arms at 2 seeds: give --seeds 2"):
        ab_run.run_experiment(plan)
    assert not (tmp_path / "exp" / "experiment.json").exists()
    with pytest.raises(Reached):
        ab_run.run_experiment(dataclasses.replace(plan, seeds=2))


def shared_and_own_plan(overrides: dict, args, defined: dict) -> Plan:
    """A plan of the arms ``defined`` (name -> settings) over the fixture's config with ``overrides``."""
    arm_set = define_arms(None, defined)
    arms = list(defined)
    plan = Plan(
        config=args.config, overrides=overrides, arms=arms, reference=arms[0], seeds=1, name="exp", arm_set=arm_set
    )
    return with_shared_config(plan)  # as compare.py's command line builds it


def test_an_arms_own_setting_wins_over_the_shared_config_which_the_other_arms_keep(no_training, capsys):
    """The command line sets model.dropout=0.1 for every arm; the arm that sets 0.2 trains with 0.2, the other
    with 0.1, and one line says which arm takes which."""
    args, overrides = no_training
    overrides.setdefault("model", {})["dropout"] = 0.1
    plan = shared_and_own_plan(overrides, args, {"base": {}, "more": {"model.dropout": 0.2}})
    cfg, _, name = commands.prepare(plan)
    cmds = commands.commands_for(plan, cfg, name)
    assert cmds.expected("base", 0).model.dropout == 0.1 and cmds.expected("more", 0).model.dropout == 0.2
    assert "the command line sets model.dropout=0.1: base trains with it; more with its own" in capsys.readouterr().out
    commands.check_planned(plan, cmds)
    assert plan.arm_set.settings["base"] == {"model.dropout": 0.1}  # what it trains with names it in the report


def test_two_arms_that_would_train_one_config_are_refused(no_training):
    """An arm whose own value is the one the shared config gives the other arm trains the same run: refused
    before anything trains, naming both."""
    args, overrides = no_training
    overrides.setdefault("model", {})["dropout"] = 0.1
    plan = shared_and_own_plan(overrides, args, {"base": {}, "same": {"model.dropout": 0.1}})
    cfg, _, name = commands.prepare(plan)
    with pytest.raises(UserError, match="arms base and same would train the same config"):
        commands.check_planned(plan, commands.commands_for(plan, cfg, name))


def test_the_learning_rate_grid_may_grow_but_not_lose_points(tmp_path, no_training):
    """A folder tuned on 1e-3,4e-3 continues with 1e-3,4e-3,1.6e-2 (widening past an edge) and records the
    wider grid; dropping a point it had, or adding a grid to a folder made without one, is refused."""
    args, overrides = no_training

    def attempt(grid, name="exp"):
        ab_run.run_experiment(
            Plan(config=args.config, overrides=overrides, arms=args.arms, seeds=args.seeds, lr_grid=grid, name=name)
        )

    for grid in ([1e-3, 4e-3], [1e-3, 4e-3, 1.6e-2]):
        with pytest.raises(Reached):
            attempt(grid)
    assert json.loads((tmp_path / "exp" / "experiment.json").read_text())["lr_grid"] == [1e-3, 4e-3, 1.6e-2]
    with pytest.raises(UserError, match=r"lr_grid \(it may grow but must keep 0.004\)"):
        attempt([1e-3, 1.6e-2])
    with pytest.raises(Reached):
        attempt([], name="plain")
    with pytest.raises(UserError, match="cannot gain one"):
        attempt([1e-3], name="plain")


def test_report_on_missing_run_exits_2(tmp_path, capsys):
    """compare.py on a folder that does not exist: one error line, exit 2."""
    assert compare.main([str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "does not exist" in err


def test_compare_cli_refuses_mixed_modes_and_fixed_keys(capsys):
    """Run folders plus --config, or overriding the seed/tie flag, are one-line errors."""
    assert compare.main(["runs/x", "--config", "configs/debug.toml"]) == 2
    assert compare.main(["--config", "configs/debug.toml", "--train.seed=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


@pytest.mark.parametrize("argv", [["--jobs", "2"], ["--jobs=2"], ["--grid", "x"], ["--budgets=1M"]])
def test_another_modes_option_in_the_ab_mode_names_that_mode(capsys, argv):
    """--jobs, --grid or --budgets given to the A/B mode: one line naming the mode they belong to."""
    assert compare.main(["--config", "configs/debug.toml", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and ("compare.py budgets" in err or "compare.py grid" in err)


# ----------------------------------------------------------------------------- end to end


# The plain two-arm experiment end to end (2 seeds, its report, reuse) is each cell of the grid's
# end-to-end test, tests/test_grid.py: one set of runs checks both.


@pytest.mark.slow
def test_compare_tunes_three_arms_on_a_grid_and_reports_them(tmp_path):
    """--arms (three) --lr-grid (2 points): the grid trains on the tuning seed, each arm's best
    learning rate trains the reported seed, and the report compares every arm with tied."""
    arms = "tied,untied,tie-then-untie"
    # One reported seed and three arms keep this test short (9 tiny runs): pairing over seeds is tested in
    # tests/test_compare.py, and every arm's training in tests/test_arms.py.
    argv = [*tiny_compare_args(tmp_path), "--seeds", "1", "--arms", arms, "--lr-grid", "1e-3,4e-3"]
    argv += ["--lr-tuning", "one-seed", "--margin", "0.05"]
    assert compare.main(argv) == 0
    exp = tmp_path / "exp"
    folders = {p.name for p in exp.iterdir() if p.is_dir() and p.name != ".claims"}
    grid = {f"tune-{arm}-lr{lr}" for arm in arms.split(",") for lr in ("0.001", "0.004")}
    assert grid <= folders and len(folders) == 6 + 3
    for arm in arms.split(","):
        scores = {
            lr: json.loads((exp / f"tune-{arm}-lr{lr}" / "summary.json").read_text())["final_val_loss"]
            for lr in ("0.001", "0.004")
        }
        best = min(scores, key=scores.get)
        cfg = json.loads((exp / f"{arm}-lr{best}-s0" / "config.json").read_text())
        assert cfg["train"]["learning_rate"] == float(best) and cfg["train"]["seed"] == 1337
        tune_cfg = json.loads((exp / f"tune-{arm}-lr{best}" / "config.json").read_text())
        assert tune_cfg["train"]["seed"] == 1337 + ab_run.TUNING_SEED_OFFSET
    md = (exp / "report.md").read_text()
    for arm in arms.split(",")[1:]:
        assert re.search(
            rf"{arm} vs tied \(reference\): \*\*(better|worse|equivalent within ±0.05 nats|inconclusive)\*\*", md
        ), arm
    assert "](loss_vs_lr.png)" in md and (exp / "loss_vs_lr.png").is_file()
    saved = json.loads((exp / "experiment.json").read_text())
    assert saved["lr_grid"] == [0.001, 0.004] and saved["margin"] == 0.05
    assert compare.main([*argv[:-1], "0.02"]) == 2  # the margin was declared: a changed one is refused


def test_compare_refuses_what_the_arms_set_and_a_single_arm(capsys):
    """An arm setting given to every arm (--model.lm_head_bias) does not apply; one arm is no comparison."""
    assert compare.main(["--config", "configs/debug.toml", "--model.lm_head_bias=true"]) == 2
    assert "--model.lm_head_bias does not apply to compare.py" in capsys.readouterr().err
    assert compare.main(["--config", "configs/debug.toml", "--arms", "tied"]) == 2
    assert "a comparison needs two" in capsys.readouterr().err


def test_a_report_on_existing_runs_uses_the_declared_margin(tmp_path, capsys, monkeypatch):
    """compare.py on run folders reads the margin experiment.json declared, and refuses another one."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    paths = fake_experiment(tmp_path, [(3.0, 3.001), (3.1, 3.1005), (3.2, 3.2002)])
    (tmp_path / "experiment.json").write_text(json.dumps({"config": {}, "margin": 0.05}))
    assert compare.main([str(p) for p in paths]) == 0
    assert "equivalent within ±0.05 nats" in capsys.readouterr().out
    assert compare.main([str(p) for p in paths] + ["--margin", "0.01"]) == 2
    assert "declared --margin 0.05" in capsys.readouterr().err


def test_a_report_on_existing_runs_with_a_margin_in_bits_per_byte(tmp_path, capsys, monkeypatch):
    """compare.py on run folders with --margin-bpb: its report.md gains the verdicts in bits per byte at that
    margin (0.5 bpb per nat here: Δ −0.15, −0.14, −0.16 nats is −0.075 bpb on average, better), beside the
    ones in nats."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    finals = [(3.0, 2.85), (3.1, 2.96), (3.2, 3.04)]
    bpb = [({"final_val_bpb": t / 2}, {"final_val_bpb": u / 2}) for t, u in finals]
    paths = fake_experiment(tmp_path, finals, bpb)
    assert compare.main([str(p) for p in paths] + ["--margin-bpb", "0.02"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "## In bits per byte, at ±0.02 bpb (`--margin-bpb 0.02`)" in md
    assert "| untied | −0.0750, −0.0700, −0.0800 | −0.0750 | [−0.0874, −0.0626] | [−0.0834, −0.0666] |" in md
    assert "| **better** |" in md and "untied vs tied (reference): **better**" in md


@pytest.mark.parametrize(
    "flags, message",
    [(["--reference", "nope"], "no nope runs given"), (["--margin", "-1"], "equivalence margin must be a positive")],
)
def test_a_mistyped_flag_on_a_report_keeps_the_earlier_report(tmp_path, capsys, monkeypatch, flags, message):
    """compare.py runs/a runs/b, then the same with a mistyped --reference or --margin: one line, exit 2, and the
    first report.md, verdict.json and figure stand as they were (the runs are what they were)."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    paths = fake_experiment(tmp_path, [(3.0, 3.001), (3.1, 3.1005), (3.2, 3.2002)])
    assert compare.main([str(p) for p in paths]) == 0
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()}
    assert {"report.md", "verdict.json"} <= set(before)
    capsys.readouterr()
    assert compare.main([str(p) for p in paths] + flags) == 2
    assert message in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()} == before


@pytest.mark.parametrize("name", ["../escape", ".", "ABSOLUTE", "a/../b"])
def test_a_name_that_leaves_the_out_dir_is_refused_before_anything_is_written(tmp_path, capsys, name):
    """--name is a folder under train.out_dir ('/' may nest one, as a grid's cells do): '..', '.' or an absolute
    path would write the experiment outside it or into it whole: one line, exit 2, nothing made."""
    runs = tmp_path / "runs"
    argv = [
        a.replace(str(tmp_path), str(runs)) if a.startswith("--train.out_dir") else a
        for a in tiny_compare_args(tmp_path)
    ]
    argv[argv.index("--name") + 1] = str(tmp_path / "abs") if name == "ABSOLUTE" else name
    assert compare.main(argv) == 2
    assert "must be a folder name under train.out_dir" in capsys.readouterr().err
    assert not runs.exists() and not (tmp_path / "escape").exists() and not (tmp_path / "abs").exists()
