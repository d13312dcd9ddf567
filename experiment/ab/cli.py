"""``compare.py ab``: train two or more arms over paired seeds and report each arm's verdict against the reference.

    python compare.py ab --config configs/shakespeare.toml --arm base: --arm drop:model.dropout=0.1 --seeds 5
    python compare.py --config configs/shakespeare.toml --arm old@HEAD~1 --arm new: --reference old --fail-on worse

(``ab`` is the mode ``compare.py`` runs when its first argument is an option.)  To report run
folders that exist already, give them to ``compare.py report`` (or as compare.py's first arguments).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from core.cli import ArgumentParser
from core.errors import UserError
from experiment.ab.readout import gate, parse_outcome
from experiment.ab.run import VERDICT_FILE, experiment_runs, run_experiment, run_sequential, write_report
from experiment.arms import ArmSet
from experiment.runs import cli
from experiment.runs.adopt import parse_adopt
from experiment.runs.folders import arms_of_runs, check_run_folders
from experiment.runs.record import (
    ONE_SEED,
    ExperimentRecord,
    counted_looks,
    declared_reference,
    declared_settings,
    record_look,
)
from training.run_files import RunFolder, runs_in

MARGIN_HELP = (
    "Equivalence margin, declared before the runs: arms closer than this count as equivalent (TOST). In "
    "nats/token for the loss (default 0.01, or the margin the experiment folder declared); for any other "
    "--outcome a fraction, e.g. 0.02 for ±2%%."
)


def parser() -> argparse.ArgumentParser:
    """The A/B mode's options: the shared ones (:mod:`experiment.runs.cli`) and the readout's."""
    p = ArgumentParser(prog="compare.py ab", description=__doc__)
    cli.add_arm_options(p)
    cli.add_seed_options(p, auto=True)
    cli.add_rate_options(p)
    cli.add_run_options(p, MARGIN_HELP)
    add_readout_options(p)
    p.add_argument(
        "--adopt",
        metavar="RUN,RUN,...",
        help="Finished run folders to use as the experiment's runs for their arm and seed instead of training "
        "those, e.g. --adopt runs/default,runs/untied: each must be exactly the run the experiment would train, "
        "else it is refused (default: none).",
    )
    return p


def add_readout_options(p: argparse.ArgumentParser) -> None:
    """What the verdict reads (--outcome), its gate (--fail-on) and verdicts in bits per byte (--margin-bpb)."""
    p.add_argument(
        "--outcome",
        help="What the verdict reads, declared before the runs: loss (the final val loss, default); tokens-per-s "
        "(each run's median tokens/s); tokens-to:LOSS (training tokens to reach val loss LOSS); time-to:LOSS "
        "(training seconds to reach it, evaluation and checkpoints left out: compare only on one quiet machine).",
    )
    p.add_argument(
        "--fail-on",
        choices=("worse", "not-better"),
        help="Exit 1 when an arm is worse than the reference (worse), or anything but better (not-better), "
        "read from verdict.json (in bits per byte with --margin-bpb).",
    )
    p.add_argument(
        "--margin-bpb",
        type=float,
        metavar="BPB",
        help="Add verdicts in bits per byte at this equivalence margin beside the ones in nats (not recorded: "
        "give it again with each report).",
    )


def check_readout(args: argparse.Namespace) -> None:
    """Parse --outcome and --margin-bpb in place; UserError for a bad value or a pair that does not go together."""
    args.outcome = parse_outcome(args.outcome) if args.outcome is not None else None
    if args.outcome not in (None, "loss") and args.margin_bpb is not None:
        raise UserError(
            f"--margin-bpb adds verdicts on the loss in bits per byte: drop it with --outcome {args.outcome}"
        )
    cli.check_margin_bpb(args.margin_bpb)


def _check(args: argparse.Namespace) -> None:
    """The A/B mode's values; UserError for a bad one or options that do not go together."""
    cli.check_shared(args)
    check_readout(args)
    timed = args.outcome == "tokens-per-s" or (args.outcome or "").startswith("time-to:")
    if args.adopt and (args.max_seeds or timed):
        raise UserError(
            "--adopt takes runs trained elsewhere: not for --seeds auto (its looks are its own) or a timed --outcome "
            f"({args.outcome}: adopted runs were not timed beside the experiment's)"
        )
    args.adopt = parse_adopt(args.adopt)
    clash = [
        flag
        for flag, given in (
            ("--seeds auto", args.max_seeds),
            ("--adopt", args.adopt),
            (f"--outcome {args.outcome}", args.outcome not in (None, "loss")),
        )
        if given
    ]
    if args.lr_grid and args.lr_tuning != ONE_SEED and clash:
        raise UserError(
            f"{clash[0]} does not go with --lr-grid's every-seed design (every rate on every seed, read on the final "
            "val loss): drop one, or use --lr-tuning one-seed"
        )
    if args.fail_on and args.lr_tuning == ONE_SEED:
        raise UserError(
            "--fail-on gates only on calibrated verdicts, and --lr-tuning one-seed picks each arm's rate on one seed, "
            "which is not: drop --lr-tuning one-seed (every rate on every seed), or drop --fail-on and read the report"
        )


@dataclass(kw_only=True)
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
    keep_earlier: bool = False  # a failed report leaves the folder's earlier one (runs given by hand, no experiment)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict]:
    """The A/B mode's options and ``--section.key`` overrides, checked; UserError for a bad value or pair."""
    args, overrides = cli.parse(parser(), argv)
    _check(args)
    return args, overrides


def main(argv: list[str], command: str) -> int:
    """Train the experiment ``argv`` asks for (a look at a time under --seeds auto), then report and gate on it."""
    args, overrides = parse_args(argv)
    plan = cli.plan_of(args, overrides, adopt=args.adopt, outcome=args.outcome or "loss", fail_on=args.fail_on)
    if plan.max_seeds:
        reported, tuning, out_dir, sequential = run_sequential(plan)
    else:
        (reported, tuning, out_dir), sequential = run_experiment(plan), (0.05, "", None)
    c = Compared(
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
    status = report(c, prompts=args.prompts, command=command, margin_bpb=args.margin_bpb, fail_on=args.fail_on)
    cli.tidy(plan, args.keep_worktrees)
    return status


def given_runs(
    runs: list[Path], *, margin: float | None, outcome: str | None, reference: str | None, report_dir: Path | None
) -> Compared:
    """The run folders named on the command line (or every run folder of one experiment folder given
    alone), read with what their experiment declared (:mod:`experiment.runs.record`)."""
    folder = runs[0] if len(runs) == 1 and ExperimentRecord.read(runs[0]) else None
    runs = experiment_runs(folder) if folder else runs
    check_run_folders(runs)
    tuning = [p for p in runs if Path(p).name.startswith("tune-")]
    reported = [p for p in runs if p not in tuning]
    where = folder or Path(runs[0]).resolve().parent
    record = ExperimentRecord.read(where)
    if record and record.lr_tuning == ONE_SEED and len(record.lr_grid) > 1 and not tuning:
        # Without its tune-* runs the report could not know the rates were picked on one seed, nor say so.
        raise UserError(
            f"{where} picked each arm's rate on one tuning seed (experiment.json: lr_tuning one-seed), but no "
            "tune-* run is given: report the experiment folder whole, tuning runs included"
        )
    whole = folder is not None or record is None or _every_finished_run(where, runs)
    if not whole and report_dir is None:
        raise UserError(
            f"these runs are some of the experiment folder {where}'s: its report.md and verdict.json are the whole "
            f"experiment's; write this report elsewhere with --report-dir DIR, or report the folder whole: "
            f"compare.py {where}"
        )
    margin, declared, outcome, sequential = declared_settings(where, margin, outcome)
    arm_set, reference = arms_of_runs([*reported, *tuning], declared_reference(where, reference))
    return Compared(
        reported=reported,
        tuning=tuning,
        out_dir=report_dir or where,
        arm_set=arm_set,
        reference=reference,
        margin=margin,
        declared=declared,
        outcome=outcome,
        sequential=sequential,
        folder=where if whole and record else None,  # a subset's read is no look at the experiment
        keep_earlier=record is None,
    )


def _every_finished_run(folder: Path, runs: list[Path]) -> bool:
    """Whether ``runs`` are the finished runs of the experiment folder ``folder``, every one and no other (it is
    reported whole); links are followed on both sides."""
    given = {Path(r).resolve() for r in runs}
    return given == {r.path.resolve() for r in runs_in(folder, finished_only=True)}


def report(c: Compared, *, prompts: list[str], command: str, margin_bpb: float | None, fail_on: str | None) -> int:
    """Write and print ``c``'s report and verdict.json, count the look, and return --fail-on's exit status."""
    seeds = len({RunFolder(p).config["train"]["seed"] for p in c.reported})
    if c.folder is not None and c.sequential[2] is None:  # seeds added after a verdict: a look of its own
        c.sequential = counted_looks(c.folder, seeds) or c.sequential
    path, meaningful = write_report(
        c.reported,
        c.tuning,
        c.out_dir,
        prompts,
        cli.title(c.arm_set, c.out_dir),
        reference=c.reference,
        margin=c.margin,
        command=command,
        margin_bpb=margin_bpb,
        arm_set=c.arm_set,
        margin_declared=c.declared,
        outcome=c.outcome,
        sequential=c.sequential,
        keep_earlier=c.keep_earlier,
    )
    cli.print_report(path, meaningful=meaningful)
    if c.folder is not None:  # (a sequential design's looks were declared: counted_looks never counts them)
        record_look(c.folder, seeds)
    return gate(path.parent / VERDICT_FILE, fail_on)
