"""The ``train.py`` command lines of an experiment's runs, and the checks made on them before any run trains.

Every design builds its runs from the same parts: :func:`prepare` reads the config and prepares the
data once (the vocabulary comes from it), :func:`commands_for` turns a :class:`experiment.runs.plan.Plan`
into the flags every run shares, each arm's own, and those a resume may take (:class:`Commands`),
and :func:`check_planned` refuses, before anything trains, the arms a report would refuse after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from core.settings import overrides_to_argv
from data.loader import TokenData
from data.prepare import prepare_from_config
from experiment import arms
from experiment.runs import adopt
from experiment.runs import launch
from experiment.runs import folders
from experiment.runs import schedules
from experiment.arms import ARMS
from experiment.runs.plan import TUNING_SEED_OFFSET, Plan, equal_params_config, lr_flags
from experiment.runs.record import BOOKKEEPING, flatten
from training.config import RESUME_OVERRIDABLE, RunConfig, parse_config


@dataclass
class Commands:
    """The ``train.py`` command lines of one experiment's runs: shared flags, each arm's, each run's."""

    cfg: RunConfig  # the experiment's resolved config (vocab_size from the data)
    out_dir: Path  # the experiment folder
    base_argv: list[str]  # --config and the command line's overrides, for every run
    arm_flags: dict[str, list[str]]  # each arm's settings (and its size, with --equal-params)
    resume_argv: list[str]  # the overrides a resume may take (bookkeeping)
    group: list[str]  # the wandb group flag
    train_py: dict[str, str] = field(default_factory=dict)  # arm -> the train.py of an arm from code

    def reported(self, arm: str, i: int, lr: float | None = None) -> tuple[str, list[str]]:
        """``(run name, train.py flags)`` of ``arm`` on seed ``train.seed + i``, at the tuned rate ``lr`` if any."""
        tc = self.cfg.train
        extra = [
            *self.arm_flags[arm],
            *(lr_flags(tc, lr) if lr is not None else []),
            f"--train.seed={tc.seed + i}",
            *self.group,
        ]
        return f"{arm}{'' if lr is None else f'-lr{lr:g}'}-s{i}", extra

    def job(self, arm: str, name: str, extra: list[str]) -> Callable[[], Path]:
        """Train (or resume, or reuse) ``arm``'s run ``name`` with flags ``extra`` (:func:`experiment.runs.launch.run_arm`)."""
        train_py = self.train_py.get(arm, launch.TRAIN_PY)
        return lambda: launch.run_arm(self.base_argv, self.out_dir, name, extra, self.resume_argv, train_py)

    def grid_point(self, arm: str, lr: float) -> Callable[[], Path | None]:
        """The tuning run of ``arm`` at ``lr`` on the tuning seed; a failure is a point with no result (None)."""

        def train() -> Path | None:
            tc = self.cfg.train
            extra = [
                *self.arm_flags[arm],
                *lr_flags(tc, lr),
                f"--train.seed={tc.seed + TUNING_SEED_OFFSET}",
                *self.group,
            ]
            try:
                name, train_py = f"tune-{arm}-lr{lr:g}", self.train_py.get(arm, launch.TRAIN_PY)
                return launch.run_arm(self.base_argv, self.out_dir, name, extra, self.resume_argv, train_py)
            except UserError as e:  # e.g. a learning rate that diverges: a grid point with no result, not the end
                print(f"[compare] {arm} at learning rate {lr:g} failed, counted as no result: {e}", flush=True)
                return None

        return train

    def expected(self, arm: str, i: int, lr: float | None = None) -> RunConfig:
        """The config the reported run of ``arm`` on seed index ``i`` (at rate ``lr``) would train with."""
        return adopt.expected_config([*self.base_argv, *self.reported(arm, i, lr)[1]], self.cfg.model.vocab_size)


def commands_for(plan: Plan, cfg: RunConfig, name: str) -> Commands:
    """The ``train.py`` flags of the experiment ``name``: shared, per arm, for resumes, the wandb group."""
    out_dir = Path(cfg.train.out_dir) / name
    passed_on = {
        s: {k: v for k, v in values.items() if f"{s}.{k}" != "train.out_dir"} for s, values in plan.overrides.items()
    }
    arm_flags = {
        arm: plan.arm_set.argv(arm)
        + _min_lr_flags(cfg, plan.arm_set.settings[arm], arm)
        + _size_flags(cfg, plan.equal_params, arm)
        for arm in plan.arms
    }
    # train.out_dir is the experiment's parent here; launch.run_arm names the experiment folder itself.
    resume_argv = overrides_to_argv(
        {
            sec: {
                k: v
                for k, v in values.items()
                if f"{sec}.{k}" in RESUME_OVERRIDABLE and f"{sec}.{k}" != "train.out_dir"
            }
            for sec, values in plan.overrides.items()
        }
    )
    return Commands(
        cfg,
        out_dir,
        [*(["--config", plan.config] if plan.config else []), *overrides_to_argv(passed_on)],
        arm_flags,
        resume_argv,
        [f"--wandb.group={cfg.wandb.group or name}"],
        {arm: str(arms.worktree(sha) / "train.py") for arm in plan.arms if (sha := plan.arm_set.code(arm))},
    )


def prepare(plan: Plan) -> tuple[RunConfig, TokenData, str]:
    """The experiment's config (vocab_size from the prepared data), its data and its folder name."""
    cfg = parse_config(plan.config, plan.overrides)
    # The vocabulary comes from the data: prepare it once so sizing and every run agree on it.
    data = TokenData(prepare_from_config(cfg.data))
    data.check_block_size(cfg.model.block_size)
    cfg = cfg.with_values(model={"vocab_size": data.vocab_size})
    stem = Path(plan.config).stem if plan.config else "default"
    suffix = f"{'-equal-params-' + plan.equal_params if plan.equal_params else ''}{'-tuned' if plan.lr_grid else ''}"
    suffix += "-budgets" if plan.budgets else ""
    return cfg, data, plan.name or f"{stem}-{_arms_name(plan)}{suffix}"


def _arms_name(plan: Plan) -> str:
    """The arms' part of a default experiment name: ``tied-vs-untied`` for the tying presets (as it always
    was), ``new-vs-old`` for two or three arms of the user's own, ``base-and-4-arms`` for more."""
    if all(a in ARMS for a in plan.arms):
        return "tied-vs-untied"
    return "-vs-".join(plan.arms) if len(plan.arms) <= 3 else f"{plan.arms[0]}-and-{len(plan.arms) - 1}-arms"


def check_planned(plan: Plan, cmds: Commands) -> None:
    """Refuse, before any run trains or experiment.json records the arms, what the report would refuse after
    training: arms whose planned configs differ in more than their own settings (and a tuned rate or size), or
    whose learning-rate schedules part (:func:`experiment.runs.schedules.check_planned`)."""
    planned = {arm: cmds.expected(arm, 0) for arm in plan.arms}
    ref = flatten(planned[plan.reference].to_dict())
    allowed = set(plan.arm_set.keys) | folders.TUNED_KEYS | folders.SIZE_KEYS | BOOKKEEPING
    for arm, cfg in planned.items():
        flat = flatten(cfg.to_dict())
        unfair = sorted(k for k in set(ref) | set(flat) if ref.get(k) != flat.get(k) and k not in allowed)
        if unfair:
            raise UserError(
                f"arm {arm} would differ from {plan.reference} in more than its own settings ({', '.join(unfair)}): "
                "set them in the config every arm shares, or in the arm itself"
            )
    same = [
        (a, b)
        for i, a in enumerate(plan.arms)
        for b in plan.arms[i + 1 :]
        if planned[a] == planned[b] and plan.arm_set.code(a) == plan.arm_set.code(b)
    ]
    if same:  # e.g. a shared config that gives every arm the one value an arm sets
        a, b = same[0]
        raise UserError(
            f"arms {a} and {b} would train the same config with the same code: give them settings that differ"
        )
    own = {arm: plan.arm_set.settings[arm] for arm in plan.arms}
    if folders.target_of(plan.outcome) is None:  # a race to a val loss lets each arm's recipe keep its own schedule
        schedules.check_planned({arm: cfg.train for arm, cfg in planned.items()}, plan.reference, own)
    else:
        schedules.check_eval_density({arm: cfg.train.eval_interval for arm, cfg in planned.items()}, plan.reference)


def _min_lr_flags(cfg: RunConfig, settings: dict, arm: str) -> list[str]:
    """For an arm that sets the peak rate but not min_lr: min_lr scaled with it, as --lr-grid scales it, so the
    schedule keeps its shape (said once); [] otherwise."""
    lr = settings.get("train.learning_rate")
    if lr is None or "train.min_lr" in settings:
        return []
    flags = [f for f in lr_flags(cfg.train, lr)[1:] if f.split("=")[0][2:] not in settings]
    print(
        f"[compare] arm {arm} sets train.learning_rate={lr:g}: {' and '.join(f[2:] for f in flags)} follow it, as "
        "--lr-grid scales them, so its schedule keeps the shape of the others' (set them in the arm for another)",
        flush=True,
    )
    return flags


def _size_flags(cfg: RunConfig, equal_params: str | None, arm: str) -> list[str]:
    """With --equal-params, the grown width or depth for the arms that share one matrix (tied, tied-bias)."""
    if not equal_params or arm not in ("tied", "tied-bias"):
        return []
    tied_cfg, n_tied, n_untied = equal_params_config(dataclasses.replace(cfg.model, tie_embeddings=False), equal_params)
    key = "n_embd" if equal_params == "width" else "n_layer"
    print(
        f"[compare] equal params by {equal_params}: {arm} {key}={getattr(tied_cfg, key)} ({n_tied:,} parameters) "
        f"vs untied {key}={getattr(cfg.model, key)} ({n_untied:,})",
        flush=True,
    )
    return [f"--model.{key}={getattr(tied_cfg, key)}"]
