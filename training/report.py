"""What a run reports about itself outside its step rows: the records and the banner before the first step,
and after the last one the final evaluation, ``summary.json`` and the closing lines (result, speed, sample, next steps).

Each function takes the :class:`training.loop.Trainer` whose run it reports on; rank 0 alone writes and prints.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from core import files, flops, hardware
from data.config import data_label
from data.tokenizers import save_tokenizer
from model.generation import generate_text
from training import ddp, runs
from training.config import describe_config
from training.step import evaluate_windows

if TYPE_CHECKING:
    from training.loop import Trainer


def write_run_records(t: Trainer) -> None:
    """The run folder's tokenizer, config.json, init_from.json and environment record (rank 0)."""
    save_tokenizer(t.s.tokenizer, t.run_dir)
    files.write_json(t.run_dir / "config.json", t.cfg.to_dict())
    if t.init_record:
        files.write_json(t.run_dir / "init_from.json", t.init_record)
    # The first segment's environment stays in env.json; each resume adds its own record.
    name = f"env-resume-step{t.p.step}.json" if t.resume else "env.json"
    files.write_json(t.run_dir / name, {**hardware.environment(t.s.device), "world_size": t.dist.world_size})


def announce(t: Trainer) -> float:
    """Print the run folder, the config where it differs from the defaults, the baseline and the model size.

    Returns the unigram baseline val loss (nats per token; NaN off rank 0, which does not compute it).
    """
    s, mc = t.s, t.cfg.model
    t.say(
        f"run folder: {t.run_dir}{f' (resumed at step {t.p.step})' if t.resume else ''}\n"
        f"config, where it differs from the defaults (all of it: {t.run_dir / 'config.json'}):\n"
        f"{describe_config(t.cfg)}",
        flush=True,
    )
    if t.init_record:
        t.say(f"weights from GPT-2: {t.init_record['source']} (recorded in init_from.json)", flush=True)
    unigram = s.data.unigram_val_loss() if t.main else float("nan")
    t.say(f"unigram baseline val loss (train token frequencies, no context): {unigram:.4f}", flush=True)
    t.say(
        f"parameters: {s.model.num_params():,} ({s.model.num_params(non_embedding=True):,} non-embedding), "
        f"tie_embeddings={mc.tie_embeddings}, device={s.device}, autocast={s.amp_dtype}, "
        f"ranks={t.dist.world_size}",
        flush=True,
    )
    note = hardware.thread_contention(torch.get_num_threads()) if s.device.type == "cpu" else None
    if note:
        t.say(note, flush=True)
    return unigram


def final_evaluation(t: Trainer) -> dict:
    """The run's final score: val loss on the same tiling windows for every run (``train.final_eval_tokens``)."""
    tc, s = t.cfg.train, t.s
    if not tc.final_eval_tokens:
        return {}
    positions = s.data.tiling_offsets("val", t.cfg.model.block_size, tc.final_eval_tokens)
    score = evaluate_windows(s.eval_model, s.data, positions, t.cfg, s.device, s.amp_dtype, t.dist, progress=t.main)
    world = t.dist.world_size
    windows = len(positions) - len(positions) % world if len(positions) >= world else len(positions)
    scored = windows * t.cfg.model.block_size
    row = {
        "kind": "final_eval",
        "step": t.p.step,
        "val_loss": score.loss,
        "val_bpb": score.bpb,
        "tokens_scored": scored,
        "elapsed_s": t.elapsed(),
    }
    t.log(row, to_wandb=False)  # under its own name: at the last eval's step it would overwrite val_loss
    final = {"final_val_loss": score.loss, "final_val_bpb": score.bpb}
    ddp.on_main(lambda: t.logger.log(final, step=t.p.step), t.dist)
    if t.main:
        tqdm.write(
            f"final val loss {score.loss:.4f}, {score.bpb:.4f} bits per byte, on {scored:,} val tokens "
            "(the same windows for every run)"
        )
    return {**final, "final_val_tokens": scored}


def write_summary(t: Trainer, final_val: dict) -> dict:
    """summary.json (with the median tokens/s of the train rows) and the final loss.png; returns the summary."""
    s, p = t.s, t.p
    summary = {
        **final_val,
        "step": p.step,
        "tokens": p.step * t.tokens_per_step,
        "val_loss": p.last_val,
        "best_val_loss": p.best_val,
        "val_bpb": p.last_bpb,
        "best_val_bpb": p.best_bpb,
        "best_val_ppl": math.exp(min(p.best_val, 50)),
        "unigram_val_loss": t.unigram,
        "elapsed_s": round(t.elapsed(), 1),
        "peak_memory_mib": hardware.peak_memory_mib(s.device),
        "parameters": s.model.num_params(),
        "non_embedding_parameters": s.model.num_params(non_embedding=True),
        "tie_embeddings": t.cfg.model.tie_embeddings,
        "data_sha256": s.data.meta.get("source_sha256"),
        "train_tokens": s.data.num_tokens("train"),
        "skipped_steps": p.skipped,
        "world_size": t.dist.world_size,
        "data": data_label(t.cfg.data.source, t.cfg.data.tokenizer, s.tokenizer.vocab_size),
        "vocab_size": s.tokenizer.vocab_size,
    }

    def write() -> None:
        train_rows = [r for r in runs.read_metrics(t.run_dir / "metrics.jsonl") if r["kind"] == "train"]
        summary["tokens_per_s_median"] = (
            statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None
        )
        summary.update(
            flops.mfu_record(
                s.model.flops_per_token(), summary["tokens_per_s_median"], s.device, s.amp_dtype, t.dist.world_size
            )
        )
        files.write_json(t.run_dir / "summary.json", summary)
        if t.cfg.train.loss_plot:
            runs.write_loss_plot(t.run_dir, t.unigram, Path(t.cfg.data.cache_dir))

    ddp.on_main(write, t.dist)
    return summary


def print_end(t: Trainer, summary: dict) -> None:
    """The result line, a sample from the final model, and where to go next."""
    p, tc = t.p, t.cfg.train
    t.say(
        f"done: {p.step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
        f"val loss {p.last_val:.4f} (best {p.best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
        f"unigram baseline {t.unigram:.4f})"
        + (f"; {p.skipped} non-finite step(s) skipped" if p.skipped else "")
        + (
            "\nnote: the val loss is not below the unigram baseline yet: the model has not learned from context; "
            "train longer (raise --train.max_iters)"
            if t.main and not p.last_val < t.unigram
            else ""
        ),
        flush=True,
    )
    if summary.get("mfu") and t.main:
        print(f"speed: {summary['tokens_per_s_median']:,.0f} tokens/s (median), MFU {summary['mfu']}")
    if tc.sample_tokens and t.main:
        print(f"--- sample (top-k 50, temperature 0.8, prompt {tc.sample_prompt!r}) ---")
        gen = torch.Generator().manual_seed(tc.seed)
        for piece in generate_text(
            t.s.model,
            t.s.tokenizer,
            tc.sample_prompt,
            tc.sample_tokens,
            t.s.device,
            temperature=0.8,
            top_k=50,
            generator=gen,
        ):
            print(piece, end="", flush=True)
        print("\n---")
    t.say(runs.next_steps(t.run_dir, summary, t.cfg, t.dist.world_size), flush=True)
