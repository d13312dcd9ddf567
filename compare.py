"""Is a change real?  A fair, tuned, multi-arm A/B experiment over paired seeds, in one command.

    python compare.py --config configs/shakespeare.toml --arm base: --arm drop:model.dropout=0.1 --seeds 5
    python compare.py --config configs/shakespeare.toml --arm old@HEAD~1 --arm new: --reference old --fail-on worse
                                                                             # your last commit against its parent
    python compare.py --config configs/shakespeare.toml                      # tied vs untied, 5 seeds, then the report
    python compare.py --config configs/shakespeare.toml --arms tied,untied,tied-bias,untied-split,tie-then-untie \\
        --lr-grid 1e-3,2e-3,4e-3,8e-3 --seeds 5 --margin 0.01               # every arm at every rate, best against best
    python compare.py --config configs/shakespeare.toml --equal-params depth # tied arms deepened to the untied count
    python compare.py runs/default runs/untied                              # report on runs you trained (tune-* = grid)
    python compare.py --config configs/shakespeare.toml --adopt runs/default,runs/untied
                                                                             # seed 0 of both arms adopted, the rest trained
    python compare.py runs/shakespeare-grid                                  # the report of a --grid folder, as far as it got
    python compare.py runs/shakespeare-grid --margin-bpb 0.02 --contrast n_embd-128_tokenizer-gpt2,n_embd-128_tokenizer-bpe32768 \\
        --slope-within data.tokenizer=bpe:1024,bpe:4096 --slope-within model.n_embd=128   # its verdicts in bpb, readouts
    python compare.py --config configs/shakespeare.toml --grid model.n_embd=64,128,256 \\
        --grid data.tokenizer=char,bpe:4096,gpt2 --arms tied,untied,untied-split --lr-grid 1e-3,2e-3,4e-3 --seeds 5
                                                                             # one tuned experiment per cell, the scaling view

Each arm is a set of ``train.py`` settings (docs/experiment.md), or the code of a commit (``NAME@REV``).
The tying question is the presets' (tied vs untied is the default): tied, untied, tied-bias (a
learned lm_head bias), untied-split (a zero-init head with nanochat's earlier learning-rate ratios, on AdamW),
tie-then-untie (modded-nanogpt's schedule).  With ``--lr-grid`` every arm trains every grid
learning rate on every seed and the verdict reads each arm's fitted best against the reference's
(``experiment/best.py``), in an ordinary experiment and in each ``--grid`` cell alike; ``--lr-tuning one-seed`` instead picks
each arm's rate on a tuning seed no reported run uses (with ``--lr-widen N`` also up to N steps past
an edge its best sits on) and trains the reported seeds there, labelled not calibrated.
For each seed ``s`` every arm trains ``runs/<experiment>/<arm>[-lr<lr>]-s<s>`` with the same
config, seed, data order, eval windows, token budget and schedule; only the arms' own settings (and tuned learning rates) differ.  Finished runs are reused,
unfinished ones resumed, and runs you trained yourself adopted with ``--adopt`` when they are
exactly what the experiment would train; before the first run trains, one line says how many runs
are left and their rough time and checkpoint disk.  The report (``report.md`` + figures) compares each arm with
``--reference`` paired by seed: better, worse, equivalent within ``--margin`` nats (declared
before the runs), or inconclusive.  With ``--grid KEY=V1,V2`` (repeatable) the whole experiment
runs once per cell of the axes' product, in ``runs/<grid>/<cell>/``, and ``runs/<grid>/report.md``
draws the gap (in bits per byte) against model size per tokenizer, with a regression across cells.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from core.cli import ArgumentParser, run_command
from core.errors import UserError
from core.files import read_json
from experiment.runs.adopt import parse_adopt
from experiment.arms import ARM_KEYS, ARMS, DEFAULT_ARMS, ArmSet, define_arms, load_arms_file, parse_arm, parse_arms
from experiment.budget.markdown import write_budget_report
from experiment.budget.run import parse_budgets
from experiment.grid.run import GRID_FILE, parse_axes, run_grid
from experiment.grid.markdown import write_grid_report
from experiment.grid.model import Readout, parse_contrast, parse_slope_within
from experiment.ab.readout import gate, parse_outcome
from experiment.runs.folders import arms_of_runs, check_run_folders
from experiment.runs.record import (
    DEFAULT_MARGIN,
    EVERY_SEED,
    ONE_SEED,
    ExperimentRecord,
    counted_looks,
    declared_reference,
    declared_settings,
    record_look,
)
from experiment.budget.run import run_budget_experiment
from experiment.runs.plan import Plan
from experiment.ab.run import (
    VERDICT_FILE,
    experiment_runs,
    remove_worktrees,
    run_experiment,
    run_sequential,
    write_report,
)
from experiment.stats import sequential_looks
from training.config import parse_cli
from training.run_files import CONFIG


# Config keys compare.py sets for each run itself (the arm's settings, the seed from --seeds): not
# offered as --section.key options, and refused if given.
SET_PER_RUN = (*ARM_KEYS, "train.seed")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """Parse the command line; ``--section.key`` overrides are passed on to every train.py run."""
    p = ArgumentParser(prog="compare.py", description=__doc__)
    _add_experiment_options(p)
    _add_tuning_options(p)
    _add_report_options(p)
    args, overrides = parse_cli(p, argv, exclude=SET_PER_RUN)
    _check_args(args, overrides)
    return args, overrides


def _add_experiment_options(p: argparse.ArgumentParser) -> None:
    """What to train or read: the runs or the config, the arms, the reference and the seeds."""
    p.add_argument(
        "runs",
        nargs="*",
        type=Path,
        help="Existing run folders to report on (no training); "
        "folders named tune-* are the learning-rate grid. One --grid "
        "folder (holding grid.json): the grid's report.",
    )
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
        "('base:' trains the config as given). The seed, the data and the eval windows cannot differ.",
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
    p.add_argument(
        "--seeds",
        default="5",
        help="Seeds per arm, paired across arms: run i trains with the config's train.seed + i. 'auto' adds seeds "
        "in looks (3, 5, 7, ... up to --max-seeds) until every verdict is decided, each look tested at 0.05 over "
        "the number of looks (Bonferroni), so the error rate stays at 5%%.",
    )
    p.add_argument(
        "--max-seeds",
        type=int,
        metavar="N",
        help="With --seeds auto: the most seeds a sequential experiment may reach (declared before the runs).",
    )


def _add_tuning_options(p: argparse.ArgumentParser) -> None:
    """The learning-rate grid, the margin, equal sizes, grid axes, adopted runs, budgets, jobs and the folder name."""
    p.add_argument(
        "--lr-grid",
        help="Comma-separated peak learning rates to tune each arm over (default: none, every arm at "
        "train.learning_rate). Every arm trains every rate on every seed and the verdict reads each arm's fitted "
        "best against the reference's (rates x seeds runs an arm); see --lr-tuning.",
    )
    p.add_argument(
        "--lr-tuning",
        choices=(EVERY_SEED, ONE_SEED),
        help=f"How --lr-grid is read. {EVERY_SEED} (the default): every rate on every seed, best against best, "
        f"calibrated. {ONE_SEED}: each arm's rate picked on one tuning seed, then its seeds "
        "at that rate; cheaper, exploratory: its verdicts are labelled not calibrated and --fail-on refuses them.",
    )
    p.add_argument(
        "--lr-widen",
        type=int,
        default=0,
        metavar="N",
        help="With --lr-grid: when an arm's best rate is the grid's smallest or largest, also train it one "
        "grid step past that edge, and again while the best stays there, up to N rates a side "
        "(default 0: the grid as given; an arm's best on an edge is then only flagged).",
    )
    p.add_argument(
        "--margin",
        type=float,
        help=f"Equivalence margin in nats/token, declared before the runs: arms closer than this count "
        f"as equivalent (TOST). Default {DEFAULT_MARGIN}, or the margin the experiment folder declared. "
        "With --budgets, in bits per byte: the unit of the budget report.",
    )
    p.add_argument(
        "--equal-params",
        nargs="?",
        const="width",
        choices=("width", "depth"),
        help="Grow the arms that share one matrix (tied, tied-bias; by n_embd, or n_layer with 'depth') "
        "to the untied parameter count (default: off, every arm the same shape).",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="Repeat the whole experiment for each value of a config key (repeatable: the product of the "
        "axes, first outermost), e.g. --grid model.n_embd=64,128 --grid data.tokenizer=char,bpe:4096.",
    )
    p.add_argument(
        "--adopt",
        metavar="RUN,RUN,...",
        help="Finished run folders to use as the experiment's runs for their arm and seed instead of "
        "training those, e.g. --adopt runs/default,runs/untied: each must be exactly the run the "
        "experiment would train (same config bar bookkeeping, seed, data and schedule), else it is "
        "refused; its text files are copied in (default: none).",
    )
    p.add_argument(
        "--budgets",
        metavar="TOKENS,...",
        help="Training budgets in tokens (k, M, G), e.g. 0.5M,1M,2M,4M: every arm trains a warmup-stable-decay trunk "
        "per learning rate and seed, and each budget is a cooldown branch from it (train.cooldown_frac of the "
        "budget); with --lr-grid every rate trains on every seed (no tuning seed). One report per budget "
        "(default: none, one budget: train.max_iters).",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="With --budgets: train N runs at once, the CPU's cores split evenly between them (every run of the "
        "experiment on the same thread count, recorded in its env.json). Default: one run per core on a CPU "
        "(more tokens/s in all than one run on every core), one on a GPU.",
    )
    p.add_argument("--name", help="Experiment folder name under train.out_dir (default: <config>-<arms>...).")
    p.add_argument(
        "--keep-worktrees",
        action="store_true",
        help="Keep the git worktrees of arms from code (NAME@REV, in .worktrees/) after the report "
        "(default: removed once the report is written; a later report adds one back to sample from it).",
    )


def _add_report_options(p: argparse.ArgumentParser) -> None:
    """How to report: a bpb margin, a --grid folder's contrasts and slopes, the report folder, the sample prompts."""
    p.add_argument(
        "--margin-bpb",
        type=float,
        metavar="BPB",
        help="An equivalence margin in bits per byte (better/worse: the 95%% paired t interval of Δ bpb "
        "excludes 0; equivalent: its 90%% interval inside ±BPB). A --grid folder's report uses it for every "
        "cell's verdict, stated in its header (default: each cell's own verdict, in nats); an experiment's "
        "report gains a section of verdicts in bits per byte beside the ones in nats. Not recorded: give it "
        "again with each report.",
    )
    p.add_argument(
        "--contrast",
        action="append",
        default=[],
        metavar="CELL_A,CELL_B",
        help="With a --grid folder to report on: Δ(A) − Δ(B) of two cells with a Welch 95%% interval "
        "(repeatable), e.g. --contrast n_embd-128_tokenizer-gpt2,n_embd-128_tokenizer-bpe4096.",
    )
    p.add_argument(
        "--slope-within",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="With a --grid folder to report on: the slope of Δ bpb on embedding share over the cells with "
        "these axis values (repeatable, all must hold; the cells may differ in one axis only), "
        "e.g. --slope-within data.tokenizer=bpe:1024,bpe:4096 --slope-within model.n_embd=128.",
    )
    p.add_argument(
        "--outcome",
        help="What the verdict reads, declared before the runs: loss (the final val loss, default); tokens-per-s "
        "(a systems change: each run's median tokens/s, the arms of a seed trained one after another); or "
        "tokens-to:LOSS (the training tokens to reach val loss LOSS, between periodic evals); or time-to:LOSS "
        "(the training seconds to reach it, evaluation and checkpoints left out, the arms of a seed trained one "
        "after another in alternating order: compare only on one quiet machine). For all but loss --margin is a "
        "fraction, e.g. 0.02 for ±2%%.",
    )
    p.add_argument(
        "--fail-on",
        choices=("worse", "not-better"),
        help="Exit 1 when an arm is worse than the reference (worse), or anything but better (not-better), "
        "for CI and automated loops; read from verdict.json (in bits per byte with --margin-bpb).",
    )
    p.add_argument(
        "--report-dir", type=Path, help="Where report.md goes when reporting on existing runs (default: their parent)."
    )
    p.add_argument(
        "--prompt", action="append", help="Prompt for the side-by-side samples (repeatable; default: a newline)."
    )


def _check_args(args: argparse.Namespace, overrides: dict) -> None:
    """Parse the options' values in place (arms, grids, adopted runs, the readout); UserError for a bad or clashing one."""
    _check_arms(args)
    args.lr_grid = _parse_grid(args.lr_grid)
    if args.lr_widen < 0 or (args.lr_widen and not args.lr_grid):
        raise UserError(
            f"--lr-widen {args.lr_widen} needs --lr-grid and a count >= 0: e.g. --lr-grid 2e-3,4e-3,8e-3 --lr-widen 2"
        )
    args.grid = parse_axes(args.grid, (*SET_PER_RUN, "train.out_dir"))
    training = args.config or args.equal_params or overrides or args.name or args.lr_grid or args.grid
    if args.runs and training:
        raise UserError(
            "give either run folders to report on, or --config/--name/--lr-grid/overrides to train: not both"
        )
    _check_budgets(args, overrides)
    args.outcome = parse_outcome(args.outcome) if args.outcome is not None else None
    if args.outcome not in (None, "loss") and args.margin_bpb is not None:
        raise UserError(
            f"--margin-bpb adds verdicts on the loss in bits per byte: drop it with --outcome {args.outcome}"
        )
    timed = args.outcome == "tokens-per-s" or (args.outcome or "").startswith("time-to:")
    if args.adopt and (args.seeds == "auto" or timed):
        raise UserError(
            "--adopt takes runs trained elsewhere: not for --seeds auto (its looks are its own) or a timed --outcome "
            f"({args.outcome}: adopted runs were not timed beside the experiment's)"
        )
    if args.outcome not in (None, "loss") and (args.grid or args.budgets):
        raise UserError(f"--outcome {args.outcome} reads one experiment: --grid and --budgets read bits per byte")
    _check_lr_tuning(args)
    if args.fail_on and args.lr_tuning == ONE_SEED:
        raise UserError(
            "--fail-on gates only on calibrated verdicts, and --lr-tuning one-seed picks each arm's rate on one seed, "
            "which is not: drop --lr-tuning one-seed (every rate on every seed), or drop --fail-on and read the report"
        )
    if args.fail_on and (args.grid or args.budgets):
        raise UserError("--fail-on gates one experiment's verdict: drop --grid / --budgets, or read their reports")
    args.adopt = parse_adopt(args.adopt)
    if args.adopt and (args.runs or args.grid):
        raise UserError(
            "--adopt is for a new experiment without --grid: give --config and the runs to adopt, "
            "e.g. compare.py --config configs/shakespeare.toml --adopt runs/default,runs/untied"
        )
    if not args.runs and args.report_dir:
        raise UserError("--report-dir is for reports on existing runs; a new experiment reports into its own folder")
    if args.prompt is not None and not all(args.prompt):
        raise UserError("an empty --prompt: give some text (e.g. --prompt 'ROMEO:')")
    _check_seeds(args)
    if args.margin is not None and not (math.isfinite(args.margin) and args.margin > 0):
        raise UserError(f"--margin must be a finite number > 0 nats, got {args.margin}: e.g. --margin 0.01")
    if args.margin_bpb is not None and not (math.isfinite(args.margin_bpb) and args.margin_bpb > 0):
        raise UserError(
            f"--margin-bpb must be a finite number > 0 bits per byte, got {args.margin_bpb}: e.g. --margin-bpb 0.02"
        )
    args.readout = Readout(
        args.margin_bpb, [parse_contrast(t) for t in args.contrast], parse_slope_within(args.slope_within)
    )
    if not args.runs and args.reference not in args.arms:
        raise UserError(f"--reference {args.reference} is not among --arms {','.join(args.arms)}: add it")


def _check_lr_tuning(args: argparse.Namespace) -> None:
    """Resolve ``args.lr_tuning`` (every-seed unless given); UserError where it cannot apply."""
    if args.lr_tuning and not args.lr_grid:
        raise UserError(f"--lr-tuning {args.lr_tuning} says how --lr-grid is read: give --lr-grid RATES too")
    if args.budgets and args.lr_tuning == ONE_SEED:
        raise UserError("--budgets trains every rate on every seed: drop --lr-tuning one-seed")
    args.lr_tuning = args.lr_tuning or EVERY_SEED
    if not args.lr_grid or args.budgets or args.lr_tuning == ONE_SEED:
        return
    clash = [
        flag
        for flag, given in (
            ("--lr-widen", args.lr_widen),
            ("--seeds auto", args.seeds == "auto"),
            ("--adopt", args.adopt),
            (f"--outcome {args.outcome}", args.outcome not in (None, "loss")),
        )
        if given
    ]
    if clash:
        raise UserError(
            f"{clash[0]} does not go with --lr-grid's every-seed design (every rate on every seed, read on the final "
            "val loss): add the next rate to --lr-grid where the report says a best sits at the edge, or use "
            "--lr-tuning one-seed"
        )


def _check_seeds(args: argparse.Namespace) -> None:
    """``args.seeds`` as a count (the first look's with ``auto``) and ``args.max_seeds`` (0: fixed); UserError if bad."""
    if args.seeds == "auto":
        if args.max_seeds is None or args.runs or args.grid or args.budgets:
            raise UserError(
                "--seeds auto trains one new experiment in looks up to a declared --max-seeds: "
                "e.g. --seeds auto --max-seeds 9 (not with run folders, --grid or --budgets)"
            )
        looks = sequential_looks(args.max_seeds)
        args.seeds, args.max_seeds = looks[0], args.max_seeds
        return
    try:
        args.seeds = int(args.seeds)
    except ValueError:
        raise UserError(f"--seeds must be a count or auto, got {args.seeds!r}: e.g. --seeds 5") from None
    if args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    if args.max_seeds is not None:
        raise UserError("--max-seeds bounds --seeds auto: add --seeds auto, or drop --max-seeds")
    args.max_seeds = 0


def _check_arms(args: argparse.Namespace) -> None:
    """``args.arm_set`` (:class:`experiment.arms.ArmSet`), ``args.arms`` (its names) and ``args.reference``
    from --arms, --arm and --arms-file; UserError for a bad definition or an arm defined twice."""
    defined: dict[str, dict] = {}
    sources = [parse_arm(t) for t in args.arm]
    sources += list(load_arms_file(args.arms_file).items()) if args.arms_file else []
    for name, settings in sources:
        if name in defined:
            raise UserError(f"arm {name} is defined twice (--arm, --arms-file): give each arm one definition")
        defined[name] = settings
    if args.runs and (defined or args.arms):
        raise UserError(
            "--arms, --arm and --arms-file choose arms to train: a report on run folders reads each run's arm "
            "from its config (runs that differ in other settings are compared by those settings)"
        )
    args.arm_set = define_arms(parse_arms(args.arms) if args.arms is not None else None, defined)
    args.arms = args.arm_set.names
    if args.reference is None and not args.runs:  # a report on run folders picks its own (arms_of_runs)
        args.reference = "tied" if "tied" in args.arms else args.arms[0]


def _check_budgets(args: argparse.Namespace, overrides: dict) -> None:
    """Parse ``--budgets`` and ``--jobs`` in place, and set every run's schedule to WSD; UserError for a clash."""
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    if args.budgets is None:
        if args.jobs is not None:
            raise UserError("--jobs runs the trunks and branches of --budgets: add --budgets, e.g. --budgets 0.5M,1M")
        args.budgets = []
        return
    clash = [f for f, v in (("--grid", args.grid), ("--adopt", args.adopt), ("--lr-widen", args.lr_widen)) if v]
    if clash or args.runs:
        raise UserError(
            f"--budgets trains a new experiment of its own: drop {', '.join(clash) or 'the run folders'} "
            "(with --lr-grid every rate trains on every seed, so there is nothing to widen)"
        )
    length = [f"--train.{k}" for k in ("max_iters", "lr_decay_iters") if k in overrides.get("train", {})]
    if length:
        raise UserError(f"--budgets sets each run's length and horizon from its budget: drop {', '.join(length)}")
    if overrides.get("train", {}).get("lr_schedule", "wsd") != "wsd":
        raise UserError("--budgets branches cooldowns from a warmup-stable-decay trunk: drop --train.lr_schedule")
    if args.margin_bpb is not None:
        raise UserError("--budgets reads bits per byte already, at --margin (in bits per byte): drop --margin-bpb")
    overrides.setdefault("train", {})["lr_schedule"] = "wsd"
    args.budgets = parse_budgets(args.budgets)


def _parse_grid(text: str | None) -> list[float]:
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


def _grid(plan: Plan, axes: list, prompts: list[str], command: str, readout: Readout) -> int:
    """Run every cell of the grid, then write the grid's report with ``readout``; exit 1 if a cell is missing."""
    grid_dir, cells = run_grid(plan, axes, prompts, command)
    _print_report(
        write_grid_report(grid_dir, {c.name: c.error for c in cells if c.error}, command, readout), "grid report"
    )
    missing = [c.name for c in cells if c.error]
    if missing:
        print(
            f"[compare] {len(missing)} grid cell(s) failed and are marked missing ({', '.join(missing)}): "
            "fix the cause and run the same command again (finished runs are reused)",
            file=sys.stderr,
        )
        return 1
    return 0


def _budgets(plan: Plan, command: str) -> int:
    """Train the budget axis, then its report (:mod:`experiment.budget.markdown`) over the budgets read so far."""
    _, failed, out_dir = run_budget_experiment(plan)
    try:
        _print_report(write_budget_report(out_dir, plan.reference, command), "budget report")
    except UserError as e:  # nothing finished to read yet: the runs' failure below is the news
        print(f"[compare] no budget report: {e}", file=sys.stderr)
    if failed:
        print(
            f"[compare] {len(failed)} run(s) failed ({', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''}): "
            "see their logs, fix the cause and run the same command again (finished runs are reused)",
            file=sys.stderr,
        )
        return 1
    return 0


def _is_budget_folder(path: Path) -> bool:
    """Whether ``path`` is the folder of a ``--budgets`` experiment (its experiment.json lists budgets)."""
    record = ExperimentRecord.read(path)
    return record is not None and record.kind == "budget"


def _title(arm_set: ArmSet, out_dir: Path) -> str:
    """The report's title: the tying question for the presets, else the arms compared."""
    if set(arm_set.names) <= set(ARMS):
        return f"Should the embedding be tied? {out_dir.name}"
    return f"{' vs '.join(arm_set.names)}: {out_dir.name}"


@dataclass
class Compared:
    """The runs a report compares and how it reads them: the reported and tuning runs, and the declared readout."""

    reported: list
    tuning: list
    out_dir: Path
    arm_set: ArmSet
    reference: str
    margin: float
    declared: bool  # the margin was declared before the runs (experiment.json) or given now
    outcome: str
    sequential: tuple  # (level, design in words, as data) of a --seeds auto experiment; (0.05, "", None) otherwise
    folder: Path | None = None  # the experiment folder (experiment.json) whose looks this report counts


def _report_folder(args: argparse.Namespace, command: str) -> int | None:
    """A --grid or --budgets folder given alone: write and print its own report (0); None for anything else."""
    if len(args.runs) != 1:
        return None
    folder = args.runs[0]
    grid = (folder / GRID_FILE).is_file()
    budgets = not grid and _is_budget_folder(folder)
    if (grid or budgets) and args.fail_on:
        raise UserError("--fail-on gates one experiment's verdict, not a --grid or --budgets folder's")
    if grid:
        _print_report(write_grid_report(folder, command=command, readout=args.readout), "grid report")
        return 0
    if not budgets:
        return None
    given = [f for f, v in (("--margin", args.margin), ("--margin-bpb", args.margin_bpb)) if v is not None]
    if given or args.report_dir:
        raise UserError(
            f"a --budgets folder's report reads the margin its experiment.json declared, into the folder "
            f"itself: drop {', '.join(given) or '--report-dir'}"
        )
    _print_report(write_budget_report(folder, args.reference or "tied", command), "budget report")
    return 0


def _given_runs(args: argparse.Namespace) -> Compared:
    """The run folders named on the command line (or every run folder of one experiment folder given
    alone), read with what their experiment declared."""
    folder = _experiment_folder(args.runs)
    runs = experiment_runs(folder) if folder else args.runs
    check_run_folders(runs)
    tuning = [p for p in runs if Path(p).name.startswith("tune-")]
    reported = [p for p in runs if p not in tuning]
    where = folder or Path(runs[0]).resolve().parent
    margin, declared, outcome, sequential = declared_settings(where, args.margin, args.outcome)
    arm_set, reference = arms_of_runs([*reported, *tuning], declared_reference(where, args.reference))
    out_dir = args.report_dir or where
    return Compared(
        reported=reported,
        tuning=tuning,
        out_dir=out_dir,
        arm_set=arm_set,
        reference=reference,
        margin=margin,
        declared=declared,
        outcome=outcome,
        sequential=sequential,
        folder=where,
    )


def _experiment_folder(runs: list[Path]) -> Path | None:
    """The one experiment folder (holding experiment.json) given alone to re-render, else None."""
    return runs[0] if len(runs) == 1 and ExperimentRecord.read(runs[0]) else None


def _plan(args: argparse.Namespace, overrides: dict) -> Plan:
    """What to train, from the command line."""
    return Plan(
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
        adopt=args.adopt,
        budgets=args.budgets,
        jobs=args.jobs or 0,
        arm_set=args.arm_set,
        outcome=args.outcome or "loss",
        max_seeds=args.max_seeds,
        lr_tuning=args.lr_tuning,
    )


def _trained_runs(plan: Plan) -> Compared:
    """Train the experiment (a look at a time under --seeds auto) and return its runs."""
    if plan.max_seeds:
        reported, tuning, out_dir, sequential = run_sequential(plan)
    else:
        (reported, tuning, out_dir), sequential = run_experiment(plan), (0.05, "", None)
    return Compared(
        reported=reported,
        tuning=tuning,
        out_dir=out_dir,
        arm_set=plan.arm_set,
        reference=plan.reference,
        margin=plan.margin,
        declared=True,
        outcome=plan.outcome,
        sequential=sequential,
        folder=out_dir,
    )


def _print_report(path: Path, what: str = "report", meaningful: bool = True) -> None:
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


def _tidy(plan: Plan, keep: bool) -> None:
    """After the report: remove the worktrees of the arms from code, unless --keep-worktrees, saying so."""
    if keep:
        return
    for sha in remove_worktrees(plan):
        print(f"[compare] removed the worktree of commit {sha[:12]} (--keep-worktrees keeps it)", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on bad input or unfair runs)."""

    def body() -> int:
        args, overrides = parse_args(argv)
        prompts = args.prompt if args.prompt is not None else ["\n"]
        command = shlex.join(["python", "compare.py", *(sys.argv[1:] if argv is None else argv)])
        status = _report_folder(args, command)
        if status is not None:
            return status
        given = [f for f, v in (("--contrast", args.contrast), ("--slope-within", args.slope_within)) if v]
        if given:
            raise UserError(
                f"{' and '.join(given)} read out the cells of a finished grid: train with --grid first, then "
                "report on its folder (python compare.py <grid folder> --contrast CELL_A,CELL_B)"
            )
        if args.runs:
            c = _given_runs(args)
        else:
            plan = _plan(args, overrides)
            if args.budgets or args.grid:
                status = (
                    _budgets(plan, command)
                    if args.budgets
                    else _grid(plan, args.grid, prompts, command, Readout(args.margin_bpb))
                )
                _tidy(plan, args.keep_worktrees)
                return status
            c = _trained_runs(plan)
        seeds = len({read_json(Path(p) / CONFIG, "run config")["train"]["seed"] for p in c.reported})
        if c.folder is not None and c.sequential[2] is None:  # seeds added after a verdict: a look of its own
            c.sequential = counted_looks(c.folder, seeds) or c.sequential
        path, meaningful = write_report(
            c.reported,
            c.tuning,
            c.out_dir,
            prompts,
            _title(c.arm_set, c.out_dir),
            reference=c.reference,
            margin=c.margin,
            command=command,
            margin_bpb=args.margin_bpb,
            arm_set=c.arm_set,
            margin_declared=c.declared,
            outcome=c.outcome,
            sequential=c.sequential,
        )
        _print_report(path, meaningful=meaningful)
        if c.folder is not None and (c.sequential[2] is None or c.sequential[2].get("declared") is False):
            record_look(c.folder, seeds)
        if not args.runs:
            _tidy(plan, args.keep_worktrees)
        return gate(path.parent / VERDICT_FILE, args.fail_on)

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
