"""Arms from code: ``compare.py --arm before@HEAD~1`` trains that arm with the project as it was at a revision.

"Is my code change real?" is then one command: the checkout's arms train with its own
``train.py``, an arm ``NAME@REV`` with the ``train.py`` of a git worktree of ``REV``
(``git worktree add --detach``, kept in ``.worktrees/<commit>`` at the repository's root and
reused).  Every run records the commit it trained from (``env.json``'s ``git_commit``), which is
how a report tells such arms apart: their configs may be identical.  The checkout must be clean
(no uncommitted changes outside ``results/``), or its runs would record a commit that is not
the code they ran.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from core.errors import UserError
from core.files import REPO_ROOT, file_lock

WORKTREES = REPO_ROOT / ".worktrees"


def _git(*args: str) -> subprocess.CompletedProcess:
    """``git <args>`` in the repository; UserError when git is missing or this is no repository."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"arms from code need git, which failed ({type(e).__name__}): install git") from None
    return done


def resolve(rev: str) -> str:
    """The full commit hash of ``rev`` (a branch, tag, hash or ``HEAD~1``).

    Raises :class:`UserError` for a revision git does not know, or the checkout's own commit.
    """
    done = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise UserError(
            f"unknown revision {rev!r}: give a commit, branch or tag of this repository (git log --oneline)"
        )
    sha = done.stdout.strip()
    if sha == head():
        raise UserError(f"{rev} is the checkout's own commit: the checkout's arms train it already; compare another")
    return sha


def head() -> str:
    """The checkout's own commit (the code its arms train with)."""
    return _git("rev-parse", "HEAD").stdout.strip()


def check_clean() -> None:
    """Refuse a checkout with uncommitted changes or untracked files (``results/`` and what ``.gitignore``
    keeps out aside): a run records only the commit it trained from."""
    status = _git("status", "--porcelain", "--untracked-files=normal", "--", ".", ":!results").stdout.strip()
    if status:
        changed = ", ".join(line[3:] for line in status.splitlines()[:3])
        raise UserError(
            f"the checkout has uncommitted changes ({changed}): commit them first, so that every run "
            "records the code it ran (its git commit)"
        )


def worktree(sha: str) -> Path:
    """The worktree of commit ``sha`` (``.worktrees/<sha[:12]>``), added on first use and checked on reuse
    (at ``sha``, unchanged); its ``train.py``'s folder.  Under a lock, so two compare.py add it once; a
    half-made one (an add cut short) is removed and added again.  Raises :class:`UserError` when git fails."""
    path = WORKTREES / sha[:12]
    WORKTREES.mkdir(parents=True, exist_ok=True)
    with file_lock(WORKTREES / ".lock"):
        if (path / "train.py").is_file() and _is_clean_at(path, sha):
            return path
        if path.exists():
            _git("worktree", "remove", "--force", str(path))
            shutil.rmtree(path, ignore_errors=True)
            _git("worktree", "prune")
        done = _git("worktree", "add", "--detach", "--force", str(path), sha)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise UserError(f"git worktree add {path} {sha[:12]} failed: {why}")
    return path


def _is_clean_at(path: Path, sha: str) -> bool:
    """Whether the worktree at ``path`` is at commit ``sha`` with no changes."""
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    status = subprocess.run(["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip() == sha and not status.stdout.strip()
