"""Make finished run folders light enough to keep in git: thin each one's train-loss rows.

    python keep.py results/tying-budget-cpu-2026-11-25                 # at most 40 train rows a run
    python keep.py results/my-experiment --train-rows 100 --dry-run    # what it would save

A record in ``results/`` needs what its report re-renders from and what a reader checks:
``config.json``, ``env.json``, ``summary.json``, every eval row of ``metrics.jsonl`` (the
curves, the schedule check) and a train-loss series, not every logged step.  For each
finished run folder (``summary.json``, no live lock) under the folders given, at any depth,
``metrics.jsonl`` keeps every row but ``train`` rows, and of those at most ``--train-rows``
(:func:`training.runs.thin_metrics`).  The file is replaced atomically; a run already thin
is left as it is.  Checkpoints, ``.gitignore`` keeps out of git anyway; this writes none.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.cli import ArgumentParser, run_command
from core.errors import UserError
from core.files import write_text_atomic
from training.faults import lock_is_live
from training.runs import read_metrics, thin_metrics
from training.run_files import CONFIG, LAST_CKPT, METRICS, SUMMARY


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; a bad flag is a :class:`UserError`."""
    p = ArgumentParser(prog="keep.py", description=__doc__)
    p.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="Run or experiment folders to thin.")
    p.add_argument("--train-rows", type=int, default=40, metavar="N", help="Train rows each run keeps, at most (>= 2).")
    p.add_argument("--dry-run", action="store_true", help="Print what would be saved; write nothing.")
    args = p.parse_args(argv)
    if args.train_rows < 2:
        raise UserError(f"--train-rows must be >= 2 (a curve needs two points), got {args.train_rows}")
    for f in args.folders:
        if not f.is_dir():
            what = "is a file, not a folder" if f.exists() else "does not exist"
            raise UserError(f"{f} {what}: give run folders or the experiment folder holding them")
    return args


def finished_runs(folders: list[Path]) -> list[Path]:
    """Run folders (``config.json`` and ``summary.json``, no live lock) at or under ``folders``, sorted;
    not a WSD trunk that may train on (it keeps its checkpoints and stopped before its horizon: its
    next stage appends to its metrics, and its branches copy them)."""
    found = {p.parent for f in folders for p in [f / SUMMARY, *f.rglob(SUMMARY)] if p.is_file()}
    return sorted(r for r in found if (r / CONFIG).is_file() and not lock_is_live(r) and not _growing(r))


def _growing(run: Path) -> bool:
    """A trunk with its checkpoints, short of its schedule's horizon (:mod:`training.branch`)."""
    if not (run / LAST_CKPT).is_file():
        return False
    tc = json.loads((run / CONFIG).read_text()).get("train", {})
    return bool(tc.get("save_at")) and tc.get("max_iters", 0) < tc.get("lr_decay_iters", 0)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints one line per thinned run and a total, returns 0 (2 on bad input)."""

    def body() -> None:
        args = parse_args(argv)
        runs, before, after = finished_runs(args.folders), 0, 0
        for run in runs:
            path = run / METRICS
            rows = read_metrics(path)
            kept = thin_metrics(rows, args.train_rows)
            if len(kept) == len(rows):
                continue
            text = "".join(json.dumps(r) + "\n" for r in kept)
            size = path.stat().st_size
            before, after = before + size, after + len(text.encode())
            print(f"{run}: {len(rows)} -> {len(kept)} rows, {size / 1e3:.0f} -> {len(text.encode()) / 1e3:.0f} KB")
            if not args.dry_run:
                write_text_atomic(path, text)
        verb = "would save" if args.dry_run else "saved"
        print(f"{len(runs)} finished run(s); {verb} {(before - after) / 1e6:.2f} MB of metrics.jsonl")

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
