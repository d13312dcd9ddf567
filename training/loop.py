"""One training run from its first step to its summary: :func:`train`, and the :class:`Trainer` it drives.

:meth:`Trainer.run` reads as the steps of a run: lock the folder, restore or start the counters,
record the config and environment, open the logs, evaluate at init, loop (step, log, evaluate,
checkpoint, obey stop signals), write the summary, print the end.  Every step that can meet bad
input or a fault says so in one line (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import math
import signal
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from core import files, flops, hardware
from core.errors import Interrupted, UserError
from data.config import data_label
from data.tokenizers import save_tokenizer
from model.generation import generate_text
from model.hf import load_into
from training import ddp, faults, runs
from training.config import RunConfig, describe_config
from training.schedule import get_lr
from training.setup import Progress, build, restore
from training.step import StepResult, evaluate, evaluate_windows, train_step

PLOT_EVERY_S = 30.0  # seconds between redraws of loss.png during a run (and once at the end)


def train(
    cfg: RunConfig, run_dir: Path, resume: bool, dist: ddp.Dist = ddp.SINGLE, init_from: str | None = None
) -> dict:
    """Train per ``cfg`` into ``run_dir`` (resuming from its ``ckpt_last.pt`` if ``resume``).

    A new run with ``init_from`` (a GPT-2 folder or hub id; ``cfg.model`` fitted by
    ``training.gpt2.init_from_overrides``) starts from those weights (``init_from.json``).

    Bad input (config, data, checkpoint, prompt) is refused before the run folder is written;
    the folder is locked (:class:`faults.RunLock`) while the run writes.  Under torchrun, rank 0
    alone writes and prints; all ranks take the same decisions.  Returns ``summary.json``'s dict.
    Raises :class:`UserError` for bad data, a mismatched checkpoint, a folder in use, a failed
    checkpoint write or a non-finite loss (beyond ``train.max_skipped_steps``), and
    :class:`Interrupted` after SIGINT / SIGTERM (once ``ckpt_last.pt`` holds the last step).
    """
    return Trainer(cfg, run_dir, resume, dist, init_from).run()


class Trainer:
    """The state of one run: its setup (:class:`training.setup.Setup`), counters, logs and checkpoints."""

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool, dist: ddp.Dist, init_from: str | None) -> None:
        tc, mc = cfg.train, cfg.model
        self.cfg, self.run_dir, self.resume, self.dist = cfg, run_dir, resume, dist
        self.main = dist.is_main
        self.saved_vocab_size = mc.vocab_size  # a resumed config's; build() sets the data's
        self.s = build(cfg, dist)
        # Every rank copies the same weights in place, after DDP's broadcast; the optimizer's references stay valid.
        self.init_record = load_into(self.s.model, init_from) if init_from and not resume else None
        if tc.sample_tokens:
            self.s.tokenizer.encode(
                tc.sample_prompt
            )  # a prompt the tokenizer cannot encode fails now, not after training
        # Fixed eval windows of the global batch (world_size * batch_size wide): each rank takes its columns.
        self.eval_offsets = {
            split: self.s.data.eval_offsets(
                split, tc.eval_iters, tc.batch_size * dist.world_size, mc.block_size, seed=tc.seed + 1
            )
            for split in ("train", "val")
        }
        self.tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size * dist.world_size
        self.last_path = run_dir / "ckpt_last.pt"
        self.resume_cmd = faults.resume_command(run_dir, dist.world_size)
        self.cleanup = contextlib.ExitStack()
        self.stop: faults.StopSignals | None = None
        self.p = Progress()
        self.saved_step, self.plotted_at = -1, time.perf_counter()  # ckpt_last.pt's step (-1: none); loss.png's time
        self.metrics = self.logger = runs.NullLogger()  # rank 0's metrics.jsonl and wandb; null elsewhere
        self.unigram = float("nan")
        self.t_start = time.perf_counter()

    def say(self, *args, **kwargs) -> None:
        """``print`` on rank 0 only."""
        if self.main:
            print(*args, **kwargs)

    def run(self) -> dict:
        """The run, step by step; returns the summary (see :func:`train` for what it raises)."""
        try:
            with self.cleanup:
                # Lock before reading ckpt_last.pt: another process may be writing it.
                ddp.on_main(lambda: faults.claim_run_folder(self.run_dir, self.resume, self.cleanup), self.dist)
                self.restore_progress()
                ddp.on_main(self.write_run_records, self.dist)
                # From here a SIGINT / SIGTERM / SIGHUP only raises a flag, checked between steps (on all ranks at once).
                self.stop = self.cleanup.enter_context(faults.StopSignals())
                self.announce()
                ddp.on_main(self.open_logs, self.dist)  # wandb unreachable on rank 0 stops every rank
                self.t_start = time.perf_counter()
                if not self.resume:
                    self.evaluate()  # the loss at init (~ln vocab_size) anchors every curve
                    self.save_last()  # resumable from the start: a run stopped before its first interval can --resume
                self.loop()
                final_val = self.final_evaluation()
                self.metrics.close()
                summary = self.write_summary(final_val)
                self.refuse_late_stop()
        except KeyboardInterrupt:  # a second signal: stop now, mid-step (every write is atomic)
            signum = (self.stop.received if self.stop is not None else None) or signal.SIGINT
            where = (
                f"{self.last_path} holds step {self.saved_step}; continue with: {self.resume_cmd}"
                if self.saved_step >= 0
                else "no checkpoint was written, so the new run folder was removed; start again"
            )
            raise Interrupted(signum, f"aborted by a second {signal.Signals(signum).name}: {where}") from None
        except OSError as e:  # e.g. the disk filled while writing metrics.jsonl
            raise UserError(
                f"{e.strerror or e} ({e.filename or self.run_dir}): the last checkpoint is intact; "
                f"free space or fix the path, then continue with: {self.resume_cmd}"
            ) from None
        # The lock is released: the run folder is complete.
        self.print_end(summary)
        return summary

    # ------------------------------------------------------------------ before the first step

    def restore_progress(self) -> None:
        """A resume takes back weights, optimizer, RNG states, data position and counters from ckpt_last.pt."""
        if self.resume:
            self.p = restore(self.s, self.cfg, self.last_path, self.saved_vocab_size)
            self.saved_step = self.p.step

    def write_run_records(self) -> None:
        """The run folder's tokenizer, config.json, init_from.json and environment record (rank 0)."""
        save_tokenizer(self.s.tokenizer, self.run_dir)
        files.write_json(self.run_dir / "config.json", self.cfg.to_dict())
        if self.init_record:
            files.write_json(self.run_dir / "init_from.json", self.init_record)
        # The first segment's environment stays in env.json; each resume adds its own record.
        name = f"env-resume-step{self.p.step}.json" if self.resume else "env.json"
        files.write_json(
            self.run_dir / name, {**hardware.environment(self.s.device), "world_size": self.dist.world_size}
        )

    def announce(self) -> None:
        """Print the run folder, the config where it differs from the defaults, the baseline and the model size."""
        s, mc = self.s, self.cfg.model
        self.say(
            f"run folder: {self.run_dir}{f' (resumed at step {self.p.step})' if self.resume else ''}\n"
            f"config, where it differs from the defaults (all of it: {self.run_dir / 'config.json'}):\n"
            f"{describe_config(self.cfg)}",
            flush=True,
        )
        if self.init_record:
            self.say(f"weights from GPT-2: {self.init_record['source']} (recorded in init_from.json)", flush=True)
        self.unigram = s.data.unigram_val_loss() if self.main else float("nan")
        self.say(f"unigram baseline val loss (train token frequencies, no context): {self.unigram:.4f}", flush=True)
        self.say(
            f"parameters: {s.model.num_params():,} ({s.model.num_params(non_embedding=True):,} non-embedding), "
            f"tie_embeddings={mc.tie_embeddings}, device={s.device}, autocast={s.amp_dtype}, "
            f"ranks={self.dist.world_size}",
            flush=True,
        )

    def open_logs(self) -> None:
        """metrics.jsonl (a resume drops rows past its checkpoint and records itself) and the wandb logger (rank 0)."""
        resume = (
            runs.resume_row(self.p.step, self.p.trained_with, self.cfg, self.p.elapsed_before) if self.resume else None
        )
        self.metrics = self.cleanup.enter_context(runs.MetricsLog(self.run_dir / "metrics.jsonl", resume=resume))
        self.logger = runs.make_logger(self.cfg, self.run_dir, self.run_dir.name, self.resume)
        self.cleanup.callback(self.logger.finish)

    # ------------------------------------------------------------------ the loop

    def loop(self) -> None:
        """Optimizer steps up to ``train.max_iters``, with logging, evaluation and checkpoints at their intervals."""
        tc = self.cfg.train
        checkpoint_interval = tc.checkpoint_interval or tc.eval_interval
        window_t, window_tokens = time.perf_counter(), 0
        # Redirected to a file or CI log, redraw rarely so the log stays readable.
        pbar = self.cleanup.enter_context(
            tqdm(
                total=tc.max_iters,
                initial=self.p.step,
                desc="train",
                unit="step",
                disable=not self.main,
                dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30.0,
            )
        )
        while self.p.step < tc.max_iters:
            self.obey_stop()
            self.untie_when_due()
            lr = get_lr(self.p.step, tc)
            result = self.step(lr)
            window_tokens += self.tokens_per_step
            pbar.update(1)
            if (self.p.step % tc.log_interval == 0 or self.p.step == tc.max_iters) and self.p.window_steps:
                tokens_per_s = window_tokens / (time.perf_counter() - window_t)
                row = self.log_train_window(result, lr, tokens_per_s)
                # refresh=False: the bar redraws on its own schedule (every 30 s in a log file), not every row
                pbar.set_postfix(
                    loss=f"{row['train_loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", refresh=False
                )
            if self.p.step % tc.eval_interval == 0 or self.p.step == tc.max_iters:
                self.evaluate()
            if self.p.step % checkpoint_interval == 0 or self.p.step == tc.max_iters:
                self.save_last()
            if self.p.step % tc.log_interval == 0:
                window_t, window_tokens = time.perf_counter(), 0  # eval and checkpoint time stay out of tokens/s
        pbar.close()

    def untie_when_due(self) -> None:
        """Tie-then-untie: past ``train.untie_at`` of the run, the head gets its own matrix (:meth:`Setup.untie`)."""
        step = self.cfg.untie_step()
        if step is None or self.p.step < step or not self.s.model.tied:
            return
        self.s.untie(self.cfg)
        self.log({"kind": "untie", "step": self.p.step, "elapsed_s": self.elapsed()}, to_wandb=False)
        if self.main:
            tqdm.write(
                f"step {self.p.step}: untied: lm_head is now its own copy of the matrix (train.untie_at="
                f"{self.cfg.train.untie_at:g})"
            )

    def obey_stop(self) -> None:
        """After a SIGINT / SIGTERM on any rank: save ckpt_last.pt and raise :class:`Interrupted` on every rank."""
        if not ddp.any_rank(self.stop.received is not None, self.dist, self.s.device):
            return
        if self.saved_step != self.p.step:
            self.save_last()
        signum = self.stop.received or signal.SIGTERM  # a rank that got no signal itself stops with its peers
        name = signal.Signals(signum).name
        self.log({"kind": "stop", "step": self.p.step, "signal": name, "elapsed_s": self.elapsed()}, to_wandb=False)
        raise Interrupted(
            signum,
            f"stopped by {name} at step {self.p.step}: {self.last_path} holds step {self.p.step}; "
            f"continue with: {self.resume_cmd}",
        )

    def step(self, lr: float) -> StepResult:
        """One optimizer step; a non-finite one is skipped (counted) up to ``train.max_skipped_steps``, then refused."""
        s, tc, p = self.s, self.cfg.train, self.p
        result = train_step(
            s.step_model, s.optimizer, s.data, s.data_gen, self.cfg, s.device, s.amp_dtype, lr, self.dist
        )
        if not result.applied:
            what = (
                f"non-finite training loss ({result.loss})"
                if not math.isfinite(result.loss)
                else f"non-finite gradient norm ({result.grad_norm})"
            )
            if p.skipped >= tc.max_skipped_steps:
                raise UserError(
                    f"{what} at step {p.step + 1}: the run stopped without saving; the last good checkpoint is "
                    f"{self.last_path} (step {self.saved_step}); continue with {self.resume_cmd} "
                    f"--train.max_skipped_steps={p.skipped + 1} to skip such steps, or start a new run with a "
                    f"lower --train.learning_rate"
                )
            p.skipped += 1
            self.log(
                {
                    "kind": "skip",
                    "step": p.step + 1,
                    "reason": what,
                    "train_loss": result.loss,
                    "grad_norm": result.grad_norm,
                    "skipped_steps": p.skipped,
                    "elapsed_s": self.elapsed(),
                },
                to_wandb=False,
            )
            if self.main:
                tqdm.write(f"step {p.step + 1}: {what}, update skipped ({p.skipped} of at most {tc.max_skipped_steps})")
        p.step += 1
        if result.applied:  # a skipped step's NaN would poison the window's mean
            p.window_loss += result.loss
            p.window_steps += 1
        return result

    def log_train_window(self, result: StepResult, lr: float, tokens_per_s: float) -> dict:
        """Write the mean train loss of the steps since the last row, and start a new window."""
        p = self.p
        row = {
            "kind": "train",
            "step": p.step,
            "tokens": p.step * self.tokens_per_step,
            "train_loss": p.window_loss / p.window_steps,
            "grad_norm": result.grad_norm,
            "lr": lr,
            "tokens_per_s": tokens_per_s,
            "elapsed_s": self.elapsed(),
        }
        self.log(row)
        p.window_loss, p.window_steps = 0.0, 0
        return row

    def evaluate(self) -> None:
        """Train and val loss on the fixed eval windows: logged, plotted, and kept in ckpt_best.pt when best."""
        s, p = self.s, self.p
        scores = evaluate(s.eval_model, s.data, self.eval_offsets, self.cfg, s.device, s.amp_dtype, self.dist)
        val = scores["val"]
        p.last_val, p.last_bpb = val.loss, val.bpb
        row = {
            "kind": "eval",
            "step": p.step,
            "tokens": p.step * self.tokens_per_step,
            "train_loss": scores["train"].loss,
            "val_loss": val.loss,
            "val_ppl": math.exp(min(val.loss, 50)),
            "val_bpb": val.bpb,
            "lr": get_lr(p.step, self.cfg.train),
            "elapsed_s": self.elapsed(),
        }
        self.log(row)
        if self.main:
            if (
                self.cfg.train.loss_plot and time.perf_counter() - self.plotted_at >= PLOT_EVERY_S
            ):  # a PNG costs ~0.3 s: not at every eval
                runs.write_loss_plot(self.run_dir, self.unigram, Path(self.cfg.data.cache_dir))
                self.plotted_at = time.perf_counter()
            tqdm.write(
                f"step {p.step}: train loss {scores['train'].loss:.4f}, val loss {val.loss:.4f}, "
                f"val ppl {row['val_ppl']:.1f}, val bpb {val.bpb:.4f}"
            )
        if val.loss < p.best_val:  # the same on every rank: the losses are all-reduced
            p.best_val, p.best_bpb = val.loss, val.bpb
            self.save(self.run_dir / "ckpt_best.pt", with_optimizer=False)

    def elapsed(self) -> float:
        """Seconds of training, this process's and those before a resume."""
        return self.p.elapsed_before + time.perf_counter() - self.t_start

    def log(self, row: dict, to_wandb: bool = True) -> None:
        """A metrics.jsonl row (and wandb's, unless ``to_wandb`` is False), written by rank 0."""

        def write() -> None:
            self.metrics.log(row)
            if to_wandb:
                self.logger.log({k: v for k, v in row.items() if k != "kind"}, step=row["step"])

        ddp.on_main(write, self.dist)  # a failed write (full disk) stops every rank, not just rank 0

    def save_last(self) -> None:
        """ckpt_last.pt: everything a resume needs, optimizer included."""
        self.save(self.last_path, with_optimizer=True)
        self.saved_step = self.p.step

    def save(self, path: Path, with_optimizer: bool) -> None:
        """A checkpoint of the current step (a collective: every rank calls it, rank 0 writes)."""
        device = self.s.device
        torch_ranks = ddp.gather(torch.get_rng_state(), self.dist)  # every rank's RNG state goes in
        cuda_ranks = ddp.gather(torch.cuda.get_rng_state(device) if device.type == "cuda" else None, self.dist)
        # write_checkpoint refuses a NaN model; on_main makes every rank stop with it.
        ddp.on_main(
            lambda: faults.write_checkpoint(
                path, self.payload(torch_ranks, cuda_ranks, with_optimizer), self.s.model, self.resume_cmd
            ),
            self.dist,
        )

    def payload(self, torch_ranks: list, cuda_ranks: list, with_optimizer: bool) -> dict:
        """What a checkpoint holds: the uncompiled model's state dict, counters, RNG states, config, tokenizer."""
        s, p = self.s, self.p
        out = {
            "model": s.model.state_dict(),
            "step": p.step,
            "tokens": p.step * self.tokens_per_step,
            "config": self.cfg.to_dict(),
            "tie_embeddings": s.model.tied,
            "tokenizer": s.tokenizer.to_dict(),
            "data_sha256": s.data.meta.get("source_sha256"),
            "elapsed_s": self.elapsed(),
            "val_loss": p.last_val,
            "best_val_loss": p.best_val,
            "val_bpb": p.last_bpb,
            "best_val_bpb": p.best_bpb,
            "skipped_steps": p.skipped,
            "train_window": [p.window_loss, p.window_steps],
            "rng": {
                "torch": torch_ranks[0],
                "data": s.data_gen.get_state(),
                "cuda": cuda_ranks[0],
                "torch_ranks": torch_ranks,
                "cuda_ranks": cuda_ranks,
            },
            "world_size": self.dist.world_size,
        }
        if with_optimizer:
            out["optimizer"] = s.optimizer.state_dict()
        return out

    # ------------------------------------------------------------------ the end

    def final_evaluation(self) -> dict:
        """The run's final score: val loss on the same tiling windows for every run (``train.final_eval_tokens``)."""
        tc, s = self.cfg.train, self.s
        if not tc.final_eval_tokens:
            return {}
        positions = s.data.tiling_offsets("val", self.cfg.model.block_size, tc.final_eval_tokens)
        score = evaluate_windows(
            s.eval_model, s.data, positions, self.cfg, s.device, s.amp_dtype, self.dist, progress=self.main
        )
        world = self.dist.world_size
        windows = len(positions) - len(positions) % world if len(positions) >= world else len(positions)
        scored = windows * self.cfg.model.block_size
        row = {
            "kind": "final_eval",
            "step": self.p.step,
            "val_loss": score.loss,
            "val_bpb": score.bpb,
            "tokens_scored": scored,
            "elapsed_s": self.elapsed(),
        }
        self.log(row, to_wandb=False)  # under its own name: at the last eval's step it would overwrite val_loss
        final = {"final_val_loss": score.loss, "final_val_bpb": score.bpb}
        ddp.on_main(lambda: self.logger.log(final, step=self.p.step), self.dist)
        if self.main:
            tqdm.write(
                f"final val loss {score.loss:.4f}, {score.bpb:.4f} bits per byte, on {scored:,} val tokens "
                "(the same windows for every run)"
            )
        return {**final, "final_val_tokens": scored}

    def write_summary(self, final_val: dict) -> dict:
        """summary.json (with the median tokens/s of the train rows) and the final loss.png; returns the summary."""
        s, p = self.s, self.p
        summary = {
            **final_val,
            "step": p.step,
            "tokens": p.step * self.tokens_per_step,
            "val_loss": p.last_val,
            "best_val_loss": p.best_val,
            "val_bpb": p.last_bpb,
            "best_val_bpb": p.best_bpb,
            "best_val_ppl": math.exp(min(p.best_val, 50)),
            "unigram_val_loss": self.unigram,
            "elapsed_s": round(self.elapsed(), 1),
            "peak_memory_mib": hardware.peak_memory_mib(s.device),
            "parameters": s.model.num_params(),
            "non_embedding_parameters": s.model.num_params(non_embedding=True),
            "tie_embeddings": self.cfg.model.tie_embeddings,
            "data_sha256": s.data.meta.get("source_sha256"),
            "train_tokens": s.data.num_tokens("train"),
            "skipped_steps": p.skipped,
            "world_size": self.dist.world_size,
            "data": data_label(self.cfg.data.source, self.cfg.data.tokenizer, s.tokenizer.vocab_size),
            "vocab_size": s.tokenizer.vocab_size,
        }

        def write() -> None:
            train_rows = [r for r in runs.read_metrics(self.run_dir / "metrics.jsonl") if r["kind"] == "train"]
            summary["tokens_per_s_median"] = (
                statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None
            )
            summary.update(
                flops.mfu_record(
                    s.model.flops_per_token(),
                    summary["tokens_per_s_median"],
                    s.device,
                    s.amp_dtype,
                    self.dist.world_size,
                )
            )
            files.write_json(self.run_dir / "summary.json", summary)
            if self.cfg.train.loss_plot:
                runs.write_loss_plot(self.run_dir, self.unigram, Path(self.cfg.data.cache_dir))

        ddp.on_main(write, self.dist)
        return summary

    def refuse_late_stop(self) -> None:
        """A signal during the last step: the run is complete, but it still exits as stopped."""
        if ddp.any_rank(self.stop.received is not None, self.dist, self.s.device):
            signum = self.stop.received or signal.SIGTERM
            raise Interrupted(
                signum,
                f"stopped by {signal.Signals(signum).name} after the last step: "
                f"the run is complete ({self.run_dir / 'summary.json'}); no sample printed",
            )

    def print_end(self, summary: dict) -> None:
        """The result line, a sample from the final model, and where to go next."""
        p, tc = self.p, self.cfg.train
        self.say(
            f"done: {p.step} steps, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
            f"val loss {p.last_val:.4f} (best {p.best_val:.4f}, perplexity {summary['best_val_ppl']:.1f}; "
            f"unigram baseline {self.unigram:.4f})"
            + (f"; {p.skipped} non-finite step(s) skipped" if p.skipped else "")
            + (
                "\nnote: the val loss is not below the unigram baseline yet: the model has not learned from context; "
                "train longer (raise --train.max_iters)"
                if self.main and not p.last_val < self.unigram
                else ""
            ),
            flush=True,
        )
        if summary.get("mfu") and self.main:
            print(f"speed: {summary['tokens_per_s_median']:,.0f} tokens/s (median), MFU {summary['mfu']}")
        if tc.sample_tokens and self.main:
            print(f"--- sample (top-k 50, temperature 0.8, prompt {tc.sample_prompt!r}) ---")
            gen = torch.Generator().manual_seed(tc.seed)
            for piece in generate_text(
                self.s.model,
                self.s.tokenizer,
                tc.sample_prompt,
                tc.sample_tokens,
                self.s.device,
                temperature=0.8,
                top_k=50,
                generator=gen,
            ):
                print(piece, end="", flush=True)
            print("\n---")
        self.say(runs.next_steps(self.run_dir, summary, self.cfg, self.dist.world_size), flush=True)
