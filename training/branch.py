"""Cooldown branches: a run that starts from a WSD trunk's checkpoint and runs its own cooldown to its budget.

Under warmup-stable-decay (:mod:`training.schedule`) every step before the cooldown trains at
the same learning rate whatever the run's length, so one long run at the stable rate -- the
*trunk*, trained with ``train.save_at`` at its branch points -- holds the first steps of every
shorter run.  A branch copies the trunk's checkpoint at step N (weights, AdamW state, RNG
states, data position, counters) and its metrics up to N into a new run folder, then trains on
as a resume would, with its own ``train.max_iters`` and horizon: bit for bit the run a single
WSD run of that budget would have been (Hägele et al. 2024, arXiv:2405.18392, section 4).

    python train.py --config configs/scaling_cpu.toml --train.lr_schedule=wsd --train.max_iters=6250 \\
        --train.lr_decay_iters=7812 --train.save_at=195,391,781 --run-name trunk
    python train.py --branch-from runs/trunk@781 --train.max_iters=977 --run-name b977

A branch is an ordinary run folder plus ``branch.json``: the trunk's folder, the branch step,
the trunk's config and the digest of the training state it started from, so a branch whose
trunk was trained again differently is refused (:func:`check_trunk`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
from pathlib import Path

from core import files
from core.errors import UserError
from model.checkpoint import load_checkpoint, payload_digest, save_checkpoint
from training import faults, runs
from training.config import RESUME_OVERRIDABLE, RunConfig
from training.run_files import BEST_CKPT, CONFIG, ENV, LAST_CKPT, METRICS

BRANCH_FILE = "branch.json"
# What a branch may set besides what a resume may: whether its cooldown unties the head.
BRANCH_OVERRIDABLE = RESUME_OVERRIDABLE | {"train.untie_at_cooldown"}


def step_checkpoint(run_dir: Path, step: int) -> Path:
    """The resumable checkpoint a run keeps at ``step`` (``train.save_at``): ``run_dir/ckpt_step<step>.pt``."""
    return Path(run_dir) / f"ckpt_step{step}.pt"


def parse_branch_from(text: str) -> tuple[Path, int]:
    """``"runs/trunk@781"`` -> ``(Path("runs/trunk"), 781)``; :class:`UserError` for another shape."""
    folder, sep, step = text.rpartition("@")
    if not sep or not folder or not step.isdigit() or int(step) < 1:
        raise UserError(f"--branch-from {text!r} is not RUN@STEP: e.g. --branch-from runs/trunk@781")
    return Path(folder), int(step)


def branch_config(trunk_dir: Path, step: int, overrides: dict) -> RunConfig:
    """The config of a branch from ``trunk_dir`` at ``step``: the trunk's with ``overrides``.

    ``overrides`` (nested, from the command line) may set what a resume may set and
    ``train.untie_at_cooldown``; the horizon ``train.lr_decay_iters`` defaults to the branch's
    ``train.max_iters`` (its budget in steps).  Raises :class:`UserError` when the trunk is not a
    WSD run, keeps no checkpoint at ``step``, or was already in its cooldown at ``step``, when
    the branch would be, or when an override would change the maths of the steps the trunk trained.
    """
    trunk = runs.load_run_config(trunk_dir)
    if trunk.train.lr_schedule != "wsd":
        raise UserError(
            f"{trunk_dir} trains a {trunk.train.lr_schedule} schedule: only a WSD run (train.lr_schedule=wsd) holds "
            "its learning rate, so only it can be branched; train the trunk with --train.lr_schedule=wsd"
        )
    if not step_checkpoint(trunk_dir, step).is_file():
        names = (p.stem.removeprefix("ckpt_step") for p in trunk_dir.glob("ckpt_step*.pt"))
        kept = sorted(int(n) for n in names if n.isdigit())  # not a copy such as ckpt_step8.bak.pt
        raise UserError(
            f"{trunk_dir} keeps no checkpoint at step {step} (it keeps {', '.join(map(str, kept)) or 'none'}): "
            f"branch at one of those, or train the trunk with --train.save_at={step}"
        )
    values = trunk.to_dict()
    for section, given in overrides.items():
        for key, value in given.items():
            if f"{section}.{key}" not in BRANCH_OVERRIDABLE:
                raise UserError(
                    f"--{section}.{key} cannot change on a branch (the trunk's steps were trained without it): "
                    f"train another trunk; a branch may set {', '.join(sorted(BRANCH_OVERRIDABLE))}"
                )
            values[section][key] = value
    if "lr_decay_iters" not in overrides.get("train", {}):
        values["train"]["lr_decay_iters"] = values["train"]["max_iters"]
    values["train"]["save_at"] = overrides.get("train", {}).get("save_at", [])
    cfg = RunConfig.from_dict(values, "branch config")
    if step >= cfg.train.max_iters:
        raise UserError(
            f"the branch starts at step {step} and would end at train.max_iters={cfg.train.max_iters}: give a budget "
            f"past it, e.g. --train.max_iters={round(step / (1 - cfg.train.cooldown_frac))}"
        )
    for name, c in (("the trunk", trunk), ("the branch", cfg)):
        if step > c.train.cooldown_start():
            raise UserError(
                f"{name}'s cooldown starts at step {c.train.cooldown_start()}, before the branch step {step}: a branch "
                "must start while both still train at the stable rate; branch earlier, or give a longer budget"
            )
    _check_trained_before_cooldown(trunk_dir, step, trunk)
    cfg.check_unties()
    # A branch's horizon is its own budget, which moves an untie at a fraction of it (train.untie_at). The
    # branch is its budget's single run when both untie at one step, or when neither had untied by the branch
    # point (the trunk's checkpoint is tied there, as the single run is).
    untie_t, untie_b = trunk.untie_step(), cfg.untie_step()
    tied_at_step = all(u is None or u >= step for u in (untie_t, untie_b))
    if untie_t != untie_b and not tied_at_step:
        raise UserError(
            f"the trunk unties at step {untie_t} and its branch at {untie_b} (train.untie_at of each horizon), "
            f"so the branch from step {step} is no single run: branch before both, or use train.untie_at_cooldown"
        )
    return cfg


def _check_trained_before_cooldown(trunk_dir: Path, step: int, trunk: RunConfig) -> None:
    """Refuse a branch step the trunk reached through a cooldown of an earlier horizon.

    A resume may move the trunk's horizon (``lr_decay_iters``; its ``resume`` rows record each
    move as ``lr_horizon``), so its config.json alone does not say at which rate its first
    ``step`` steps trained: each stretch between resumes is checked under its own horizon.
    """
    moves = sorted(
        (r["step"], r["lr_horizon"])
        for r in runs.read_metrics(trunk_dir / METRICS)
        if r.get("kind") == "resume" and r.get("lr_horizon")
    )
    horizon = moves[0][1][0] if moves else None  # the first segment's, before any move
    starts = [(0, horizon)] + [(at, h[1]) for at, h in moves if at < step]
    for (first, h), (end, _) in zip(starts, starts[1:] + [(step, None)], strict=True):
        cooldown = dataclasses.replace(trunk.train, lr_decay_iters=h).cooldown_start() if h else None
        if cooldown is not None and end > cooldown:
            raise UserError(
                f"{trunk_dir} trained steps {first}-{end - 1} with horizon {h}, whose cooldown starts at step "
                f"{cooldown}, before the branch step {step}: its checkpoint there is no stable-rate state; "
                "branch at a step before that cooldown"
            )


def start_branch(trunk_dir: Path, step: int, run_dir: Path, cfg: RunConfig) -> None:
    """Write the branch's run folder: the trunk's checkpoint at ``step`` as ``ckpt_last.pt`` (with the
    branch's config), its metrics rows up to ``step``, its ``env.json`` and ``branch.json``.

    The folder is built in a hidden folder of its own beside ``run_dir`` and renamed into place,
    so a crash leaves no half branch and two processes starting the same branch at once never
    share a half-built folder: the one whose rename comes second is refused.  Raises
    :class:`UserError` when ``run_dir`` exists or the trunk's checkpoint is unreadable.
    """
    if run_dir.exists():
        raise _branch_exists(run_dir)
    source = step_checkpoint(trunk_dir, step)
    ckpt = load_checkpoint(source)
    if cfg.train.untie_at_cooldown and ckpt.get("tie_embeddings") is False:
        raise UserError(f"{source} holds an untied model: train.untie_at_cooldown branches from a tied trunk")
    _remove_dead_builds(run_dir)
    tmp = run_dir.with_name(f".{run_dir.name}.branch-{socket.gethostname()}-{os.getpid()}")  # this process's alone
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _fill_branch(tmp, trunk_dir, step, cfg, ckpt)
        try:  # rename() onto an existing non-empty folder fails: a branch started by another process wins
            tmp.rename(run_dir)
        except OSError:
            if run_dir.exists():
                raise _branch_exists(run_dir) from None
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_dead_builds(run_dir: Path) -> None:
    """Remove the half-built folders of ``run_dir``'s branch left by processes of this host that died building
    them (a SIGKILL, an out-of-memory kill): each holds a whole checkpoint."""
    host = socket.gethostname()
    for build in run_dir.parent.glob(f".{run_dir.name}.branch-*"):
        owner, _, pid = build.name.removeprefix(f".{run_dir.name}.branch-").rpartition("-")
        if owner == host and pid.isdigit() and not faults.pid_alive(int(pid)):
            shutil.rmtree(build, ignore_errors=True)


def _branch_exists(run_dir: Path) -> UserError:
    return UserError(
        f"run folder {run_dir} already exists: continue that branch with --resume, or pick another --run-name"
    )


def _best_before(trunk_dir: Path, step: int, ckpt: dict) -> dict | None:
    """The trunk's ckpt_best.pt, with the branch's config, when it is the best model up to ``step``
    (the one the checkpoint at ``step`` counts as best); else None."""
    path = trunk_dir / BEST_CKPT
    if not path.is_file():
        return None
    best = load_checkpoint(path)
    if best.get("step", step + 1) > step or best.get("val_loss") != ckpt.get("best_val_loss"):
        return None
    return {**best, "config": ckpt["config"]}


def _fill_branch(tmp: Path, trunk_dir: Path, step: int, cfg: RunConfig, ckpt: dict) -> None:
    """Write a branch's files into ``tmp``: checkpoint, metrics up to ``step``, env, config, branch.json."""
    trunk_digest = state_digest(ckpt)
    ckpt["config"] = cfg.to_dict()  # from here the branch is a run of its own: its resumes check against this
    best = _best_before(trunk_dir, step, ckpt)
    if best is not None:  # the single run's best model up to the branch step: the branch's too
        save_checkpoint(tmp / BEST_CKPT, {k: v for k, v in best.items() if k not in ("format", "sha256")})
    else:  # the trunk's best file is of a later step (or gone): the branch's best is of its own evals
        ckpt["best_val_loss"], ckpt["best_val_bpb"] = float("inf"), float("nan")
    save_checkpoint(tmp / LAST_CKPT, {k: v for k, v in ckpt.items() if k not in ("format", "sha256")})
    rows = [r for r in runs.read_metrics(trunk_dir / METRICS) if _before_branch(r, step)]
    files.write_text_atomic(tmp / METRICS, "".join(json.dumps(r) + "\n" for r in rows))
    if (trunk_dir / ENV).is_file():
        shutil.copy2(trunk_dir / ENV, tmp / ENV)
    files.write_json(tmp / CONFIG, cfg.to_dict())
    files.write_json(
        tmp / BRANCH_FILE,
        {
            "trunk": os.path.relpath(trunk_dir.resolve(), tmp.resolve().parent),
            "branch_step": step,
            "budget_steps": cfg.train.max_iters,
            # every rank's tokens, as summary.json counts them (a branch runs on the trunk's number of ranks)
            "budget_tokens": cfg.train.max_iters * tokens_per_step(cfg) * ckpt.get("world_size", 1),
            "trunk_state_sha256": trunk_digest,
            "trunk_elapsed_s": ckpt.get("elapsed_s"),
            "trunk_config": runs.load_run_config(trunk_dir).to_dict(),
        },
    )


def tokens_per_step(cfg: RunConfig) -> int:
    """Tokens of one optimizer step on one rank: ``grad_accum_steps * batch_size * block_size``."""
    return cfg.train.grad_accum_steps * cfg.train.batch_size * cfg.model.block_size


def _before_branch(row: dict, step: int) -> bool:
    """A trunk metrics row the branch keeps: its training up to ``step`` (not the trunk's stops or final score)."""
    if row.get("kind") in ("stop", "final_eval"):
        return False
    return row.get("step", 0) < step if row.get("kind") in ("resume", "untie") else row.get("step", 0) <= step


def check_trunk(run_dir: Path) -> None:
    """Refuse a branch whose trunk changed since it branched; nothing to check for an ordinary run.

    The trunk's settings (bar what a resume may change: its length, horizon, branch points,
    bookkeeping) must be those recorded in ``branch.json``, and its checkpoint at the branch
    step, if still there, must hold the state the branch started from (:func:`state_digest`).  A
    trunk folder that is gone is no change: the branch holds all it needs.
    """
    record_path = Path(run_dir) / BRANCH_FILE
    if not record_path.is_file():
        return
    record = files.read_json(record_path, "branch record")
    trunk_dir = (Path(run_dir).parent / record["trunk"]).resolve()
    if not (trunk_dir / CONFIG).is_file():
        return
    was, now = _flat(record["trunk_config"]), _flat(runs.load_run_config(trunk_dir).to_dict())
    changed = sorted(k for k in was.keys() | now.keys() if k not in RESUME_OVERRIDABLE and was.get(k) != now.get(k))
    ckpt = step_checkpoint(trunk_dir, record["branch_step"])
    digest = state_digest(load_checkpoint(ckpt)) if not changed and ckpt.is_file() else None
    if changed or (digest is not None and digest != record["trunk_state_sha256"]):
        what = f"its settings {', '.join(changed)}" if changed else f"{ckpt.name}"
        raise UserError(
            f"{run_dir} branched from {trunk_dir} at step {record['branch_step']}, but that trunk changed since "
            f"({what}): delete {run_dir} and branch again from the trunk as it is now (a compare.py report then "
            "labels it a second draw of its seed: keep a trunk until every branch of it has finished)"
        )


def state_digest(ckpt: dict) -> str:
    """sha256 of a checkpoint's training state: weights and AdamW state, not its timings.

    A trunk trained again bit for bit (the same code and CPU kind) gives the same digest, so the
    branches of the first one stay valid; one that differs in any bit does not.
    """
    return payload_digest({"model": ckpt["model"], "optimizer": ckpt.get("optimizer")})


def _flat(nested: dict) -> dict:
    """``{"train": {"seed": 1}}`` -> ``{"train.seed": 1}``."""
    return {f"{s}.{k}": v for s, values in nested.items() for k, v in values.items()}
