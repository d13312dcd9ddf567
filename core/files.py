"""Crash-safe files: atomic writes with fsync, JSON, hashing, folder swaps and one kind of lock.

Every file tinygpt writes that a later process reads (checkpoints, ``config.json``,
``meta.json``, tokenizers, plots) goes through :func:`atomic_write`: a reader, or a run
resumed after a crash or a power cut, sees the old file or the complete new one, never half.
Locks (:func:`file_lock`) are ``flock`` locks taken through the ``filelock`` library, so the
kernel releases them when their process dies, however it dies.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import filelock

from core.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout: git metadata, train.py for subprocesses


def cache_dir() -> Path:
    """tinygpt's per-user cache folder (not created here): ``$TINYGPT_CACHE_DIR`` if set, else ``~/.cache/tinygpt``."""
    env = os.environ.get("TINYGPT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tinygpt"


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (POSIX: the folder's entry list is data too)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], None], mode: int = 0o644) -> None:
    """Create or replace ``path`` with what ``write(f)`` writes, all or nothing.

    The bytes go to a temp file in the same folder, are fsync'ed and ``os.replace``'d over
    ``path`` (atomic on POSIX and Windows on one filesystem), then the folder is fsync'ed so
    the rename survives a power cut.  Missing parent folders are created.  On any failure
    (a full disk: ``OSError`` ENOSPC) the temp file is removed, ``path`` is untouched and the
    error propagates.  ``mode``: the file's permissions (mkstemp alone would give 0o600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # named by the file asked for, not the hidden temp name the user never gave
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write` of ``data``."""
    atomic_write(path, lambda f: f.write(data))


def write_text_atomic(path: Path, text: str) -> None:
    """:func:`atomic_write` of ``text`` as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj, indent: int = 2) -> None:
    """:func:`atomic_write` of ``obj`` as JSON (non-ASCII kept as is)."""
    write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def read_json(path: Path, what: str) -> dict:
    """Read the JSON object ``what`` (e.g. "run config") from ``path``.

    Raises :class:`UserError` naming the file when it is missing, not valid JSON or not an object.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} {path} does not exist: is this a tinygpt run folder?")
    # A run's config.json is also in each of its checkpoints; other files have no second copy here.
    fix = (
        "restore it from the run's checkpoint"
        if path.name == "config.json"
        else "restore it from a copy (git, a backup)"
    )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {path} is not valid JSON ({e}): {fix}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} holds a JSON {type(data).__name__}, not an object: {fix}")
    return data


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file at ``path``, read in 1 MiB chunks (weight files may be GBs); OSError if unreadable."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def temp_folder_beside(folder: Path) -> Path:
    """A new, empty hidden folder beside ``folder`` (its parents made), to build ``folder`` in and then
    :func:`swap_in_folder` it.  Readable by others (0o755, not mkdtemp's 0o700).  Raises ``OSError``
    naming ``folder``, the path the user gave, not the temp name they never saw."""
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(folder)) from None
    os.chmod(tmp, 0o755)
    return tmp


def swap_in_folder(tmp: Path, folder: Path) -> None:
    """Replace ``folder`` (if it exists) by the finished folder ``tmp`` on the same filesystem.

    POSIX cannot rename a folder over a non-empty one, so the old one is first renamed
    aside, then deleted: ``folder`` is always either old-complete or new-complete (briefly
    absent between the two renames, never half-written).
    """
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(folder, old)
    try:
        os.rename(tmp, folder)
    except BaseException:
        if old is not None:
            os.rename(old, folder)
        raise
    _fsync_folder(folder.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def move_into_place(tmp: Path, folder: Path) -> None:
    """Rename the finished folder ``tmp`` to ``folder``, which must be absent or an empty folder then.

    Unlike :func:`swap_in_folder` nothing is ever moved aside: POSIX ``rename`` refuses a non-empty
    target, so a folder that filled up after the caller checked it (a second export to the same
    path) is kept.  Raises ``FileExistsError`` naming ``folder`` if it is no longer absent or empty.
    """
    try:
        os.rename(tmp, folder)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(e.errno, "it was filled while this was being written", str(folder)) from None
        raise
    _fsync_folder(folder.parent)


def file_lock(path: Path, timeout: float = -1) -> filelock.FileLock:
    """An exclusive ``flock`` on the file ``path`` (``filelock.FileLock``; not acquired yet).

    ``timeout``: seconds to wait in ``acquire`` (-1 forever, 0 not at all; then
    ``filelock.Timeout``).  The kernel drops the lock when its process dies, so a crash never
    leaves a stale lock; a filesystem without flock raises on acquire instead of falling
    back to a lock file that would outlive a crash.
    """
    try:  # filelock >= 3.13 would otherwise fall back to a soft lock where flock is missing
        return filelock.FileLock(path, timeout=timeout, fallback_to_soft=False)
    except TypeError:  # older filelock: no fallback to turn off
        return filelock.FileLock(path, timeout=timeout)


def acquire_or_wait(lock: filelock.FileLock, waiting: str) -> None:
    """Acquire ``lock``; if another process holds it, print ``waiting`` to stderr once and block."""
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        print(waiting, file=sys.stderr, flush=True)
        lock.acquire(timeout=-1)
