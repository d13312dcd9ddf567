"""Whether an experiment folder declares again a comparison whose verdict another folder had already read.

A folder's declaration (margin, outcome, reference, seeds, rate grid) holds its 5% error rate because
it is made before any of its runs are read; compare.py refuses a rerun into the folder that changes
it.  A new ``--name`` escapes that refusal: the same comparison declared again in a second folder,
after the first folder's verdict was read, can take the margin or outcome that reads best, or keep
the better of two draws (on a GPU, or with other seeds).  A verdict chosen among tries is not
calibrated at 5%, whichever try it comes from.

:func:`earlier_reads` looks in the folders beside an experiment folder (its siblings under one
``train.out_dir``, where ``--name`` puts them) for a folder of the same kind and config (bookkeeping
and the seed aside: other seeds are other draws of the same comparison) holding two arms this folder
compares with the same settings, trained from the same code (for a timed outcome, on the same
machine), whose verdict over both was read (experiment.json's ``looks``) before this folder declared
the pair (its ``created``, or ``compared_at`` for an arm added later).  What it finds labels the
verdict not calibrated and says the calibrated way on: add seeds to the first folder, whose looks are
counted.  Before any run of this folder trains, its code is the checkout's.

A budget design is checked the same way, its report's reads recorded as looks (at the seeds it had
read); a grid's cell against the other cells of its grid and the same cell of any grid beside it (a
grid declared again under another name), the grid report's reads recorded in each cell.  Folders
elsewhere and folders from before experiment.json recorded ``created`` are not checked.  A sibling that cannot be read is passed over.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from core.errors import UserError
from core.hardware import checkout_code
from experiment import arms
from experiment.runs.record import GRID_FILE, ExperimentRecord, config_changes, flatten
from experiment.runs.seeds import codes_differ, env_machine, run_codes, segment_envs
from experiment.style import count
from training.run_files import runs_in


def earlier_reads(folder: Path) -> list[str]:
    """Why ``folder``'s verdicts may be a second try at a comparison read before in a folder beside it, in
    words (empty: none found, or the folder records no ``created``)."""
    return reads_before(_read(Path(folder)))


def reads_before(record: ExperimentRecord | None) -> list[str]:
    """:func:`earlier_reads` of an experiment record, as written or as a folder not yet made would write it."""
    if record is None or not record.created:
        return []
    here = Path(record.folder).resolve()
    if not here.parent.is_dir():  # (a first experiment under a train.out_dir not made yet)
        return []
    siblings = {p.resolve() for p in here.parent.iterdir() if _is_folder(p) and not p.name.startswith(".")}
    if (here.parent / GRID_FILE).is_file():  # a grid's cell: the same cell of a grid beside its grid, too
        grids = [g for g in here.parent.parent.iterdir() if _is_folder(g) and (g / GRID_FILE).is_file()]
        siblings |= {(g / here.name).resolve() for g in grids if _is_folder(g / here.name)}
    out = []
    for sibling in sorted(siblings - {here}):
        other = _read(sibling)
        try:
            if other is None or other.kind != record.kind or config_changes(other.config, record.config):
                continue
            pairs, looks = _read_pairs(record, other)
        except (TypeError, ValueError, AttributeError, KeyError):  # a record written by hand, or by a future tinygpt
            continue
        if pairs:  # (a cell of another grid is named with its grid)
            name = sibling.name if sibling.parent == here.parent else f"{sibling.parent.name}/{sibling.name}"
            out.append(_words(pairs, name, looks))
    return out


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _read(folder: Path) -> ExperimentRecord | None:
    """The folder's record, or None for a folder without one, or one that cannot be read or makes no sense
    (not this check's to refuse: the folder is another experiment's)."""
    try:
        record = ExperimentRecord.read(folder)
        return record if record is None or isinstance(record.created, str | None) else None
    except (UserError, OSError, ValueError, TypeError, AttributeError):
        return None


def _read_pairs(record: ExperimentRecord, other: ExperimentRecord) -> tuple[list[tuple[str, str]], list[dict]]:
    """``(this folder's pairs (reference, arm) whose two arms ``other`` held alike and had read before the pair was
    declared here, the looks of ``other`` that read them)``."""
    mine = arms.with_recorded(record.arms).with_shared(record.config)
    theirs = arms.with_recorded(other.arms).with_shared(other.config)
    twins = {name: _twin(name, mine, theirs, _compared(other)) for name in record.compared}
    twins = {name: twin for name, twin in twins.items() if twin and _same_run(record, other, mine.code(name))}
    ref = record.reference or (record.compared[0] if record.compared else None)
    pairs, used = [], []
    for arm in (a for a in record.compared if a != ref and ref in twins and a in twins):
        declared = max(_declared_at(record, ref), _declared_at(record, arm))
        looks = [
            k
            for k in other.looks
            if isinstance(k, dict) and _before(k, declared) and _covers(other, k, twins[ref], twins[arm])
        ]
        if looks:
            pairs.append((ref, arm))
            used += [k for k in looks if k not in used]
    return pairs, used


def _compared(record: ExperimentRecord) -> list[str]:
    """The arms a folder compares: ``compared``, or for a folder from before it was recorded, its runs' arms."""
    if record.compared:
        return record.compared
    arm_set = arms.with_recorded(record.arms)
    names = []
    for run in runs_in(record.folder):
        try:
            names.append(arm_set.of(flatten(run.config), str(run.path)))
        except UserError:
            continue
    return sorted(set(names))


def _twin(name: str, mine: arms.ArmSet, theirs: arms.ArmSet, compared: list[str]) -> str | None:
    """The arm of the other folder with ``name``'s settings (over the config both share), and its code alike."""
    if name not in mine.settings:
        return None
    own = {k: v for k, v in mine.settings[name].items() if k != arms.CODE}
    for twin in (n for n in compared if n in theirs.settings):
        if arms.same_settings(own, {k: v for k, v in theirs.settings[twin].items() if k != arms.CODE}):
            if _same_commit(mine.code(name), theirs.code(twin)):
                return twin
    return None


def _same_commit(a: str | None, b: str | None) -> bool:
    """Two arms' commits (None: the folder's checkout, compared by runs) train alike; what git cannot tell counts."""
    if a is None or b is None:
        return a is None and b is None
    return a == b or arms.same_training_code(a, b) is not False


def _same_run(record: ExperimentRecord, other: ExperimentRecord, commit: str | None) -> bool:
    """Whether an arm's runs trained alike in both folders: from the same code (an arm from code by its commit,
    compared by :func:`_twin`; the others by the checkout both folders pinned, else by their runs' code), and
    for a timed outcome on the same machine.  What cannot be told counts as alike."""
    if commit is None:
        if record.checkout and other.checkout:
            if not _same_commit(record.checkout, other.checkout):
                return False
        elif not _some_alike(_folder_codes(record.folder), _folder_codes(other.folder), codes_differ):
            return False
    if record.outcome == "tokens-per-s" or record.outcome.startswith("time-to:"):
        machines = [
            {env_machine(env) for run in runs_in(f) for env in segment_envs(run.path)}
            for f in (record.folder, other.folder)
        ]
        return _some_alike(*machines, lambda pair: pair[0] != pair[1])
    return True


def _some_alike(mine: set, theirs: set, differ) -> bool:
    """Some member of ``mine`` and some of ``theirs`` do not ``differ``; either empty: alike (cannot tell)."""
    return not mine or not theirs or any(not differ([a, b]) for a, b in itertools.product(mine, theirs))


def _folder_codes(folder: Path) -> set[tuple]:
    """The codes (:func:`experiment.runs.seeds.run_codes`) the folder's runs trained from, every segment; for a
    folder with no run yet, the checkout's (what its runs will train from)."""
    subs = sorted(folder.iterdir()) if _is_folder(folder) else []
    runs = runs_in(folder) or [run for sub in subs if _is_folder(sub) for run in runs_in(sub)]
    codes = {code for run in runs for code in run_codes(run.path)}  # (a budget design's runs: one level down)
    if codes:
        return codes
    commit, _, diff = checkout_code()
    return {(commit, ("diff", diff))}


def _declared_at(record: ExperimentRecord, arm: str) -> str:
    """When ``arm`` joined the folder's comparisons: ``compared_at``, else when the folder was declared."""
    return max(record.created, str(record.compared_at.get(arm) or record.created))


def _before(look: dict, declared: str) -> bool:
    """Whether a look was read before ``declared``.  A look recorded with a date alone comes from a version that
    recorded no ``created`` either, so it is older than any folder that has one."""
    return look["at"] < declared if isinstance(look.get("at"), str) else True


def _covers(record: ExperimentRecord, look: dict, a: str, b: str) -> bool:
    """Whether the look read arms ``a`` and ``b`` (both compared by then; a look without a time read every arm)."""
    at = look.get("at")
    return not isinstance(at, str) or all(_declared_at(record, n) <= at for n in (a, b) if record.created)


def _words(pairs: list[tuple[str, str]], name: str, looks: list[dict]) -> str:
    """The reason, in words: which arms, which folder, when it was first read, and the way on."""
    arm_names = sorted({a for pair in pairs for a in pair}, key=[a for pair in pairs for a in pair].index)
    seeds = [look["seeds"] for look in looks if isinstance(look.get("seeds"), int)]
    at = (
        f" at {count(seeds[0], 'seed')}"
        if len(seeds) == 1
        else f" at {', '.join(map(str, seeds))} seeds"
        if seeds
        else ""
    )
    first = min((str(look.get("at") or look.get("date")) for look in looks), default="")[:10]
    return (
        f"arms {', '.join(arm_names)} were compared alike in the experiment folder '{name}', whose verdict "
        f"({count(len(looks), 'look')}{at}) was first read on {first}, before this folder declared them: its "
        f"margin, outcome, reference or seeds could have been chosen after seeing that verdict, or the better of two "
        f"draws kept; report '{name}' instead, or add seeds to it (its looks are counted)"
    )
