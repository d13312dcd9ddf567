"""``compare.py grid``: one tuned A/B experiment per cell of a product of config values, and the scaling view.

    python compare.py grid --config configs/scaling_cpu.toml --axis model.n_embd=64,128,256 \\
        --axis data.tokenizer=char,bpe:4096 --arms tied,untied --lr-grid 1e-3,2e-3,4e-3 --seeds 5

Each cell trains in ``<train.out_dir>/<name>/<cell>/`` as ``compare.py ab`` would train it; the grid's
``report.md`` draws the gap in bits per byte against model size.  ``compare.py report <grid folder>``
writes the report again, with contrasts and slopes asked of the cells.
"""

from __future__ import annotations

import argparse
import sys

from core.cli import ArgumentParser
from core.errors import UserError
from experiment.grid.markdown import write_grid_report
from experiment.grid.model import Readout
from experiment.grid.run import parse_axes, run_grid
from experiment.runs import cli

MARGIN_HELP = (
    "Equivalence margin in nats/token for each cell's verdict, declared before the runs (default 0.01); "
    "--margin-bpb gives the grid report's verdicts in bits per byte."
)


def parser() -> argparse.ArgumentParser:
    """The grid mode's options: the shared ones (:mod:`experiment.runs.cli`), the axes and --margin-bpb."""
    p = ArgumentParser(prog="compare.py grid", description=__doc__)
    p.add_argument(
        "--axis",
        action="append",
        default=[],
        required=True,
        metavar="KEY=V1,V2,...",
        help="A config key and the values the grid takes it through (repeatable: the product of the axes, first "
        "outermost), e.g. --axis model.n_embd=64,128 --axis data.tokenizer=char,bpe:4096.",
    )
    cli.add_arm_options(p)
    cli.add_seed_options(p)
    cli.add_rate_options(p)
    cli.add_run_options(p, MARGIN_HELP)
    p.add_argument(
        "--margin-bpb",
        type=float,
        metavar="BPB",
        help="The grid report's verdicts in bits per byte at this equivalence margin (default: each cell's own, "
        "in nats).",
    )
    return p


def main(argv: list[str], command: str) -> int:
    """Train every cell of the grid, then write its report; exit 1 if a cell failed (marked missing)."""
    args, overrides = cli.parse(parser(), argv)
    cli.check_shared(args)
    axes = parse_axes(args.axis, (*cli.SET_PER_RUN, "train.out_dir"))
    cli.check_margin_bpb(args.margin_bpb)
    plan = cli.plan_of(args, overrides)
    armed = sorted({a.key for a in axes} & {k for arm in plan.arms for k in plan.arm_set.settings[arm]})
    if armed:  # an arm's own value would win over the cell's: the axis would change nothing in that arm
        raise UserError(f"--axis {armed[0]}: the arms set it themselves; vary it in the arms, or choose another axis")
    grid_dir, cells = run_grid(plan, axes, args.prompts, command)
    errors = {c.name: c.error for c in cells if c.error}
    cli.print_report(write_grid_report(grid_dir, errors, command, Readout(args.margin_bpb)), "grid report")
    cli.tidy(plan, args.keep_worktrees)
    if errors:
        print(
            f"[compare] {len(errors)} grid cell(s) failed and are marked missing ({', '.join(errors)}): "
            "fix the cause and run the same command again (finished runs are reused)",
            file=sys.stderr,
        )
        return 1
    return 0
