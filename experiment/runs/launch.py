"""Training one experiment run as a ``train.py`` subprocess, and sharing an experiment's runs between processes.

:func:`run_arm` trains, resumes or reuses one run folder, passing stop signals on to its
``train.py`` (:func:`run_forwarding_signals`); :func:`run_shared` runs a list of such jobs
under per-run claims, so several ``compare.py`` can work on one experiment folder at once.
:mod:`experiment.ab.run` decides which runs an experiment needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import filelock

from core.errors import Interrupted, RunFailed, UserError
from core.files import REPO_ROOT, acquire_or_wait, file_lock
from core.signals import StopSignals
from experiment.runs import ledger
from experiment.runs.plan import RunsBar
from training.branch import check_trunk
from training.faults import lock_is_live
from training.run_files import DIVERGED, RunFolder

T = TypeVar("T")
TRAIN_PY = str(REPO_ROOT / "train.py")


POLL_S = 0.5  # seconds between looks at the running processes
# What a diverged run asks for: trained again, it would stop at the same step.
LOWER_RATE = "compare at a lower rate (--lr-grid, or the arm's train.learning_rate) under a new --name"


def unfinished(run: RunFolder, last_eval: int, max_iters: int) -> str:
    """Why a run cannot be read yet, and what to do: resume it, or, if it diverged, train at a lower rate."""
    if run.diverged:
        return f"run {run.path} diverged (last eval at step {last_eval} of {max_iters}): {LOWER_RATE}"
    return (
        f"run {run.path} is unfinished (last eval at step {last_eval} of {max_iters}): finish it with "
        f"python train.py --resume --run-name {run.path.name} --train.out_dir={run.path.parent}"
    )


class _CheckpointWatch:
    """Called while a run trains: notes in the ledger, once, that its folder holds a checkpoint."""

    def __init__(self, out_dir: Path, name: str) -> None:
        self.out_dir, self.name, self.noted = out_dir, name, False

    def __call__(self) -> None:
        if not self.noted and RunFolder(self.out_dir / self.name).last_ckpt.is_file():
            ledger.note_checkpointed(self.out_dir, self.name)
            self.noted = True


def run_forwarding_signals(cmd: list[str], watch: Callable[[], None] | None = None) -> tuple[int, int | None]:
    """Run ``cmd`` to completion, passing each SIGINT / SIGTERM / SIGHUP we receive on to it.

    Returns ``(exit status, the last signal passed on or None)``.  The child runs in its own
    POSIX session (``start_new_session``), so a terminal's Ctrl-C (sent to the whole process
    group) reaches it once, through us, and ``train.py`` gets to stop at a step boundary with a checkpoint
    (``subprocess.run`` would SIGKILL the child on our KeyboardInterrupt).  The handlers are
    in place before the child starts; a signal the parent ignores stays ignored.  ``watch``, if
    given, is called every :data:`POLL_S` seconds while the child runs.
    """
    state: dict = {"proc": None, "signum": None}

    def forward(signum, frame) -> None:
        state["signum"] = signum
        if state["proc"] is not None:
            state["proc"].send_signal(signum)

    previous = {}
    for sig in StopSignals.SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, forward)
    try:
        if state["signum"] is not None:
            return 128 + state["signum"], state["signum"]
        with subprocess.Popen(cmd, start_new_session=True) as proc:
            state["proc"] = proc
            if state["signum"] is not None:  # it came while the child was starting
                proc.send_signal(state["signum"])
            while True:
                try:
                    status = proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if watch is not None:
                        watch()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    return status, state["signum"]


def arm_command(
    base_argv: list[str], out_dir: Path, name: str, extra: list[str], resume_argv: list[str], train_py: str = TRAIN_PY
) -> list[str] | None:
    """The ``train.py`` argv that brings the run ``out_dir/name`` to its end, or None when it is finished.

    A finished run (``summary.json``) is reused, an interrupted one (``ckpt_last.pt``) resumed
    with ``resume_argv`` (bookkeeping overrides only), a missing one trained from scratch, all with
    ``train_py`` (an arm from code: its worktree's, :func:`experiment.arms.worktree`).  A
    branch (:mod:`training.branch`) whose trunk changed since it branched is refused.  Raises
    :class:`UserError` for a folder whose first start failed before its first checkpoint.
    """
    run_dir = out_dir / name
    check_trunk(run_dir)
    run = RunFolder(run_dir)
    if run.finished:
        return None
    if run.resumable:
        return [sys.executable, train_py, "--resume", "--run-name", name, f"--train.out_dir={out_dir}", *resume_argv]
    if run_dir.exists():
        raise UserError(
            f"{run_dir} exists but holds no checkpoint (its first start failed before training): "
            "delete that folder and run the same compare.py command again"
        )
    return [sys.executable, train_py, *base_argv, *extra, "--run-name", name, f"--train.out_dir={out_dir}"]


def run_arm(
    base_argv: list[str], out_dir: Path, name: str, extra: list[str], resume_argv: list[str], train_py: str = TRAIN_PY
) -> Path:
    """Train (or resume, or reuse) one run ``out_dir/name`` through ``train.py`` (:func:`arm_command`); returns its folder."""
    run_dir = out_dir / name
    if (run_dir / ".lock").is_file():  # a train.py still at work here (its compare.py was killed): let it end
        busy = file_lock(run_dir / ".lock")
        acquire_or_wait(busy, f"[compare] {run_dir}: waiting for the train.py that still holds it ...")
        busy.release()
    cmd = arm_command(base_argv, out_dir, name, extra, resume_argv, train_py)
    if cmd is None:
        ledger.note_finished(out_dir, name)  # (if a kill came between its end and the note)
        print(f"[compare] {run_dir}: finished earlier, reused", flush=True)
        return run_dir
    print(f"[compare] {run_dir}: {'resuming' if '--resume' in cmd else 'training'}", flush=True)
    ledger.note_start(out_dir, name, fresh="--resume" not in cmd)
    returncode, signum = run_forwarding_signals(cmd, watch=_CheckpointWatch(out_dir, name))
    ledger.note_finished(out_dir, name)  # however it ended: a stop in its last step may leave it finished
    if signum is not None:  # the user asked to stop: never go on to the next arm, however the child ended
        raise Interrupted(
            signum,
            f"stopped while training {run_dir} (exit {returncode}; its checkpoint is "
            "saved): run the same compare.py command again to continue",
        )
    if returncode != 0 and RunFolder(run_dir).diverged:
        raise RunFailed(
            f"training {run_dir} diverged ({run_dir / DIVERGED}): the same command would train it to the same "
            f"step again; {LOWER_RATE}"
        )
    if returncode != 0:
        raise RunFailed(
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
    was_finished = RunFolder(run_dir).finished
    try:
        result = job()
    finally:
        claim.release()
    if bar is not None and not was_finished:
        bar.run_done()
    return result


@dataclass
class Job:
    """One ``train.py`` process of an experiment run by :func:`run_parallel`.

    ``name`` is the run folder under the experiment folder (``4M/tied-s0``; a trunk's stages are
    ``trunks/tied-s0@<step>`` with ``claim`` ``trunks/tied-s0``);
    ``command()`` gives the argv now (None: nothing left to do).  A job starts once the jobs
    named in ``after`` are done and the file ``needs`` exists (a trunk's branch checkpoint);
    it fails without starting if one of ``after``, or ``needs_from`` (the job writing
    ``needs``), failed.
    """

    name: str
    command: Callable[[], list[str] | None]
    after: tuple[str, ...] = ()
    needs: Path | None = None
    needs_from: str | None = None
    claim: str = ""  # the run folder it trains, if not ``name`` (a trunk's stages share one)

    @property
    def folder(self) -> str:
        """The run folder under the experiment folder that this job trains."""
        return self.claim or self.name


@dataclass
class _Running:
    """A started job: its process, its claim and its log file."""

    job: Job
    proc: subprocess.Popen
    claim: filelock.FileLock
    log: Path | None
    watch: Callable[[], None]


def run_parallel(out_dir: Path, jobs: list[Job], n: int, threads: int, bar: RunsBar | None = None) -> dict[str, bool]:
    """Run ``jobs`` as up to ``n`` ``train.py`` processes at once, each on ``threads`` torch threads.

    Jobs start in list order as their prerequisites allow (a ready job never waits for a later
    one); with ``n`` > 1 each process writes to ``out_dir/logs/<name>.log`` and one line says
    when it starts and ends.  ``OMP_NUM_THREADS`` sets every process's thread count, so every
    run of the experiment trains with the same (each run records it in ``env.json``).  Runs are
    claimed as in :func:`run_shared`, so another ``compare.py`` may share the folder.  A failed
    run does not stop the others; its dependents fail with it.  A SIGINT / SIGTERM / SIGHUP is
    passed on to every running process, which checkpoint and stop; then :class:`Interrupted`.
    Returns ``{job name: finished}``.
    """
    (out_dir / ".claims").mkdir(parents=True, exist_ok=True)
    pending, running, done, waiting = list(jobs), {}, {}, set()
    state: dict = {"signum": None}

    def forward(signum, frame) -> None:
        state["signum"] = signum
        for r in running.values():
            r.proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in StopSignals.SIGNALS}
    try:
        while pending or running:
            if state["signum"] is None:
                for job in list(pending):
                    if len(running) >= n:
                        break
                    verdict = _readiness(job, done)
                    if verdict == "wait":
                        continue
                    pending.remove(job)
                    if verdict == "fail":
                        done[job.name] = False
                        print(f"[compare] {out_dir / job.name}: not run, a run it starts from failed", flush=True)
                        continue
                    started = _start(out_dir, job, n, threads, waiting)
                    if started is None:  # another compare.py holds it: try again later
                        pending.append(job)
                    elif isinstance(started, bool):
                        done[job.name] = started
                    else:
                        running[job.name] = started
            for name, r in list(running.items()):
                if r.proc.poll() is None:
                    r.watch()
                    continue
                del running[name]
                ledger.note_finished(out_dir, r.job.folder)  # however it ended (a stop in its last step)
                r.claim.release()
                done[name] = r.proc.returncode == 0
                _report_end(out_dir, r, n)
                if bar is not None:
                    bar.run_done()
            if state["signum"] is not None and not running:
                raise Interrupted(
                    state["signum"],
                    "stopped: each running train.py was asked to save a checkpoint and stop (its own lines say "
                    "whether it could); run the same compare.py command again to continue",
                )
            if pending or running:
                time.sleep(POLL_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    return done


def _readiness(job: Job, done: dict[str, bool]) -> str:
    """``"go"``, ``"wait"`` or ``"fail"``: whether ``job``'s prerequisites (see :class:`Job`) allow it to start."""
    if any(done.get(a) is False for a in job.after):
        return "fail"
    if not all(done.get(a) for a in job.after):
        return "wait"
    if job.needs is None or job.needs.is_file() or done.get(job.needs_from):
        return "go"  # (a finished run needs no file: its command says there is nothing left to do)
    return "fail" if job.needs_from in done else "wait"


def _start(out_dir: Path, job: Job, n: int, threads: int, waiting: set[str]) -> _Running | bool | None:
    """Claim and start ``job``: its :class:`_Running`, True when nothing was left to do, False when its
    command was refused (the message is printed), None when another process holds its claim or a
    train.py is still at work in its folder (said once, by name in ``waiting``)."""
    claim = file_lock(out_dir / ".claims" / f"{job.folder.replace('/', '_')}.lock", timeout=0)
    try:
        claim.acquire()
    except filelock.Timeout:
        return None
    if lock_is_live(out_dir / job.folder):  # a train.py whose compare.py was killed: let it end, then go on
        claim.release()
        if job.folder not in waiting:
            waiting.add(job.folder)
            print(f"[compare] {out_dir / job.folder}: waiting for the train.py that still holds it ...", flush=True)
        return None
    try:
        cmd = job.command()
    except UserError as e:
        claim.release()
        print(f"[compare] {out_dir / job.folder}: {e}", flush=True)
        return False
    if cmd is None:
        ledger.note_finished(out_dir, job.folder)
        claim.release()
        return True
    ledger.note_start(out_dir, job.folder, fresh="--resume" not in cmd)
    log = out_dir / "logs" / f"{job.folder.replace('/', '_')}.log" if n > 1 else None
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:  # the child keeps its own descriptor
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        print(f"[compare] {out_dir / job.name}: started (log: {log})", flush=True)
    else:
        proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    return _Running(job, proc, claim, log, _CheckpointWatch(out_dir, job.folder))


def _report_end(out_dir: Path, r: _Running, n: int) -> None:
    """One line when a run ends (with ``n`` > 1); a failed run's log tail."""
    code = r.proc.returncode
    if code == 0:
        if n > 1:
            print(f"[compare] {out_dir / r.job.name}: done", flush=True)
        return
    tail = ""
    if r.log is not None and r.log.is_file():
        lines = [ln for ln in r.log.read_text(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
        tail = " | ".join(lines[-3:])
    print(f"[compare] {out_dir / r.job.name}: failed (exit {code}){': ' + tail if tail else ''}", flush=True)
