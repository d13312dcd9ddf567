"""The run folders under ``train.out_dir``: find them and describe each as a row (``list_runs.py``'s table).

Reading only: nothing in a run folder is written, and a run's lock is tested
(:func:`training.faults.lock_is_live`), never waited on or kept.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from core.errors import UserError
from data.config import data_label
from training.faults import lock_is_live
from training.runs import Unreadable, is_finished, read_metrics
from training.run_files import CONFIG, IMPORTED, METRICS, SUMMARY

# The fields of a row, in table order; --sort takes any of them and --json writes them all (+ path, problem).
# data (corpus/tokenizer) tells apart runs whose losses are not comparable: another corpus or vocabulary.
COLUMNS = (
    "name",
    "embeddings",
    "data",
    "steps",
    "best_val_loss",
    "final_val_loss",
    "best_val_bpb",
    "tokens_per_s",
    "status",
)


def finite_number(value) -> float | None:
    """``value`` if it is a finite int or float (not a bool), else None: a number read from a JSON record."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def _first(*values):
    """The first of ``values`` that is not None (None if all are)."""
    return next((v for v in values if v is not None), None)


def _read_json(path: Path) -> dict:
    """The JSON object in ``path``; raises :class:`Unreadable` if it is not one."""
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise Unreadable(f"{path.name} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict):
        raise Unreadable(f"{path.name} holds no JSON object")
    return value


def _run_facts(run_dir: Path) -> dict:
    """The row's fields read from ``run_dir``'s files; raises :class:`Unreadable` if one is damaged."""
    config = _read_json(run_dir / CONFIG)
    try:
        tied, planned = config["model"]["tie_embeddings"], config["train"]["max_iters"]
    except (KeyError, TypeError):
        raise Unreadable(
            "config.json lacks model.tie_embeddings or train.max_iters: it was not written by train.py"
        ) from None
    if not isinstance(tied, bool) or type(planned) is not int:
        raise Unreadable("config.json's model.tie_embeddings is not a bool or train.max_iters not an integer")
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    source, tokenizer = data.get("source"), data.get("tokenizer")
    vocab_size = config["model"].get("vocab_size")
    label = (
        data_label(source, tokenizer, vocab_size if type(vocab_size) is int else None)
        if isinstance(source, str) and isinstance(tokenizer, str)
        else None
    )
    rows = read_metrics(run_dir / METRICS)
    summary = _read_json(run_dir / SUMMARY) if is_finished(run_dir) else None
    summary_step = summary.get("step") if summary is not None else None
    if summary is not None and type(summary_step) is not int:
        raise Unreadable("summary.json has no integer step")
    evals = [r for r in rows if r["kind"] == "eval"]
    losses = [v for v in (finite_number(r.get("val_loss")) for r in evals) if v is not None]
    bpbs = [v for v in (finite_number(r.get("val_bpb")) for r in evals) if v is not None]
    speeds = [v for v in (finite_number(r.get("tokens_per_s")) for r in rows if r["kind"] == "train") if v is not None]
    s = summary or {}
    return {
        # a run that untied on the way (train.untie_at, train.untie_at_cooldown) logs an untie row
        "embeddings": ("tied→untied" if any(r["kind"] == "untie" for r in rows) else "tied") if tied else "untied",
        "data": label,
        "steps": rows[-1]["step"] if rows else summary_step,
        "max_iters": planned,
        "best_val_loss": _first(finite_number(s.get("best_val_loss")), min(losses, default=None)),
        "final_val_loss": finite_number(s.get("final_val_loss")),  # the whole-split score (train.final_eval_tokens)
        "best_val_bpb": _first(
            finite_number(s.get("best_val_bpb")), min(bpbs, default=None), finite_number(s.get("val_bpb"))
        ),
        "tokens_per_s": _first(
            finite_number(s.get("tokens_per_s_median")), statistics.median(speeds) if speeds else None
        ),
        "_summary_step": summary_step,
        "_stopped": bool(rows) and rows[-1]["kind"] == "stop",
    }


def describe_run(run_dir: Path, name: str) -> dict:
    """One row for the run folder ``run_dir``: every field of :data:`COLUMNS` plus ``max_iters``,
    ``path`` and ``problem`` (why it is unreadable, else None).  Absent values are None.
    """
    row = dict.fromkeys(COLUMNS) | {"name": name, "max_iters": None, "path": str(run_dir), "problem": None}
    try:
        facts = _run_facts(run_dir)
    except Unreadable as e:
        return row | {"status": "unreadable", "problem": str(e)}
    summary_step, stopped = facts.pop("_summary_step"), facts.pop("_stopped")
    if (run_dir / IMPORTED).is_file():  # weights from hf.py import: never trained here, no data or steps of its own
        return row | facts | {"data": None, "steps": None, "max_iters": None, "status": "imported"}
    if lock_is_live(run_dir):
        status = "running"
    elif summary_step is not None and summary_step >= facts["max_iters"]:
        status = "finished"
    elif stopped or summary_step is not None:
        status = "stopped"
    else:
        status = "failed"
    return row | facts | {"status": status}


def find_run_folders(out_dir: Path) -> list[Path]:
    """Run folders (holding ``config.json``) directly under ``out_dir`` or one level deeper, sorted.

    Hidden folders are skipped, and so is everything inside a run folder.
    """

    def folders(parent: Path) -> list[Path]:
        try:
            return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:  # a folder we may not list holds nothing we can read
            return []

    found = []
    for child in folders(out_dir):
        if (child / CONFIG).is_file():
            found.append(child)
        else:
            found += [p for p in folders(child) if (p / CONFIG).is_file()]
    return found


def list_runs(out_dir: Path, sort: str = "name") -> list[dict]:
    """A row (:func:`describe_run`) per run folder under ``out_dir``, sorted by column ``sort``.

    Sorting is ascending, with absent values last and the name breaking ties.  Raises
    :class:`UserError` if ``out_dir`` is not a folder or ``sort`` not a column.
    """
    if sort not in COLUMNS:
        raise UserError(f"cannot sort by {sort!r}: choose one of {', '.join(COLUMNS)}")
    if not out_dir.is_dir():
        what = "is not a folder" if out_dir.exists() else "does not exist"
        raise UserError(
            f"out-dir {out_dir} {what}: give the folder holding the run folders with --out-dir "
            "(train.py's --train.out_dir), or train a run first"
        )
    rows = [describe_run(p, p.relative_to(out_dir).as_posix()) for p in find_run_folders(out_dir)]
    return sorted(rows, key=lambda r: (r[sort] is None, r[sort] if r[sort] is not None else 0, r["name"]))
