"""Tied vs untied embeddings: run a fair experiment with one command and write a report.

    python compare.py --config configs/shakespeare.toml --seeds 3                  # both arms, then the report
    python compare.py --config configs/shakespeare.toml --seeds 3 --equal-params   # tied arm widened to match
    python compare.py runs/exp/tied-s0 runs/exp/untied-s0 runs/exp/tied-s1 ...     # report on existing runs
    python compare.py --config configs/debug.toml --seeds 2 --train.max_iters=50   # any train.py override

For each seed ``s`` it trains ``runs/<experiment>/tied-s<s>`` and ``untied-s<s>`` through
``train.py`` with the same config, seed, data order, eval batches, token budget, schedule and
optimizer settings -- only ``tie_embeddings`` differs (and, with ``--equal-params``, the tied
arm's ``n_embd`` or ``n_layer``, sized so the parameter counts match within 2%).  Finished runs
are reused and unfinished ones resumed, so an interrupted experiment continues where it stopped.
Then it writes ``runs/<experiment>/report.md`` with PNG figures and prints the report.  wandb,
when enabled, gets one ``group`` per experiment with ``tied`` / ``untied`` tags.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli import ArgumentParser, run_command
from core.errors import UserError
from experiment.runner import run_experiment, write_report
from training.config import parse_cli

# Config keys compare.py sets for each run itself (the arm, the seed from --seeds): not offered as
# --section.key options, and refused if given.
SET_PER_RUN = ("model.tie_embeddings", "train.seed")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """Parse the command line; ``--section.key`` overrides are passed on to every train.py run."""
    p = ArgumentParser(prog="compare.py", description=__doc__)
    p.add_argument("runs", nargs="*", type=Path, help="Existing run folders to report on (no training).")
    p.add_argument("--config", help="TOML config both arms train with, e.g. configs/shakespeare.toml "
                                    "(default: none, the built-in defaults).")
    p.add_argument("--seeds", type=int, default=3,
                   help="Seeds per arm, paired across arms: run i trains with the config's train.seed + i; "
                        ">= 2 for a confidence interval.")
    p.add_argument("--equal-params", nargs="?", const="width", choices=("width", "depth"),
                   help="Grow the tied arm (by n_embd, or n_layer with 'depth') to the untied arm's parameter count "
                        "(default: off, both arms the same size).")
    p.add_argument("--name", help="Experiment folder name under train.out_dir (default: <config>-tied-vs-untied).")
    p.add_argument("--report-dir", type=Path, help="Where report.md goes when reporting on existing runs (default: their parent).")
    p.add_argument("--prompt", action="append", help="Prompt for the side-by-side samples (repeatable; default: a newline and 'ROMEO:').")
    args, overrides = parse_cli(p, argv, exclude=SET_PER_RUN)
    if args.runs and (args.config or args.equal_params or overrides or args.name):
        raise UserError("give either run folders to report on, or --config/--name/overrides to train: not both")
    if not args.runs and args.report_dir:
        raise UserError("--report-dir is for reports on existing runs; a new experiment reports into its own folder")
    if args.prompt is not None and not all(args.prompt):
        raise UserError("an empty --prompt: give some text (e.g. --prompt 'ROMEO:')")
    if args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on bad input or unfair runs)."""

    def body() -> int:
        args, overrides = parse_args(argv)
        prompts = args.prompt if args.prompt is not None else ["\n", "ROMEO:"]
        if args.runs:
            out_dir = args.report_dir or Path(args.runs[0]).resolve().parent
            path, meaningful = write_report(args.runs, out_dir, prompts, f"Tied vs untied: {out_dir.name}")
        else:
            paths, out_dir = run_experiment(args, overrides)
            path, meaningful = write_report(paths, out_dir, prompts, f"Tied vs untied: {out_dir.name}")
        print(path.read_text())
        print(f"[compare] report: {path}")
        if not meaningful:
            print("[compare] warning: a run did not beat the unigram baseline, so the comparison is not meaningful "
                  "(see the top of the report): train longer or check the config", file=sys.stderr)
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
