"""``compare.py budgets``: does the answer change with the training budget?  One verdict per budget.

    python compare.py budgets --config configs/scaling_cpu.toml --budgets 0.5M,1M,2M,4M \\
        --arms tied,untied --lr-grid 1e-3,2e-3,4e-3 --seeds 6 --margin 0.01 --jobs 2

Every arm trains a warmup-stable-decay trunk per learning rate and seed, and each budget is a
cooldown branch from it (``train.cooldown_frac`` of the budget); every rate trains on every seed
and each budget's verdict reads best against best in bits per byte, Holm across the budgets.
``compare.py report <folder>`` writes the report again over the budgets finished so far.
"""

from __future__ import annotations

import argparse
import sys

from core.cli import ArgumentParser
from core.errors import UserError
from experiment.budget.markdown import write_budget_report
from experiment.budget.run import parse_budgets, run_budget_experiment
from experiment.runs import cli

MARGIN_HELP = "Equivalence margin in bits per byte, declared before the runs (default 0.01)."


def parser() -> argparse.ArgumentParser:
    """The budget mode's options: the shared ones (:mod:`experiment.runs.cli`), the budgets and --jobs."""
    p = ArgumentParser(prog="compare.py budgets", description=__doc__)
    p.add_argument(
        "--budgets",
        required=True,
        metavar="TOKENS,...",
        help="Training budgets in tokens (k, M, G), e.g. 0.5M,1M,2M,4M: a cooldown branch each.",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="Train N runs at once, the CPU's cores split evenly between them (every run on the same thread "
        "count, recorded in its env.json). Default: one run per core on a CPU, one on a GPU.",
    )
    cli.add_arm_options(p)
    cli.add_seed_options(p)
    cli.add_rate_options(p, one_seed=False)
    cli.add_run_options(p, MARGIN_HELP)
    return p


def _check(args: argparse.Namespace, overrides: dict) -> None:
    """Parse --budgets and --jobs in place and set every run's schedule to WSD; UserError for a clash."""
    cli.check_shared(args)
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    length = [f"--train.{k}" for k in ("max_iters", "lr_decay_iters") if k in overrides.get("train", {})]
    if length:
        raise UserError(f"--budgets sets each run's length and horizon from its budget: drop {', '.join(length)}")
    if overrides.get("train", {}).get("lr_schedule", "wsd") != "wsd":
        raise UserError("--budgets branches cooldowns from a warmup-stable-decay trunk: drop --train.lr_schedule")
    overrides.setdefault("train", {})["lr_schedule"] = "wsd"
    args.budgets = parse_budgets(args.budgets)


def main(argv: list[str], command: str) -> int:
    """Train the budget axis, then its report over the budgets read so far; exit 1 if a run failed."""
    args, overrides = cli.parse(parser(), argv)
    _check(args, overrides)
    plan = cli.plan_of(args, overrides, budgets=args.budgets, jobs=args.jobs or 0)
    _, failed, out_dir = run_budget_experiment(plan)
    try:
        cli.print_report(write_budget_report(out_dir, plan.reference, command), "budget report")
    except UserError as e:  # nothing finished to read yet: the runs' failure below is the news
        print(f"[compare] no budget report: {e}", file=sys.stderr)
    cli.tidy(plan, args.keep_worktrees)
    if failed:
        print(
            f"[compare] {len(failed)} run(s) failed ({', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''}): "
            "see their logs, fix the cause and run the same command again (finished runs are reused)",
            file=sys.stderr,
        )
        return 1
    return 0
