"""Before the first step: resolve a run's config and folder, build model, optimizer and data, or restore them.

- :func:`setup_run`: the config and run folder of a command line; refuses to overwrite a run
  or to change one's maths on ``--resume``.
- :func:`build`: data, model, optimizer and data order for a config (shared with ``bench.py``).
- :func:`restore`: a resume's model, optimizer, RNG states, data position and counters.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from core import hardware
from core.cli import ArgumentParser
from core.errors import UserError
from data.loader import TokenData
from data.prepare import prepare_from_config
from data.tokenizers import load_tokenizer
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT
from training import ddp, faults, runs
from training.branch import branch_config, check_trunk, parse_branch_from
from training.config import RESUME_OVERRIDABLE, RunConfig, TrainConfig, edited_setting, parse_cli, parse_config
from training.gpt2 import init_from_overrides
from training.optim import build_optimizer
from training.schedule import schedule_note
from training.step import Setup, resolve_head_loss, wrap
from training.run_files import IMPORTED, LAST_CKPT, RunFolder


def setup_run(
    args: argparse.Namespace, overrides: dict, dist: ddp.Dist = ddp.SINGLE
) -> tuple[RunConfig, Path, tuple[Path, int] | None]:
    """Resolve the config, the run folder and the trunk a branch starts from (else None); refuse to
    overwrite or to silently change a run.

    Nothing is written here.  For a new run, settings that default to "derive it" (lr decay
    horizon, checkpoint interval, autocast dtype) are resolved so ``config.json`` records what
    ran; :func:`build` resolves the head loss for the device it picks.
    Under torchrun (``dist``) a new run needs ``--run-name``, and only rank 0 checks that the
    folder does not exist yet (it may already have created it when a peer looks).
    ``--branch-from RUN@STEP`` takes its config from the trunk (:func:`training.branch.branch_config`).
    """
    if getattr(args, "branch_from", None):
        return _setup_branch(args, overrides, dist)
    if args.resume:
        return _setup_resume(args, overrides, dist)
    if args.init_from:  # the model's shape comes from the GPT-2 config; conflicting settings are refused
        overrides = init_from_overrides(args.init_from, args.config, overrides)
    cfg = resolve_new(args.config, overrides)
    tc = cfg.train
    name = args.run_name
    if name is not None:
        faults.check_run_name(name)
    elif dist.enabled:  # a time-stamped name could differ between ranks
        raise UserError("under torchrun give --run-name: every rank must name the same run folder")
    if not name:
        stem = Path(args.config).stem + "-" if args.config else ""
        arm = "tied" if cfg.model.tie_embeddings else "untied"
        name = f"{stem}{arm}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(tc.out_dir) / name
    faults.check_paths(cfg, run_dir)
    if dist.is_main and run_dir.exists():
        raise UserError(f"run folder {run_dir} already exists: pick another --run-name, or add --resume to continue it")
    return cfg, run_dir, None


def _setup_resume(args: argparse.Namespace, overrides: dict, dist: ddp.Dist) -> tuple[RunConfig, Path, None]:
    """:func:`setup_run` for ``--resume``: the saved config with the overrides a resume may change."""
    if not args.run_name:
        raise UserError("--resume needs --run-name: name the run folder to continue")
    if args.config or args.init_from:
        raise UserError("--resume takes the config and weights saved in the run folder: drop --config / --init-from")
    out_dir = Path(overrides.get("train", {}).get("out_dir", TrainConfig.out_dir))
    run_dir = out_dir / args.run_name
    faults.check_run_name(args.run_name)
    if not (run_dir / LAST_CKPT).is_file() and (run_dir / IMPORTED).is_file():
        raise UserError(
            f"{run_dir} holds weights from hf.py import, with no training to resume: fine-tune GPT-2 weights "
            f"with train.py --init-from on their Hugging Face folder (hf.py export --run {run_dir} writes one)"
        )
    if not (run_dir / LAST_CKPT).is_file():
        raise UserError(f"nothing to resume: {run_dir / LAST_CKPT} does not exist; start the run without --resume")
    cfg = runs.load_run_config(run_dir)
    saved_horizon = cfg.train.lr_decay_iters
    changes: dict[str, dict] = {}
    for section, values in overrides.items():
        for key, value in values.items():
            full = f"{section}.{key}"
            if full == "train.out_dir":
                continue
            if full not in RESUME_OVERRIDABLE:
                raise UserError(
                    f"--{full} cannot change on --resume (it would change the run's maths): "
                    f"start a new run instead; resumable options: {', '.join(sorted(RESUME_OVERRIDABLE))}"
                )
            changes.setdefault(section, {})[key] = value
    if (cfg.train.untie_at or cfg.train.untie_at_cooldown) and overrides.get("train", {}).get(
        "lr_decay_iters", cfg.train.lr_decay_iters
    ) != saved_horizon:
        switch = "train.untie_at of the horizon" if cfg.train.untie_at else "the cooldown's first step"
        raise UserError(
            f"--train.lr_decay_iters cannot change on --resume of a tie-then-untie run: its switch step "
            f"({switch}) would move; start a new run instead"
        )
    # The overrides, and the folder the run lives in now (even if it was moved), in one validated copy.
    changes.setdefault("train", {})["out_dir"] = str(out_dir)
    cfg = cfg.with_values(**changes)
    train_keys = overrides.get("train", {})
    if dist.is_main and ("max_iters" in train_keys or "lr_decay_iters" in train_keys):
        note = schedule_note(cfg.train)
        if note:
            print(note, file=sys.stderr, flush=True)
    faults.check_paths(cfg, run_dir)
    check_trunk(run_dir)
    return cfg, run_dir, None


def _setup_branch(
    args: argparse.Namespace, overrides: dict, dist: ddp.Dist
) -> tuple[RunConfig, Path, tuple[Path, int] | None]:
    """:func:`setup_run` for ``--branch-from RUN@STEP``: the branch's config and folder, and the trunk's."""
    if args.resume or args.config or args.init_from or not args.run_name:
        raise UserError(
            "--branch-from takes its config from the trunk and needs a new --run-name: drop --resume / --config / "
            "--init-from (continue a branch with --resume --run-name alone)"
        )
    trunk_dir, step = parse_branch_from(args.branch_from)
    faults.check_run_name(args.run_name)
    cfg = branch_config(trunk_dir, step, overrides)
    cfg = cfg.with_values(train={"out_dir": overrides.get("train", {}).get("out_dir", TrainConfig.out_dir)})
    run_dir = Path(cfg.train.out_dir) / args.run_name
    faults.check_paths(cfg, run_dir)
    if dist.is_main and run_dir.exists():
        raise UserError(
            f"run folder {run_dir} already exists: continue that branch with --resume, or pick another --run-name"
        )
    return cfg, run_dir, (trunk_dir, step)


def resolve_new(config: str | None, overrides: dict) -> RunConfig:
    """The config a new run records in ``config.json``: the TOML file ``config`` (None: the defaults) with
    ``overrides``, and the settings that default to "derive it" resolved (lr decay horizon, checkpoint
    interval, autocast dtype for the device picked here).  Raises :class:`UserError` for a bad config
    or a tie-then-untie switch at or past ``max_iters``.
    """
    cfg = parse_config(config, overrides)
    tc = cfg.train
    dtype = tc.dtype
    if dtype == "auto":  # fixed now, so a resume on other hardware keeps the same arithmetic
        dtype = "bfloat16" if hardware.autocast_dtype(hardware.pick_device(tc.device), "auto") else "float32"
    cfg = cfg.with_values(
        train={
            "lr_decay_iters": tc.lr_decay_iters or tc.max_iters,
            "checkpoint_interval": tc.checkpoint_interval or tc.eval_interval,
            "dtype": dtype,
        }
    )
    cfg.check_unties()
    return cfg


def parse_train_args(argv: list[str] | None, description: str | None = None) -> tuple[argparse.Namespace, dict]:
    """``train.py``'s command line: ``(fixed flags, typed --section.key overrides)``.

    Here rather than in ``train.py`` so that what reads a run's command line as ``train.py`` does
    (``compare.py --adopt``) need not import a command.
    """
    parser = ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML file of config overrides, e.g. configs/shakespeare.toml.")
    parser.add_argument(
        "--run-name", help="Run folder name under train.out_dir (default: <config>-<tied|untied>-<time>)."
    )
    parser.add_argument("--resume", action="store_true", help="Continue the run --run-name from its ckpt_last.pt.")
    parser.add_argument(
        "--branch-from",
        metavar="RUN@STEP",
        help="Start the new run --run-name from a WSD trunk's checkpoint at STEP (kept by its train.save_at) and "
        "run its own cooldown to --train.max_iters, e.g. --branch-from runs/trunk@781 --train.max_iters=977.",
    )
    parser.add_argument(
        "--init-from",
        metavar="FOLDER",
        help="Start from GPT-2 weights: a Hugging Face folder "
        "(save_pretrained) or hub id; the model shape comes from its config (needs transformers).",
    )
    return parse_cli(parser, argv)


def new_model(cfg: RunConfig) -> GPT:
    """The run's freshly initialised model, seeded by ``train.seed``, its head set up from the resolved ``train.*``.

    ``train.head_loss`` and ``train.pad_vocab_multiple`` must be resolved (:func:`training.step.resolve_head_loss`):
    the model's loss without logits is the fused kernel for ``'fused'`` and the chunked one otherwise
    (``'logits'`` builds every logit in ``forward`` and needs neither).
    """
    tc = cfg.train
    torch.manual_seed(tc.seed)
    return GPT(cfg.model, tc.pad_vocab_multiple, "fused" if tc.head_loss == "fused" else "chunked")


def build(cfg: RunConfig, dist: ddp.Dist = ddp.SINGLE) -> Setup:
    """Prepare the data and build model, optimizer and data order for ``cfg`` (seeded).

    ``cfg`` stays as given; the set-up's own ``cfg`` (:attr:`Setup.cfg`, what config.json records) is a
    resolved copy: ``model.vocab_size`` from the tokenizer, ``train.head_loss='auto'`` and
    ``train.pad_vocab_multiple=0`` for the device (new runs and resumes alike).  Writes nothing but the data cache
    (prepared by rank 0 alone under torchrun).  Shared by ``train.py`` and ``bench.py`` so the
    benchmark times the training set-up exactly.  Under torchrun the model is wrapped in
    ``DistributedDataParallel``; the tied head stays one Parameter inside it.
    Raises :class:`UserError` for a bad device, corpus or ``block_size``.
    """
    device = ddp.init(dist, cfg.train.device) or hardware.pick_device(cfg.train.device)
    amp_dtype = hardware.autocast_dtype(device, cfg.train.dtype)
    if device.type == "cpu":
        hardware.keep_freed_memory_on_cpu()
    data_dir = ddp.on_main(lambda: prepare_from_config(cfg.data), dist)  # one writer for the cache
    data = TokenData(data_dir)
    ddp.on_every_rank(lambda: data.check_block_size(cfg.model.block_size), dist)  # told once, by rank 0
    tokenizer = load_tokenizer(data_dir)
    if tokenizer.vocab_size != data.vocab_size:
        raise UserError(
            f"{data_dir / 'meta.json'} says vocab_size {data.vocab_size} but its tokenizer.json has "
            f"{tokenizer.vocab_size} tokens: re-run python -m data.prepare --source {shlex.quote(cfg.data.source)} "
            f"--tokenizer {cfg.data.tokenizer} --force"
        )
    cfg = resolve_head_loss(cfg.with_values(model={"vocab_size": data.vocab_size}), device)
    tc = cfg.train
    model = new_model(cfg).to(device)
    optimizer = build_optimizer(model, tc, device, amp_dtype)
    eval_model, step_model = wrap(model, cfg, device, dist)
    if dist.rank:  # dropout noise differs per rank; rank 0 keeps a single process's stream
        torch.manual_seed(tc.seed + dist.rank)
    return Setup(
        device=device,
        amp_dtype=amp_dtype,
        data=data,
        tokenizer=tokenizer,
        model=model,
        eval_model=eval_model,
        step_model=step_model,
        optimizer=optimizer,
        data_gen=torch.Generator().manual_seed(tc.seed),
        dist=dist,
        cfg=cfg,
    )


def check_resumable(ckpt: dict, cfg: RunConfig, s: Setup, saved_vocab_size: int, path: Path) -> None:
    """Refuse a resume that would continue on other data, another tokenizer, or past its end."""
    missing = [k for k in ("optimizer", "rng", "step", "data_sha256") if k not in ckpt]
    if missing:
        raise UserError(
            f"{path} lacks {', '.join(missing)} and cannot be resumed: use a ckpt_last.pt written by train.py"
        )
    if saved_vocab_size != s.data.vocab_size or ckpt.get("tokenizer") != s.tokenizer.to_dict():
        raise UserError(f"the prepared data's tokenizer differs from the one {path} was trained with: start a new run")
    if ckpt["data_sha256"] != s.data.meta.get("source_sha256"):
        raise UserError(f"the corpus {cfg.data.source!r} changed since {path} was written: start a new run on it")
    # Another number of ranks would change the global batch, the eval windows and the token count.
    saved_world = ckpt.get("world_size", 1)
    if saved_world != s.dist.world_size:
        raise UserError(
            f"{path} was written by {saved_world} rank(s), this resume has {s.dist.world_size}: resume with "
            f"the same number ({'torchrun, ' + str(saved_world) + ' processes in all' if saved_world > 1 else 'python train.py, no torchrun'})"
        )
    edit = edited_setting(ckpt.get("config", {}), cfg.to_dict())  # a hand-edited config.json
    if edit is not None:
        full, value, was = edit
        raise UserError(
            f"config.json says {full}={value!r} but {path} was trained with {was!r}: "
            "restore config.json, or start a new run"
        )
    if ckpt.get("tie_embeddings") is not False:  # not untied yet: it must still reach its switch
        cfg.check_unties()
    # A run stopped after its last step (in its final evaluation, say) resumes to its end: no step to train,
    # then the final evaluation and the summary.  Only a finished run is refused: one whose summary is of
    # this checkpoint's step (a summary of an earlier end, left by a kill while the run was extended, is not).
    run = RunFolder(path.parent)
    ended = run.finished and run.summary.get("step", ckpt["step"]) == ckpt["step"]
    if ckpt["step"] > cfg.train.max_iters or (ckpt["step"] == cfg.train.max_iters and ended):
        raise UserError(
            f"{path} is at step {ckpt['step']}, already >= train.max_iters={cfg.train.max_iters}: "
            f"pass --train.max_iters=N with N > {ckpt['step']} to train further"
        )


@dataclass
class Progress:
    """The loop's counters: saved in ``ckpt_last.pt`` so a resume continues them exactly."""

    step: int = 0  # optimizer steps done
    best_val: float = float("inf")
    last_val: float | None = None
    elapsed_before: float = 0.0  # seconds of training before this process started
    skipped: int = 0  # non-finite steps skipped so far
    window_loss: float = 0.0  # sum of train losses since the last train row
    window_steps: int = 0  # ... and how many, so a resumed run logs the same means
    last_bpb: float = float("nan")  # val bits per byte of the last eval
    best_bpb: float = float("nan")  # ... and of the eval with the best val loss
    trained_with: dict | None = None  # the config the checkpoint's steps ran with: a resume logs what it changes


def restore(s: Setup, cfg: RunConfig, path: Path, saved_vocab_size: int) -> Progress:
    """Load model, optimizer, RNG states and data position from ``path``; returns the counters.

    Each rank takes back its own dropout RNG state (the world size cannot change: see
    :func:`check_resumable`); a checkpoint with a single state (from before per-rank states)
    gives it to rank 0, and the others reseed.
    """

    def checked() -> dict:
        ckpt = load_checkpoint(path, map_location=s.device)
        check_resumable(ckpt, cfg, s, saved_vocab_size, path)
        return ckpt

    ckpt = ddp.on_every_rank(checked, s.dist)  # a refusal every rank meets is told once, by rank 0
    if cfg.untie_step() is not None and ckpt.get("tie_embeddings") is False and s.model.tied:
        s.untie(cfg)  # saved after the tie-then-untie switch: the same parameters and groups before loading
    load_model_state(s.model, ckpt, source=str(path))
    rng, rank = ckpt["rng"], s.dist.rank
    try:
        s.optimizer.load_state_dict(ckpt["optimizer"])
        s.data_gen.set_state(rng["data"].cpu())
        per_rank = rng.get("torch_ranks") or [rng["torch"]]
        if rank < len(per_rank) and len(per_rank) in (1, s.dist.world_size):
            torch.set_rng_state(per_rank[rank].cpu())
        else:
            torch.manual_seed(cfg.train.seed + rank + ckpt["step"])
        cuda_states = rng.get("cuda_ranks") or [rng.get("cuda")]
        if s.device.type == "cuda" and rank < len(cuda_states) and cuda_states[rank] is not None:
            torch.cuda.set_rng_state(cuda_states[rank].cpu(), s.device)
    except (ValueError, KeyError, RuntimeError, TypeError, AttributeError) as e:
        raise UserError(f"{path} has a broken optimizer or RNG state ({e}): resume from another checkpoint") from None
    window_loss, window_steps = ckpt.get("train_window", (0.0, 0))
    nan = float("nan")  # checkpoints from before bits per byte have none
    return Progress(
        step=ckpt["step"],
        best_val=ckpt["best_val_loss"],
        last_val=ckpt["val_loss"],
        elapsed_before=ckpt["elapsed_s"],
        skipped=ckpt.get("skipped_steps", 0),
        window_loss=window_loss,
        window_steps=window_steps,
        last_bpb=ckpt.get("val_bpb", nan),
        best_bpb=ckpt.get("best_val_bpb", nan),
        trained_with=ckpt.get("config"),
    )
