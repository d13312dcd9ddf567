"""Is a change real?  A fair, tuned A/B experiment over paired seeds, in one command, and its report.

    python compare.py --config configs/shakespeare.toml --arm base: --arm drop:model.dropout=0.1 --seeds 5
    python compare.py --config configs/shakespeare.toml --arm old@HEAD~1 --arm new: --reference old --fail-on worse
                                                                # your last commit against its parent
    python compare.py --config configs/shakespeare.toml          # tied vs untied, 5 seeds, then the report
    python compare.py grid --config configs/scaling_cpu.toml --axis model.n_embd=64,128 --lr-grid 1e-3,2e-3
    python compare.py budgets --config configs/scaling_cpu.toml --budgets 0.5M,1M,2M --seeds 6 --jobs 2
    python compare.py runs/default runs/untied                    # the report on runs you trained
    python compare.py report runs/shakespeare-grid --margin-bpb 0.02   # any experiment folder's report, again

Modes (``python compare.py MODE --help`` lists each one's options):

  ab       arms over paired seeds, a verdict per arm against the reference (the mode when the first
           argument is an option)
  grid     one A/B experiment per cell of a product of config values (--axis), and the scaling view
  budgets  warmup-stable-decay trunks with a cooldown branch per token budget, a verdict per budget
  report   the report of run folders or of an experiment folder, read with what it declared (the mode
           when the first argument is a folder)

Each arm is a set of ``train.py`` settings or the code of a commit (``NAME@REV``); docs/experiment.md
says how each design is read and what its verdicts' error rates are.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from core.cli import ArgumentParser, plain_text, run_command
from core.errors import UserError
from experiment.ab import cli as ab_cli
from experiment.budget import cli as budget_cli
from experiment.budget.markdown import write_budget_report
from experiment.grid import cli as grid_cli
from experiment.grid.markdown import write_grid_report
from experiment.grid.model import Readout, parse_contrast, parse_slope_within
from experiment.runs.cli import print_report
from experiment.runs.record import GRID_FILE, ExperimentRecord

# A mode's options given to the A/B mode: the mode it names, and how to ask for it.
OTHER_MODES = {
    "--grid": "the grid is a mode of its own: python compare.py grid --axis KEY=V1,V2 (the other options as they are)",
    "--budgets": "the budget axis is a mode of its own: python compare.py budgets --budgets TOKENS,... "
    "(the other options as they are)",
    "--jobs": "runs at once is an option of the budgets mode: python compare.py budgets --budgets TOKENS,... "
    "--jobs N (an A/B experiment trains one run at a time; start the command twice to share its runs)",
}


def report_parser() -> argparse.ArgumentParser:
    """The report mode's options: the folders, and how to read them."""
    p = ArgumentParser(prog="compare.py report", description="The report of run folders or an experiment folder.")
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="Run folders (tune-* are a learning-rate grid), or one experiment, grid or budgets folder.",
    )
    p.add_argument("--reference", help="The arm the others are compared with (default: the one the folder declared).")
    p.add_argument("--margin", type=float, help="Equivalence margin (default: the one the folder declared, else 0.01).")
    p.add_argument("--outcome", help="What the verdict reads (default: what the folder declared, else loss).")
    p.add_argument("--margin-bpb", type=float, metavar="BPB", help="Verdicts in bits per byte at this margin too.")
    p.add_argument(
        "--contrast",
        action="append",
        default=[],
        metavar="CELL_A,CELL_B",
        help="A grid folder's Δ(A) − Δ(B) of two cells with a Welch 95%% interval (repeatable).",
    )
    p.add_argument(
        "--slope-within",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="A grid folder's slope of Δ bpb on embedding share over the cells with these axis values (repeatable).",
    )
    p.add_argument(
        "--beside",
        action="append",
        type=Path,
        default=[],
        metavar="FOLDER",
        help="A budgets folder's report draws another budgets experiment's Δ against tokens beside its own, "
        "e.g. the same question under another recipe (repeatable).",
    )
    p.add_argument("--report-dir", type=Path, help="Where report.md goes for run folders (default: their parent).")
    p.add_argument("--prompt", action="append", help="Prompt for the side-by-side samples (repeatable).")
    p.add_argument(
        "--fail-on",
        choices=("worse", "not-better"),
        help="Exit 1 when an arm is worse than the reference (worse), or anything but better (not-better); "
        "exit 3, no gate, when the verdicts are not calibrated.",
    )
    return p


def report(argv: list[str], command: str) -> int:
    """Write and print the report of the folders in ``argv``: a grid's, a budget axis's, or an A/B experiment's."""
    args = report_parser().parse_args(argv)
    # The values first: a bad one is named whatever the folders hold.
    readout = Readout(
        args.margin_bpb, [parse_contrast(t) for t in args.contrast], parse_slope_within(args.slope_within)
    )
    ab_cli.check_readout(args)
    if args.prompt is not None and not all(args.prompt):
        raise UserError("an empty --prompt: give some text (e.g. --prompt 'ROMEO:')")
    folder = args.runs[0] if len(args.runs) == 1 else None
    kind = "grid" if folder and (folder / GRID_FILE).is_file() else "ab"
    if folder and kind == "ab" and (record := ExperimentRecord.read(folder)) is not None:
        kind = record.kind
    _refuse_options(args, kind)
    if kind == "grid":
        print_report(write_grid_report(folder, command=command, readout=readout), "grid report")
        return 0
    if kind == "budget":
        report_path = write_budget_report(folder, args.reference or "tied", command, beside=args.beside)
        print_report(report_path, "budget report")
        return 0
    c = ab_cli.given_runs(
        args.runs, margin=args.margin, outcome=args.outcome, reference=args.reference, report_dir=args.report_dir
    )
    prompts = args.prompt if args.prompt is not None else ["\n"]
    return ab_cli.report(c, prompts=prompts, command=command, margin_bpb=args.margin_bpb, fail_on=args.fail_on)


def _refuse_options(args: argparse.Namespace, kind: str) -> None:
    """UserError for a report option the folder's kind cannot use (known only once the folder is read)."""
    given = {
        "--reference": args.reference,
        "--margin": args.margin,
        "--outcome": args.outcome,
        "--margin-bpb": args.margin_bpb,
        "--contrast": args.contrast,
        "--slope-within": args.slope_within,
        "--report-dir": args.report_dir,
        "--beside": args.beside,
        "--prompt": args.prompt,
        "--fail-on": args.fail_on,
    }
    applies = {
        "grid": ("--margin-bpb", "--contrast", "--slope-within"),
        "budget": ("--reference", "--beside"),
        "ab": ("--reference", "--margin", "--outcome", "--margin-bpb", "--report-dir", "--prompt", "--fail-on"),
    }[kind]
    wrong = [flag for flag, value in given.items() if value not in (None, []) and flag not in applies]
    if wrong:
        what = {"grid": "a grid folder", "budget": "a budgets folder", "ab": "A/B run folders"}[kind]
        raise UserError(
            f"{', '.join(wrong)} cannot apply to {what}, whose report takes {', '.join(applies)}: drop {wrong[0]}"
        )


MODES = {"ab": ab_cli.main, "grid": grid_cli.main, "budgets": budget_cli.main, "report": report}


def mode_of(argv: list[str]) -> tuple[str, list[str]]:
    """``(mode, its arguments)``: the first word if it names a mode, else ``report`` for a folder, ``ab`` for an option.

    Raises :class:`UserError` for another mode's option given to the A/B mode (``--grid``, ``--budgets``)."""
    if argv and argv[0] in MODES:
        return argv[0], argv[1:]
    if argv and not argv[0].startswith("-"):
        return "report", argv
    for flag, fix in OTHER_MODES.items():
        if any(a == flag or a.startswith(f"{flag}=") for a in argv):
            raise UserError(f"{flag}: {fix}")
    return "ab", argv


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1: a failed --fail-on gate; 2: bad input or unfair
    runs; 3: --fail-on on verdicts that are not calibrated)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(plain_text(__doc__))
        return 0
    command = shlex.join(["python", "compare.py", *argv])

    def body() -> int:
        mode, rest = mode_of(argv)
        return MODES[mode](rest, command)

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
