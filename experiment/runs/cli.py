"""The command-line pieces every ``compare.py`` mode shares: the config, the arms, the seeds, the rates, the margin.

Each mode (``compare.py ab``, ``grid``, ``budgets``) builds its parser from these groups and adds
only the options that apply to it, so an option one mode cannot use is not there to be given:

    p = ArgumentParser(prog="compare.py grid", description=...)
    add_arm_options(p); add_seed_options(p); add_rate_options(p); add_run_options(p, margin_help=...)
    args, overrides = parse(p, argv)
    check_shared(args)          # arms, rates, seeds, margin, prompts: UserError for a bad value
    plan = plan_of(args, overrides)

The report mode reads run folders instead and shares only :func:`print_report` and :func:`title`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from core.errors import UserError
from experiment import arms
from experiment.arms import ARM_KEYS, ARMS, DEFAULT_ARMS, ArmSet, define_arms, load_arms_file, parse_arm, parse_arms
from experiment.runs.plan import Plan, with_shared_config
from experiment.runs.record import DEFAULT_MARGIN, EVERY_SEED, ONE_SEED
from experiment.stats import sequential_looks
from training.config import parse_cli

# Config keys compare.py sets for each run itself (the arm's settings, the seed from --seeds): not
# offered as --section.key options, and refused if given.
SET_PER_RUN = (*ARM_KEYS, "train.seed")


def parse(p: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, dict]:
    """Parse ``argv`` with ``p`` plus every ``--section.key`` override (passed on to each train.py run)."""
    return parse_cli(p, argv, exclude=SET_PER_RUN)


def add_arm_options(p: argparse.ArgumentParser) -> None:
    """--config, the arms (--arms, --arm, --arms-file) and --reference."""
    p.add_argument(
        "--config",
        help="TOML config every arm trains with, e.g. configs/shakespeare.toml (default: none, the built-in defaults).",
    )
    p.add_argument(
        "--arms",
        help=f"Comma-separated arms: presets ({', '.join(ARMS)}) or arms defined with --arm / --arms-file "
        f"(default: every defined arm, else {','.join(DEFAULT_ARMS)}).",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="Define an arm by its train.py settings (repeatable), e.g. --arm base: --arm dropout:model.dropout=0.1 "
        "('base:' trains the config as given), or by a commit's code, NAME@REV (e.g. --arm old@HEAD~1).",
    )
    p.add_argument(
        "--arms-file",
        type=Path,
        metavar="FILE",
        help='Arms from a TOML file, one table each: [dropout] then "model.dropout" = 0.1.',
    )
    p.add_argument(
        "--reference", help="The arm every other arm is compared with (default: tied if it is an arm, else the first)."
    )


def add_seed_options(p: argparse.ArgumentParser, auto: bool = False) -> None:
    """--seeds, and with ``auto`` its sequential form (--seeds auto, --max-seeds)."""
    p.add_argument(
        "--seeds",
        default="5",
        help="Seeds per arm, paired across arms: run i trains with the config's train.seed + i."
        + (
            " 'auto' adds seeds in looks (3, 5, 7, ... up to --max-seeds) until every verdict is decided, each look "
            "tested at 0.05 over the number of looks (Bonferroni), so the error rate stays at 5%%."
            if auto
            else ""
        ),
    )
    if auto:
        p.add_argument(
            "--max-seeds",
            type=int,
            metavar="N",
            help="With --seeds auto: the most seeds a sequential experiment may reach (declared before the runs).",
        )


def add_rate_options(p: argparse.ArgumentParser, one_seed: bool = True) -> None:
    """--lr-grid, and with ``one_seed`` the exploratory reading of it (--lr-tuning, --lr-widen)."""
    p.add_argument(
        "--lr-grid",
        help="Comma-separated peak learning rates to tune each arm over (default: none, every arm at "
        "train.learning_rate). Every arm trains every rate on every seed and the verdict reads each arm's fitted "
        "best against the reference's.",
    )
    if not one_seed:
        return
    p.add_argument(
        "--lr-tuning",
        choices=(EVERY_SEED, ONE_SEED),
        help=f"How --lr-grid is read. {EVERY_SEED} (the default): every rate on every seed, best against best, "
        f"calibrated. {ONE_SEED}: each arm's rate picked on one tuning seed, then its seeds at that rate; "
        "cheaper, exploratory: its verdicts are labelled not calibrated.",
    )
    p.add_argument(
        "--lr-widen",
        type=int,
        default=0,
        metavar="N",
        help="With --lr-tuning one-seed: when an arm's best rate is the grid's smallest or largest, also train it "
        "one grid step past that edge, and again while the best stays there, up to N rates a side.",
    )


def add_run_options(p: argparse.ArgumentParser, margin_help: str) -> None:
    """--margin (worded by the mode), --equal-params, --name, --keep-worktrees and --prompt."""
    p.add_argument("--margin", type=float, help=margin_help)
    p.add_argument(
        "--equal-params",
        nargs="?",
        const="width",
        choices=("width", "depth"),
        help="Grow the arms that share one matrix (tied, tied-bias; by n_embd, or n_layer with 'depth') "
        "to the untied parameter count (default: off, every arm the same shape).",
    )
    p.add_argument("--name", help="Experiment folder name under train.out_dir (default: <config>-<arms>...).")
    p.add_argument(
        "--keep-worktrees",
        action="store_true",
        help="Keep the git worktrees of arms from code (NAME@REV, in .worktrees/) after the report "
        "(default: removed once the report is written).",
    )
    p.add_argument(
        "--prompt", action="append", help="Prompt for the side-by-side samples (repeatable; default: a newline)."
    )


def check_shared(args: argparse.Namespace) -> None:
    """Parse the shared options' values in place (arms, rates, seeds, margin, prompts); UserError for a bad one."""
    check_arms(args)
    args.lr_grid = parse_lr_grid(args.lr_grid)
    lr_tuning = getattr(args, "lr_tuning", None)
    if lr_tuning and not args.lr_grid:
        raise UserError(f"--lr-tuning {lr_tuning} says how --lr-grid is read: give --lr-grid RATES too")
    args.lr_tuning = lr_tuning or EVERY_SEED
    args.lr_widen = getattr(args, "lr_widen", 0)
    if args.lr_widen < 0 or (args.lr_widen and not args.lr_grid):
        raise UserError(
            f"--lr-widen {args.lr_widen} needs --lr-grid and a count >= 0: e.g. --lr-grid 2e-3,4e-3,8e-3 --lr-widen 2"
        )
    if args.lr_widen and args.lr_tuning != ONE_SEED:
        raise UserError(
            "--lr-widen does not go with --lr-grid's every-seed design (every rate on every seed): add the next rate "
            "to --lr-grid where the report says a best sits at the edge, or use --lr-tuning one-seed"
        )
    check_seeds(args)
    if args.margin is not None and not (math.isfinite(args.margin) and args.margin > 0):
        raise UserError(f"--margin must be a finite number > 0, got {args.margin}: e.g. --margin 0.01")
    if args.prompt is not None and not all(args.prompt):
        raise UserError("an empty --prompt: give some text (e.g. --prompt 'ROMEO:')")
    args.prompts = args.prompt if args.prompt is not None else ["\n"]
    if args.reference not in args.arms:
        raise UserError(f"--reference {args.reference} is not among --arms {','.join(args.arms)}: add it")


def check_margin_bpb(margin_bpb: float | None) -> None:
    """Refuse a ``--margin-bpb`` that is not a finite number > 0 (an infinite one reads every cell equivalent)."""
    if margin_bpb is not None and not (math.isfinite(margin_bpb) and margin_bpb > 0):
        raise UserError(
            f"--margin-bpb must be a finite number > 0 bits per byte, got {margin_bpb}: e.g. --margin-bpb 0.02"
        )


def check_arms(args: argparse.Namespace) -> None:
    """``args.arm_set`` (:class:`experiment.arms.ArmSet`), ``args.arms`` (its names) and ``args.reference``
    from --arms, --arm and --arms-file; UserError for a bad definition or an arm defined twice."""
    defined: dict[str, dict] = {}
    sources = [parse_arm(t) for t in args.arm]
    sources += list(load_arms_file(args.arms_file).items()) if args.arms_file else []
    for name, settings in sources:
        if name in defined:
            raise UserError(f"arm {name} is defined twice (--arm, --arms-file): give each arm one definition")
        defined[name] = settings
    args.arm_set = define_arms(parse_arms(args.arms) if args.arms is not None else None, defined)
    args.arms = args.arm_set.names
    if args.reference is None:
        args.reference = "tied" if "tied" in args.arms else args.arms[0]


def check_seeds(args: argparse.Namespace) -> None:
    """``args.seeds`` as a count (the first look's with ``auto``) and ``args.max_seeds`` (0: fixed); UserError if bad."""
    max_seeds = getattr(args, "max_seeds", None)
    if args.seeds == "auto" and hasattr(args, "max_seeds"):
        if max_seeds is None:
            raise UserError(
                "--seeds auto trains in looks up to a declared --max-seeds: e.g. --seeds auto --max-seeds 9"
            )
        args.seeds = sequential_looks(max_seeds)[0]
        return
    try:
        args.seeds = int(args.seeds)
    except ValueError:
        raise UserError(f"--seeds must be a count, got {args.seeds!r}: e.g. --seeds 5") from None
    if args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    if max_seeds is not None:
        raise UserError("--max-seeds bounds --seeds auto: add --seeds auto, or drop --max-seeds")
    args.max_seeds = 0


def parse_lr_grid(text: str | None) -> list[float]:
    """``"1e-3,2e-3"`` -> ``[0.001, 0.002]`` (sorted, distinct, positive); [] for None."""
    if text is None:
        return []
    try:
        grid = sorted({float(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise UserError(
            f"--lr-grid {text!r} is not a comma-separated list of numbers: e.g. --lr-grid 1e-3,2e-3"
        ) from None
    if not grid or grid[0] <= 0 or not all(math.isfinite(lr) for lr in grid):
        raise UserError(f"--lr-grid needs positive learning rates, got {text!r}: e.g. --lr-grid 1e-3,2e-3,4e-3")
    if len({f"{lr:g}" for lr in grid}) != len(grid):  # run folders are named by f"{lr:g}"
        raise UserError(f"--lr-grid {text!r} has values too close to tell apart (same to 6 digits): space them out")
    return grid


def plan_of(args: argparse.Namespace, overrides: dict, **mode: object) -> Plan:
    """What to train, from the shared options; ``mode`` adds a mode's own fields (budgets, adopt, outcome, ...).

    Each arm's settings are complete: a key the config sets and an arm does not is the arm's too
    (:func:`~experiment.runs.plan.with_shared_config`).
    """
    plan = Plan(
        config=args.config,
        overrides=overrides,
        arms=args.arms,
        seeds=args.seeds,
        lr_grid=args.lr_grid,
        equal_params=args.equal_params,
        name=args.name,
        reference=args.reference,
        margin=DEFAULT_MARGIN if args.margin is None else args.margin,
        lr_widen=args.lr_widen,
        arm_set=args.arm_set,
        max_seeds=args.max_seeds,
        lr_tuning=args.lr_tuning,
        **mode,
    )
    return with_shared_config(plan)


def title(arm_set: ArmSet, out_dir: Path) -> str:
    """A report's title: the tying question for the presets, else the arms compared."""
    if set(arm_set.names) <= set(ARMS):
        return f"Should the embedding be tied? {out_dir.name}"
    return f"{' vs '.join(arm_set.names)}: {out_dir.name}"


def print_report(path: Path, what: str = "report", meaningful: bool = True) -> None:
    """The report on stdout, where it was written (``[compare] grid report: ...``), and a warning when a run
    did not learn from context."""
    print(path.read_text())
    print(f"[compare] {what}: {path}")
    if not meaningful:
        print(
            "[compare] warning: a run did not beat the unigram baseline, so the comparison is not meaningful "
            "(see the top of the report): train longer or check the config",
            file=sys.stderr,
        )


def tidy(plan: Plan, keep: bool) -> None:
    """After the report: remove the worktrees of the plan's arms from code (:func:`experiment.arms.remove_worktree`),
    unless ``keep`` (--keep-worktrees), saying so.  A later report that samples such a run adds the worktree
    again for the sample and removes it after."""
    if keep:
        return
    for sha in sorted({sha for arm in plan.arms if (sha := plan.arm_set.code(arm))}):
        if (arms.WORKTREES / sha[:12]).exists():
            arms.remove_worktree(sha)
            print(f"[compare] removed the worktree of commit {sha[:12]} (--keep-worktrees keeps it)", flush=True)
