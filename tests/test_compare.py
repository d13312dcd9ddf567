"""The tied-vs-untied experiment: fairness invariants, sizing, statistics, refusals, end to end.

Run: ``python -m pytest -q tests/test_compare.py``  (CPU, offline, under a minute).
Synthetic run folders (hand-written config.json / metrics.jsonl / summary.json) test the
report's statistics and refusals with known answers; one tiny real experiment runs compare.py.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fake_runs import UNIGRAM, fake_experiment, fake_run

import compare
import train
from core.errors import UserError
from experiment import launch, report, report_markdown, runner, sizing
from model.config import GPTConfig
from model.gpt import GPT
from training import setup
from training.config import parse_config

# ----------------------------------------------------------------------------- sizing


@pytest.mark.parametrize("tie", [True, False])
def test_count_params_matches_a_real_model(tie):
    """The meta-device count equals a real model's num_params()."""
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=2, n_embd=32, tie_embeddings=tie)
    assert sizing.count_params(cfg) == GPT(cfg).num_params()


def test_equal_params_by_width_is_within_2_percent():
    """The default model's tied arm grows in n_embd until it is within 2% of the untied arm."""
    base = GPTConfig(vocab_size=50257, block_size=128, n_layer=4, n_head=4, n_embd=128, tie_embeddings=False)
    tied, n_tied, n_untied = sizing.equal_params_config(base, "width")
    assert tied.tie_embeddings and tied.n_embd > 128 and tied.n_embd % tied.n_head == 0
    assert n_untied == sizing.count_params(base)
    assert abs(n_tied - n_untied) <= 0.02 * n_untied


def test_equal_params_by_depth_is_within_2_percent():
    """With a small vocabulary, extra layers can make up the untied head's parameters."""
    base = GPTConfig(vocab_size=1562, block_size=32, n_layer=2, n_head=2, n_embd=64, tie_embeddings=False)
    tied, n_tied, n_untied = sizing.equal_params_config(base, "depth")
    assert tied.n_layer > 2 and abs(n_tied - n_untied) <= 0.02 * n_untied


def test_equal_params_impossible_is_an_error():
    """When no depth gets within 2%, the error says so and suggests the other way."""
    base = GPTConfig(vocab_size=50257, block_size=16, n_layer=1, n_head=1, n_embd=8, tie_embeddings=False)
    with pytest.raises(UserError, match="try --equal-params width"):
        sizing.equal_params_config(base, "depth")


# ----------------------------------------------------------------------------- fairness


def _build(tmp_path, tie: bool, seed: int):
    path = tmp_path / "c.txt"
    if not path.exists():
        path.write_text("Now is the winter of our discontent\nMade glorious summer by this sun of York;\n" * 200)
    overrides = {
        "data": {"source": str(path), "tokenizer": "char", "cache_dir": str(tmp_path / "cache")},
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "tie_embeddings": tie},
        "train": {"seed": seed, "batch_size": 4, "eval_iters": 3},
    }
    cfg = parse_config(None, overrides)
    return cfg, setup.build(cfg)


def test_both_arms_of_a_seed_see_the_same_data_order_and_eval_batches(tmp_path, monkeypatch):
    """Real train.py runs of both arms read exactly the same training batches and eval windows."""
    from data.loader import TokenData

    seen = {}
    real_get, real_at = TokenData.get_batch, TokenData.batch_at

    def get_batch(self, split, *a, **k):
        x, y = real_get(self, split, *a, **k)
        seen[current].append(("batch", split, x.clone()))
        return x, y

    def batch_at(self, split, offsets, *a, **k):
        seen[current].append(("eval", split, offsets.clone()))
        return real_at(self, split, offsets, *a, **k)

    monkeypatch.setattr(TokenData, "get_batch", get_batch)
    monkeypatch.setattr(TokenData, "batch_at", batch_at)
    path = tmp_path / "c.txt"
    path.write_text("Now is the winter of our discontent\nMade glorious summer by this sun of York;\n" * 200)
    for current in ("true", "false"):
        seen[current] = []
        argv = [
            f"--data.source={path}",
            "--data.tokenizer=char",
            f"--data.cache_dir={tmp_path / 'cache'}",
            f"--train.out_dir={tmp_path / 'runs'}",
            "--model.n_layer=1",
            "--model.n_head=2",
            "--model.n_embd=16",
            "--model.block_size=16",
            "--train.batch_size=2",
            "--train.max_iters=4",
            "--train.eval_interval=2",
            "--train.eval_iters=2",
            "--train.sample_tokens=0",
            f"--model.tie_embeddings={current}",
            "--run-name",
            current,
        ]
        assert train.main(argv) == 0
    tied, untied = seen["true"], seen["false"]
    assert len(tied) == len(untied) > 0 and any(kind == "eval" for kind, _, _ in tied)
    for (ka, sa, ta), (kb, sb, tb) in zip(tied, untied):
        assert (ka, sa) == (kb, sb) and torch.equal(ta, tb)


def test_both_arms_of_a_seed_start_from_the_same_body(tmp_path):
    """Same seed: every non-embedding weight is bit-identical at init; the tied matrix = the untied head."""
    (_, tied), (_, untied) = _build(tmp_path, True, 3), _build(tmp_path, False, 3)
    t, u = tied.model.state_dict(), untied.model.state_dict()
    for key in t:
        if key not in ("wte.weight", "lm_head.weight"):
            assert torch.equal(t[key], u[key]), key
    assert torch.equal(t["wte.weight"], u["lm_head.weight"])


def test_different_seeds_see_different_data(tmp_path):
    """The seed does change the data order (so seeds are real replicates)."""
    (_, a), (_, b) = _build(tmp_path, True, 1), _build(tmp_path, True, 2)
    assert not torch.equal(
        a.data.get_batch("train", 4, 16, a.data_gen)[0], b.data.get_batch("train", 4, 16, b.data_gen)[0]
    )


def test_embedding_decay_policy_applies_to_both_arms():
    """embedding_weight_decay=false keeps wte, wpe and lm_head (tied or not) out of weight decay."""
    for tie in (True, False):
        model = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=1, n_embd=8, tie_embeddings=tie))
        decayed = {id(p) for p in model.param_groups(0.1, embedding_weight_decay=False)[0]["params"]}
        for p in (model.wte.weight, model.wpe.weight, model.lm_head.weight):
            assert id(p) not in decayed
        assert id(model.blocks[0].attn.q_proj.weight) in decayed
        everything = {id(p) for p in model.param_groups(0.1)[0]["params"]}
        assert id(model.wte.weight) in everything and id(model.lm_head.weight) in everything


# ----------------------------------------------------------------------------- statistics


def test_report_on_fake_runs_has_the_known_difference(tmp_path):
    """write_report: the per-seed differences, a 'worse' verdict for untied, the config difference, the figures."""
    paths = fake_experiment(tmp_path, [(3.0, 3.1), (3.1, 3.22), (3.2, 3.28)])
    out, meaningful = runner.write_report(paths, [], tmp_path, prompts=[], title="t")
    md = out.read_text()
    assert meaningful  # no unigram baseline recorded: nothing to warn about
    assert "untied vs tied: **worse**" in md and "+0.1000" in md
    assert "model.tie_embeddings" in md
    for png in ("val_loss_vs_step.png", "paired_difference_vs_step.png"):
        assert (tmp_path / png).stat().st_size > 1000 and f"]({png})" in md
    assert "val_loss_vs_tokens" not in md and "loss_vs_lr.png" not in md  # no grid: no LR figure


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "t1", True, 1, 3.1)], "a second arm"),
        (lambda r: [fake_run(r, "u0", False, 0, 3.0), fake_run(r, "u1", False, 1, 3.1)], "no tied runs"),
        (
            lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u0", False, 0, 3.1, train__weight_decay=0.5)],
            "more than its arm's settings: train.weight_decay",
        ),
        (lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u1", False, 1, 3.1)], "seeds are not paired"),
        (
            lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u0", False, 0, 3.1, model__n_embd=64)],
            "not within 2%",
        ),
    ],
)
def test_report_refuses_unfair_sets_of_runs(tmp_path, make, match):
    """A single arm, no reference arm, a difference beyond the arms' settings, unpaired seeds, or unequal sizes: refused."""
    with pytest.raises(UserError, match=match):
        report.check_experiment(report.load_runs(make(tmp_path)))


def test_pairing_is_by_seed_not_by_argument_order(tmp_path):
    """Paths given in any order are paired by seed: the per-seed differences come out right."""
    runs = [
        fake_run(tmp_path, "u2", False, 2, 3.5),
        fake_run(tmp_path, "t0", True, 0, 3.0),
        fake_run(tmp_path, "u0", False, 0, 3.1),
        fake_run(tmp_path, "t2", True, 2, 3.2),
    ]
    exp = report.check_experiment(report.load_runs(runs))
    (comparison,) = report.comparisons(exp)
    assert exp.seeds == [0, 2] and comparison.diffs == pytest.approx([0.1, 0.3])


def test_equal_parameter_runs_are_accepted_and_the_size_difference_stated(tmp_path):
    """A tied arm that is wider but within 2% in parameters is fair; the report names n_embd."""
    paths = [fake_run(tmp_path, "t0", True, 0, 3.0, model__n_embd=160), fake_run(tmp_path, "u0", False, 0, 3.1)]
    (paths[0] / "summary.json").write_text(
        json.dumps(
            {"parameters": 1490, "non_embedding_parameters": 700, "tokens_per_s_median": 90.0, "final_val_loss": 3.0}
        )
    )
    exp = report.check_experiment(report.load_runs(paths))
    assert exp.differences["untied"]["model.n_embd"] == (160, 128)
    md = report_markdown.render_markdown(exp, [], {}, "t")
    assert "model.n_embd" in md and "equal parameters" in md


@pytest.mark.parametrize("final, warned", [(3.0, False), (10.0, True)])
def test_compare_prints_the_warning_only_when_a_run_is_behind_the_baseline(
    tmp_path, capsys, monkeypatch, final, warned
):
    """compare.py on run folders: below the unigram loss the verdict stands alone; above it, the report
    opens with the warning and a last line on stderr repeats it."""
    monkeypatch.setattr(report, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    paths = fake_experiment(tmp_path, [(final, final + 0.1), (final + 0.1, final + 0.22)], [(UNIGRAM, UNIGRAM)] * 2)
    assert compare.main([str(p) for p in paths]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Should the embedding be tied?") and "untied vs tied: **" in out
    assert ("**Warning: this comparison is not meaningful.**" in out) == warned
    assert ("[compare] warning: a run did not beat the unigram baseline" in err) == warned


def test_compare_help_shows_defaults_and_not_what_compare_sets_per_run(capsys):
    """`python compare.py --help` shows --seeds' default and no --model.tie_embeddings / --train.seed;
    giving one anyway is a one-line error, exit 2."""
    proc = subprocess.run(
        [sys.executable, "compare.py", "--help"],
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
        assert err == f"error: {flag.split('=')[0]} does not apply to compare.py: drop it"


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
    return compare.parse_args(argv)


def test_experiment_folder_from_an_older_tinygpt_is_still_accepted(tmp_path, no_training):
    """An experiment.json written before a setting existed (it ran at the default) or while a key was
    not yet bookkeeping still matches the same command: the runs in it are reused, not refused."""
    args, overrides = no_training
    plan = runner.Plan(args.config, overrides, args.arms, args.seeds, name=args.name)
    with pytest.raises(Reached):  # first run writes experiment.json
        runner.run_experiment(plan)
    saved = tmp_path / "exp" / "experiment.json"
    old = json.loads(saved.read_text())
    del old["config"]["train.max_skipped_steps"]  # added to tinygpt later; it ran at its default, 0
    old["config"]["train.checkpoint_interval"] = 10  # once part of the settings, now bookkeeping
    saved.write_text(json.dumps(old))
    with pytest.raises(Reached):
        runner.run_experiment(plan)
    old["config"]["train.max_skipped_steps"] = 3  # but a real difference is still refused
    saved.write_text(json.dumps(old))
    with pytest.raises(UserError, match="train.max_skipped_steps"):
        runner.run_experiment(plan)


def test_the_learning_rate_grid_may_grow_but_not_lose_points(tmp_path, no_training):
    """A folder tuned on 1e-3,4e-3 continues with 1e-3,4e-3,1.6e-2 (widening past an edge) and records the
    wider grid; dropping a point it had, or adding a grid to a folder made without one, is refused."""
    args, overrides = no_training

    def attempt(grid, name="exp"):
        runner.run_experiment(runner.Plan(args.config, overrides, args.arms, args.seeds, grid, name=name))

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


def test_report_refuses_empty_metrics_and_unfinished_runs(tmp_path):
    """Empty metrics.jsonl or a run that stopped early is named, with how to fix it."""
    empty = fake_run(tmp_path, "e", True, 0, 3.0)
    (empty / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="missing or empty"):
        report.load_run(empty)
    short = fake_run(tmp_path, "s", True, 0, 3.0, train__max_iters=40)
    with pytest.raises(UserError, match="unfinished .*--resume"):
        report.load_run(short)


def test_compare_cli_refuses_mixed_modes_and_fixed_keys(capsys):
    """Run folders plus --config, or overriding the seed/tie flag, are one-line errors."""
    assert compare.main(["runs/x", "--config", "configs/debug.toml"]) == 2
    assert compare.main(["--config", "configs/debug.toml", "--train.seed=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


# ----------------------------------------------------------------------------- end to end


def _tiny_compare_argv(tmp_path) -> list[str]:
    """compare.py flags for a tiny experiment on a local char corpus under tmp_path."""
    path = tmp_path / "c.txt"
    path.write_text("ROMEO:\nWhat light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n\n" * 200)
    return [
        "--config",
        "configs/debug.toml",
        "--name",
        "exp",
        f"--data.source={path}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
        "--train.max_iters=6",
        "--train.eval_interval=3",
        "--train.sample_tokens=0",
    ]


# The plain two-arm experiment end to end (2 seeds, its report, reuse) is each cell of the grid's
# end-to-end test, tests/test_grid.py: one set of runs checks both.


@pytest.mark.slow
def test_compare_tunes_all_five_arms_on_a_grid_and_reports_them(tmp_path):
    """--arms (all five) --lr-grid (2 points): the grid trains on the tuning seed, each arm's best
    learning rate trains the reported seed, and the report compares every arm with tied."""
    arms = "tied,untied,tied-bias,untied-split,tie-then-untie"
    # One reported seed keeps this test short (15 tiny runs); pairing over seeds is tested above.
    argv = [*_tiny_compare_argv(tmp_path), "--seeds", "1", "--arms", arms, "--lr-grid", "1e-3,4e-3", "--margin", "0.05"]
    assert compare.main(argv) == 0
    exp = tmp_path / "exp"
    folders = {p.name for p in exp.iterdir() if p.is_dir() and p.name != ".claims"}
    grid = {f"tune-{arm}-lr{lr}" for arm in arms.split(",") for lr in ("0.001", "0.004")}
    assert grid <= folders and len(folders) == 10 + 5
    for arm in arms.split(","):
        scores = {
            lr: json.loads((exp / f"tune-{arm}-lr{lr}" / "summary.json").read_text())["final_val_loss"]
            for lr in ("0.001", "0.004")
        }
        best = min(scores, key=scores.get)
        cfg = json.loads((exp / f"{arm}-lr{best}-s0" / "config.json").read_text())
        assert cfg["train"]["learning_rate"] == float(best) and cfg["train"]["seed"] == 1337
        tune_cfg = json.loads((exp / f"tune-{arm}-lr{best}" / "config.json").read_text())
        assert tune_cfg["train"]["seed"] == 1337 + runner.TUNING_SEED_OFFSET
    md = (exp / "report.md").read_text()
    for arm in arms.split(",")[1:]:
        assert re.search(rf"{arm} vs tied: \*\*(better|worse|equivalent within ±0.05 nats|inconclusive)\*\*", md), arm
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
    monkeypatch.setattr(report, "samples", lambda exp, prompts: {})  # fake runs have no checkpoints
    paths = fake_experiment(tmp_path, [(3.0, 3.001), (3.1, 3.1005), (3.2, 3.2002)])
    (tmp_path / "experiment.json").write_text(json.dumps({"config": {}, "margin": 0.05}))
    assert compare.main([str(p) for p in paths]) == 0
    assert "equivalent within ±0.05 nats" in capsys.readouterr().out
    assert compare.main([str(p) for p in paths] + ["--margin", "0.01"]) == 2
    assert "declared --margin 0.05" in capsys.readouterr().err


def test_runs_with_and_without_a_final_score_are_not_compared(tmp_path):
    """Runs scored on the shared val windows and older runs scored on their periodic evals: refused."""
    paths = fake_experiment(tmp_path, [(3.0, 3.1), (3.1, 3.2)])
    summary = json.loads((paths[0] / "summary.json").read_text())
    del summary["final_val_loss"]
    (paths[0] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match="final_val_loss"):
        report.check_experiment(report.load_runs(paths))
