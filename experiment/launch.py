"""Training one experiment run as a ``train.py`` subprocess, and sharing an experiment's runs between processes.

:func:`run_arm` trains, resumes or reuses one run folder, passing stop signals on to its
``train.py`` (:func:`run_forwarding_signals`); :func:`run_shared` runs a list of such jobs
under per-run claims, so several ``compare.py`` can work on one experiment folder at once.
:mod:`experiment.runner` decides which runs an experiment needs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import filelock

from core.errors import Interrupted, UserError
from core.files import REPO_ROOT, acquire_or_wait, file_lock
from experiment.plan import RunsBar
from training import faults

T = TypeVar("T")


def run_forwarding_signals(cmd: list[str]) -> tuple[int, int | None]:
    """Run ``cmd`` to completion, passing each SIGINT / SIGTERM / SIGHUP we receive on to it.

    Returns ``(exit status, the last signal passed on or None)``.  The child runs in its own
    POSIX session (``start_new_session``), so a terminal's Ctrl-C (sent to the whole process
    group) reaches it once, through us, and ``train.py`` gets to stop at a step boundary with a checkpoint
    (``subprocess.run`` would SIGKILL the child on our KeyboardInterrupt).  The handlers are
    in place before the child starts; a signal the parent ignores stays ignored.
    """
    state: dict = {"proc": None, "signum": None}

    def forward(signum, frame) -> None:
        state["signum"] = signum
        if state["proc"] is not None:
            state["proc"].send_signal(signum)

    previous = {}
    for sig in faults.StopSignals.SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, forward)
    try:
        if state["signum"] is not None:
            return 128 + state["signum"], state["signum"]
        with subprocess.Popen(cmd, start_new_session=True) as proc:
            state["proc"] = proc
            if state["signum"] is not None:  # it came while the child was starting
                proc.send_signal(state["signum"])
            status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    return status, state["signum"]


def run_arm(base_argv: list[str], out_dir: Path, name: str, extra: list[str], resume_argv: list[str]) -> Path:
    """Train (or resume, or reuse) one run ``out_dir/name`` through ``train.py``; returns its folder.

    A finished run (``summary.json``) is reused, an interrupted one (``ckpt_last.pt``) resumed
    with ``resume_argv`` (bookkeeping overrides only), a missing one trained from scratch.
    """
    run_dir = out_dir / name
    train_py = str(REPO_ROOT / "train.py")
    if (run_dir / ".lock").is_file():  # a train.py still at work here (its compare.py was killed): let it end
        busy = file_lock(run_dir / ".lock")
        acquire_or_wait(busy, f"[compare] {run_dir}: waiting for the train.py that still holds it ...")
        busy.release()
    if (run_dir / "summary.json").is_file():
        print(f"[compare] {run_dir}: finished earlier, reused", flush=True)
        return run_dir
    if (run_dir / "ckpt_last.pt").is_file():
        cmd = [sys.executable, train_py, "--resume", "--run-name", name, f"--train.out_dir={out_dir}", *resume_argv]
        print(f"[compare] {run_dir}: resuming", flush=True)
    elif run_dir.exists():
        raise UserError(
            f"{run_dir} exists but holds no checkpoint (its first start failed before training): "
            "delete that folder and run the same compare.py command again"
        )
    else:
        cmd = [sys.executable, train_py, *base_argv, *extra, "--run-name", name, f"--train.out_dir={out_dir}"]
        print(f"[compare] {run_dir}: training", flush=True)
    returncode, signum = run_forwarding_signals(cmd)
    if signum is not None:  # the user asked to stop: never go on to the next arm, however the child ended
        raise Interrupted(
            signum,
            f"stopped while training {run_dir} (exit {returncode}; its checkpoint is "
            "saved): run the same compare.py command again to continue",
        )
    if returncode != 0:
        raise UserError(
            f"training {run_dir} failed (exit {returncode}; see its output above): "
            "fix the cause and run the same compare.py command again to continue"
        )
    return run_dir


def run_shared(out_dir: Path, jobs: list[tuple[str, Callable[[], T]]], bar: RunsBar | None = None) -> list[T]:
    """Run each ``(run name, job)`` under a claim on the name, so several ``compare.py`` share one folder.

    A run whose claim another process holds (another ``compare.py`` on this experiment,
    perhaps on another machine sharing ``runs/``) is put off: the free ones run first, then
    each put-off one waits for its claim and runs (by then it is usually finished, so
    ``run_arm`` reuses it).  Claims are ``flock`` files in ``out_dir/.claims/``; the kernel
    drops them when their process dies.  ``bar`` counts each run that ends here unfinished before.
    Returns the jobs' results in the order given.
    """
    claims = out_dir / ".claims"
    claims.mkdir(parents=True, exist_ok=True)
    results: dict[str, T] = {}
    later = []
    for name, job in jobs:
        claim = file_lock(claims / f"{name}.lock", timeout=0)
        try:
            claim.acquire()
        except filelock.Timeout:
            print(f"[compare] {out_dir / name}: another compare.py holds it; going on with the others", flush=True)
            later.append((name, job, claim))
            continue
        results[name] = _release_after(claim, job, out_dir / name, bar)
    for name, job, claim in later:
        acquire_or_wait(claim, f"[compare] waiting for the other compare.py that holds {out_dir / name} ...")
        results[name] = _release_after(claim, job, out_dir / name, bar)
    return [results[name] for name, _ in jobs]


def _release_after(claim: filelock.FileLock, job: Callable[[], T], run_dir: Path, bar: RunsBar | None) -> T:
    """``job()``, then release ``claim`` however the job ended; ``bar`` moves on if ``run_dir`` was unfinished."""
    was_finished = (run_dir / "summary.json").is_file()
    try:
        result = job()
    finally:
        claim.release()
    if bar is not None and not was_finished:
        bar.run_done()
    return result
