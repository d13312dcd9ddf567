"""Warmup-stable-decay and cooldown branches: a branch from a trunk is the single run of its budget, bit for bit.

Run: ``python -m pytest -q tests/test_branch.py`` (CPU, offline, about half a minute).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys

import pytest
import torch
from helpers import error_line, loss_curve, tiny_args, train_rows

import train
from model.checkpoint import load_checkpoint
from training import branch, schedule
from training.config import TrainConfig

WSD = ("--train.lr_schedule=wsd", "--train.cooldown_frac=0.25", "--train.min_lr=0")


def run(capsys, *argv: str) -> int:
    """``train.main(argv)``; the captured output is dropped."""
    status = train.main(list(argv))
    capsys.readouterr()
    return status


def test_wsd_holds_the_rate_then_cools_down_over_its_last_share():
    """WSD: linear warmup, learning_rate held until the cooldown's first step, then down to min_lr at the horizon."""
    cfg = TrainConfig(
        max_iters=100, warmup_iters=10, learning_rate=1e-3, min_lr=1e-4, lr_schedule="wsd", cooldown_frac=0.2
    )
    assert cfg.cooldown_start() == 80
    assert schedule.get_lr(9, cfg) < 1e-3
    assert all(schedule.get_lr(s, cfg) == 1e-3 for s in range(10, 81))
    assert schedule.get_lr(90, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert schedule.get_lr(100, cfg) == 1e-4
    sqrt = TrainConfig(**{**cfg.__dict__, "cooldown_shape": "1-sqrt"})
    assert schedule.get_lr(90, sqrt) == pytest.approx(1e-4 + (1 - math.sqrt(0.5)) * 9e-4)


def test_wsd_runs_of_two_lengths_agree_before_the_earlier_cooldown():
    """The property branches rest on: the learning rate before a cooldown does not depend on the horizon."""
    short = TrainConfig(max_iters=400, lr_schedule="wsd")
    long = TrainConfig(max_iters=800, lr_schedule="wsd")
    assert [schedule.get_lr(s, short) for s in range(320)] == [schedule.get_lr(s, long) for s in range(320)]


def test_an_untie_at_the_cooldown_waits_for_the_end_of_warmup():
    """train.untie_at_cooldown unties where get_lr's cooldown starts: the cooldown's first step, or the end of
    warmup when a short run's cooldown share would begin inside it (the rate still rises there)."""
    from training.config import RunConfig

    def untie(**train):
        return RunConfig.from_dict({"train": {"lr_schedule": "wsd", "untie_at_cooldown": True, **train}}, "test")

    assert untie(max_iters=100, warmup_iters=10, cooldown_frac=0.2).untie_step() == 80
    late = untie(max_iters=20, warmup_iters=18, cooldown_frac=0.2)
    assert late.train.cooldown_start() == 16 and late.untie_step() == 18
    lrs = [schedule.get_lr(s, late.train) for s in range(20)]
    assert lrs[16] < lrs[17] < lrs[18] == late.train.learning_rate > lrs[19]


def test_a_wsd_run_stopped_before_its_cooldown_is_called_a_trunk():
    """The resume note says a WSD run that ends before its cooldown ends at the peak rate, and how to branch."""
    note = schedule.schedule_note(TrainConfig(max_iters=300, lr_decay_iters=800, lr_schedule="wsd"))
    assert "a trunk" in note and "--branch-from" in note


def test_a_branch_equals_the_single_run_of_its_budget_bit_for_bit(tmp_path, corpus, capsys):
    """Trunk (horizon 32, stopped at 24, kept at 12) + branch to 16 == one WSD run of 16 steps: every loss and weight."""
    base = tiny_args(tmp_path, corpus, *WSD)
    assert run(capsys, *base, "--train.max_iters=16", "--run-name", "single") == 0
    trunk = [*base, "--train.max_iters=24", "--train.lr_decay_iters=32", "--train.save_at=12,24"]
    assert run(capsys, *trunk, "--run-name", "trunk") == 0
    runs = tmp_path / "runs"
    assert (runs / "trunk" / "ckpt_step12.pt").is_file()
    status = run(
        capsys,
        "--branch-from",
        f"{runs / 'trunk'}@12",
        "--train.max_iters=16",
        f"--train.out_dir={runs}",
        "--run-name",
        "b16",
    )
    assert status == 0
    assert loss_curve(runs / "b16") == loss_curve(runs / "single")
    a, b = load_checkpoint(runs / "b16" / "ckpt_last.pt"), load_checkpoint(runs / "single" / "ckpt_last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    summary = [json.loads((runs / r / "summary.json").read_text())["final_val_loss"] for r in ("b16", "single")]
    assert summary[0] == summary[1]
    record = json.loads((runs / "b16" / branch.BRANCH_FILE).read_text())
    assert record["trunk"] == "trunk" and record["branch_step"] == 12 and record["budget_steps"] == 16
    assert record["budget_tokens"] == json.loads((runs / "b16" / "summary.json").read_text())["tokens"]


def test_a_branch_keeps_a_best_model_that_matches_its_best_val_loss(tmp_path, corpus, capsys):
    """A branch's ckpt_best.pt exists and holds the val loss its summary calls best: the trunk's best model
    when that is of a step up to the branch point (the single run's best so far), else the best of the
    branch's own evaluations (the trunk's best file is of a later step)."""
    runs = tmp_path / "runs"
    # a rate high enough that the branch may not beat the best model of the trunk before it
    base = [
        *tiny_args(tmp_path, corpus, *WSD),
        "--train.lr_decay_iters=32",
        "--train.eval_interval=4",
        "--train.learning_rate=0.05",
    ]
    assert run(capsys, *base, "--train.max_iters=12", "--train.save_at=12", "--run-name", "stopped") == 0
    assert run(capsys, *base, "--train.max_iters=24", "--train.save_at=12", "--run-name", "onward") == 0
    for trunk in ("stopped", "onward"):
        out = [f"--train.out_dir={runs}", "--run-name", f"b-{trunk}"]
        assert run(capsys, "--branch-from", f"{runs / trunk}@12", "--train.max_iters=16", *out) == 0
        best = load_checkpoint(runs / f"b-{trunk}" / "ckpt_best.pt")
        summary = json.loads((runs / f"b-{trunk}" / "summary.json").read_text())
        assert best["val_loss"] == summary["best_val_loss"] and best["config"]["train"]["max_iters"] == 16


def test_a_branch_records_the_tokens_of_every_rank(tmp_path, corpus, capsys):
    """branch.json's budget_tokens counts every rank's tokens, as summary.json does: a trunk checkpoint
    written by 2 ranks gives twice one process's."""
    import shutil

    from model.checkpoint import save_checkpoint

    runs = tmp_path / "runs"
    trunk = [*tiny_args(tmp_path, corpus, *WSD), "--train.max_iters=8", "--train.lr_decay_iters=32"]
    assert run(capsys, *trunk, "--train.save_at=8", "--run-name", "trunk") == 0
    shutil.copytree(runs / "trunk", runs / "two")
    ckpt = load_checkpoint(runs / "two" / "ckpt_step8.pt")
    save_checkpoint(
        runs / "two" / "ckpt_step8.pt",
        {k: v for k, v in ckpt.items() if k not in ("format", "sha256")} | {"world_size": 2},
    )
    for name, ranks in (("trunk", 1), ("two", 2)):
        cfg = branch.branch_config(runs / name, 8, {"train": {"max_iters": 16}})
        branch.start_branch(runs / name, 8, runs / f"b-{name}", cfg)
        record = json.loads((runs / f"b-{name}" / branch.BRANCH_FILE).read_text())
        assert record["budget_tokens"] == 16 * branch.tokens_per_step(cfg) * ranks


def test_a_branch_that_unties_at_its_cooldown_equals_the_single_run(tmp_path, corpus, capsys):
    """train.untie_at_cooldown on a branch from a tied trunk: the same run as one that unties at its cooldown."""
    base = tiny_args(tmp_path, corpus, *WSD)
    runs = tmp_path / "runs"
    assert run(capsys, *base, "--train.max_iters=16", "--train.untie_at_cooldown=true", "--run-name", "single") == 0
    trunk = [*base, "--train.max_iters=12", "--train.lr_decay_iters=32", "--train.save_at=12"]
    assert run(capsys, *trunk, "--run-name", "trunk") == 0
    branch_argv = ["--branch-from", f"{runs / 'trunk'}@12", "--train.max_iters=16", f"--train.out_dir={runs}"]
    assert run(capsys, *branch_argv, "--train.untie_at_cooldown=true", "--run-name", "b16") == 0
    assert loss_curve(runs / "b16") == loss_curve(runs / "single")
    assert load_checkpoint(runs / "b16" / "ckpt_last.pt")["tie_embeddings"] is False


def test_a_stopped_branch_resumes_like_any_run(tmp_path, corpus, capsys):
    """A branch stopped mid-cooldown continues with --resume and ends where the single run does."""
    base = tiny_args(tmp_path, corpus, *WSD)
    runs = tmp_path / "runs"
    assert run(capsys, *base, "--train.max_iters=16", "--run-name", "single") == 0
    assert (
        run(
            capsys,
            *base,
            "--train.max_iters=12",
            "--train.lr_decay_iters=32",
            "--train.save_at=12",
            "--run-name",
            "trunk",
        )
        == 0
    )
    argv = ["--branch-from", f"{runs / 'trunk'}@12", "--train.max_iters=14", "--train.lr_decay_iters=16"]
    assert run(capsys, *argv, f"--train.out_dir={runs}", "--run-name", "b") == 0  # stopped at step 14 of 16 ...
    resumed = ["--resume", "--run-name", "b", f"--train.out_dir={runs}", "--train.max_iters=16"]
    assert run(capsys, *resumed) == 0  # ... and continued to its budget
    losses = [[(r["step"], r["train_loss"], r["lr"]) for r in train_rows(runs / n)] for n in ("b", "single")]
    assert losses[0] == losses[1]  # train rows only: stopping at step 14 added an eval there
    a, b = load_checkpoint(runs / "b" / "ckpt_last.pt"), load_checkpoint(runs / "single" / "ckpt_last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


def test_a_branch_whose_trunk_changed_is_refused(tmp_path, corpus, capsys):
    """A trunk trained again with other settings: resuming its old branch fails with one line naming the change."""
    base = tiny_args(tmp_path, corpus, *WSD)
    runs = tmp_path / "runs"
    assert (
        run(
            capsys,
            *base,
            "--train.max_iters=12",
            "--train.lr_decay_iters=32",
            "--train.save_at=8",
            "--run-name",
            "trunk",
        )
        == 0
    )
    argv = [
        "--branch-from",
        f"{runs / 'trunk'}@8",
        "--train.max_iters=10",
        f"--train.out_dir={runs}",
        "--run-name",
        "b",
    ]
    assert run(capsys, *argv) == 0
    config = json.loads((runs / "trunk" / "config.json").read_text())
    config["train"]["seed"] = 7
    (runs / "trunk" / "config.json").write_text(json.dumps(config))
    status = train.main(["--resume", "--run-name", "b", f"--train.out_dir={runs}", "--train.max_iters=12"])
    line = error_line(capsys)
    assert status == 2 and "trunk changed" in line and "train.seed" in line


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--train.max_iters=9"], "cooldown starts at step"),  # the branch would already be cooling down at 8
        (["--train.max_iters=16", "--train.seed=3"], "cannot change on a branch"),
    ],
)
def test_a_branch_that_cannot_continue_the_trunk_is_refused(tmp_path, corpus, capsys, extra, words):
    """A branch whose cooldown would start before its branch step, or that changes the maths, is one error line."""
    base = tiny_args(tmp_path, corpus, *WSD)
    runs = tmp_path / "runs"
    assert (
        run(
            capsys,
            *base,
            "--train.max_iters=8",
            "--train.lr_decay_iters=32",
            "--train.save_at=8",
            "--run-name",
            "trunk",
        )
        == 0
    )
    status = train.main(["--branch-from", f"{runs / 'trunk'}@8", f"--train.out_dir={runs}", "--run-name", "b", *extra])
    assert status == 2 and words in error_line(capsys)
    assert not (runs / "b").exists()


def test_a_branch_from_a_step_the_trunk_reached_in_an_earlier_cooldown_is_refused(tmp_path, corpus, capsys):
    """A trunk trained to its end (cooling down over steps 6-7), then resumed with a longer horizon: its
    config.json says step 8 is before the cooldown, but its steps 6-7 were not trained at the stable rate,
    so a branch from step 8 would not be its budget's single run: one error line naming the stretch."""
    runs = tmp_path / "runs"
    base = tiny_args(tmp_path, corpus, *WSD)
    assert run(capsys, *base, "--train.max_iters=8", "--train.save_at=8", "--run-name", "trunk") == 0
    resumed = ["--resume", "--run-name", "trunk", f"--train.out_dir={runs}"]
    assert run(capsys, *resumed, "--train.max_iters=10", "--train.lr_decay_iters=40") == 0
    status = train.main(
        ["--branch-from", f"{runs / 'trunk'}@8", "--train.max_iters=16", f"--train.out_dir={runs}", "--run-name", "b"]
    )
    assert status == 2 and "trained steps 0-7 with horizon 8, whose cooldown starts at step 6" in error_line(capsys)
    assert not (runs / "b").exists()


def test_a_branch_that_would_end_before_its_untie_is_refused(tmp_path, corpus, capsys):
    """A branch with train.untie_at_cooldown whose horizon puts the cooldown past its end would end tied:
    refused, as a new run with those settings is."""
    runs = tmp_path / "runs"
    base = tiny_args(tmp_path, corpus, *WSD)
    assert (
        run(capsys, *base, "--train.max_iters=8", "--train.lr_decay_iters=32", "--train.save_at=8", "--run-name", "t")
        == 0
    )
    branch_args = ["--train.max_iters=12", "--train.lr_decay_iters=40", "--train.untie_at_cooldown=true"]
    status = train.main(
        ["--branch-from", f"{runs / 't'}@8", *branch_args, f"--train.out_dir={runs}", "--run-name", "b"]
    )
    assert status == 2 and "the run would never untie" in error_line(capsys)
    assert not (runs / "b").exists()


def test_only_a_wsd_run_with_a_checkpoint_at_the_step_can_be_branched(tmp_path, corpus, capsys):
    """A cosine run, or a step the trunk kept no checkpoint at, is refused with what to do instead."""
    runs = tmp_path / "runs"
    assert run(capsys, *tiny_args(tmp_path, corpus), "--train.max_iters=8", "--run-name", "cosine") == 0
    assert (
        train.main(
            [
                "--branch-from",
                f"{runs / 'cosine'}@4",
                "--train.max_iters=8",
                f"--train.out_dir={runs}",
                "--run-name",
                "b",
            ]
        )
        == 2
    )
    assert "--train.lr_schedule=wsd" in error_line(capsys)
    base = tiny_args(tmp_path, corpus, *WSD)
    assert (
        run(capsys, *base, "--train.max_iters=8", "--train.lr_decay_iters=32", "--train.save_at=8", "--run-name", "t")
        == 0
    )
    assert (
        train.main(
            ["--branch-from", f"{runs / 't'}@4", "--train.max_iters=8", f"--train.out_dir={runs}", "--run-name", "b"]
        )
        == 2
    )
    assert "keeps no checkpoint at step 4 (it keeps 8)" in error_line(capsys)
    (runs / "t" / "ckpt_step8.bak.pt").write_bytes(b"a user's copy")  # not a step checkpoint: not listed
    assert (
        train.main(
            ["--branch-from", f"{runs / 't'}@4", "--train.max_iters=8", f"--train.out_dir={runs}", "--run-name", "b"]
        )
        == 2
    )
    assert "keeps no checkpoint at step 4 (it keeps 8)" in error_line(capsys)


def test_a_trunk_trained_in_stages_keeps_the_state_of_one_trained_in_one_go(tmp_path, corpus, capsys):
    """compare.py budgets trains a trunk stage by stage (a resume to each branch point): its checkpoint at
    the last branch point holds the same training state as a trunk trained there at once, so its branches
    are the same runs."""
    base = [*tiny_args(tmp_path, corpus, *WSD), "--train.lr_decay_iters=32", "--train.save_at=8,16"]
    runs = tmp_path / "runs"
    assert run(capsys, *base, "--train.max_iters=16", "--run-name", "whole") == 0
    assert run(capsys, *base, "--train.max_iters=8", "--run-name", "staged") == 0
    assert run(capsys, "--resume", "--run-name", "staged", f"--train.out_dir={runs}", "--train.max_iters=16") == 0
    whole, staged = (load_checkpoint(runs / n / "ckpt_step16.pt") for n in ("whole", "staged"))
    assert branch.state_digest(whole) == branch.state_digest(staged)


def test_a_branch_point_a_kill_kept_from_being_written_is_written_on_resume(tmp_path, corpus, capsys):
    """A stage killed after ckpt_last.pt reached its branch point but before ckpt_step8.pt was written: the
    resume starts past step 8 and never trains it again, so it writes the branch point from the state it
    restored, the same state as an uninterrupted trunk's; and the stage's summary of step 8 is gone while
    the trunk is extended, so a kill then leaves it resumable, not finished."""
    base = [*tiny_args(tmp_path, corpus, *WSD), "--train.lr_decay_iters=32", "--train.save_at=8,16"]
    runs = tmp_path / "runs"
    assert run(capsys, *base, "--train.max_iters=16", "--run-name", "whole") == 0
    assert run(capsys, *base, "--train.max_iters=8", "--run-name", "killed") == 0
    (runs / "killed" / "ckpt_step8.pt").unlink()  # the write the kill cut short
    extend = ["--resume", "--run-name", "killed", f"--train.out_dir={runs}", "--train.max_iters=16"]
    assert run(capsys, *extend) == 0
    whole, killed = (load_checkpoint(runs / n / "ckpt_step8.pt") for n in ("whole", "killed"))
    assert branch.state_digest(whole) == branch.state_digest(killed)


def test_a_run_extended_past_its_end_is_unfinished_until_it_ends_again(tmp_path, corpus, capsys, monkeypatch):
    """Resuming a finished 8-step run to 12 drops its summary of step 8 first: stopped at step 10 (ckpt kept),
    the folder reads unfinished and resumable, and the next --resume ends it at 12 with a new summary."""
    from training import report
    from training.run_files import RunFolder

    base = [*tiny_args(tmp_path, corpus, *WSD), "--train.lr_decay_iters=32"]
    runs = tmp_path / "runs"
    assert run(capsys, *base, "--train.max_iters=8", "--train.checkpoint_interval=2", "--run-name", "r") == 0
    assert RunFolder(runs / "r").finished

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies in its final evaluation, after ckpt_last.pt at step 12

    monkeypatch.setattr(report, "summarize", killed)
    extend = ["--resume", "--run-name", "r", f"--train.out_dir={runs}", "--train.max_iters=12"]
    assert train.main(extend) != 0  # ends as a second Ctrl-C would
    capsys.readouterr()
    folder = RunFolder(runs / "r")
    assert not folder.finished and folder.resumable and load_checkpoint(folder.last_ckpt)["step"] == 12
    monkeypatch.undo()
    assert run(capsys, *extend) == 0
    assert RunFolder(runs / "r").summary["step"] == 12


def test_a_branch_that_would_move_an_untie_at_a_fraction_is_refused(tmp_path, corpus, capsys):
    """A trunk that unties at half its 32-step horizon (step 16), branched at 12 to a 16-step budget, would untie
    at step 8 of the branch's own horizon, before the branch point: no single run; refused in one line."""
    base = tiny_args(tmp_path, corpus, *WSD)
    runs = tmp_path / "runs"
    trunk = [*base, "--train.max_iters=20", "--train.lr_decay_iters=32", "--train.save_at=12", "--train.untie_at=0.5"]
    trunk += ["--model.tie_embeddings=true"]
    assert run(capsys, *trunk, "--run-name", "trunk") == 0
    argv = ["--branch-from", f"{runs / 'trunk'}@12", "--train.max_iters=16", f"--train.out_dir={runs}"]
    assert train.main([*argv, "--run-name", "b"]) == 2
    assert "the trunk unties at step 16 and its branch at 8" in error_line(capsys)
    assert not (runs / "b").exists()


def test_a_branch_started_twice_at_once_is_refused_and_leaves_the_other_intact(tmp_path, corpus, capsys, monkeypatch):
    """Two processes starting one branch: the second to finish building is refused, the first's folder kept whole."""
    runs = tmp_path / "runs"
    base = tiny_args(tmp_path, corpus, *WSD)
    args = ("--train.max_iters=8", "--train.lr_decay_iters=32", "--train.save_at=4")
    assert run(capsys, *base, *args, "--run-name", "t") == 0
    fill = branch._fill_branch

    def other_process_wins(tmp, *rest):
        fill(tmp, *rest)
        (runs / "b").mkdir()
        (runs / "b" / "theirs.txt").write_text("kept")

    monkeypatch.setattr(branch, "_fill_branch", other_process_wins)
    argv = ["--branch-from", f"{runs / 't'}@4", "--train.max_iters=6", f"--train.out_dir={runs}", "--run-name", "b"]
    assert train.main(argv) == 2
    assert "already exists: continue that branch with --resume" in error_line(capsys)
    assert [p.name for p in (runs / "b").iterdir()] == ["theirs.txt"]
    assert not [p for p in runs.iterdir() if p.name.startswith(".b.branch")]


def test_a_branch_build_left_by_a_killed_process_is_removed_on_the_next_start(tmp_path, corpus, capsys):
    """A hidden half-built branch folder whose process of this host is gone (killed mid-build) is removed when
    the branch is next started; one of a live process is left alone."""
    runs = tmp_path / "runs"
    base = tiny_args(tmp_path, corpus, *WSD)
    assert (
        run(capsys, *base, "--train.max_iters=8", "--train.lr_decay_iters=32", "--train.save_at=4", "--run-name", "t")
        == 0
    )
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = runs / f".b.branch-{socket.gethostname()}-{int(done.stdout)}"
    live = runs / f".b.branch-{socket.gethostname()}-{os.getppid()}"
    for build in (dead, live):
        build.mkdir()
        (build / "ckpt_last.pt").write_bytes(b"half")
    argv = ["--branch-from", f"{runs / 't'}@4", "--train.max_iters=6", f"--train.out_dir={runs}", "--run-name", "b"]
    assert run(capsys, *argv) == 0
    assert not dead.exists() and live.exists()
