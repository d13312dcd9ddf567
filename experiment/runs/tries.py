"""Whether an experiment folder declares again a comparison whose verdict another folder had already read.

A folder's declaration (margin, outcome, reference, seeds, rate grid) holds its 5% error rate because
it is made before any of its runs are read; compare.py refuses a rerun into the folder that changes
it.  A new ``--name`` escapes that refusal: the same comparison declared again in a second folder,
after the first folder's verdict was read, can take the margin or outcome that reads best, or keep
the better of two draws (on a GPU, or with other seeds).  A verdict chosen among tries is not
calibrated at 5%, whichever try it comes from.

:func:`earlier_reads` looks in the folders beside an experiment folder (its siblings under one
``train.out_dir``, where ``--name`` puts them) for a folder of the same kind, with the same config
(bookkeeping and the seed aside: other seeds are other draws of the same comparison) and two arms
both compare alike (settings and code), whose verdict was read (experiment.json's ``looks``) before
this folder was declared (its ``created``).  What it finds labels the verdict not calibrated, and
says the calibrated way on: add seeds to the first folder, whose looks are counted.

Folders elsewhere, and folders from before experiment.json recorded ``created``, are not checked.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from core.errors import UserError
from experiment import arms
from experiment.runs.record import ExperimentRecord, config_changes
from experiment.runs.seeds import codes_differ, run_codes
from experiment.style import count
from training.run_files import runs_in


def earlier_reads(folder: Path) -> list[str]:
    """Why ``folder``'s verdicts may be a second try at a comparison read before in a folder beside it, in
    words (empty: none found, or the folder records no ``created``)."""
    record = _read(Path(folder))
    if record is None or not record.created:
        return []
    out = []
    for sibling in sorted(
        p for p in Path(folder).resolve().parent.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        other = None if sibling == Path(folder).resolve() else _read(sibling)
        read = [look for look in (other.looks if other else []) if _before(look, record.created)]
        if not read or other.kind != record.kind or config_changes(other.config, record.config):
            continue
        pairs = _shared_pairs(record, other)
        if pairs:
            seeds = [look.get("seeds") for look in read]
            seeds = count(seeds[0], "seed") if len(seeds) == 1 else f"{', '.join(map(str, seeds))} seeds"
            out.append(
                f"{_pairs_words(pairs)} read before in the experiment folder {sibling.name} ({count(len(read), 'verdict')} "
                f"at {seeds}, from {read[0].get('date')}) and declared again here afterwards: a second folder can "
                f"take its margin, outcome, reference or seeds, or keep the better draw, after seeing the first; "
                f"report {sibling.name}, or add seeds to it (its looks are counted)"
            )
    return out


def _read(folder: Path) -> ExperimentRecord | None:
    """The folder's record, or None for a folder without one or with one unreadable (not this check's to refuse)."""
    try:
        return ExperimentRecord.read(folder)
    except UserError:
        return None


def _before(look: dict, created: str) -> bool:
    """Whether a look was taken before ``created``: by its time, or for a look recorded with a date alone, on that
    day or earlier (the order within the day unknown, it counts)."""
    if isinstance(look.get("at"), str):
        return look["at"] < created
    return isinstance(look.get("date"), str) and look["date"] <= created[:10]


def _shared_pairs(record: ExperimentRecord, other: ExperimentRecord) -> list[tuple[str, str]]:
    """This folder's comparisons (reference, arm) that ``other`` holds too: both arms compared there, with the
    same settings, and trained from the same code."""
    mine, theirs = arms.with_recorded(record.arms), arms.with_recorded(other.arms)
    alike = {}
    for name in record.compared:
        twin = [n for n in other.compared if n in theirs.settings and name in mine.settings]
        twin = [n for n in twin if arms.same_settings(mine.settings[name], theirs.settings[n])]
        if twin and _same_code(record, other, mine.code(name)):
            alike[name] = twin[0]
    ref = record.reference or (record.compared[0] if record.compared else None)
    return [(ref, a) for a in record.compared if a != ref and ref in alike and a in alike]


def _same_code(record: ExperimentRecord, other: ExperimentRecord, commit: str | None) -> bool:
    """Whether an arm trained from the same code in both folders: an arm from code by its commit (compared in its
    settings); the others by the checkout both folders pinned, else by their runs' code (some run of each alike).
    What cannot be told counts as the same."""
    if commit is not None:
        return True
    if record.checkout and other.checkout:
        return (
            record.checkout == other.checkout or arms.same_training_code(record.checkout, other.checkout) is not False
        )
    mine, theirs = _folder_codes(record.folder), _folder_codes(other.folder)
    if not mine or not theirs:
        return True
    return any(not codes_differ([a, b]) for a, b in itertools.product(mine, theirs))


def _folder_codes(folder: Path) -> set[tuple]:
    """The codes (:func:`experiment.runs.seeds.run_codes`) the folder's runs trained from, every segment."""
    return {code for run in runs_in(folder) for code in run_codes(run.path)}


def _pairs_words(pairs: list[tuple[str, str]]) -> str:
    """``"the comparison untied against tied was"`` / ``"the comparisons a, b against tied were"``."""
    ref = pairs[0][0]
    names = ", ".join(a for _, a in pairs)
    return f"the comparison{'s' * (len(pairs) > 1)} {names} against {ref} {'were' if len(pairs) > 1 else 'was'}"
