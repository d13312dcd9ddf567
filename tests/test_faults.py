"""Faults a training run survives, each injected for real, each checked for what was kept.

Run: ``python -m pytest -q tests/test_faults.py``  (CPU, offline, about a minute).

Signals and kills use real ``train.py`` subprocesses (SIGTERM, SIGKILL, a kill in the middle of
a checkpoint write); the rest calls ``train.main`` in-process with the fault patched in at an
exact step (Ctrl-C, a full disk, NaN / Inf losses and gradients), or hands it a damaged or
hostile file.  "Nothing lost" is checked the strict way: a resumed run's loss curve equals the
uninterrupted run's, bit for bit, on CPU.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import error_line, error_lines, loss_curve, tiny_args, write_corpus

import sample
import train
import training.loop
from core.errors import UserError
from data.loader import TokenData
from experiment import runner
from model.checkpoint import load_checkpoint, save_checkpoint
from model.gpt import GPT
from training import faults, runs

REPO = Path(__file__).resolve().parent.parent
LOG, EVAL = 1, 10  # log and eval intervals of the subprocess runs: a train row every step


def train_cmd(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), *args]


def run_train(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` to completion, output captured."""
    return subprocess.run(train_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=300, **kwargs)


def last_step(run_dir: Path) -> int:
    """The step of the last complete row of a (possibly still growing) metrics.jsonl."""
    step = -1
    path = run_dir / "metrics.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else []):
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
    common = tiny_args(root, corpus, f"--train.log_interval={LOG}", f"--train.eval_interval={EVAL}",
                       "--train.lr_decay_iters=20000")
    runs_dir = root / "runs"
    out = SimpleNamespace(runs=runs_dir, interval=7)

    # SIGKILL, no chance to clean up.  Logged every step, so the metrics show how far it got.
    victim = subprocess.Popen(train_cmd(*common, "--train.max_iters=20000",
                                        f"--train.checkpoint_interval={out.interval}", "--run-name", "kill"),
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
    out.kill_resumed = run_train("--run-name", "kill", "--resume", f"--train.out_dir={runs_dir}",
                                 f"--train.max_iters={out.kill_end}")

    # SIGTERM, a scheduler's pre-emption.  The checkpoint interval is long: the stop must save.
    victim = subprocess.Popen(train_cmd(*common, "--train.max_iters=20000", "--train.checkpoint_interval=1000",
                                        "--run-name", "term"),
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
    out.term_resumed = run_train("--run-name", "term", "--resume", f"--train.out_dir={runs_dir}",
                                 f"--train.max_iters={out.term_end}")

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


def test_second_run_into_a_busy_folder_is_refused_naming_the_owner(killed):
    """While a run trains, a second train.py on its folder exits 2 naming the owner's pid and host."""
    assert killed.victim_alive_during_second
    assert killed.second.returncode == 2
    (line,) = error_lines(killed.second.stderr)
    assert f"in use by pid {killed.victim_pid} on host {socket.gethostname()}" in line


def test_sigkill_loses_at_most_checkpoint_interval_steps(killed):
    """After kill -9, ckpt_last.pt is loadable and at most checkpoint_interval steps behind the last logged step."""
    assert killed.kill_returncode == -signal.SIGKILL
    assert killed.kill_ckpt_step > 0
    assert killed.kill_last_logged - killed.kill_ckpt_step <= killed.interval


def test_stale_lock_of_a_killed_run_is_recognised(killed):
    """The killed run's lock.json is reported as stale (its pid is gone) and the resume goes ahead."""
    assert killed.kill_resumed.returncode == 0, killed.kill_resumed.stderr[-2000:]
    assert f"stale lock {killed.runs / 'kill' / 'lock.json'} of pid {killed.victim_pid}" in killed.kill_resumed.stderr
    assert not (killed.runs / "kill" / "lock.json").exists()  # released at the end


def test_resume_after_sigkill_equals_the_uninterrupted_run(killed):
    """The killed-and-resumed run's losses (every train and eval row) and final weights equal the reference's exactly."""
    assert killed.kill_resumed.returncode == 0, killed.kill_resumed.stderr[-2000:]
    assert_matches_reference(killed, "kill", killed.kill_end)


def test_sigterm_checkpoints_the_current_step_and_exits_143(killed):
    """SIGTERM: the step in progress finishes, ckpt_last.pt holds it, a 'stop' row is logged, exit 128+15."""
    assert killed.term_returncode == 128 + signal.SIGTERM
    (line,) = error_lines(killed.term_stderr)
    assert f"stopped by SIGTERM at step {killed.term_ckpt_step}" in line and "--resume" in line
    assert killed.term_rows[-1] == {**killed.term_rows[-1], "kind": "stop", "step": killed.term_ckpt_step,
                                    "signal": "SIGTERM"}
    assert not killed.term_lock_left


def test_resume_after_sigterm_equals_the_uninterrupted_run(killed):
    """Resumed from the SIGTERM checkpoint, every logged loss equals the uninterrupted run's."""
    assert killed.term_resumed.returncode == 0, killed.term_resumed.stderr[-2000:]
    assert_matches_reference(killed, "term", killed.term_end)


# ----------------------------------------------------------------------------- Ctrl-C, in-process


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


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


def test_ctrl_c_checkpoints_and_resume_is_bit_exact(tmp_path, corpus, monkeypatch, capsys):
    """Ctrl-C at step 7 (mid log window, between checkpoints): exit 130, ckpt_last.pt at step 7, and
    the resumed run's rows (window means included) and weights equal an uninterrupted run's."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=16", "--train.log_interval=3",
                     "--train.checkpoint_interval=100")
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


# ----------------------------------------------------------------------------- crashes while writing


CRASH_MID_WRITE = """
import os, signal, sys, torch
import train
real_save = torch.save
def save_and_die(obj, f, *args, **kwargs):
    if "optimizer" in obj and obj["step"] == 8:  # ckpt_last.pt at step 8: write half, then die
        f.write(b"PK\\x03\\x04 half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *args, **kwargs)
torch.save = save_and_die
sys.exit(train.main(sys.argv[1:]))
"""


def test_kill_in_the_middle_of_a_checkpoint_write_keeps_the_previous_one(tmp_path, corpus):
    """Killed while writing ckpt_last.pt: the old file still loads (step 4), the half-written temp file
    is never read, the resume removes it and ends where an uninterrupted run ends."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.checkpoint_interval=4")
    proc = subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, *args, "--run-name", "crash"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run_dir = tmp_path / "runs" / "crash"
    assert load_checkpoint(run_dir / "ckpt_last.pt")["step"] == 4
    (half,) = run_dir.glob(".ckpt_last.pt.*.tmp")
    with pytest.raises(UserError):
        load_checkpoint(half)
    resumed = run_train(f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "crash", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "removed 1 half-written file" in resumed.stdout
    assert not list(run_dir.glob(".*.tmp"))
    assert train.main([*args, "--run-name", "ref"]) == 0
    assert loss_curve(run_dir) == loss_curve(tmp_path / "runs" / "ref")


def test_full_disk_during_a_checkpoint_write_keeps_the_previous_one(tmp_path, corpus, monkeypatch, capsys):
    """ENOSPC while writing ckpt_last.pt: exit 2 with one line naming the file and the fix; the
    previous checkpoint is intact and no temp file is left."""
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if "optimizer" in obj and obj["step"] == 8:
            f.write(b"PK\x03\x04 some bytes")
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=12", "--run-name", "r")) == 2
    line = error_line(capsys)
    run_dir = tmp_path / "runs" / "r"
    assert f"could not write checkpoint {run_dir / 'ckpt_last.pt'} (No space left on device)" in line
    assert "free disk space" in line and "--resume" in line
    assert load_checkpoint(run_dir / "ckpt_last.pt")["step"] == 4
    assert not list(run_dir.glob(".*.tmp"))


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


@pytest.mark.parametrize("where, what", [("loss", "non-finite training loss (nan)"),
                                         ("grad", "non-finite gradient norm")])
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


def test_skipped_non_finite_steps_are_not_applied_and_are_counted(tmp_path, corpus, monkeypatch):
    """With max_skipped_steps=2, two poisoned steps are skipped: AdamW made 2 fewer updates, both
    skips are in metrics.jsonl and summary.json, and the weights stay finite."""
    poison_forward(monkeypatch, {3, 9}, "loss")
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.max_skipped_steps=2",
                                "--run-name", "r")) == 0
    run_dir = tmp_path / "runs" / "r"
    ckpt = load_checkpoint(run_dir / "ckpt_last.pt")
    adam_steps = {float(state["step"]) for state in ckpt["optimizer"]["state"].values()}
    assert adam_steps == {10.0} and ckpt["skipped_steps"] == 2
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    strict = [json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))  # no bare NaN
              for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
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


# ----------------------------------------------------------------------------- damaged and hostile files


@pytest.fixture
def finished(tmp_path, corpus) -> Path:
    """A finished tiny char-tokenizer run folder."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")) == 0
    return tmp_path / "runs" / "r"


def test_tampered_checkpoint_fails_its_digest_and_is_not_overwritten(finished, tmp_path, capsys):
    """One flipped byte inside a tensor (torch.load alone accepts it) fails the sha256 check; the
    resume exits 2 naming the file, and the file is left as it was."""
    path = finished / "ckpt_last.pt"
    ckpt = load_checkpoint(path)
    marker = ckpt["model"]["wte.weight"][3, :4].numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at > 0
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=True)  # the damage is invisible to torch
    argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]
    assert train.main(argv) == 2
    assert f"checkpoint {path} fails its sha256 check" in error_line(capsys)
    assert path.read_bytes() == bytes(data)
    # Relabelled as a format-1 file (written before digests existed), it is still checked.
    path.write_bytes(bytes(data).replace(b"tinygpt-checkpoint-2", b"tinygpt-checkpoint-1"))
    with pytest.raises(UserError, match="fails its sha256 check"):
        load_checkpoint(path)


def test_truncated_checkpoint_is_refused_by_sample_and_resume(finished, tmp_path, capsys):
    """A checkpoint cut short (a copy that died half way) is a one-line error for sample.py and --resume."""
    path = finished / "ckpt_last.pt"
    path.write_bytes(path.read_bytes()[:5000])
    assert sample.main(["--run", str(finished), "--checkpoint", "last"]) == 2
    assert f"checkpoint {path} could not be loaded safely" in error_line(capsys)
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]) == 2
    assert f"checkpoint {path} could not be loaded safely" in error_line(capsys)


def test_checkpoint_carrying_a_pickled_object_is_refused_not_executed(tmp_path):
    """A crafted checkpoint whose unpickling would create a file: refused, and the file never appears."""
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"format": "tinygpt-checkpoint-2", "model": {}, "x": Exploit()}, tmp_path / "evil.pt")
    with pytest.raises(UserError, match="could not be loaded safely"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


def test_checkpoint_digest_round_trips_every_payload_type(tmp_path):
    """save/load keeps tensors of every dtype, nested dicts/lists, None and floats under one valid digest."""
    payload = {"model": {"a": torch.randn(3, 2).bfloat16(), "b": torch.tensor(7)}, "step": 3, "val_loss": None,
               "best_val_loss": float("inf"), "nested": [1, {"x": 2.5}], "train_window": [0.5, 2]}
    save_checkpoint(tmp_path / "c.pt", payload)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert loaded.pop("format") == "tinygpt-checkpoint-2" and len(loaded.pop("sha256")) == 64
    assert loaded.keys() == payload.keys() and torch.equal(loaded["model"]["a"], payload["model"]["a"])
    assert loaded["model"]["a"].dtype == torch.bfloat16 and loaded["model"]["b"].item() == 7
    assert (loaded["step"], loaded["val_loss"], loaded["best_val_loss"]) == (3, None, float("inf"))
    assert loaded["nested"] == [1, {"x": 2.5}] and loaded["train_window"] == [0.5, 2]


def prepared(tmp_path, corpus) -> Path:
    """The prepared-data folder of the tiny runs."""
    (folder,) = (p for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock")  # .<name>.lock: the build lock
    return folder


def test_meta_json_that_disagrees_with_its_token_files_is_refused(finished, tmp_path, corpus, capsys):
    """meta.json claiming more tokens than a train shard holds: one line naming the token file and the fix."""
    folder = prepared(tmp_path, corpus)
    meta = json.loads((folder / "meta.json").read_text())
    meta["splits"]["train"]["shards"][0]["tokens"] += 10
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"token file '.*train-00000.bin' has \d+ bytes, expected .*--force"):
        TokenData(folder)


def test_token_ids_beyond_vocab_size_are_refused(finished, tmp_path, corpus, capsys):
    """A train shard holding an id >= vocab_size (another tokenizer's file) is refused before training."""
    folder = prepared(tmp_path, corpus)
    shard = folder / "train-00000.bin"
    data = bytearray(shard.read_bytes())
    data[10:12] = (60000).to_bytes(2, "little")
    shard.write_bytes(bytes(data))
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r2")) == 2
    line = error_line(capsys)
    assert f"token file '{shard}' holds token id 60000" in line and "--force" in line
    assert not (tmp_path / "runs" / "r2").exists()


def test_meta_vocab_size_that_disagrees_with_the_tokenizer_is_refused(finished, tmp_path, corpus, capsys):
    """meta.json's vocab_size differing from tokenizer.json's is refused, naming both and the fix."""
    folder = prepared(tmp_path, corpus)
    meta = json.loads((folder / "meta.json").read_text())
    meta["vocab_size"] += 100
    (folder / "meta.json").write_text(json.dumps(meta))
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r2")) == 2
    assert f"says vocab_size {meta['vocab_size']} but its tokenizer.json has" in error_line(capsys)


def test_prompt_the_char_tokenizer_cannot_encode_is_one_line(finished, capsys):
    """sample.py with characters outside a char run's alphabet exits 2 naming them and the fix."""
    assert sample.main(["--run", str(finished), "--prompt", "ROMEO: 日本"]) == 2
    line = error_line(capsys)
    assert "日" in line and "本" in line


# ----------------------------------------------------------------------------- two runs, one folder


def test_live_lock_refuses_a_resume(finished, tmp_path, capsys):
    """A folder whose lock is held (here by this process) refuses --resume, naming pid and host."""
    with faults.RunLock(finished):
        argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]
        assert train.main(argv) == 2
        assert f"in use by pid {os.getpid()} on host {socket.gethostname()}" in error_line(capsys)
        assert json.loads((finished / "lock.json").read_text())["pid"] == os.getpid()  # the owner's record stays
    assert not (finished / "lock.json").exists()


def test_stale_lock_from_a_dead_process_is_taken_over(finished, tmp_path, capsys):
    """A lock.json naming a pid that no longer exists (its flock died with it) does not block a resume."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": "earlier", "command": []}
    (finished / "lock.json").write_text(json.dumps(owner))
    argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=6"]
    assert train.main(argv) == 0
    assert f"of pid {owner['pid']} on host {owner['host']} taken over" in capsys.readouterr().err
    assert load_checkpoint(finished / "ckpt_last.pt")["step"] == 6


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "."])
def test_run_name_cannot_leave_out_dir(tmp_path, corpus, capsys, name):
    """A --run-name with a path in it is refused for new runs and resumes alike."""
    assert train.main(tiny_args(tmp_path, corpus, "--run-name", name)) == 2
    assert "must be a plain folder name" in error_line(capsys)
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", name, "--resume"]) == 2
    assert "must be a plain folder name" in error_line(capsys)
    assert not (tmp_path / "escape").exists()


def test_symlinked_run_folder_pointing_elsewhere_is_refused(finished, tmp_path, capsys):
    """A run folder that is a link to a folder outside train.out_dir is never written through."""
    outside = tmp_path / "elsewhere"
    finished.rename(outside)
    finished.symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]) == 2
    assert f"is a link to {outside}" in error_line(capsys)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize("cache", ["runs", "."])
def test_run_folders_inside_the_data_cache_are_refused(tmp_path, corpus, capsys, cache):
    """train.out_dir equal to, or inside, data.cache_dir is refused: a data rebuild swaps folders there."""
    args = tiny_args(tmp_path, corpus, f"--data.cache_dir={tmp_path / cache}", "--run-name", "r")
    assert train.main(args) == 2
    assert "is inside data.cache_dir" in error_line(capsys)
    assert not (tmp_path / "runs" / "r").exists()


def test_training_writes_only_into_its_run_folder_and_the_data_cache(tmp_path):
    """A full run (wandb offline included) from a fresh working folder and HOME creates files only under
    runs/<name>/ and the data cache, and none in the repository."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    corpus = write_corpus(tmp_path)
    repo_before = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TINYGPT_"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"),
               TMPDIR=str(tmp_path / "tmp"), PYTHONDONTWRITEBYTECODE="1")
    (tmp_path / "tmp").mkdir()
    before = {p for p in tmp_path.rglob("*")}
    proc = subprocess.run(
        train_cmd(f"--data.source={corpus}", "--data.tokenizer=char", "--model.n_layer=1", "--model.n_embd=16",
                  "--model.n_head=1", "--model.block_size=16", "--train.max_iters=4", "--train.eval_iters=1",
                  "--train.sample_tokens=5", "--wandb.mode=offline", "--run-name", "r"),
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    created = {p for p in tmp_path.rglob("*") if p.is_file()} - before
    allowed = (work / "runs" / "r", work / "data" / "cache")
    outside = sorted(str(p.relative_to(tmp_path)) for p in created if not any(p.is_relative_to(a) for a in allowed))
    assert outside == []
    repo_after = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True).stdout
    assert repo_after == repo_before


# ----------------------------------------------------------------------------- compare.py's children

CHILD = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
Path(sys.argv[1]).write_text(str(os.getsid(0)))
time.sleep(60)
"""


def test_compare_passes_a_signal_to_its_training_child_once(tmp_path):
    """compare.py's child train.py runs in its own session (a terminal's Ctrl-C reaches it once,
    through compare.py) and a SIGTERM sent to compare.py is passed on: the child stops cleanly."""
    import threading

    ready = tmp_path / "ready"

    def terminate_when_ready():
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_ready, daemon=True).start()
    started = time.monotonic()
    status, forwarded = runner.run_forwarding_signals([sys.executable, "-c", CHILD, str(ready)])
    assert (status, forwarded) == (128 + signal.SIGTERM, signal.SIGTERM) and time.monotonic() - started < 30
    assert int(ready.read_text()) != os.getsid(0)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_config_values_are_data_never_code(tmp_path, corpus, capsys):
    """Python in a TOML value or a CLI value is a string (or a type error), never run."""
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path('{marker}').touch()"
    toml = tmp_path / "c.toml"
    toml.write_text(f'[train]\nlearning_rate = "{code}"\n')
    assert train.main(["--config", str(toml), "--run-name", "r"]) == 2
    assert "train.learning_rate" in error_line(capsys)
    assert train.main(tiny_args(tmp_path, corpus, f"--model.n_layer={code}", "--run-name", "r")) == 2
    assert "model.n_layer" in error_line(capsys)
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=1", f"--wandb.name={code}", "--run-name", "r")) == 0
    assert not marker.exists()


def test_a_non_finite_model_is_never_written_over_a_checkpoint(tmp_path):
    """write_checkpoint refuses weights holding a NaN (naming the step) and leaves the old file as it was."""
    from model.config import GPTConfig

    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=8))
    path = tmp_path / "ckpt_last.pt"
    save_checkpoint(path, {"model": model.state_dict(), "step": 1})
    before = path.read_bytes()
    with torch.no_grad():
        model.blocks[0].mlp.up_proj.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match=r"blocks\.0\.mlp\.up_proj\.weight .*not finite at step 2"):
        faults.write_checkpoint(path, {"model": model.state_dict(), "step": 2}, model, "python train.py --resume")
    assert path.read_bytes() == before
