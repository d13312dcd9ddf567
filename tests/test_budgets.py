"""The budget axis planned and trained: budgets in steps, the order its jobs run in, and what they reuse.

The branch itself (a branch equals the single run of its budget) is tested in
``tests/test_branch.py``; the readouts and the report in ``tests/test_budget_report.py``.
Run: ``python -m pytest -q tests/test_budgets.py`` (CPU, offline; the end-to-end tests are ``slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import error_line, tiny_compare_args

import compare
from core.errors import UserError
from experiment.budget import run as budget_run
from training.config import RunConfig, TrainConfig


def _cfg(**train) -> RunConfig:
    """The default config with a 128-token block, batch 16 (2,048 tokens a step) and ``train`` changes."""
    cfg = RunConfig()
    cfg.model.block_size = 128
    cfg.train = TrainConfig(**{**cfg.train.__dict__, "batch_size": 16, "lr_schedule": "wsd", **train})
    return cfg


def test_budgets_parse_with_suffixes_sorted_and_distinct():
    """``0.5M,1M,2k,1M`` -> token counts, sorted, each once."""
    assert budget_run.parse_budgets("1M, 0.5M,2k,1M") == [2_000, 500_000, 1_000_000]
    assert (
        budget_run.label(500_000) == "0.5M"
        and budget_run.label(16_000_000) == "16M"
        and budget_run.label(4_000) == "4k"
    )


@pytest.mark.parametrize("text", ["", "1X", "-1M", "0", "abc,1M"])
def test_a_budget_that_is_no_token_count_is_refused(text):
    """Each bad budget raises a UserError that shows the form wanted."""
    with pytest.raises(budget_run.UserError, match="e.g. --budgets 0.5M,1M,2M"):
        budget_run.parse_budgets(text)


def test_each_budget_branches_where_its_own_cooldown_starts():
    """Steps = tokens / tokens a step; the branch step is the first step of the last 20% (the WSD cooldown)."""
    planned = budget_run.plan_budgets([500_000, 16_000_000], _cfg(cooldown_frac=0.2, warmup_iters=30))
    assert [(b.label, b.steps, b.branch_step) for b in planned] == [("0.5M", 244, 195), ("16M", 7812, 6250)]
    assert planned[0].cooldown_steps == 49


def test_a_budget_whose_cooldown_would_start_in_the_warmup_is_refused():
    """A budget too small for the warmup, and two budgets of the same steps, are each one UserError."""
    with pytest.raises(budget_run.UserError, match="inside the 100-step warmup"):
        budget_run.plan_budgets([100_000], _cfg(warmup_iters=100))
    with pytest.raises(budget_run.UserError, match="same steps"):
        budget_run.plan_budgets([1_000_000, 1_000_100], _cfg(warmup_iters=10))


def _axis(tmp_path: Path, tokens: list[int]) -> budget_run.BudgetRuns:
    cfg = _cfg(warmup_iters=10)
    return budget_run.BudgetRuns(tmp_path, cfg, budget_run.plan_budgets(tokens, cfg), [], {}, [], [])


def test_jobs_finish_one_trunk_and_its_branches_before_the_next_seed_by_seed(tmp_path):
    """Trunk stage k, then budget k's branches of the arms on that trunk, for every k; then the next trunk.

    A machine that goes loses only the trunks it was training (their checkpoints are not committed),
    and tie-untie-cooldown branches from the tied trunk: it has none of its own.
    """
    axis = _axis(tmp_path, [500_000, 1_000_000])
    runs = [("-s0", ["--train.seed=1337"]), ("-s1", ["--train.seed=1338"])]
    names = [j.name for j in axis.jobs(["tied", "untied", "tie-untie-cooldown"], runs)]
    assert names == [
        "trunks/tied-s0@195",
        "0.5M/tied-s0",
        "0.5M/tie-untie-cooldown-s0",
        "trunks/tied-s0@390",
        "1M/tied-s0",
        "1M/tie-untie-cooldown-s0",
        "trunks/untied-s0@195",
        "0.5M/untied-s0",
        "trunks/untied-s0@390",
        "1M/untied-s0",
        *[n.replace("-s0", "-s1") for n in names[:10]],
    ]
    jobs = {j.name: j for j in axis.jobs(["tied", "untied"], runs)}
    assert jobs["trunks/tied-s0@390"].after == ("trunks/tied-s0@195",)
    assert jobs["1M/tied-s0"].needs_from == "trunks/tied-s0@390"
    assert jobs["1M/tied-s0"].needs == tmp_path / "trunks" / "tied-s0" / "ckpt_step390.pt"


def test_a_trunk_stage_no_unfinished_branch_needs_is_skipped(tmp_path):
    """A clone of committed branches (text files, no checkpoints) retrains no trunk for them."""
    axis = _axis(tmp_path, [500_000, 1_000_000])
    for b in ("0.5M", "1M"):
        (tmp_path / b / "untied-s0").mkdir(parents=True)
        (tmp_path / b / "untied-s0" / "summary.json").write_text("{}")
    jobs = {j.name: j for j in axis.jobs(["tied", "untied"], [("-s0", [])])}
    assert jobs["trunks/untied-s0@195"].command() is None
    assert jobs["trunks/tied-s0@195"].command() is not None


def test_a_trunk_that_diverged_is_not_trained_again_past_its_step(tmp_path):
    """A trunk whose record says it stopped on a non-finite loss at step 300 is refused, with the way to try
    again, for the stage that would cross that step; the stage before it (to 195) still runs."""
    axis = _axis(tmp_path, [500_000, 1_000_000])
    trunk = tmp_path / "trunks" / "tied-s0"
    trunk.mkdir(parents=True)
    (trunk / "ckpt_last.pt").write_bytes(b"")
    (trunk / "diverged.json").write_text(json.dumps({"step": 300, "reason": "non-finite training loss (nan)"}))
    jobs = {j.name: j for j in axis.jobs(["tied"], [("-s0", [])])}
    assert jobs["trunks/tied-s0@195"].command() is not None
    with pytest.raises(UserError, match="non-finite loss at step 300 .*delete .*diverged.json"):
        jobs["trunks/tied-s0@390"].command()
    (trunk / "diverged.json").write_text(json.dumps({"step": 391}))
    assert jobs["trunks/tied-s0@390"].command() is not None  # it wrote step 390's checkpoint first


def test_a_branch_that_diverged_is_not_trained_again(tmp_path):
    """A cooldown branch whose record says it stopped on a non-finite loss is refused, not resumed into the
    same step again; once it has a summary (a resume finished it) nothing is refused."""
    axis = _axis(tmp_path, [500_000, 1_000_000])
    branch = tmp_path / "0.5M" / "untied-s0"
    branch.mkdir(parents=True)
    (branch / "diverged.json").write_text(json.dumps({"step": 230}))
    jobs = {j.name: j for j in axis.jobs(["untied"], [("-s0", [])])}
    with pytest.raises(UserError, match="non-finite loss at step 230"):
        jobs["0.5M/untied-s0"].command()
    (branch / "summary.json").write_text("{}")
    assert jobs["0.5M/untied-s0"].command() is None


def test_an_arm_that_unties_at_a_fraction_of_the_run_is_refused_on_the_budget_axis():
    """tie-then-untie's switch would fall inside the shared trunk: refused, naming tie-untie-cooldown."""
    with pytest.raises(budget_run.UserError, match="use tie-untie-cooldown"):
        budget_run.check_arms(["tied", "tie-then-untie"])
    assert budget_run.trunk_arm("tie-untie-cooldown") == "tied" and budget_run.trunk_arm("untied") == "untied"


def test_the_plan_line_counts_trunk_and_cooldown_tokens_and_what_is_left(tmp_path):
    """36 trunks to 6,250 steps and 324 branches: the issue's 460.8M trunk and 340.2M cooldown tokens."""
    cfg = _cfg(warmup_iters=30)
    planned = budget_run.plan_budgets(budget_run.parse_budgets("0.5M,1M,2M,4M,8M,16M"), cfg)
    trunks = [f"trunks/t{i}" for i in range(36)]
    branches = [(f"{b.label}/r{i}", 1_000_000) for b in planned for i in range(54)]
    line = budget_run.plan_line(
        out_dir=tmp_path,
        budgets=planned,
        cfg=cfg,
        trunks=trunks,
        branches=branches,
        seconds_per_token=60e-6,
        how="a guess",
        jobs=2,
        threads=1,
    )
    assert "36 trunks to step 6,250 and 324 branches" in line
    assert "801.0M tokens in all (460.8M in trunks, 340.2M in cooldowns), 801.0M left" in line
    assert "roughly 6.7 h with 2 run(s) at once" in line


def test_the_budgets_mode_refuses_what_it_cannot_train(capsys):
    """--jobs or --budgets in the A/B mode, a grid axis in the budgets mode, a non-WSD schedule and a run length
    are each one error line and exit 2."""
    base = ["budgets", "--config", "configs/debug.toml"]
    assert compare.main(["--config", "configs/debug.toml", "--jobs", "2"]) == 2
    assert "--jobs: runs at once is an option of the budgets mode" in error_line(capsys)
    assert compare.main(["--config", "configs/debug.toml", "--budgets", "1M"]) == 2
    assert "python compare.py budgets --budgets TOKENS" in error_line(capsys)
    assert compare.main([*base, "--budgets", "1M", "--axis", "model.n_embd=32,64"]) == 2
    assert "unknown option --axis" in error_line(capsys)
    assert compare.main([*base, "--budgets", "1M", "--train.lr_schedule=cosine"]) == 2
    assert "drop --train.lr_schedule" in error_line(capsys)
    assert compare.main([*base, "--budgets", "1M", "--train.max_iters=100"]) == 2  # it would cut every trunk short
    assert "--budgets sets each run's length and horizon from its budget: drop --train.max_iters" in error_line(capsys)


@pytest.mark.slow
def test_compare_budgets_trains_trunks_and_branches_two_at_a_time_and_reuses_them(tmp_path, capsys):
    """Tied, untied and tie-untie-cooldown at 2 budgets, 2 seeds, --jobs 2: a branch folder per budget,
    arm and seed that records its trunk, one thread per run, the report; a second call trains nothing."""
    argv = [
        *tiny_compare_args(tmp_path, max_iters=None),
        *("--train.eval_interval=10", "--train.final_eval_tokens=2048"),
        *("--arms", "tied,untied,tie-untie-cooldown", "--seeds", "2", "--budgets", "8k,16k", "--jobs", "2"),
    ]
    argv = ["budgets", *argv]
    assert compare.main(argv) == 0
    exp = tmp_path / "exp"
    for b in ("8k", "16k"):
        for arm in ("tied", "untied", "tie-untie-cooldown"):
            for s in (0, 1):
                run = exp / b / f"{arm}-s{s}"
                record = json.loads((run / "branch.json").read_text())
                trunk = "untied" if arm == "untied" else "tied"
                assert record["trunk"] == f"../trunks/{trunk}-s{s}", record
                assert json.loads((run / "env.json").read_text())["torch_threads"] == 1
                assert (run / "summary.json").is_file()
    assert sorted(p.name for p in (exp / "trunks").iterdir()) == ["tied-s0", "tied-s1", "untied-s0", "untied-s1"]
    report = (exp / "report.md").read_text()
    assert "## Verdicts: best against best" in report and "Interim" not in report  # both declared seeds read
    assert json.loads((exp / "experiment.json").read_text())["seeds"] == 2
    capsys.readouterr()
    assert compare.main(argv) == 0
    assert "nothing to train" in capsys.readouterr().out


@pytest.mark.slow
def test_a_rate_added_to_the_grid_trains_only_its_own_trunks_and_branches(tmp_path, capsys):
    """Growing --lr-grid on a budget experiment (the edge rule's fourth rate) keeps every finished run as
    it is, trains each arm at the new rate alone, and records and reports the grown grid."""
    base = [
        *tiny_compare_args(tmp_path, max_iters=None),
        *("--train.eval_interval=10", "--train.final_eval_tokens=2048"),
        *("--arms", "tied,untied", "--seeds", "1", "--budgets", "8k", "--jobs", "2"),
    ]
    base = ["budgets", *base]
    assert compare.main([*base, "--lr-grid", "1e-3"]) == 0
    exp = tmp_path / "exp"
    before = {p: p.stat().st_mtime_ns for p in exp.glob("*/*/summary.json")}
    assert len(before) == 2 * 2  # a trunk and an 8k branch for each arm
    capsys.readouterr()
    assert compare.main([*base, "--lr-grid", "1e-3,2e-3"]) == 0
    assert {p: p.stat().st_mtime_ns for p in before} == before
    new = sorted(str(p.parent.relative_to(exp)) for p in exp.glob("*/*/summary.json") if p not in before)
    assert new == [f"{b}/{arm}-lr0.002-s0" for b in ("8k", "trunks") for arm in ("tied", "untied")]
    assert json.loads((exp / "experiment.json").read_text())["lr_grid"] == [1e-3, 2e-3]
    assert "| budget | arm | lr 0.001 | lr 0.002 |" in (exp / "report.md").read_text()  # seeds finished
