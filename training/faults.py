"""What a training run survives: the run folder's lock, path checks, safe checkpoints.

Used by ``train.py``; stop signals are ``core.signals``. See docs/reliability.md
for each fault and the test that injects it (``tests/test_faults.py``)::

    with RunLock(run_dir), StopSignals() as stop:  # core.signals
        ...  # train; check stop.received between steps

- :class:`RunLock`: one training process per run folder (an flock plus an owner record).
- :func:`check_run_name`, :func:`check_paths`: a run writes only into its folder and the data cache.
- :func:`claim_run_folder`: create and lock a run folder; a start that fails leaves none behind.
- :func:`write_checkpoint`: never a non-finite model, and a failed write explained.
- :func:`record_divergence`: a run stopped by a non-finite loss says so in its folder (``diverged.json``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import filelock
import torch

from core.errors import UserError
from core.files import file_lock, write_json
from model.checkpoint import save_checkpoint
from model.gpt import GPT
from training.config import RunConfig, TrainConfig
from training.run_files import DIVERGED, LAST_CKPT


class RunLock:
    """Exclusive ownership of a run folder by one training process.

    The lock is an ``flock`` on ``<run>/.lock`` taken through the ``filelock`` library: the
    kernel releases it when its process dies, however it dies (SIGKILL included), so a
    crashed run never blocks the next one.  Beside it, ``<run>/lock.json`` names the owner
    (pid, host, start time, command) so that a refused second run can say who holds the
    folder; a ``lock.json`` found while the flock is free is a stale lock from a process
    that died, reported and taken over.  On exit both files are removed, ``.lock`` while the
    flock is still held: a run folder nobody uses holds no lock files, whether its run ended,
    failed or was refused (a ``--resume`` that does not fit).  Removing a held lock file is safe
    because every acquirer checks that the file it locked is still the one at ``.lock``, and
    tries again if not (:meth:`_acquire`).  Use as a context manager::

        with RunLock(run_dir):
            ...  # write checkpoints and metrics

    Raises :class:`UserError` on entry when another live process holds the folder.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.owner_path = self.run_dir / "lock.json"
        self.lock_path = self.run_dir / ".lock"
        self._lock = file_lock(self.lock_path, timeout=0)
        self.stale_owner: dict | None = None  # the dead owner taken over, if any

    def _locks_its_path(self) -> bool | None:
        """Whether the held flock is on the file now at ``.lock``; None if ``filelock`` does not say."""
        fd = getattr(getattr(self._lock, "_context", None), "lock_file_fd", None)
        if fd is None:
            return None
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
        except OSError:  # removed by its previous owner
            return False

    def _acquire(self) -> None:
        """Take the flock (``filelock.Timeout`` if a live process has it).

        The previous owner removes ``.lock`` on exit while holding it; a process that opened
        the file just before may then get the flock on a file no longer there, which guards
        nothing (a third process would create and lock a new one).  So the lock is taken again
        until the file locked is the one at the path.
        """
        for _ in range(5):
            self._lock.acquire()
            if self._locks_its_path() is not False:
                return
            self._lock.release()
        raise filelock.Timeout(str(self.lock_path))

    def _read_owner(self) -> dict | None:
        try:
            owner = json.loads(self.owner_path.read_text())
            return owner if isinstance(owner, dict) else None
        except (OSError, ValueError):
            return None

    def __enter__(self) -> RunLock:
        try:
            self._acquire()
        except (NotImplementedError, PermissionError) as e:
            raise UserError(
                f"cannot lock run folder {self.run_dir} ({e}): its filesystem has no working file "
                "locks (flock); put train.out_dir on a local disk"
            ) from None
        except filelock.Timeout:
            owner = self._read_owner() or {}
            who = f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')} (since {owner.get('started', '?')})"
            raise UserError(
                f"run folder {self.run_dir} is in use by {who}: wait for that run to finish or stop it "
                f"(kill {owner.get('pid', '<pid>')}), then --resume; or pick another --run-name"
            ) from None
        self.stale_owner = self._read_owner()  # still there: its process died without releasing
        if self.stale_owner is not None:
            print(
                f"note: stale lock {self.owner_path} of pid {self.stale_owner.get('pid')} on host "
                f"{self.stale_owner.get('host')} taken over: that process is gone",
                file=sys.stderr,
                flush=True,
            )
        try:
            write_json(
                self.owner_path,
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": sys.argv,
                },
            )
        except BaseException:  # e.g. a full disk: do not keep a lock nobody will release
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.owner_path.unlink(missing_ok=True)
        if self._locks_its_path():  # still ours: no other process holds it, and a waiter will retry (_acquire)
            self.lock_path.unlink(missing_ok=True)
        self._lock.release()


def check_run_name(name: str) -> None:
    """A run name is one plain folder name: no path separators, no '.' or '..'."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise UserError(f"--run-name {name!r} must be a plain folder name (no '/', not '.' or '..')")


def check_paths(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse paths that would make a run write outside its run folder and the data cache.

    Both folders are resolved (symlinks, ``..``) before comparing: the run folder must be a
    real folder directly under ``train.out_dir``, and ``train.out_dir`` must not lie in (or be)
    ``data.cache_dir``: a data rebuild swaps whole folders there, run folders included.
    """
    out_dir, cache_dir = Path(cfg.train.out_dir).resolve(), Path(cfg.data.cache_dir).resolve()
    if run_dir.is_symlink() or run_dir.resolve().parent != out_dir:
        what = f"is a link to {run_dir.resolve()}" if run_dir.is_symlink() else f"resolves to {run_dir.resolve()}"
        raise UserError(
            f"run folder {run_dir} {what}: runs write only into real folders directly under "
            f"train.out_dir {out_dir}; use a plain run folder there"
        )
    for path, key in ((out_dir, "train.out_dir"), (cache_dir, "data.cache_dir")):
        if path.exists() and not path.is_dir():
            raise UserError(f"{key} {path} exists and is not a folder: point --{key} at a folder")
    if out_dir.is_relative_to(cache_dir):
        raise UserError(
            f"train.out_dir {out_dir} is inside data.cache_dir {cache_dir}: a data rebuild could "
            "replace a run folder there; give them separate folders"
        )


def resume_command(run_dir: Path, world_size: int = 1) -> str:
    """The command that continues the run in ``run_dir`` (with torchrun, on as many ranks, if ``world_size > 1``)."""
    out_dir = "" if run_dir.parent == Path(TrainConfig.out_dir) else f" --train.out_dir={run_dir.parent}"
    launcher = "python"
    if world_size > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        nodes = "" if per_node == world_size else f" --nnodes={world_size // per_node} (and the same rendezvous flags)"
        launcher = f"torchrun --nproc_per_node={per_node}{nodes}"
    return f"{launcher} train.py --run-name {run_dir.name} --resume{out_dir}"


def check_finite_weights(model: GPT, step: int, path: Path) -> None:
    """Raise :class:`UserError` if any parameter is NaN or Inf: such a model is never saved."""
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise UserError(
            f"parameters {', '.join(bad[:3])} are not finite at step {step}: not saved over {path}; "
            "start a new run with a lower --train.learning_rate"
        )


def write_checkpoint(path: Path, payload: dict, model: GPT, resume_cmd: str) -> None:
    """:func:`save_checkpoint` that refuses a non-finite model and explains a failed write.

    A failed write (full disk, lost mount) leaves the previous file at ``path`` intact.
    """
    check_finite_weights(model, payload["step"], path)
    try:
        save_checkpoint(path, payload)
    except OSError as e:
        raise UserError(
            f"could not write checkpoint {path} ({e.strerror or e}): the previous one there is intact; "
            f"free disk space, then continue with: {resume_cmd}"
        ) from None


def remove_stale_temp_files(run_dir: Path) -> None:
    """Delete half-written temp files left in ``run_dir`` by a process killed mid-write.

    Only called while holding the run's lock, so no live writer owns them.  They are never
    read: every file is renamed into place only once complete.
    """
    stale = sorted(run_dir.glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        print(
            f"removed {len(stale)} half-written file(s) left by an interrupted write: "
            f"{', '.join(p.name for p in stale)}",
            flush=True,
        )


def claim_run_folder(run_dir: Path, resume: bool, cleanup: contextlib.ExitStack) -> None:
    """Create (new run) and lock the run folder; the lock is released when ``cleanup`` closes.

    A new run that fails before its first ``ckpt_last.pt`` removes the folder it created: it
    holds nothing of value, and left behind it could be neither resumed nor reused.
    """
    if not resume:
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:
            raise UserError(f"run folder {run_dir} already exists: pick another --run-name, or add --resume") from None
        except OSError as e:
            raise UserError(f"cannot create run folder {run_dir} ({e.strerror}): check --train.out_dir") from None

        def remove_if_unstarted(exc_type, exc, tb) -> bool:
            if exc_type is not None and not (run_dir / LAST_CKPT).exists():
                shutil.rmtree(run_dir, ignore_errors=True)
            return False  # the error goes on

        cleanup.push(remove_if_unstarted)  # runs after the lock below is released
    cleanup.enter_context(RunLock(run_dir))
    remove_stale_temp_files(run_dir)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def lock_is_live(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock, found without taking it.

    :class:`RunLock` holds an flock on ``<run>/.lock`` and keeps ``lock.json`` (pid,
    host) while it does; the kernel drops the flock when the process dies.  No ``lock.json``:
    nobody holds it.  A ``lock.json`` naming a process of this host that is gone: stale.
    Otherwise the flock itself decides: a shared non-blocking flock on a read-only descriptor
    is refused while the owner holds its exclusive one (and is dropped at once when granted).
    """
    try:
        owner = json.loads((run_dir / "lock.json").read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        owner = {}
    owner = owner if isinstance(owner, dict) else {}
    pid = owner.get("pid")
    on_this_host = owner.get("host") == socket.gethostname() and type(pid) is int and pid > 0
    if on_this_host and not pid_alive(pid):
        return False
    import fcntl  # POSIX only, as flock is; imported here so the module loads elsewhere

    try:
        fd = os.open(run_dir / ".lock", os.O_RDONLY)
    except OSError:  # no lock file: nothing to hold
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            return True
        return on_this_host  # no working flock here (e.g. ENOLCK): trust the live pid
    finally:
        os.close(fd)  # releases the shared flock if it was granted


def record_divergence(run_dir: Path, step: int, reason: str, learning_rate: float, lr_at_step: float) -> None:
    """Write ``run_dir/diverged.json``: the (1-based) step whose loss or gradient was non-finite, why, the
    run's peak ``learning_rate`` and the scheduled rate at that step.

    Readers (the budget report) take it as a result -- that rate diverged -- rather than a run
    still to train; :func:`clear_divergence` removes it once a resumed run gets past that step.
    """
    record = {"step": step, "reason": reason, "learning_rate": learning_rate, "lr_at_step": lr_at_step}
    write_json(run_dir / DIVERGED, record)


def clear_divergence(run_dir: Path, step: int) -> None:
    """Remove ``run_dir/diverged.json`` if the run has now trained ``step`` steps, past the one that stopped it."""
    marker = run_dir / DIVERGED
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        if json.loads(marker.read_text())["step"] <= step:
            marker.unlink()
