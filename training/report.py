"""What a run reports about itself outside its step rows: the records and the banner before the first step,
and after the last one ``summary.json`` and the closing lines (result, speed, sample, next steps).

Each function takes plain values (the config, the :class:`training.setup.Setup`, the
:class:`training.setup.Progress` counters), never the run's :class:`training.loop.Trainer`; the
caller runs them on rank 0 alone, where only rank 0 writes and prints.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import torch

from core import files, flops, hardware
from data.config import data_label
from data.tokenizers import save_tokenizer
from model.generation import generate_text
from training import faults, runs
from training.config import RunConfig, describe_config
from training.setup import Progress
from training.step import Setup
from training.run_files import CONFIG, ENV, METRICS, SUMMARY


def write_run_records(
    run_dir: Path, cfg: RunConfig, s: Setup, init_record: dict | None, resumed_at: int | None, world_size: int
) -> None:
    """The run folder's tokenizer, config.json, init_from.json and environment record.

    ``resumed_at`` is the step a resume goes on from (``None`` for a new run).
    """
    save_tokenizer(s.tokenizer, run_dir)
    files.write_json(run_dir / CONFIG, cfg.to_dict())
    if init_record:
        files.write_json(run_dir / "init_from.json", init_record)
    # The first segment's environment stays in env.json; each resume adds its own record.
    name = ENV if resumed_at is None else f"env-resume-step{resumed_at}.json"
    files.write_json(run_dir / name, {**hardware.environment(s.device), "world_size": world_size})


def announce(
    run_dir: Path, cfg: RunConfig, s: Setup, init_record: dict | None, resumed_at: int | None, world_size: int
) -> float:
    """Print the run folder, the config where it differs from the defaults, the baseline and the model size.

    Returns the unigram baseline val loss (nats per token).
    """
    resumed = f" (resumed at step {resumed_at})" if resumed_at is not None else ""
    print(
        f"run folder: {run_dir}{resumed}\n"
        f"config, where it differs from the defaults (all of it: {run_dir / 'config.json'}):\n"
        f"{describe_config(cfg)}",
        flush=True,
    )
    if init_record:
        print(f"weights from GPT-2: {init_record['source']} (recorded in init_from.json)", flush=True)
    # On the tokens the final score reads, so "not below the baseline" compares like with like.
    unigram = s.data.unigram_val_loss(block_size=cfg.model.block_size, max_tokens=cfg.train.final_eval_tokens)
    print(f"unigram baseline val loss (train token frequencies, no context): {unigram:.4f}", flush=True)
    print(
        f"parameters: {s.model.num_params():,} ({s.model.num_params(non_embedding=True):,} non-embedding), "
        f"tie_embeddings={cfg.model.tie_embeddings}, device={s.device}, autocast={s.amp_dtype}, "
        f"ranks={world_size}",
        flush=True,
    )
    note = hardware.thread_contention(torch.get_num_threads()) if s.device.type == "cpu" else None
    if note:
        print(note, flush=True)
    return unigram


def summarize(
    p: Progress,
    s: Setup,
    cfg: RunConfig,
    final_val: dict,
    tokens_per_step: int,
    unigram: float,
    elapsed_s: float,
    world_size: int,
) -> dict:
    """The run's ``summary.json`` without its speed (which :func:`write_summary` reads from metrics.jsonl)."""
    return {
        **final_val,
        "step": p.step,
        "tokens": p.step * tokens_per_step,
        "val_loss": p.last_val,
        "best_val_loss": p.best_val,
        "val_bpb": p.last_bpb,
        "best_val_bpb": p.best_bpb,
        "best_val_ppl": math.exp(min(p.best_val, 50)),
        "unigram_val_loss": unigram,
        "elapsed_s": round(elapsed_s, 1),
        "peak_memory_mib": hardware.peak_memory_mib(s.device),
        "parameters": s.model.num_params(),
        "non_embedding_parameters": s.model.num_params(non_embedding=True),
        "tie_embeddings": cfg.model.tie_embeddings,
        "data_sha256": s.data.meta.get("source_sha256"),
        "train_tokens": s.data.num_tokens("train"),
        "skipped_steps": p.skipped,
        "world_size": world_size,
        "data": data_label(cfg.data.source, cfg.data.tokenizer, s.tokenizer.vocab_size),
        "vocab_size": s.tokenizer.vocab_size,
    }


def write_summary(run_dir: Path, summary: dict, s: Setup, cfg: RunConfig, unigram: float, world_size: int) -> None:
    """Add the median tokens/s of the train rows and the MFU to ``summary``; write summary.json and the final loss.png."""
    train_rows = [r for r in runs.read_metrics(run_dir / METRICS) if r["kind"] == "train"]
    summary["tokens_per_s_median"] = statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None
    summary.update(
        flops.mfu_record(s.model.flops_per_token(), summary["tokens_per_s_median"], s.device, s.amp_dtype, world_size)
    )
    (run_dir / faults.DIVERGED).unlink(missing_ok=True)  # resumed past the step that stopped it
    files.write_json(run_dir / SUMMARY, summary)
    if cfg.train.loss_plot:
        runs.write_loss_plot(run_dir, unigram, Path(cfg.data.cache_dir))


def print_end(
    run_dir: Path, summary: dict, p: Progress, s: Setup, cfg: RunConfig, unigram: float, world_size: int
) -> None:
    """The result line, a sample from the final model, and where to go next."""
    tc = cfg.train
    final = "final_val_loss" in summary  # the baseline is on the final score's tokens
    score = summary["final_val_loss"] if final else p.last_val
    print(
        f"done: {p.step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
        f"val loss {p.last_val:.4f} (best {p.best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
        f"unigram baseline {unigram:.4f})"
        + (f"; {p.skipped} non-finite step(s) skipped" if p.skipped else "")
        + (
            f"\nnote: the {'final ' if final else ''}val loss is not below the unigram baseline yet: "
            "the model has not learned from context; train longer (raise --train.max_iters)"
            if not score < unigram
            else ""
        ),
        flush=True,
    )
    if summary.get("mfu"):
        print(f"speed: {summary['tokens_per_s_median']:,.0f} tokens/s (median), MFU {summary['mfu']}")
    if tc.sample_tokens:
        print(f"--- sample (top-k 50, temperature 0.8, prompt {tc.sample_prompt!r}) ---")
        gen = torch.Generator().manual_seed(tc.seed)
        for piece in generate_text(
            s.model, s.tokenizer, tc.sample_prompt, tc.sample_tokens, s.device, temperature=0.8, top_k=50, generator=gen
        ):
            print(piece, end="", flush=True)
        print("\n---")
    print(runs.next_steps(run_dir, summary, cfg, world_size), flush=True)
