"""Faults a training run survives, each injected for real: signals, kills, Ctrl-C and NaN / Inf steps.

Run: ``python -m pytest -q tests/test_faults.py``  (CPU, offline, about a minute).

SIGKILL and SIGTERM hit real ``train.py`` subprocesses (and a second run into the busy folder is
refused); Ctrl-C and non-finite losses and gradients are patched into ``train.main`` in-process
at an exact step.  "Nothing lost" is checked the strict way: a resumed run's loss curve equals
the uninterrupted run's, bit for bit, on CPU.  The faults in files and folders are in
``test_faults_files.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import error_line, error_lines, loss_curve, run_train, tiny_args, train_cmd, write_corpus

import train
import training.loop
from core.errors import UserError
from model.checkpoint import load_checkpoint
from model.gpt import GPT
from training import faults, runs

REPO = Path(__file__).resolve().parent.parent
LOG, EVAL = 1, 10  # log and eval intervals of the subprocess runs: a train row every step


def last_step(run_dir: Path) -> int:
    """The step of the last complete row of a (possibly still growing) metrics.jsonl."""
    step = -1
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            step = max(step, json.loads(line)["step"])
        except (ValueError, KeyError):
            pass  # a row being written right now
    return step


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Block until the run in ``run_dir`` has logged ``step`` (its process must still be alive)."""
    deadline = time.monotonic() + timeout
    while last_step(run_dir) < step:
        assert proc.poll() is None, f"the run exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no step {step} within {timeout} s"
        time.sleep(0.02)


def round_up(step: int, extra: int = 20) -> int:
    """A step past ``step + extra`` at which both a train row and an eval row fall."""
    return (step + extra) // EVAL * EVAL + EVAL


def same_weights(run_a: Path, run_b: Path) -> bool:
    a, b = (load_checkpoint(r / "ckpt_last.pt") for r in (run_a, run_b))
    return a["step"] == b["step"] and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


# ----------------------------------------------------------------------------- SIGKILL and SIGTERM


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> SimpleNamespace:
    """Real train.py runs: one SIGKILLed (with a second run trying its folder meanwhile), one
    SIGTERMed, both resumed, and one uninterrupted reference run of the same config."""
    root = tmp_path_factory.mktemp("killed")
    corpus = write_corpus(root)
    # lr_decay_iters is fixed so the schedule does not depend on where each run is told to end.
    common = tiny_args(
        root, corpus, f"--train.log_interval={LOG}", f"--train.eval_interval={EVAL}", "--train.lr_decay_iters=20000"
    )
    runs_dir = root / "runs"
    out = SimpleNamespace(runs=runs_dir, interval=7)

    # SIGKILL, no chance to clean up.  Logged every step, so the metrics show how far it got.
    victim = subprocess.Popen(
        train_cmd(
            *common, "--train.max_iters=20000", f"--train.checkpoint_interval={out.interval}", "--run-name", "kill"
        ),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(runs_dir / "kill", 20, victim)
        out.second = run_train("--run-name", "kill", "--resume", f"--train.out_dir={runs_dir}")
        out.victim_alive_during_second = victim.poll() is None
        out.victim_pid = victim.pid
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    finally:
        victim.kill()
    out.kill_returncode = victim.returncode
    out.kill_last_logged = last_step(runs_dir / "kill")
    out.kill_ckpt_step = load_checkpoint(runs_dir / "kill" / "ckpt_last.pt")["step"]
    out.kill_end = round_up(out.kill_ckpt_step)
    out.kill_resumed = run_train(
        "--run-name", "kill", "--resume", f"--train.out_dir={runs_dir}", f"--train.max_iters={out.kill_end}"
    )

    # SIGTERM, a scheduler's pre-emption.  The checkpoint interval is long: the stop must save.
    victim = subprocess.Popen(
        train_cmd(*common, "--train.max_iters=20000", "--train.checkpoint_interval=1000", "--run-name", "term"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(runs_dir / "term", 12, victim)
        victim.send_signal(signal.SIGTERM)
        out.term_stderr = victim.communicate(timeout=60)[1]
    finally:
        victim.kill()
    out.term_returncode = victim.returncode
    out.term_ckpt_step = load_checkpoint(runs_dir / "term" / "ckpt_last.pt")["step"]
    out.term_rows = runs.read_metrics(runs_dir / "term" / "metrics.jsonl")
    out.term_lock_left = (runs_dir / "term" / "lock.json").exists()
    out.term_end = round_up(out.term_ckpt_step)
    out.term_resumed = run_train(
        "--run-name", "term", "--resume", f"--train.out_dir={runs_dir}", f"--train.max_iters={out.term_end}"
    )

    # The uninterrupted run both are held to; its prefix up to each end step is theirs.
    out.ref_end = max(out.kill_end, out.term_end)
    out.reference = run_train(*common, f"--train.max_iters={out.ref_end}", "--run-name", "ref")
    return out


def assert_matches_reference(killed: SimpleNamespace, name: str, end: int) -> None:
    """Run ``name``'s train/eval losses equal the reference's up to ``end``, and so do its final
    weights where the reference ended at the same step."""
    assert killed.reference.returncode == 0, killed.reference.stderr[-2000:]
    assert loss_curve(killed.runs / name) == [row for row in loss_curve(killed.runs / "ref") if row[1] <= end]
    if end == killed.ref_end:
        assert same_weights(killed.runs / name, killed.runs / "ref")


@pytest.mark.slow
def test_second_run_into_a_busy_folder_is_refused_naming_the_owner(killed):
    """While a run trains, a second train.py on its folder exits 2 naming the owner's pid and host."""
    assert killed.victim_alive_during_second
    assert killed.second.returncode == 2
    (line,) = error_lines(killed.second.stderr)
    assert f"in use by pid {killed.victim_pid} on host {socket.gethostname()}" in line


@pytest.mark.slow
def test_sigkill_loses_at_most_checkpoint_interval_steps(killed):
    """After kill -9, ckpt_last.pt is loadable and at most checkpoint_interval steps behind the last logged step."""
    assert killed.kill_returncode == -signal.SIGKILL
    assert killed.kill_ckpt_step > 0
    assert killed.kill_last_logged - killed.kill_ckpt_step <= killed.interval


@pytest.mark.slow
def test_stale_lock_of_a_killed_run_is_recognised(killed):
    """The killed run's lock.json is reported as stale (its pid is gone) and the resume goes ahead."""
    assert killed.kill_resumed.returncode == 0, killed.kill_resumed.stderr[-2000:]
    assert f"stale lock {killed.runs / 'kill' / 'lock.json'} of pid {killed.victim_pid}" in killed.kill_resumed.stderr
    assert not (killed.runs / "kill" / "lock.json").exists()  # released at the end


@pytest.mark.slow
def test_resume_after_sigkill_equals_the_uninterrupted_run(killed):
    """The killed-and-resumed run's losses (every train and eval row) and final weights equal the reference's exactly."""
    assert killed.kill_resumed.returncode == 0, killed.kill_resumed.stderr[-2000:]
    assert_matches_reference(killed, "kill", killed.kill_end)


@pytest.mark.slow
def test_sigterm_checkpoints_the_current_step_and_exits_143(killed):
    """SIGTERM: the step in progress finishes, ckpt_last.pt holds it, a 'stop' row is logged, exit 128+15."""
    assert killed.term_returncode == 128 + signal.SIGTERM
    (line,) = error_lines(killed.term_stderr)
    assert f"stopped by SIGTERM at step {killed.term_ckpt_step}" in line and "--resume" in line
    assert killed.term_rows[-1] == {
        **killed.term_rows[-1],
        "kind": "stop",
        "step": killed.term_ckpt_step,
        "signal": "SIGTERM",
    }
    assert not killed.term_lock_left


@pytest.mark.slow
def test_resume_after_sigterm_equals_the_uninterrupted_run(killed):
    """Resumed from the SIGTERM checkpoint, every logged loss equals the uninterrupted run's."""
    assert killed.term_resumed.returncode == 0, killed.term_resumed.stderr[-2000:]
    assert_matches_reference(killed, "term", killed.term_end)


# ----------------------------------------------------------------------------- Ctrl-C, in-process


def signal_at_call(monkeypatch, call: int, times: int = 1) -> None:
    """Send SIGINT to this process ``times`` times during train_step call number ``call`` (1-based)."""
    real_step, calls = training.loop.train_step, {"n": 0}

    def step_then_signal(*args, **kwargs):
        calls["n"] += 1
        result = real_step(*args, **kwargs)
        if calls["n"] == call:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(training.loop, "train_step", step_then_signal)


@pytest.mark.slow
def test_ctrl_c_checkpoints_and_resume_is_bit_exact(tmp_path, corpus, monkeypatch, capsys):
    """Ctrl-C at step 7 (mid log window, between checkpoints): exit 130, ckpt_last.pt at step 7, and
    the resumed run's rows (window means included) and weights equal an uninterrupted run's."""
    args = tiny_args(
        tmp_path, corpus, "--train.max_iters=16", "--train.log_interval=3", "--train.checkpoint_interval=100"
    )
    assert train.main([*args, "--run-name", "ref"]) == 0
    signal_at_call(monkeypatch, call=7)
    assert train.main([*args, "--run-name", "cut"]) == 130
    assert "stopped by SIGINT at step 7" in error_line(capsys)
    assert load_checkpoint(tmp_path / "runs" / "cut" / "ckpt_last.pt")["step"] == 7
    monkeypatch.undo()
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "cut", "--resume"]) == 0
    assert loss_curve(tmp_path / "runs" / "cut") == loss_curve(tmp_path / "runs" / "ref")
    assert "stop" not in {r["kind"] for r in runs.read_metrics(tmp_path / "runs" / "cut" / "metrics.jsonl")}
    assert same_weights(tmp_path / "runs" / "cut", tmp_path / "runs" / "ref")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored


def test_a_run_stopped_in_its_final_evaluation_resumes_to_its_summary(tmp_path, corpus, monkeypatch, capsys):
    """Stopped after its last step, during the whole-split score (no summary yet): --resume trains no step,
    scores and summarises the run, and its final val loss is an uninterrupted run's."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=8")
    assert train.main([*args, "--run-name", "ref"]) == 0

    def stopped(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(training.loop.Trainer, "final_evaluation", stopped)
    assert train.main([*args, "--run-name", "cut"]) == 130
    cut = tmp_path / "runs" / "cut"
    assert load_checkpoint(cut / "ckpt_last.pt")["step"] == 8 and not (cut / "summary.json").exists()
    monkeypatch.undo()
    capsys.readouterr()
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "cut", "--resume"]) == 0
    summary = json.loads((cut / "summary.json").read_text())
    ref = json.loads((tmp_path / "runs" / "ref" / "summary.json").read_text())
    assert summary["final_val_loss"] == ref["final_val_loss"] and load_checkpoint(cut / "ckpt_last.pt")["step"] == 8


def test_metrics_rows_reach_the_disk_before_each_checkpoint(tmp_path, corpus, monkeypatch):
    """Every ckpt_last.pt is written after an fsync of metrics.jsonl, so a power cut never keeps a checkpoint
    newer than the rows that led to it (a resume drops rows past its checkpoint, but cannot add missing ones)."""
    from training import faults, runs

    events = []
    sync, write = runs.MetricsLog.sync, faults.write_checkpoint

    def synced(self):
        events.append(("sync", self.path.name))
        sync(self)

    def written(path, *args, **kwargs):
        events.append(("write", path.name))
        return write(path, *args, **kwargs)

    monkeypatch.setattr(runs.MetricsLog, "sync", synced)
    monkeypatch.setattr(faults, "write_checkpoint", written)
    assert train.main([*tiny_args(tmp_path, corpus, "--train.max_iters=8", "--train.checkpoint_interval=4")]) == 0
    lasts = [i for i, e in enumerate(events) if e == ("write", "ckpt_last.pt")]
    assert len(lasts) == 3 and all(events[i - 1] == ("sync", "metrics.jsonl") for i in lasts)


def test_second_ctrl_c_aborts_at_once_keeping_the_last_checkpoint(tmp_path, corpus, monkeypatch, capsys):
    """Two Ctrl-Cs abort without waiting (exit 130); ckpt_last.pt still holds the last interval's step."""
    signal_at_call(monkeypatch, call=6, times=2)
    args = tiny_args(tmp_path, corpus, "--train.max_iters=16", "--train.checkpoint_interval=4", "--run-name", "r")
    assert train.main(args) == 130
    line = error_line(capsys)
    run_dir = tmp_path / "runs" / "r"
    assert f"aborted by a second SIGINT: {run_dir / 'ckpt_last.pt'} holds step 4" in line and "--resume" in line
    assert load_checkpoint(run_dir / "ckpt_last.pt")["step"] == 4
    assert not (run_dir / "lock.json").exists() and not list(run_dir.glob(".*.tmp"))


def test_signal_during_the_first_eval_stops_at_step_0_and_resumes_exactly(tmp_path, corpus, monkeypatch, capsys):
    """Ctrl-C while the step-0 eval runs: ckpt_last.pt at step 0, exit 130; the resume logs the step-0
    eval once and ends exactly where an uninterrupted run ends."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=8")
    assert train.main([*args, "--run-name", "ref"]) == 0
    real_evaluate = training.loop.evaluate

    def evaluate_then_signal(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        return real_evaluate(*a, **k)

    monkeypatch.setattr(training.loop, "evaluate", evaluate_then_signal)
    assert train.main([*args, "--run-name", "cut"]) == 130
    assert "stopped by SIGINT at step 0" in error_line(capsys)
    monkeypatch.undo()
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "cut", "--resume"]) == 0
    assert loss_curve(tmp_path / "runs" / "cut") == loss_curve(tmp_path / "runs" / "ref")


def test_signal_in_the_last_step_completes_the_run_and_still_exits_130(tmp_path, corpus, monkeypatch, capsys):
    """A Ctrl-C during the final step is not lost: the run is finished (summary.json) but exits 130, so a
    caller such as compare.py stops instead of starting the next run."""
    signal_at_call(monkeypatch, call=6)
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=6", "--run-name", "r")) == 130
    assert "after the last step: the run is complete" in error_line(capsys)
    assert json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())["step"] == 6


def test_ignored_sigint_stays_ignored(tmp_path, corpus, monkeypatch):
    """A run started with SIGINT ignored (nohup, `cmd &` in a script) is not stopped by one."""
    signal_at_call(monkeypatch, call=3)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=6", "--run-name", "r")) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_start_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path, corpus, monkeypatch, capsys):
    """A new run that fails after creating its folder but before ckpt_last.pt removes the folder, so
    the same command works again (neither 'already exists' nor 'nothing to resume')."""

    def broken_logger(*args, **kwargs):
        raise UserError("wandb is unreachable: use --wandb.mode=offline")

    monkeypatch.setattr(runs, "make_logger", broken_logger)
    args = tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")
    assert train.main(args) == 2
    assert "wandb is unreachable" in error_line(capsys)
    assert not (tmp_path / "runs" / "r").exists()
    monkeypatch.undo()
    assert train.main(args) == 0


# ----------------------------------------------------------------------------- NaN and Inf


def poison_forward(monkeypatch, calls: set[int], where: str = "loss") -> None:
    """Make training forward pass number n (1-based, for n in ``calls``) produce a NaN loss
    (``where="loss"``) or a finite loss with infinite gradients (``where="grad"``)."""
    real_forward, count = GPT.forward, {"n": 0}

    def forward(self, idx, targets=None, return_logits=True):
        logits, loss = real_forward(self, idx, targets, return_logits)
        if self.training and targets is not None:
            count["n"] += 1
            if count["n"] in calls:
                if where == "loss":
                    loss = loss * float("nan")
                else:  # every gradient below the loss becomes infinite (or NaN), the loss stays finite
                    loss.register_hook(lambda grad: grad * float("inf"))
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)


@pytest.mark.parametrize(
    "where, what", [("loss", "non-finite training loss (nan)"), ("grad", "non-finite gradient norm")]
)
def test_non_finite_step_stops_the_run_naming_step_and_checkpoint(tmp_path, corpus, monkeypatch, capsys, where, what):
    """A NaN loss or an Inf gradient in step 6 stops the run there, names the last good checkpoint
    (step 4) and how to go on, and saves nothing: every checkpoint on disk is finite."""
    poison_forward(monkeypatch, {6}, where)
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=12", "--run-name", "r")) == 2
    line = error_line(capsys)
    run_dir = tmp_path / "runs" / "r"
    assert f"{what}" in line and "at step 6" in line
    assert f"last good checkpoint is {run_dir / 'ckpt_last.pt'} (step 4)" in line
    assert "--train.max_skipped_steps=1" in line
    for name in ("ckpt_last.pt", "ckpt_best.pt"):
        ckpt = load_checkpoint(run_dir / name)
        assert ckpt["step"] <= 4 and all(torch.isfinite(t).all() for t in ckpt["model"].values())


def test_a_run_stopped_by_a_non_finite_loss_says_so_until_it_finishes(tmp_path, corpus, monkeypatch, capsys):
    """A NaN loss at step 6 leaves diverged.json (step, reason, rate) in the run folder, so a reader can
    tell a diverged rate from a run not yet trained; resumed with one skip allowed, the run finishes
    and the record is gone."""
    poison_forward(monkeypatch, {6}, "loss")
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=12", "--run-name", "r")) == 2
    record = tmp_path / "runs" / "r" / "diverged.json"
    diverged = json.loads(record.read_text())
    assert diverged["step"] == 6 and diverged["reason"].startswith("non-finite training loss")
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert diverged["learning_rate"] == config["train"]["learning_rate"] >= diverged["lr_at_step"] > 0
    capsys.readouterr()
    resume = ["--resume", "--run-name", "r", f"--train.out_dir={tmp_path / 'runs'}", "--train.max_skipped_steps=1"]
    assert train.main(resume) == 0
    assert not record.exists() and (tmp_path / "runs" / "r" / "summary.json").is_file()


def test_a_divergence_record_goes_once_the_run_has_trained_past_its_step(tmp_path):
    """clear_divergence keeps diverged.json while the run is short of the step that stopped it (a resume
    may stop there again), and removes it once a checkpoint is past that step."""
    faults.record_divergence(tmp_path, 6, "non-finite training loss (nan)", 1e-3, 5e-4)
    faults.clear_divergence(tmp_path, 5)
    assert (tmp_path / faults.DIVERGED).is_file()
    faults.clear_divergence(tmp_path, 6)
    assert not (tmp_path / faults.DIVERGED).exists()
    faults.clear_divergence(tmp_path, 7)  # nothing to remove: no error


def test_skipped_non_finite_steps_are_not_applied_and_are_counted(tmp_path, corpus, monkeypatch):
    """With max_skipped_steps=2, two poisoned steps are skipped: AdamW made 2 fewer updates, both
    skips are in metrics.jsonl and summary.json, and the weights stay finite."""
    poison_forward(monkeypatch, {3, 9}, "loss")
    assert (
        train.main(
            tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.max_skipped_steps=2", "--run-name", "r")
        )
        == 0
    )
    run_dir = tmp_path / "runs" / "r"
    ckpt = load_checkpoint(run_dir / "ckpt_last.pt")
    adam_steps = {float(state["step"]) for state in ckpt["optimizer"]["state"].values()}
    assert adam_steps == {10.0} and ckpt["skipped_steps"] == 2
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    strict = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))  # no bare NaN
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    skips = [r for r in strict if r["kind"] == "skip"]
    assert [r["step"] for r in skips] == [3, 9] and skips[0]["train_loss"] is None
    assert skips[0]["reason"].startswith("non-finite training loss")
    assert json.loads((run_dir / "summary.json").read_text())["skipped_steps"] == 2


def test_more_non_finite_steps_than_allowed_stop_the_run(tmp_path, corpus, monkeypatch, capsys):
    """The skip budget is a limit: with max_skipped_steps=1, the second NaN stops the run."""
    poison_forward(monkeypatch, {3, 9}, "loss")
    args = tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.max_skipped_steps=1", "--run-name", "r")
    assert train.main(args) == 2
    assert "at step 9" in error_line(capsys)
