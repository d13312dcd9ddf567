"""Adopting runs you trained yourself into an experiment: ``compare.py --config ... --adopt runs/default,runs/untied``.

A finished run folder may stand in for one of the experiment's reported runs when it is exactly
the run the experiment would train for that arm and seed:

- finished (``summary.json``, eval at ``max_iters``; :func:`experiment.runs.folders.load_run`), of an
  arm the experiment compares, on one of its seeds (``train.seed`` + 0 .. seeds - 1);
- its config equal to the one ``train.py`` resolves from the experiment's own command line for
  that arm and seed, bookkeeping aside (:data:`experiment.runs.record.BOOKKEEPING`); with a
  learning-rate grid, at the arm's tuned rate (checked once the grid has trained);
- trained on the same corpus contents (``summary.json``'s ``data_sha256``);
- on the experiment's learning-rate schedule as it logged it: no resume that moved the cosine's
  horizon, every logged ``lr`` equal to the schedule's (:mod:`experiment.runs.schedules`).

Anything else is refused in one line naming what differs.  An adopted run's text files (config,
metrics, summary, environment, tokenizer, plot; no checkpoints) are copied into the experiment
folder under the name the experiment gives that run, with ``adopted.json`` saying where from;
the source folder is only read.  The copy is made in a hidden folder and renamed into place,
so an interrupted adoption leaves no half run folder.
"""

from __future__ import annotations

import datetime
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import filelock

from core.errors import UserError
from core.files import file_lock, read_json, write_json
from experiment.runs import folders, ledger
from experiment.runs import schedules
from experiment.arms import PRESETS, ArmSet
from experiment.runs.record import config_changes, flatten
from training.config import RunConfig
from training.setup import parse_train_args, resolve_new
from training.schedule import get_lr

ADOPTED_FILE = "adopted.json"


@dataclass
class Candidate:
    """A run folder given to ``--adopt``: where it is, and which of the experiment's runs it would be."""

    source: Path
    run: folders.Run
    index: int  # the seed's place: the run trains with train.seed + index

    @property
    def arm(self) -> str:
        """The arm its config has."""
        return self.run.arm


def parse_adopt(text: str | None) -> list[Path]:
    """``"runs/default,runs/untied"`` -> the folders; [] for None."""
    return [Path(t.strip()) for t in (text or "").split(",") if t.strip()]


def identify(
    sources: list[Path], base_seed: int, arms: list[str], seeds: int, arm_set: ArmSet = PRESETS
) -> list[Candidate]:
    """Each folder as a :class:`Candidate`; UserError for one unfinished or malformed, of an arm not compared,
    on a seed the experiment does not use, or two standing for the same arm and seed."""
    out: list[Candidate] = []
    for source in sources:
        run = folders.load_run(source, arm_set)
        index = run.seed - base_seed
        if run.arm not in arms:
            raise UserError(
                f"--adopt {source}: it is a {run.arm} run, an arm this experiment does not compare "
                f"(--arms {','.join(arms)}): drop it from --adopt or add the arm"
            )
        if not 0 <= index < seeds:
            raise UserError(
                f"--adopt {source}: its train.seed {run.seed} is none of the experiment's seeds "
                f"({base_seed}..{base_seed + seeds - 1}): drop it from --adopt or raise --seeds"
            )
        twin = next((c for c in out if (c.arm, c.index) == (run.arm, index)), None)
        if twin is not None:
            raise UserError(
                f"--adopt {source} and {twin.source} are both the {run.arm} run on seed {run.seed}: give one of them"
            )
        out.append(Candidate(source, run, index))
    return out


def expected_config(argv: list[str], vocab_size: int) -> RunConfig:
    """The config ``train.py ARGV`` would write to ``config.json`` for a new run (settings it derives resolved)."""
    # The command line the experiment runs, read as train.py reads it.
    args, overrides = parse_train_args(argv)
    # vocab_size is set from the tokenizer when the run starts
    return resolve_new(args.config, overrides).with_values(model={"vocab_size": vocab_size})


def check(c: Candidate, expected: RunConfig, data_sha256: str | None, ignore: frozenset[str] = frozenset()) -> None:
    """Refuse ``c`` unless it is the run ``expected`` describes; ``ignore``: keys not known yet (a tuned rate).

    Raises :class:`UserError` naming the differing config keys (with both values), another corpus,
    or the first step where its logged learning rate leaves ``expected``'s schedule.
    """
    mine, theirs = flatten(c.run.config), flatten(expected.to_dict())
    changed = [k for k in config_changes(mine, theirs) if k not in ignore]
    if changed:
        detail = ", ".join(f"{k} ({mine.get(k)!r}, the experiment's {theirs.get(k)!r})" for k in changed)
        raise UserError(
            f"--adopt {c.source}: not the experiment's {c.arm} run on seed {c.run.seed}; it differs in "
            f"{detail}: drop it from --adopt (the experiment trains that run itself)"
        )
    if data_sha256 is None or c.run.summary.get("data_sha256") != data_sha256:
        raise UserError(
            f"--adopt {c.source}: it trained on other corpus contents than the experiment's data "
            "(data_sha256 differs or is missing): drop it from --adopt"
        )
    if c.run.resumes:
        raise UserError(
            f"--adopt {c.source}: {schedules.describe_change(c.run)}, which moved its learning-rate "
            "schedule: drop it from --adopt (the experiment trains that run in one go)"
        )
    if not ignore & {"train.learning_rate", "train.min_lr"}:
        tc = expected.train
        planned = {
            (step, kind): get_lr(step - 1 if kind == "train" else step, tc) / tc.learning_rate
            for step, kind in c.run.schedule
        }
        parting = schedules.first_parting(c.run.schedule, planned)
        if parting is not None:
            raise UserError(
                f"--adopt {c.source}: its logged learning rate leaves the experiment's schedule at step "
                f"{parting[0]} (lr / peak {parting[1]:.4g}, the schedule's {parting[2]:.4g}): drop it from --adopt"
            )


def settled(c: Candidate, out_dir: Path, name: str | None) -> bool:
    """True when ``out_dir/name`` was adopted from ``c.source`` already (a rerun of the same command).

    ``name`` None (the run's name waits for its tuned rate) is never settled.  Raises
    :class:`UserError` when another folder has that name: the experiment already has that run,
    finished or under way.
    """
    if name is None:
        return False
    target = out_dir / name
    record = target / ADOPTED_FILE
    if record.is_file() and same_folder(read_json(record, "adoption record").get("adopted_from"), c.source):
        return True
    if target.exists():
        raise UserError(
            f"--adopt {c.source}: {target} exists already (the experiment's own {c.arm} run on seed "
            f"{c.run.seed}): drop it from --adopt"
        )
    return False


def spelt(source: Path) -> str:
    """How ``adopted.json`` names ``source``: relative to the current directory (the repository root
    compare.py runs from) when it lies there, so the record reads the same on every machine and however
    the path was typed (``./runs/x``, ``runs/x/``, absolute); else its absolute path."""
    resolved = source.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def same_folder(recorded: str | None, source: Path) -> bool:
    """Whether an ``adopted_from`` (as :func:`spelt` writes it, or as typed by older versions) is ``source``."""
    return recorded is not None and Path(recorded).resolve() == source.resolve()


def copy_in(c: Candidate, out_dir: Path, name: str) -> Path:
    """Copy ``c``'s text files to ``out_dir/name`` (not there yet: :func:`settled`) with ``adopted.json``;
    returns the new folder."""
    target = out_dir / name
    (out_dir / ".claims").mkdir(parents=True, exist_ok=True)
    claim = file_lock(out_dir / ".claims" / f"{name}.lock", timeout=0)  # the claim a compare.py training it holds
    try:
        claim.acquire()
    except filelock.Timeout:
        raise UserError(
            f"--adopt {c.source}: another compare.py is at work on {target}: drop it from --adopt"
        ) from None
    try:
        if target.exists() and settled(c, out_dir, name):  # made meanwhile by another compare.py (else it raises)
            return target
        copied = _copy(c, target)
        ledger.note_adopted(out_dir, name)
        return copied
    finally:
        claim.release()


def _copy(c: Candidate, target: Path) -> Path:
    """:func:`copy_in`'s body, under the run's claim."""
    staging = target.parent / f".adopting-{target.name}"
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted adoption left
    staging.mkdir(parents=True)
    for path in sorted(c.source.iterdir()):
        # Checkpoints stay behind (the report needs none); locks and temporary files are the source's own.
        if path.is_file() and not path.name.startswith(".") and path.suffix != ".pt" and path.name != "lock.json":
            shutil.copy2(path, staging / path.name)
    write_json(
        staging / ADOPTED_FILE,
        {
            "adopted_from": spelt(c.source),
            "date": datetime.date.today().isoformat(),
            "as": target.name,
            "checked": "config equal to the experiment's for this arm and seed (bookkeeping aside), same corpus "
            "(data_sha256), logged learning rates on the experiment's schedule, no resume that moved it",
        },
    )
    os.replace(staging, target)
    print(f"[compare] {target}: adopted from {c.source} (its text files; checkpoints left there)", flush=True)
    return target
