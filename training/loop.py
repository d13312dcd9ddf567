"""One training run from its first step to its summary: :func:`train`, and the :class:`Trainer` it drives.

:meth:`Trainer.run` reads as the steps of a run: lock the folder, restore or start the counters,
record the config and environment, open the logs, evaluate at init, loop (step, log, evaluate,
checkpoint, obey stop signals), write the summary, print the end.  Every step that can meet bad
input or a fault says so in one line (docs/reliability.md).  What the run records and prints before
its first step and after its last (records, banner, summary, closing lines) is :mod:`training.report`.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from core.errors import Interrupted, UserError
from core.signals import StopSignals
from model.hf import load_into
from training import ddp, faults, report, runs
from training.branch import start_branch, step_checkpoint
from training.config import RunConfig
from training.schedule import get_lr
from training.setup import Progress, build, restore
from training.step import StepResult, evaluate, evaluate_windows, train_step
from training.run_files import BEST_CKPT, LAST_CKPT, METRICS, SUMMARY

PLOT_EVERY_S = 30.0  # seconds between redraws of loss.png during a run (and once at the end)


def train(
    cfg: RunConfig,
    run_dir: Path,
    resume: bool,
    dist: ddp.Dist = ddp.SINGLE,
    init_from: str | None = None,
    branch_from: tuple[Path, int] | None = None,
) -> dict:
    """Train per ``cfg`` into ``run_dir`` (resuming from its ``ckpt_last.pt`` if ``resume``).

    With ``branch_from`` (a WSD trunk's folder and step; ``cfg`` from :func:`training.branch.branch_config`)
    the new folder ``run_dir`` starts as a copy of the trunk at that step (:func:`training.branch.start_branch`)
    and trains on as a resume.

    A new run with ``init_from`` (a GPT-2 folder or hub id; ``cfg.model`` fitted by
    ``training.gpt2.init_from_overrides``) starts from those weights (``init_from.json``).

    Bad input (config, data, checkpoint, prompt) is refused before the run folder is written;
    the folder is locked (:class:`faults.RunLock`) while the run writes.  Under torchrun, rank 0
    alone writes and prints; all ranks take the same decisions.  Returns ``summary.json``'s dict.
    Raises :class:`UserError` for bad data, a mismatched checkpoint, a folder in use, a failed
    checkpoint write or a non-finite loss (beyond ``train.max_skipped_steps``), and
    :class:`Interrupted` after SIGINT / SIGTERM (once ``ckpt_last.pt`` holds the last step).
    """
    return Trainer(cfg, run_dir, resume, dist, init_from, branch_from).run()


class Trainer:
    """The state of one run: its setup (:class:`training.setup.Setup`), counters, logs and checkpoints."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        resume: bool,
        dist: ddp.Dist,
        init_from: str | None,
        branch_from: tuple[Path, int] | None = None,
    ) -> None:
        self.run_dir, self.dist, self.branch_from = run_dir, dist, branch_from
        self.resume = resume or branch_from is not None  # a branch goes on from the trunk's checkpoint
        self.main = dist.is_main
        self.saved_vocab_size = cfg.model.vocab_size  # a resumed config's; build() sets the data's
        self.setup = build(cfg, dist)
        self.cfg = cfg = self.setup.cfg  # resolved for the device and the data: what config.json records
        tc, mc = cfg.train, cfg.model
        # Every rank copies the same weights in place, after DDP's broadcast; the optimizer's references stay valid.
        self.init_record = load_into(self.setup.model, init_from) if init_from and not resume else None
        if tc.sample_tokens:
            self.setup.tokenizer.encode(
                tc.sample_prompt
            )  # a prompt the tokenizer cannot encode fails now, not after training
        # Fixed eval windows of the global batch (world_size * batch_size wide): each rank takes its columns.
        self.eval_offsets = {
            split: self.setup.data.eval_offsets(
                split, tc.eval_iters, tc.batch_size * dist.world_size, mc.block_size, seed=tc.seed + 1
            )
            for split in ("train", "val")
        }
        self.tokens_per_step = tc.grad_accum_steps * tc.batch_size * mc.block_size * dist.world_size
        self.last_path = run_dir / LAST_CKPT
        self.resume_cmd = faults.resume_command(run_dir, dist.world_size)
        self.cleanup = contextlib.ExitStack()
        self.stop: StopSignals | None = None
        self.progress = Progress()
        self.saved_step, self.plotted_at = -1, time.perf_counter()  # ckpt_last.pt's step (-1: none); loss.png's time
        self.metrics = self.logger = runs.NullLogger()  # rank 0's metrics.jsonl and wandb; null elsewhere
        self.unigram = float("nan")
        self.t_start = time.perf_counter()

    def run(self) -> dict:
        """The run, step by step; returns the summary (see :func:`train` for what it raises)."""
        try:
            with self.cleanup:
                if self.branch_from:  # the folder starts as the trunk at the branch step
                    ddp.on_main(lambda: start_branch(*self.branch_from, self.run_dir, self.cfg), self.dist)
                # Lock before reading ckpt_last.pt: another process may be writing it.
                ddp.on_main(lambda: faults.claim_run_folder(self.run_dir, self.resume, self.cleanup), self.dist)
                # wandb's start is the last input check: before a resume touches summary.json, config.json or metrics.
                ddp.on_main(self.open_logger, self.dist)  # wandb unreachable on rank 0 stops every rank
                self.restore_progress()
                resumed_at = self.progress.step if self.resume else None
                world = self.dist.world_size
                ddp.on_main(
                    lambda: report.write_run_records(
                        self.run_dir, self.cfg, self.setup, self.init_record, resumed_at, world
                    ),
                    self.dist,
                )
                # From here a SIGINT / SIGTERM / SIGHUP only raises a flag, checked between steps (on all ranks at once).
                self.stop = self.cleanup.enter_context(StopSignals())
                if self.main:  # the unigram baseline stays NaN elsewhere: only rank 0 prints it
                    self.unigram = report.announce(
                        self.run_dir, self.cfg, self.setup, self.init_record, resumed_at, world
                    )
                ddp.on_main(self.open_metrics, self.dist)
                self.t_start = time.perf_counter()
                if not self.resume:
                    self.evaluate()  # the loss at init (~ln vocab_size) anchors every curve
                    self.save_last()  # resumable from the start: a run stopped before its first interval can --resume
                self.loop()
                final_val = self.final_evaluation()
                self.metrics.close()
                summary = report.summarize(
                    p=self.progress,
                    s=self.setup,
                    cfg=self.cfg,
                    final_val=final_val,
                    tokens_per_step=self.tokens_per_step,
                    unigram=self.unigram,
                    elapsed_s=self.elapsed(),
                    world_size=world,
                )
                ddp.on_main(
                    lambda: report.write_summary(self.run_dir, summary, self.setup, self.cfg, self.unigram, world),
                    self.dist,
                )
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
        if self.main:
            report.print_end(
                self.run_dir, summary, self.progress, self.setup, self.cfg, self.unigram, self.dist.world_size
            )
        return summary

    # ------------------------------------------------------------------ before the first step

    def restore_progress(self) -> None:
        """A resume takes back weights, optimizer, RNG states, data position and counters from ckpt_last.pt.

        A run extended past an earlier end loses that end's summary.json now: until it ends again it is
        unfinished, and a kill on the way leaves it resumable, never read as the old run.  A branch point
        at the resumed step whose checkpoint a kill kept from being written is written from this state,
        which is the state it would have held (the loop never trains that step again).
        """
        if not self.resume:
            return
        self.progress = restore(self.setup, self.cfg, self.last_path, self.saved_vocab_size)
        self.saved_step = step = self.progress.step
        if step < self.cfg.train.max_iters and self.main:
            (self.run_dir / SUMMARY).unlink(missing_ok=True)
        if step in self.cfg.train.save_at and not step_checkpoint(self.run_dir, step).is_file():
            self.save(step_checkpoint(self.run_dir, step), with_optimizer=True)  # every rank: a collective

    def open_logger(self) -> None:
        """The wandb logger (rank 0; a null one when wandb is off); UserError when wandb cannot start."""
        self.logger = runs.make_logger(self.cfg, self.run_dir, self.run_dir.name, self.resume)
        self.cleanup.callback(self.logger.finish)

    def open_metrics(self) -> None:
        """metrics.jsonl (rank 0): a resume drops rows past its checkpoint and records itself."""
        resume = (
            runs.resume_row(self.progress.step, self.progress.trained_with, self.cfg, self.progress.elapsed_before)
            if self.resume
            else None
        )
        self.metrics = self.cleanup.enter_context(runs.MetricsLog(self.run_dir / METRICS, resume=resume))

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
                initial=self.progress.step,
                desc="train",
                unit="step",
                disable=not self.main,
                dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30.0,
            )
        )
        while self.progress.step < tc.max_iters:
            self.obey_stop()
            self.untie_when_due()
            lr = get_lr(self.progress.step, tc)
            result = self.step(lr)
            window_tokens += self.tokens_per_step
            pbar.update(1)
            if (
                self.progress.step % tc.log_interval == 0 or self.progress.step == tc.max_iters
            ) and self.progress.window_steps:
                tokens_per_s = window_tokens / (time.perf_counter() - window_t)
                row = self.log_train_window(result, lr, tokens_per_s)
                # refresh=False: the bar redraws on its own schedule (every 30 s in a log file), not every row
                pbar.set_postfix(
                    loss=f"{row['train_loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", refresh=False
                )
            bookkeeping_t = time.perf_counter()
            if self.progress.step % tc.eval_interval == 0 or self.progress.step == tc.max_iters:
                self.evaluate()
            # A branch point first, kept once (a resume that trains this step again writes the same state):
            # were ckpt_last.pt written first, a kill between the two would resume past the branch point.
            if self.progress.step in tc.save_at and not step_checkpoint(self.run_dir, self.progress.step).is_file():
                self.save(step_checkpoint(self.run_dir, self.progress.step), with_optimizer=True)
            if self.progress.step % checkpoint_interval == 0 or self.progress.step == tc.max_iters:
                self.save_last()
            # Eval and checkpoint time stay out of tokens/s, also inside a window (intervals that do not align).
            if self.progress.step % tc.log_interval == 0:
                window_t, window_tokens = time.perf_counter(), 0
            else:
                window_t += time.perf_counter() - bookkeeping_t
        pbar.close()

    def untie_when_due(self) -> None:
        """Tie-then-untie: past ``train.untie_at`` of the run, the head gets its own matrix (:meth:`Setup.untie`)."""
        step = self.cfg.untie_step()
        if step is None or self.progress.step < step or not self.setup.model.tied:
            return
        self.setup.untie(self.cfg)
        self.log({"kind": "untie", "step": self.progress.step, "elapsed_s": self.elapsed()}, to_wandb=False)
        if self.main:
            tqdm.write(
                f"step {self.progress.step}: untied: lm_head is now its own copy of the matrix ("
                f"{'the cooldown starts' if self.cfg.train.untie_at_cooldown else f'train.untie_at={self.cfg.train.untie_at:g}'})"
            )

    def obey_stop(self) -> None:
        """After a SIGINT / SIGTERM on any rank: save ckpt_last.pt and raise :class:`Interrupted` on every rank."""
        if not ddp.any_rank(self.stop.received is not None, self.dist, self.setup.device):
            return
        if self.saved_step != self.progress.step:
            self.save_last()
        signum = self.stop.received or signal.SIGTERM  # a rank that got no signal itself stops with its peers
        name = signal.Signals(signum).name
        self.log(
            {"kind": "stop", "step": self.progress.step, "signal": name, "elapsed_s": self.elapsed()}, to_wandb=False
        )
        raise Interrupted(
            signum,
            f"stopped by {name} at step {self.progress.step}: {self.last_path} holds step {self.progress.step}; "
            f"continue with: {self.resume_cmd}",
        )

    def step(self, lr: float) -> StepResult:
        """One optimizer step; a non-finite one is skipped (counted) up to ``train.max_skipped_steps``, then refused."""
        tc, p = self.cfg.train, self.progress
        result = train_step(self.setup, lr)
        if not result.applied:
            what = (
                f"non-finite training loss ({result.loss})"
                if not math.isfinite(result.loss)
                else f"non-finite gradient norm ({result.grad_norm})"
            )
            if p.skipped >= tc.max_skipped_steps:
                if self.main:
                    faults.record_divergence(self.run_dir, p.step + 1, what, tc.learning_rate, lr)
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
        p = self.progress
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
        p = self.progress
        scores = evaluate(self.setup, self.eval_offsets)
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
            self.save(self.run_dir / BEST_CKPT, with_optimizer=False)

    def elapsed(self) -> float:
        """Seconds of training, this process's and those before a resume."""
        return self.progress.elapsed_before + time.perf_counter() - self.t_start

    def log(self, row: dict, to_wandb: bool = True) -> None:
        """A metrics.jsonl row (and wandb's, unless ``to_wandb`` is False), written by rank 0."""

        def write() -> None:
            self.metrics.log(row)
            if to_wandb:
                self.logger.log({k: v for k, v in row.items() if k != "kind"}, step=row["step"])

        ddp.on_main(write, self.dist)  # a failed write (full disk) stops every rank, not just rank 0

    def save_last(self) -> None:
        """ckpt_last.pt: everything a resume needs, optimizer included (metrics.jsonl's rows on disk first)."""
        self.metrics.sync()
        self.save(self.last_path, with_optimizer=True)
        self.saved_step = self.progress.step
        if self.main:  # a resume that got past the step a non-finite loss stopped it at
            faults.clear_divergence(self.run_dir, self.progress.step)

    def save(self, path: Path, with_optimizer: bool) -> None:
        """A checkpoint of the current step (a collective: every rank calls it, rank 0 writes)."""
        device = self.setup.device
        torch_ranks = ddp.gather(torch.get_rng_state(), self.dist)  # every rank's RNG state goes in
        cuda_ranks = ddp.gather(torch.cuda.get_rng_state(device) if device.type == "cuda" else None, self.dist)
        # write_checkpoint refuses a NaN model; on_main makes every rank stop with it.
        ddp.on_main(
            lambda: faults.write_checkpoint(
                path, self.payload(torch_ranks, cuda_ranks, with_optimizer), self.setup.model, self.resume_cmd
            ),
            self.dist,
        )

    def payload(self, torch_ranks: list, cuda_ranks: list, with_optimizer: bool) -> dict:
        """What a checkpoint holds: the uncompiled model's state dict, counters, RNG states, config, tokenizer."""
        s, p = self.setup, self.progress
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
        tc, s, block = self.cfg.train, self.setup, self.cfg.model.block_size
        if not tc.final_eval_tokens:
            return {}
        positions = s.data.tiling_offsets("val", block, tc.final_eval_tokens)
        score = evaluate_windows(
            s.eval_model, s.data, positions, self.cfg, s.device, s.amp_dtype, self.dist, progress=self.main
        )
        scored = len(positions) * block  # every window, dealt round-robin across ranks (evaluate_windows)
        row = {
            "kind": "final_eval",
            "step": self.progress.step,
            "val_loss": score.loss,
            "val_bpb": score.bpb,
            "tokens_scored": scored,
            "elapsed_s": self.elapsed(),
        }
        self.log(row, to_wandb=False)  # under its own name: at the last eval's step it would overwrite val_loss
        final = {"final_val_loss": score.loss, "final_val_bpb": score.bpb}
        ddp.on_main(lambda: self.logger.log(final, step=self.progress.step), self.dist)
        if self.main:
            tqdm.write(
                f"final val loss {score.loss:.4f}, {score.bpb:.4f} bits per byte, on {scored:,} val tokens "
                "(the same windows for every run of this data and block_size)"
            )
        return {**final, "final_val_tokens": scored}

    def refuse_late_stop(self) -> None:
        """A signal during the last step: the run is complete, but it still exits as stopped."""
        if ddp.any_rank(self.stop.received is not None, self.dist, self.setup.device):
            signum = self.stop.received or signal.SIGTERM
            raise Interrupted(
                signum,
                f"stopped by {signal.Signals(signum).name} after the last step: "
                f"the run is complete ({self.run_dir / 'summary.json'}); no sample printed",
            )
