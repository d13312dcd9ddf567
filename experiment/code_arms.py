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

import subprocess
from pathlib import Path

from core.errors import UserError
from core.files import REPO_ROOT

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
    if sha == _git("rev-parse", "HEAD").stdout.strip():
        raise UserError(f"{rev} is the checkout's own commit: the checkout's arms train it already; compare another")
    return sha


def check_clean() -> None:
    """Refuse a checkout with uncommitted changes to its code (``results/`` aside)."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results").stdout.strip()
    if status:
        changed = ", ".join(line[3:] for line in status.splitlines()[:3])
        raise UserError(
            f"the checkout has uncommitted changes ({changed}): commit them first, so that every run "
            "records the code it ran (its git commit)"
        )


def worktree(sha: str) -> Path:
    """The worktree of commit ``sha`` (``.worktrees/<sha[:12]>``), added on first use; its ``train.py``'s folder."""
    path = WORKTREES / sha[:12]
    if not (path / "train.py").is_file():
        done = _git("worktree", "add", "--detach", "--force", str(path), sha)
        if done.returncode != 0:
            raise UserError(f"git worktree add {path} {sha[:12]} failed: {done.stderr.strip().splitlines()[-1]}")
    return path
