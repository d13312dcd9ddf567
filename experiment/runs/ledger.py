"""Which runs an experiment folder trained itself, and whether each finished run stayed as it finished.

A verdict holds its 5% error rate for runs drawn once, under the experiment's declaration, and read
whole.  Three ways round that leave a folder looking ordinary:

- copying finished runs into a new experiment folder, and declaring its margin or outcome after
  seeing them (``compare.py`` reuses a finished run it finds under the name it would train);
- deleting a finished run and training it again: a second draw of a seed already read, kept if
  it reads better (on a GPU the same command gives other numbers; on a CPU a bookkeeping change does);
- reading a hand-picked subset of the folder's finished runs (some arms, seeds or rates) as run folders.

``compare.py`` notes in experiment.json's ``trained`` every run it starts (:func:`note_start`; fresh or
resumed) and adopts (:func:`note_adopted`), and the digest of the run's ``summary.json`` once it has
finished (:func:`note_finished`).  A report reads the note (:func:`problems`) and labels a verdict
over any other runs not calibrated (``verdict.json``'s ``not_calibrated``; ``--fail-on`` will not
gate on it).  Folders made before the note existed hold no ``trained`` and are not checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from core.files import read_json, sha256_file, write_json
from experiment.style import count
from experiment.runs.record import EXPERIMENT_FILE, record_lock
from training.run_files import RunFolder, runs_in

TRAINED = "trained"  # experiment.json's key: {run folder, relative: {"summary": digest or None, ...}}


def every_run(name: str) -> bool:
    """True: every run a folder trained is one its report reads (an A/B or grid cell folder)."""
    return True


def summary_digest(run_dir: Path) -> str | None:
    """The first 16 hex digits of the SHA-256 of ``run_dir/summary.json``, or None while it has none."""
    path = RunFolder(run_dir).summary_path
    return sha256_file(path)[:16] if path.is_file() else None


def _update(out_dir: Path, name: str, change) -> None:
    """Apply ``change(entry) -> entry`` to run ``name``'s note (``{}`` if none), under the record's lock;
    nothing for a folder without experiment.json or whose record keeps no note (an older folder)."""
    saved = Path(out_dir) / EXPERIMENT_FILE
    if not saved.is_file() or not isinstance(read_json(saved, "experiment settings").get(TRAINED), dict):
        return  # (no lock taken, nothing written: an older folder is only read)
    with record_lock(Path(out_dir)):
        data = read_json(saved, "experiment settings")
        if not isinstance(data.get(TRAINED), dict):
            return
        entry = change(dict(data[TRAINED].get(name, {})))
        if entry is not None and entry != data[TRAINED].get(name):
            data[TRAINED][name] = entry
            write_json(saved, data)


def note_start(out_dir: Path, name: str, *, fresh: bool) -> None:
    """Note that ``compare.py`` starts the run ``out_dir/name``: from scratch (``fresh``) or resumed.

    A fresh start of a run noted finished, or noted to have reached a checkpoint (its evals could be read),
    is a second draw (``redrawn``), which stays noted.  (A new run stopped before its first checkpoint
    removes its own folder, so starting it again is no second draw.)"""

    def start(entry: dict) -> dict:
        if fresh and (entry.get("summary") or entry.get("checkpointed")):
            entry["redrawn"] = True
        return {**entry, "summary": None}  # a resumed run may finish with another summary (a trunk's next stage)

    _update(out_dir, name, start)


def note_finished(out_dir: Path, name: str) -> None:
    """After a ``train.py`` of the run ``out_dir/name`` ended, however: note the digest of its summary.json if it
    finished, else that it holds a checkpoint (``checkpointed``), if ``compare.py`` started it and has not
    noted either yet (a run found finished and never started here stays un-noted)."""
    run = RunFolder(Path(out_dir) / name)

    def finish(entry: dict) -> dict | None:
        if not entry or entry.get("summary"):
            return None
        if run.summary_path.is_file():
            return {**entry, "summary": summary_digest(run.path)}
        return {**entry, "checkpointed": True} if run.last_ckpt.is_file() and not entry.get("checkpointed") else None

    _update(out_dir, name, finish)


def note_checkpointed(out_dir: Path, name: str) -> None:
    """While a ``train.py`` that ``compare.py`` started is running: note ``checkpointed`` once its folder holds
    a checkpoint, so that a later fresh start reads as a second draw even if both processes are killed
    (only then is :func:`note_finished` never called).  Never notes a summary: one there may be an earlier
    stage's, which the running resume is about to remove."""
    run = RunFolder(Path(out_dir) / name)

    def checkpointed(entry: dict) -> dict | None:
        if not entry or entry.get("summary") or entry.get("checkpointed") or not run.last_ckpt.is_file():
            return None
        return {**entry, "checkpointed": True}

    _update(out_dir, name, checkpointed)


def note_adopted(out_dir: Path, name: str) -> None:
    """Note the run ``out_dir/name`` as adopted (``--adopt``: checked equal to the run the experiment would train);
    adopted where a run had finished before (deleted since) it is a second draw.  Noting it again is no change."""
    digest = summary_digest(Path(out_dir) / name)

    def adopt(entry: dict) -> dict | None:
        if entry.get("adopted") and entry.get("summary") == digest:
            return None
        return {**entry, "adopted": True, "summary": digest, **({"redrawn": True} if entry.get("summary") else {})}

    _update(out_dir, name, adopt)


def reported(
    folder: Path, runs: list[Path], *, read_whole: bool, reads: Callable[[str], bool] = every_run
) -> list[str]:
    """:func:`problems` of the ``runs`` a report reads, after noting each finished one that ``compare.py``
    started and never saw finish (killed in between) as it is now."""
    for run in runs:
        note_finished(folder, _name(folder, run))
    return problems(folder, runs, read_whole=read_whole, reads=reads)


def problems(
    folder: Path, runs: list[Path], *, read_whole: bool, reads: Callable[[str], bool] = every_run
) -> list[str]:
    """Why the ``runs`` a report reads from the experiment folder ``folder`` may not be the runs its declaration
    drew, in words (empty: nothing found): finished runs of the folder left out (when ``read_whole``, a design
    that reads every finished run), runs it did not train, runs trained again from scratch after an earlier
    draw had finished or saved a checkpoint, runs whose summary.json changed after they finished, and runs noted finished that are gone
    from the folder (of those the design reads: ``reads(name)``; a budget design does not read its trunks)."""
    saved = Path(folder) / EXPERIMENT_FILE
    if not saved.is_file():
        return []
    given = {_absolute(r) for r in runs}
    out = []
    if read_whole:
        left = [r.path.name for r in runs_in(folder, finished_only=True) if _absolute(r.path) not in given]
        if left:
            out.append(
                f"{count(len(left), 'run')} of the experiment finished but left out of the report ({_names(left)}): a "
                "subset of its arms, seeds or rates picked by hand can pick the verdict; report the experiment "
                "folder whole"
            )
    trained = read_json(saved, "experiment settings").get(TRAINED)
    if not isinstance(trained, dict):
        return out
    trained = {n: e for n, e in trained.items() if isinstance(e, dict)}  # (a hand-edited note: what is readable)
    names = sorted(_name(folder, r) for r in given)
    kinds = {
        "not trained by this experiment (copied in, or trained by hand): a run drawn before the declaration "
        "lets the declaration be fitted to it; train it here or adopt it (--adopt)": [
            n for n in names if n not in trained
        ],
        "trained again from scratch after an earlier draw had finished or saved a checkpoint: a second draw of "
        "a seed lets the better draw be kept; report with the first draws or start a new experiment folder": [
            n for n in names if trained.get(n, {}).get("redrawn")
        ],
        "changed after it finished (its summary.json is not the one compare.py saw): report the runs as "
        "they finished": [
            n
            for n in names
            if trained.get(n, {}).get("summary") not in (None, summary_digest(Path(folder) / n))
            and not trained[n].get("redrawn")
        ],
        "finished here and gone from the folder since: deleting finished runs (a seed that reads badly) "
        "can pick the verdict; put them back, or start a new experiment folder": sorted(
            n for n, e in trained.items() if reads(n) and e.get("summary") and not summary_digest(Path(folder) / n)
        ),
    }
    out += [f"{count(len(ns), 'run')} ({_names(ns)}) {why}" for why, ns in kinds.items() if ns]
    return out


def _absolute(path: Path) -> Path:
    """``path`` made absolute without following links (a run folder linked into the experiment folder is
    named where it is linked, as compare.py named it)."""
    return Path(os.path.abspath(path))


def _name(folder: Path, run: Path) -> str:
    """The run's name in the note: its path relative to the experiment folder (``4M/tied-s0``)."""
    return Path(os.path.relpath(_absolute(run), _absolute(folder))).as_posix()


def _names(names: list[str], most: int = 4) -> str:
    """The first ``most`` names, and how many more."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
