"""Whether run folders given by hand leave out finished runs of the same comparison that sit beside them.

An experiment folder knows which runs it drew (:mod:`experiment.runs.ledger`); a plain folder of
runs trained with ``train.py`` (``compare.py runs/default runs/untied``) records nothing of the
kind.  What a report can still see is the folder itself: a finished run beside the given ones that
the comparison would read -- one of its arms, the same config but for the arm's settings and the
seed, trained from the same code -- and that was not given.  Leaving such runs out (a seed that read
badly) can pick the verdict, so :func:`left_beside` names them and the report labels the verdict
not calibrated.  Runs deleted before the report cannot be seen; an experiment folder can.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import UserError
from experiment.arms import CODE
from experiment.runs.folders import Experiment, run_commit
from experiment.runs.record import BOOKKEEPING, EXPERIMENT_FILE, flatten
from experiment.runs.seeds import codes_differ, run_codes
from experiment.style import count
from training.run_files import runs_in
from training.runs import load_run_config


def left_beside(exp: Experiment) -> list[str]:
    """Why the report's hand-given runs may be a subset picked from their folder, in words (empty: they are every
    finished run of the comparison there, or they lie in an experiment folder or in several folders)."""
    given = exp.every_run
    parents = {Path(os.path.abspath(r.path)).parent for r in given}
    if len(parents) != 1 or (next(iter(parents)) / EXPERIMENT_FILE).is_file():
        return []
    (folder,) = parents
    paths = {Path(r.path).resolve() for r in given}  # (a run given through a link is the run it links to)
    by_arm = {arm: runs[0] for arm, runs in exp.runs.items() if runs}
    left, seen = [], set(paths)
    for run in runs_in(folder, finished_only=True):
        if run.path.resolve() in seen or (run.path.name.startswith("tune-") and not exp.tuning):
            continue  # given, or a link to a run already counted; a tuning grid's run, when none was given
        seen.add(run.path.resolve())
        try:
            flat = flatten(load_run_config(run.path).to_dict())  # filled and typed as the given runs' are
            arm = exp.arm_set.of({**flat, CODE: run_commit(run.path)}, str(run.path))
        except (UserError, OSError, ValueError, TypeError, AttributeError, KeyError):  # not a run this one reads
            continue
        if arm in by_arm and _same_but_seed(flat, flatten(by_arm[arm].config), by_arm[arm].path, run.path):
            left.append(run.path.name)
    if not left:
        return []
    shown = ", ".join(left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
    return [
        f"{count(len(left), 'finished run')} of these arms beside the given runs, with their config and code, left "
        f"out of the report ({shown}): runs picked by hand can pick the verdict; give every run of the comparison, "
        "or train it with compare.py, whose experiment folder records what it drew"
    ]


def _same_but_seed(flat: dict, like: dict, like_path: Path, path: Path) -> bool:
    """Whether a run's flat config equals a given run's of its arm but for bookkeeping and the seed, and it
    trained from the same code."""
    keys = (set(flat) | set(like)) - BOOKKEEPING
    if any(flat.get(k) != like.get(k) for k in keys):
        return False
    return not codes_differ([*set(run_codes(path)), *set(run_codes(like_path))])
