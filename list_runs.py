"""List the run folders under ``train.out_dir`` as a table: what each run is, how far it got, how it did.

    python list_runs.py                           # runs/ (train.py's default train.out_dir)
    python list_runs.py --out-dir /tmp/runs --sort best_val_loss
    python list_runs.py --json                    # the same fields as a JSON list, for scripts

A run folder is a folder holding ``config.json``, directly under the out-dir or one level
deeper (``compare.py`` puts its runs in ``<out-dir>/<experiment>/``); other folders are
skipped.  Each row shows the run's name, tied or untied embeddings, steps done / planned
(``train.max_iters``), the best val loss (nats/token), the best val bits per byte where the
run logged one, the median training tokens/s, and a status:

- ``running``: a live process holds the folder's lock (``faults.RunLock``);
- ``finished``: ``summary.json`` is there and reached ``train.max_iters``;
- ``stopped``: stopped on request (the last metrics row is a ``stop`` row), or a summary
  short of ``train.max_iters``; ``python train.py --resume`` continues it;
- ``failed``: none of these -- it ended by an error, a crash or a kill (``--resume`` continues
  it from ``ckpt_last.pt``);
- ``unreadable``: a damaged ``config.json``, ``metrics.jsonl`` or ``summary.json`` (the
  problem is printed below the table).

It only reads: nothing in a run folder is written, and a run's lock is tested, never waited
on or kept.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import math
import os
import socket
import statistics
import sys
from pathlib import Path

from config import ArgumentParser, TrainConfig
from errors import UserError

# The fields of a row, in table order; --sort takes any of them and --json writes them all (+ path, problem).
COLUMNS = ("name", "embeddings", "steps", "best_val_loss", "best_val_bpb", "tokens_per_s", "status")
# faults.RunLock's files: the flock it holds, and the owner record it keeps while holding it.
LOCK_FILE, OWNER_FILE = ".lock", "lock.json"


class Unreadable(Exception):
    """A run folder file that cannot be read as train.py writes it; the message names file and problem."""


def _number(value) -> float | None:
    """``value`` if it is a finite int or float (not a bool), else None."""
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


def read_metrics_rows(path: Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` ([] if it does not exist).

    A last line with no newline that is not JSON is a write in progress (or one cut short by a
    crash, which ``train.py --resume`` drops too) and is left out.  Raises :class:`Unreadable`
    for any other line that is not a JSON object with a ``kind`` and an integer ``step``.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise Unreadable(f"{path.name} cannot be read ({type(e).__name__}: {e})") from None
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if number == len(lines):  # unterminated last line: being written
                break
            raise Unreadable(f"{path.name} line {number} is not JSON") from None
        if not (isinstance(row, dict) and isinstance(row.get("kind"), str) and type(row.get("step")) is int):
            raise Unreadable(f"{path.name} line {number} is not a metrics row (no kind or integer step)")
        rows.append(row)
    return rows


def _pid_alive(pid: int) -> bool:
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

    :class:`faults.RunLock` holds an flock on ``<run>/.lock`` and keeps ``lock.json`` (pid,
    host) while it does; the kernel drops the flock when the process dies.  No ``lock.json``:
    nobody holds it.  A ``lock.json`` naming a process of this host that is gone: stale.
    Otherwise the flock itself decides: a shared non-blocking flock on a read-only descriptor
    is refused while the owner holds its exclusive one (and is dropped at once when granted).
    """
    try:
        owner = json.loads((run_dir / OWNER_FILE).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        owner = {}
    owner = owner if isinstance(owner, dict) else {}
    pid = owner.get("pid")
    on_this_host = owner.get("host") == socket.gethostname() and type(pid) is int and pid > 0
    if on_this_host and not _pid_alive(pid):
        return False
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
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


def _run_facts(run_dir: Path) -> dict:
    """The row's fields read from ``run_dir``'s files; raises :class:`Unreadable` if one is damaged."""
    config = _read_json(run_dir / "config.json")
    try:
        tied, planned = config["model"]["tie_embeddings"], config["train"]["max_iters"]
    except (KeyError, TypeError):
        raise Unreadable("config.json lacks model.tie_embeddings or train.max_iters: "
                         "it was not written by train.py") from None
    if not isinstance(tied, bool) or type(planned) is not int:
        raise Unreadable("config.json's model.tie_embeddings is not a bool or train.max_iters not an integer")
    rows = read_metrics_rows(run_dir / "metrics.jsonl")
    summary = _read_json(run_dir / "summary.json") if (run_dir / "summary.json").exists() else None
    summary_step = summary.get("step") if summary is not None else None
    if summary is not None and type(summary_step) is not int:
        raise Unreadable("summary.json has no integer step")
    evals = [r for r in rows if r["kind"] == "eval"]
    losses = [v for v in (_number(r.get("val_loss")) for r in evals) if v is not None]
    bpbs = [v for v in (_number(r.get("val_bpb")) for r in evals) if v is not None]
    speeds = [v for v in (_number(r.get("tokens_per_s")) for r in rows if r["kind"] == "train") if v is not None]
    s = summary or {}
    return {
        "embeddings": "tied" if tied else "untied",
        "steps": rows[-1]["step"] if rows else summary_step,
        "max_iters": planned,
        "best_val_loss": _first(_number(s.get("best_val_loss")), min(losses, default=None)),
        "best_val_bpb": _first(_number(s.get("best_val_bpb")), min(bpbs, default=None), _number(s.get("val_bpb"))),
        "tokens_per_s": _first(_number(s.get("tokens_per_s_median")), statistics.median(speeds) if speeds else None),
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
        if (child / "config.json").is_file():
            found.append(child)
        else:
            found += [p for p in folders(child) if (p / "config.json").is_file()]
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
        raise UserError(f"out-dir {out_dir} {what}: give the folder holding the run folders with --out-dir "
                        "(train.py's --train.out_dir), or train a run first")
    rows = [describe_run(p, p.relative_to(out_dir).as_posix()) for p in find_run_folders(out_dir)]
    return sorted(rows, key=lambda r: (r[sort] is None, r[sort] if r[sort] is not None else 0, r["name"]))


def _cells(row: dict) -> list[str]:
    """The table cells of one row, in :data:`COLUMNS` order; '-' where a value is absent."""
    def fmt(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    steps = "-" if row["max_iters"] is None else f"{fmt(row['steps'], 'd')}/{row['max_iters']}"
    return [row["name"], row["embeddings"] or "-", steps, fmt(row["best_val_loss"], ".4f"),
            fmt(row["best_val_bpb"], ".4f"), fmt(row["tokens_per_s"], ",.0f"), row["status"]]


def format_table(rows: list[dict]) -> str:
    """The rows as plain aligned columns under a header (numbers right-aligned), then one
    ``note:`` line per unreadable run saying what is wrong with it.
    """
    table = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    numeric = {"steps", "best_val_loss", "best_val_bpb", "tokens_per_s"}
    lines = ["  ".join(cell.rjust(w) if col in numeric else cell.ljust(w)
                       for col, cell, w in zip(COLUMNS, line, widths)).rstrip() for line in table]
    lines += [f"note: {r['name']} is unreadable: {r['problem']}" for r in rows if r["problem"]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; a bad flag is a :class:`UserError`."""
    p = ArgumentParser(prog="list_runs.py", description=__doc__)
    p.add_argument("--out-dir", type=Path, default=Path(TrainConfig.out_dir), metavar="DIR",
                   help="Folder holding the run folders (train.py's --train.out_dir).")
    p.add_argument("--sort", default="name", choices=COLUMNS, metavar="COLUMN",
                   help=f"Column to sort by, ascending, runs lacking the value last: one of {', '.join(COLUMNS)}.")
    p.add_argument("--json", action="store_true",
                   help="Print a JSON list of objects (numbers as numbers, null where absent) instead of a table.")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the table (or JSON) and returns 0, or 2 on bad input."""
    try:
        args = parse_args(argv)
        rows = list_runs(args.out_dir, args.sort)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no run folders in {args.out_dir}: train one with python train.py --run-name NAME")
    else:
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
