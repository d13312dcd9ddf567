"""The budget axis: one WSD trunk per arm x learning rate x seed, and a cooldown branch per token budget.

``compare.py budgets --budgets 0.5M,1M,2M`` asks whether the answer changes with the training budget.
Training each budget from scratch would cost the sum of the budgets; under warmup-stable-decay
(:mod:`training.schedule`) it costs the largest budget's stable phase plus every cooldown:
a trunk trains at the stable rate and keeps a checkpoint where each budget's cooldown starts,
and each budget is a branch from there (:mod:`training.branch`; Hägele et al. 2024,
arXiv:2405.18392).  A branch is the run of its budget, bit for bit.

Jobs are listed trunk by trunk, seed by seed: a trunk's stage to a branch point, that budget's
branches, its next stage, and so on, then the next trunk (``--jobs 2`` works on two trunks at
once).  The trunks' checkpoints are what an experiment cannot commit (megabytes each), so an
experiment longer than its machine loses, when the machine goes, only the trunks it was
training: every trunk finished before holds all its branches, which are text files in git.
The seeds come in order, so an experiment stopped early has its first seeds at every budget.
Arms that differ only in what their cooldown does (``tie-untie-cooldown``) share the trunk of
the arm they start as (``tied``).  With ``--lr-grid`` every arm trains every rate on every
seed: there is no tuning seed whose pick the verdict would rest on.

Layout: ``<experiment>/trunks/<arm>[-lr<lr>]-s<i>/`` and ``<experiment>/<budget>/<arm>[-lr<lr>]-s<i>/``.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from core import hardware
from core.errors import UserError
from core.files import read_json
from experiment.arms import PRESETS, ArmSet
from experiment.style import duration, size
from experiment.runs import launch
from experiment.runs.commands import check_planned, commands_for, prepare
from experiment.runs.launch import TRAIN_PY, Job, arm_command
from experiment.runs.plan import Plan, RunsBar, arm_params, lr_flags, measure_step_seconds
from experiment.runs.record import remember_settings
from training.branch import step_checkpoint, tokens_per_step
from training.run_files import DIVERGED
from training.config import RunConfig, TrainConfig
from training.runs import is_finished
from training.run_files import RunFolder, runs_in

TRUNKS = "trunks"
# Settings that act only in a cooldown: arms that differ in them alone share a trunk.
BRANCH_ONLY = frozenset({"train.untie_at_cooldown"})
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9}


@dataclass(frozen=True)
class Budget:
    """One training budget: its label, the tokens asked for, and its schedule in optimizer steps."""

    label: str  # "0.5M": the folder of its branches
    tokens: int  # as asked (--budgets)
    steps: int  # round(tokens / tokens per step): the branch's train.max_iters and horizon
    branch_step: int  # the first step of its cooldown, where it branches from the trunk

    @property
    def cooldown_steps(self) -> int:
        """Steps the branch trains past the trunk."""
        return self.steps - self.branch_step


def parse_budgets(text: str) -> list[int]:
    """``"0.5M,1M,2M"`` -> ``[500000, 1000000, 2000000]`` tokens (suffixes k, M, G; sorted, distinct).

    Raises :class:`UserError` for a value that is not a positive token count.
    """
    out = set()
    for part in (t.strip() for t in text.split(",")):
        match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)([kMG]?)", part)
        if not match or float(match[1]) * _SUFFIX[match[2]] < 1:
            raise UserError(f"--budgets {text!r}: {part!r} is not a token count; e.g. --budgets 0.5M,1M,2M (k, M, G)")
        out.add(round(float(match[1]) * _SUFFIX[match[2]]))
    return sorted(out)


def label(tokens: int) -> str:
    """``500000`` -> ``"0.5M"``, ``16000000`` -> ``"16M"``; below 0.1M in thousands: ``4000`` -> ``"4k"``."""
    return f"{tokens / 1e6:g}M" if tokens >= 100_000 else f"{tokens / 1e3:g}k"


def plan_budgets(tokens: list[int], cfg: RunConfig) -> list[Budget]:
    """Each budget's steps and branch step under ``cfg``'s batch and WSD ``cooldown_frac``.

    Raises :class:`UserError` when two budgets round to the same number of steps, or a budget's
    cooldown would start inside the warmup.
    """
    per_step, tc = tokens_per_step(cfg), cfg.train
    out = []
    for t in tokens:
        steps = max(1, round(t / per_step))
        start = TrainConfig(max_iters=steps, cooldown_frac=tc.cooldown_frac, lr_schedule="wsd").cooldown_start()
        if start <= tc.warmup_iters:
            raise UserError(
                f"the budget {label(t)} is {steps} steps of {per_step:,} tokens, and its cooldown would start at step "
                f"{start}, inside the {tc.warmup_iters}-step warmup: give a larger budget or a smaller batch"
            )
        out.append(Budget(label(t), t, steps, start))
    if len({b.steps for b in out}) != len(out):
        raise UserError(
            f"--budgets {','.join(b.label for b in out)} round to the same steps at {per_step:,} tokens a step: space them out"
        )
    return out


def trunk_arm(arm: str, arm_set: ArmSet = PRESETS) -> str:
    """The arm whose trunk ``arm`` branches from: the arm with ``arm``'s settings but the cooldown-only ones."""
    core = {k: v for k, v in arm_set.settings[arm].items() if k not in BRANCH_ONLY}
    return next((a for a, settings in {**arm_set.settings, **PRESETS.settings}.items() if settings == core), arm)


def check_arms(arms: list[str], arm_set: ArmSet = PRESETS) -> None:
    """Refuse arms whose switch sits at a fraction of the run (``train.untie_at``): it would fall inside the trunk."""
    if any(arm_set.code(a) for a in arms):
        raise UserError("--budgets does not train arms from code (NAME@REV): compare revisions without --budgets")
    bad = [a for a in arms if "train.untie_at" in arm_set.settings[a]]
    if bad:
        raise UserError(
            f"--budgets cannot branch {', '.join(bad)} (it unties at a fraction of the run, inside the shared trunk): "
            "use tie-untie-cooldown, which unties where each budget's cooldown starts"
        )


@dataclass
class BudgetRuns:
    """The trunk and branch jobs of one budget experiment (:func:`BudgetRuns.jobs`)."""

    out_dir: Path  # the experiment folder
    cfg: RunConfig  # its resolved config
    budgets: list[Budget]
    base_argv: list[str]  # --config and the command line's overrides
    arm_flags: dict[str, list[str]]  # each arm's flags (its size too, with --equal-params)
    resume_argv: list[str]  # the bookkeeping overrides a resume may take
    group: list[str]  # the wandb group flag
    arm_set: ArmSet = PRESETS  # what each arm sets

    def jobs(self, arms: list[str], runs: list[tuple[str, list[str]]]) -> list[Job]:
        """Every trunk stage and branch, trunk by trunk (see the module's docstring).

        ``runs``: ``(suffix, flags)`` of each learning rate and seed, seed-major, e.g.
        ``("-lr0.002-s0", ["--train.learning_rate=0.002", ..., "--train.seed=1337"])``.
        """
        out: list[Job] = []
        for suffix, flags in runs:
            for t_arm in dict.fromkeys(trunk_arm(a, self.arm_set) for a in arms):
                name = f"{TRUNKS}/{t_arm}{suffix}"
                own = [a for a in arms if trunk_arm(a, self.arm_set) == t_arm]
                for k, b in enumerate(self.budgets):
                    after = (f"{name}@{self.budgets[k - 1].branch_step}",) if k else ()
                    # the branches this trunk stage and the later ones start
                    served = [
                        self.out_dir / later.label / f"{arm}{suffix}" for later in self.budgets[k:] for arm in own
                    ]
                    command = self._trunk_command(t_arm, name, flags, b, served)
                    out.append(Job(f"{name}@{b.branch_step}", command, after, claim=name))
                    out.extend(
                        Job(
                            f"{b.label}/{arm}{suffix}",
                            self._branch_command(arm, f"{arm}{suffix}", name, b),
                            needs=step_checkpoint(self.out_dir / name, b.branch_step),
                            needs_from=f"{name}@{b.branch_step}",
                        )
                        for arm in own
                    )
        return out

    def _trunk_command(self, arm: str, name: str, flags: list[str], b: Budget, served: list[Path]):
        """The argv that trains trunk ``name`` to budget ``b``'s branch step (None: it is there, or every
        branch it would serve, ``served``, is finished: a clone of committed runs retrains no trunk it needs not)."""
        last = self.budgets[-1]
        folder = self.out_dir / name
        keep = [
            f"--train.max_iters={b.branch_step}",
            f"--train.lr_decay_iters={last.steps}",
            f"--train.save_at={','.join(str(x.branch_step) for x in self.budgets)}",
            "--train.final_eval_tokens=0",  # the branches are scored, not the trunk
            "--train.sample_tokens=0",
        ]
        run_name, where = Path(name).name, f"--train.out_dir={folder.parent}"

        def command() -> list[str] | None:
            if step_checkpoint(folder, b.branch_step).is_file():
                return None
            if all(RunFolder(f).finished for f in served):
                return None
            refuse_diverged(folder, b.branch_step)
            if RunFolder(folder).last_ckpt.is_file():
                return [sys.executable, TRAIN_PY, "--resume", "--run-name", run_name, where, *keep, *self.resume_argv]
            if folder.exists():
                raise UserError(f"{folder} exists but holds no checkpoint: delete it and run the same command again")
            wsd = ["--train.lr_schedule=wsd"]
            return [
                sys.executable,
                TRAIN_PY,
                *self.base_argv,
                *self._flags(arm),
                *flags,
                *wsd,
                *keep,
                *self.group,
                "--run-name",
                run_name,
                where,
            ]

        return command

    def _flags(self, arm: str) -> list[str]:
        """The train.py flags of ``arm``, or of the preset a trunk is named after (``tied`` for tie-untie-cooldown)."""
        if arm in self.arm_flags:
            return self.arm_flags[arm]
        return ArmSet({**PRESETS.settings, **self.arm_set.settings}).argv(arm)

    def _branch_command(self, arm: str, run_name: str, trunk: str, b: Budget):
        """The argv that trains (or resumes) the branch ``<budget>/<run_name>`` of ``trunk`` (None: finished)."""
        tc = self.cfg.train
        own = [f for f in self.arm_set.argv(arm) if f.split("=")[0].removeprefix("--") in BRANCH_ONLY]
        branch = [
            "--branch-from",
            f"{self.out_dir / trunk}@{b.branch_step}",
            f"--train.max_iters={b.steps}",
            f"--train.final_eval_tokens={tc.final_eval_tokens}",
            f"--train.sample_tokens={tc.sample_tokens}",
            *own,
            *self.group,
            *self.resume_argv,
        ]
        folder = self.out_dir / b.label / run_name

        def command() -> list[str] | None:
            if not RunFolder(folder).finished:
                refuse_diverged(folder, b.steps)
            return arm_command(branch, self.out_dir / b.label, run_name, [], self.resume_argv)

        return command


def refuse_diverged(folder: Path, to_step: int) -> None:
    """Raise :class:`UserError` if the run in ``folder`` stopped on a non-finite loss at or before
    ``to_step`` (its ``diverged.json``): training it again would stop there again, and the budget
    report reads it as a result (:func:`experiment.budget.readout.load_diverged`)."""
    marker = folder / DIVERGED
    if marker.is_file() and (step := read_json(marker, "divergence")["step"]) <= to_step:
        raise UserError(
            f"it stopped on a non-finite loss at step {step:,} ({DIVERGED}), so it is not trained again and the "
            f"budget report takes this rate out of the arm's grid past that step; to try again, delete {marker}"
        )


def trunk_step(folder: Path, budgets: list[Budget]) -> int:
    """How far a trunk is, by the branch checkpoints it keeps: the last budget's branch step it reached (0: none)."""
    return max((b.branch_step for b in budgets if step_checkpoint(folder, b.branch_step).is_file()), default=0)


def plan_line(
    out_dir: Path,
    budgets: list[Budget],
    cfg: RunConfig,
    trunks: list[str],
    branches: list[tuple[str, int]],
    seconds_per_token: float | None,
    how: str,
    jobs: int,
    threads: int,
) -> str:
    """The line ``compare.py budgets`` prints before training: runs, tokens (trunks and cooldowns), time, disk.

    ``trunks``: trunk folders under ``out_dir``; ``branches``: ``(folder, parameters)`` of every
    branch; ``seconds_per_token``: of one run on ``threads`` threads (None: no estimate; ``how``
    says where it came from, or why not).  The time has ``jobs`` runs at once; the disk counts
    every checkpoint the runs left to train will write (:data:`experiment.runs.plan.CHECKPOINT_BYTES_PER_PARAM`).
    """
    per_step, last = tokens_per_step(cfg), budgets[-1]
    steps_of = {b.label: b for b in budgets}
    trunk_left = sum(last.branch_step - trunk_step(out_dir / t, budgets) for t in trunks) * per_step
    open_branches = [(f, p) for f, p in branches if not is_finished(out_dir / f)]
    branch_left = sum(steps_of[f.split("/")[0]].cooldown_steps for f, _ in open_branches) * per_step
    trunk_all = len(trunks) * last.branch_step * per_step
    branch_all = sum(steps_of[f.split("/")[0]].cooldown_steps for f, _ in branches) * per_step
    new = [p for f, p in open_branches if not (out_dir / f).exists()]
    disk = sum(new) * 16 + len([t for t in trunks if not (out_dir / t).exists()]) * max(
        (p for _, p in branches), default=0
    ) * (12 * len(budgets) + 16)
    line = (
        f"[compare] plan: budgets {', '.join(b.label for b in budgets)} tokens ({', '.join(str(b.steps) for b in budgets)} "
        f"steps of {per_step:,} tokens, the last {cfg.train.cooldown_frac:g} of each a {cfg.train.cooldown_shape} "
        f"cooldown): {len(trunks)} trunks to step {last.branch_step:,} and {len(branches)} branches; "
        f"{(trunk_all + branch_all) / 1e6:,.1f}M tokens in all ({trunk_all / 1e6:,.1f}M in trunks, "
        f"{branch_all / 1e6:,.1f}M in cooldowns), {(trunk_left + branch_left) / 1e6:,.1f}M left"
    )
    if not trunk_left and not branch_left:
        return line + "; nothing to train"
    when = (
        f"no time estimate ({how})"
        if seconds_per_token is None
        else f"roughly {duration((trunk_left + branch_left) * seconds_per_token / jobs)} with {jobs} run(s) at once on "
        f"{threads} thread(s) each (an estimate, from {how})"
    )
    return line + f"; {when}; about {size(disk)} of new checkpoints"


@dataclass(frozen=True)
class Compute:
    """What the runs of a budget experiment that finished so far cost, and where they ran (its report's
    compute table).

    A trunk counts as far as its last finished segment; a branch from its branch point
    (``branch.json``), since the steps before it are its trunk's.
    """

    trunks: int
    branches: int
    trunk_tokens: int
    branch_tokens: int
    trunk_s: float  # each run's elapsed wall time (summary.json), summed, in seconds
    branch_s: float
    threads: list[int]  # torch threads a run used (env*.json)
    cpus: list[str]  # the CPU model, or the accelerator's name for runs on one
    commits: list[str]  # short commits the runs trained at, "-dirty" when the tree was


def compute_used(out_dir: Path, labels: list[str]) -> Compute:
    """Sum tokens and elapsed seconds over ``out_dir/trunks/*`` and the branches under ``out_dir/<label>/``."""
    trunks = runs_in(out_dir / TRUNKS, finished_only=True)
    t_tokens = t_s = b_tokens = b_s = 0.0
    for run in trunks:
        t_tokens, t_s = t_tokens + run.summary["tokens"], t_s + run.summary["elapsed_s"]
    branches = [run for lab in labels for run in runs_in(out_dir / lab, finished_only=True)]
    for run in branches:
        summary, branch = run.summary, read_json(run.path / "branch.json", "branch")
        b_tokens += summary["tokens"] - branch["branch_step"] * branch["budget_tokens"] / branch["budget_steps"]
        b_s += summary["elapsed_s"] - branch["trunk_elapsed_s"]
    envs = [read_json(e, "run environment") for run in trunks + branches for e in sorted(run.path.glob("env*.json"))]
    return Compute(
        trunks=len(trunks),
        branches=len(branches),
        trunk_tokens=round(t_tokens),
        branch_tokens=round(b_tokens),
        trunk_s=t_s,
        branch_s=b_s,
        threads=sorted({e["torch_threads"] for e in envs}),
        cpus=sorted(
            {
                e["device_name"] if e.get("device", "cpu") != "cpu" else e.get("cpu_model") or e["device_name"]
                for e in envs
            }
        ),
        commits=sorted(
            {e["git_commit"][:7] + ("-dirty" if e.get("git_dirty") else "") for e in envs if e.get("git_commit")}
        ),
    )


def measured_seconds_per_token(out_dir: Path, labels: list[str], threads: int, here: str | None) -> float | None:
    """Seconds a token took one run of this experiment, from the records of its finished runs; None if none fit.

    The finished trunk segments' and cooldowns' summed ``elapsed_s`` over their tokens
    (:func:`compute_used`).  Unlike a timed training step it counts evaluations, checkpoints and
    the slowdown of runs sharing the machine (and pauses, which make it err long).  Only runs
    that all trained on ``threads`` threads on this machine (``here``: its CPU model, or its
    accelerator's name) count, since another machine or thread count takes its own time.
    """
    used = compute_used(out_dir, labels)
    tokens = used.trunk_tokens + used.branch_tokens
    if not tokens or used.threads != [threads] or used.cpus != [here]:
        return None
    return (used.trunk_s + used.branch_s) / tokens


def seconds_per_token(out_dir: Path, labels: list[str], cfg: RunConfig, threads: int) -> tuple[float | None, str]:
    """``(seconds a token takes one run on threads threads, where that came from)`` for the plan line.

    Measured on the experiment's finished runs when they trained here alike
    (:func:`measured_seconds_per_token`), else a few training steps timed now
    (:func:`experiment.runs.plan.measure_step_seconds`), which leave out evaluations and checkpoints.
    ``(None, why)`` when a timed step fails (e.g. out of device memory).
    """
    device = hardware.pick_device(cfg.train.device)
    here = torch.cuda.get_device_name(device) if device.type == "cuda" else hardware.cpu_model()
    measured = measured_seconds_per_token(out_dir, labels, threads, here)
    if measured is not None:
        return measured, f"the runs finished here, {measured * 1e6:.0f} µs a token each, evaluations included"
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        per_step = measure_step_seconds(cfg)
    except (RuntimeError, OSError) as e:  # an estimate is not worth stopping for
        return None, f"a timed training step failed ({type(e).__name__})"
    finally:
        torch.set_num_threads(before)
    per_token = per_step / tokens_per_step(cfg)
    return per_token, f"training steps alone, timed here at {per_token * 1e6:.0f} µs a token on {threads} thread(s)"


def run_budget_experiment(plan: Plan) -> tuple[dict[str, list[Path]], list[str], Path]:
    """Train the budget axis (:mod:`experiment.budget.run`): a WSD trunk per arm x rate x seed, a branch per budget.

    Every arm trains every ``plan.lr_grid`` rate (or the config's) on every seed, ``plan.jobs``
    runs at once, each on the machine's cores divided among them.  Finished trunk stages and
    branches are reused, unfinished ones resumed.  Returns ``({budget label: its finished
    branch folders}, the runs that failed, the experiment folder)``.
    """
    cfg, data, name = prepare(plan)
    check_arms(plan.arms, plan.arm_set)
    steps = plan_budgets(plan.budgets, cfg)
    cmds = commands_for(plan, cfg, name)
    check_planned(plan, cmds)
    remember_settings(cmds.out_dir, cfg, plan)
    tc = cfg.train
    runs = [
        (
            f"{'' if lr is None else f'-lr{lr:g}'}-s{i}",
            [*(lr_flags(tc, lr) if lr is not None else []), f"--train.seed={tc.seed + i}"],
        )
        for i in range(plan.seeds)
        for lr in (plan.lr_grid or [None])
    ]
    axis = BudgetRuns(
        out_dir=cmds.out_dir,
        cfg=cfg,
        budgets=steps,
        base_argv=cmds.base_argv,
        arm_flags=cmds.arm_flags,
        resume_argv=cmds.resume_argv,
        group=cmds.group,
        arm_set=plan.arm_set,
    )
    jobs = axis.jobs(plan.arms, runs)
    n = plan.jobs or (os.cpu_count() or 1 if hardware.pick_device(tc.device).type == "cpu" else 1)
    threads = max(1, (os.cpu_count() or 1) // n)
    trunks = sorted({j.folder for j in jobs if j.claim})
    params = {arm: arm_params(cfg, arm, plan.equal_params, plan.arm_set) for arm in plan.arms}
    branches = [(f"{b.label}/{arm}{suffix}", params[arm]) for b in steps for suffix, _ in runs for arm in plan.arms]
    per_token, how = seconds_per_token(cmds.out_dir, [b.label for b in steps], cfg, threads)
    print(
        plan_line(
            out_dir=cmds.out_dir,
            budgets=steps,
            cfg=cfg,
            trunks=trunks,
            branches=branches,
            seconds_per_token=per_token,
            how=how,
            jobs=n,
            threads=threads,
        ),
        flush=True,
    )
    bar = RunsBar(len(jobs), sum(_job_done(cmds.out_dir, j) for j in jobs))
    try:
        done = launch.run_parallel(cmds.out_dir, jobs, n, threads, bar)
    finally:
        bar.close()
    finished = {
        b.label: [cmds.out_dir / b.label / f"{arm}{suffix}" for suffix, _ in runs for arm in plan.arms] for b in steps
    }
    finished = {k: [p for p in v if RunFolder(p).finished] for k, v in finished.items()}
    return finished, [n for n, ok in done.items() if not ok], cmds.out_dir


def _job_done(out_dir: Path, job: launch.Job) -> bool:
    """Whether a budget job has nothing left to do: a trunk stage's checkpoint, or a branch's summary, is there."""
    if job.claim:
        return step_checkpoint(out_dir / job.claim, int(job.name.rsplit("@", 1)[1])).is_file()
    return RunFolder(out_dir / job.name).finished
