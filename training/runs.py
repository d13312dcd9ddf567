"""Run folders and the plumbing shared by ``train.py``, ``sample.py`` and ``bench.py``.

A run folder ``runs/<run-name>/`` holds everything needed to inspect, resume or sample
from a run: ``config.json`` (resolved config), ``env.json`` (git commit, library versions,
hardware), ``metrics.jsonl`` (one JSON object per log/eval step), ``tokenizer.json``
(+ ``gpt2.tiktoken`` for the BPE tokenizer), ``ckpt_last.pt``, ``ckpt_best.pt`` and, once
the run finishes, ``summary.json`` (final and best val loss, unigram baseline, tokens/s).

This module also provides the experiment loggers (:class:`MetricsLog`, always on, local
JSONL; a wandb logger that is a no-op when wandb is disabled).  The guards a long run needs
(lock, stop signals, path checks) are in :mod:`training.faults`; the device and the
environment record in :mod:`core.device`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
from pathlib import Path

import torch

from core.errors import UserError, first_line
from core.files import atomic_write_bytes, read_json, write_text_atomic
from data.tokenizers import load_tokenizer
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT
from training import faults
from training.config import RunConfig, TrainConfig, edited_setting
from training.run_files import BEST_CKPT, CONFIG, EXPERIMENT_FILE, IMPORTED, LAST_CKPT, METRICS, RunFolder


def is_finished(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished (:attr:`training.run_files.RunFolder.finished`)."""
    return RunFolder(run_dir).finished


@contextlib.contextmanager
def _env_default(name: str, value: str):
    """Set environment variable ``name`` to ``value`` inside the block unless already set."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def load_run_config(run_dir: Path) -> RunConfig:
    """The resolved :class:`RunConfig` saved in ``run_dir/config.json``.

    A run saved before ``train.head_loss`` existed computed its loss from the full logits:
    it reads as ``'logits'``, so a resume goes on with the arithmetic it began with.  Raises
    :class:`UserError` naming ``hf.py import`` for a Hugging Face folder (its ``config.json`` has a
    ``model_type``), which is no run folder.
    """
    d = read_json(run_dir / CONFIG, "run config")
    if "model_type" in d:  # transformers' config.json: the weights of an export, or of the Hub
        raise UserError(
            f"{run_dir} is a Hugging Face folder, not a run folder: make one from it first with "
            f"python hf.py import --hf {run_dir} --out runs/<name>"
        )
    if isinstance(d.get("train"), dict):
        d["train"].setdefault("head_loss", "logits")
    return RunConfig.from_dict(d, str(run_dir / CONFIG))


class MetricsLog:
    """Append-only ``metrics.jsonl``: one JSON object per line, flushed at once.

    On resume (``resume``: the :func:`resume_row` to write), rows past the checkpoint's step
    (written after the last checkpoint by a run that then died) are dropped, so the file reads
    as if the run had never stopped, and the resume row is appended: the file keeps every
    resume that led to the steps it holds, and what each changed.
    """

    def __init__(self, path: Path, resume: dict | None = None) -> None:
        self.path = path
        if resume is not None and path.exists():
            kept = [line for line in path.read_text().splitlines() if _kept_on_resume(line, resume["step"])]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        self._f = open(path, "a")
        if resume is not None:
            self.log(resume)

    def log(self, row: dict) -> None:
        """Append one row (a JSON object) and flush it to disk at once.

        NaN and infinities become null: JSON has no such numbers (``json.dumps`` would write
        a bare ``NaN`` that jq and JavaScript reject).
        """
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self._f.write(json.dumps(clean, allow_nan=False) + "\n")
        self._f.flush()

    def sync(self) -> None:
        """Put every row written so far on disk (``os.fsync``), as a checkpoint is: called before each
        ``ckpt_last.pt``, so a power cut never leaves a checkpoint newer than the rows that led to it."""
        if not self._f.closed:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        """Close the file (again is fine)."""
        self._f.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _kept_on_resume(line: str, resume_step: int) -> bool:
    """Whether a metrics line stays when a run resumes from ``resume_step``.

    Dropped: rows past the checkpoint, a torn or blank line (a crash mid-write), "stop" rows,
    which mark where a segment ended, and "final_eval" rows of a run being extended: the file
    then reads as one uninterrupted run.  "resume" rows of earlier resumes stay; one at
    ``resume_step`` itself goes, since the new resume from that same checkpoint records all that
    changed since it (:func:`resume_row`).
    """
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return False
    if not isinstance(row, dict) or row.get("kind") in ("stop", "final_eval"):
        return False
    if row.get("kind") == "resume":
        return row.get("step", 0) < resume_step
    # A checkpoint at a tie-then-untie switch step is the tied model: the switch happens again.
    return row.get("step", 0) < resume_step if row.get("kind") == "untie" else row.get("step", 0) <= resume_step


def resume_row(step: int, before: dict | None, cfg: RunConfig, elapsed_s: float) -> dict:
    """The ``metrics.jsonl`` row a resume writes: what changed since the steps its checkpoint holds.

    ``before``: the config ``ckpt_last.pt`` was saved with (nested, as ``config.json``; None
    for a checkpoint older than that), ``cfg``: the config the run goes on with.  The row holds
    ``overrides`` (flat key -> new value) and ``previous`` (-> old value) for each setting that
    changed (``train.out_dir`` left out: it names where the folder is now), and ``lr_horizon``,
    ``[before, after]``, the step where the cosine reaches min_lr (``lr_decay_iters``, or
    ``max_iters`` where that is 0): a resume moving it changes the learning rate of later steps,
    which the experiment's fairness check reads (:mod:`experiment.runs.schedules`).  A checkpoint
    without a config gives None for all three: what changed is unknown.
    """
    row: dict = {"kind": "resume", "step": step, "overrides": None, "previous": None, "lr_horizon": None}
    if before:
        now = cfg.to_dict()
        changed = sorted(
            (f"{s}.{k}", v, now[s][k])
            for s, values in before.items()
            if s in now
            for k, v in values.items()
            if k in now[s] and v != now[s][k] and f"{s}.{k}" != "train.out_dir"
        )
        row["overrides"] = {key: new for key, _, new in changed}
        row["previous"] = {key: old for key, old, _ in changed}
        old = before.get("train", {})
        row["lr_horizon"] = [
            old.get("lr_decay_iters") or old.get("max_iters"),
            cfg.train.lr_decay_iters or cfg.train.max_iters,
        ]
    return {**row, "elapsed_s": elapsed_s}


class Unreadable(UserError):
    """A run folder file that cannot be read as train.py writes it; the message names file and problem."""


def read_metrics(path: Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` ([] if it does not exist).

    A last line with no newline that is not JSON is a write in progress (or one cut short by a
    crash, which ``train.py --resume`` drops too) and is left out.  Raises :class:`Unreadable`
    for any other line that is not a JSON object with a ``kind`` and an integer ``step``.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise Unreadable(f"{path.name} cannot be read ({type(e).__name__}: {e})") from None
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if number == len(lines):  # unterminated last line: being written
                break
            raise Unreadable(f"{path.name} line {number} is not JSON") from None
        if not (isinstance(row, dict) and isinstance(row.get("kind"), str) and type(row.get("step")) is int):
            raise Unreadable(f"{path.name} line {number} is not a metrics row (no kind or integer step)")
        rows.append(row)
    return rows


def thin_metrics(rows: list[dict], max_train_rows: int) -> list[dict]:
    """``rows`` with at most ``max_train_rows`` ``train`` rows; every other row (eval, resume, untie,
    stop, final_eval) kept, in order.

    The train rows kept are those at a multiple of a stride: the smallest power-of-two multiple
    of the logging interval (the first two train rows' distance) that keeps at most
    ``max_train_rows``, and the last one.  Runs thinned alike keep the same steps, so the
    learning-rate schedule check (:mod:`experiment.runs.schedules`) still compares them step by step.
    A kept row's ``tokens_per_s`` becomes its merged window's (the tokens since the last kept row over the
    dropped windows' seconds and its own), so the training clock read from the rows (evaluation and
    checkpoints left out, ``--outcome time-to``) is the same before and after.
    """
    train = [r for r in rows if r["kind"] == "train"]
    if len(train) <= max_train_rows:
        return list(rows)
    interval = max(1, train[1]["step"] - train[0]["step"])
    stride = interval
    while sum(r["step"] % stride == 0 for r in train) > max(1, max_train_rows - 1):
        stride *= 2
    last = train[-1]["step"]
    out, seconds, since, at = [], 0.0, 0, 0  # the merged window: its seconds, where it began, the last row's tokens
    for r in rows:
        if r["kind"] != "train":
            out.append(r)
            continue
        rate, tokens = r.get("tokens_per_s"), r.get("tokens", 0)
        timed = isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0
        if timed and tokens > at:  # a resumed run's repeated window adds nothing, as the clock reads it
            seconds, at = seconds + (tokens - at) / rate, tokens
        if r["step"] % stride == 0 or r["step"] == last:
            merged = timed and seconds > 0 and tokens > since
            out.append({**r, "tokens_per_s": (tokens - since) / seconds} if merged else r)
            seconds, since = 0.0, max(since, at)
    return out


class NullLogger:
    """Stands in for wandb when it is disabled, and for every log on ranks > 0: each call does nothing."""

    def log(self, row: dict, step: int | None = None) -> None:
        """Do nothing."""

    def finish(self) -> None:
        """Do nothing."""

    def sync(self) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


class WandbLogger:
    """Thin wrapper over a wandb run; created only when the resolved mode (:meth:`WandbConfig.resolved_mode`) is
    online or offline."""

    def __init__(self, cfg: RunConfig, run_dir: Path, run_name: str, resume: bool) -> None:
        import wandb  # imported lazily: wandb is slow to import and unused when disabled

        tag = "tied" if cfg.model.tie_embeddings else "untied"
        # wandb's service writes its debug logs under $WANDB_CACHE_DIR (default ~/.cache) when it
        # starts: point it at the run folder for that moment only (a user's own setting wins).
        with _env_default("WANDB_CACHE_DIR", str(run_dir / "wandb")):
            self._run = wandb.init(
                project=cfg.wandb.project,
                group=cfg.wandb.group or None,
                name=cfg.wandb.name or run_name,
                tags=sorted(set(cfg.wandb.tags) | {tag}),
                config=cfg.to_dict(),
                dir=str(run_dir),
                mode=cfg.wandb.resolved_mode(),
                id=(run_dir / ".wandb_id").read_text().strip() if resume and (run_dir / ".wandb_id").exists() else None,
                resume="allow" if resume else None,
            )
        write_text_atomic(run_dir / ".wandb_id", self._run.id)

    def log(self, row: dict, step: int) -> None:
        """Send one row of metrics to wandb at optimizer step ``step`` (missing and non-finite values left out)."""
        self._run.log(
            {k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and not math.isfinite(v))},
            step=step,
        )

    def finish(self) -> None:
        """Flush and close the wandb run."""
        self._run.finish()


def make_logger(cfg: RunConfig, run_dir: Path, run_name: str, resume: bool):
    """A :class:`WandbLogger` if wandb is on, else a :class:`NullLogger`."""
    mode = cfg.wandb.resolved_mode()  # --wandb.mode, else wandb's own WANDB_MODE, else disabled
    if mode == "disabled":
        return NullLogger()
    try:
        return WandbLogger(cfg, run_dir, run_name, resume)
    except Exception as e:  # wandb raises many types (auth, network, install); all mean "cannot log"
        first = first_line(e, 160)
        raise UserError(
            f"wandb could not start in {mode} mode ({first}): run `wandb login`, "
            "or use --wandb.mode=offline or --wandb.mode=disabled"
        ) from None


def write_loss_plot(run_dir: Path, unigram_val_loss: float | None = None, cache_dir: Path | None = None) -> Path:
    """Draw ``loss.png`` in ``run_dir`` from its ``metrics.jsonl``: train and val loss (nats/token) vs step.

    Train loss is the logged window means, val loss the evaluations; the unigram baseline
    (train token frequencies, no context) is a dashed line when given.  Written atomically,
    so a reader never sees half a file.  matplotlib keeps its font cache in
    ``<cache_dir>/matplotlib`` (unless ``MPLCONFIGDIR`` is set), so a run writes nowhere but
    its run folder and the data cache.  Returns the path.
    """
    import io

    if cache_dir is not None:
        os.environ.setdefault("MPLCONFIGDIR", str(Path(cache_dir).resolve() / "matplotlib"))
    # The Figure class alone, not pyplot: no backend or GUI machinery to import (about a second per run).
    from matplotlib.figure import Figure

    rows = read_metrics(run_dir / METRICS)
    train = [(r["step"], r["train_loss"]) for r in rows if r["kind"] == "train"]
    evals = [(r["step"], r["val_loss"]) for r in rows if r["kind"] == "eval"]
    fig = Figure(figsize=(7, 4.2), layout="constrained")  # and bbox_inches="tight": a long run name is never cut
    ax = fig.add_subplot()
    if train:
        ax.plot(*zip(*train), color="tab:blue", alpha=0.6, label="train loss (window mean)")
    if evals:
        ax.plot(*zip(*evals), "o-", color="tab:orange", markersize=3, label="val loss")
    if unigram_val_loss is not None and math.isfinite(unigram_val_loss):
        ax.axhline(unigram_val_loss, color="gray", linestyle="--", label=f"unigram baseline ({unigram_val_loss:.3f})")
    ax.set(xlabel="step", ylabel="loss (nats/token)", title=f"{run_dir.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    atomic_write_bytes(run_dir / "loss.png", buf.getvalue())
    return run_dir / "loss.png"


def load_run(run_dir: Path, which: str, device: torch.device) -> tuple[GPT, object, dict]:
    """Load ``(model, tokenizer, checkpoint)`` from a run folder (``which`` is 'best' or 'last').

    Raises :class:`UserError` if the folder, its config, tokenizer or checkpoint is missing,
    corrupt, or disagrees with the others.
    """
    if run_dir.is_file():
        raise UserError(
            f"{run_dir} is a file, not a run folder: give the folder train.py wrote, e.g. --run runs/<run-name>"
        )
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist: give --run runs/<run-name>")
    cfg = load_run_config(run_dir)
    tokenizer = load_tokenizer(run_dir)
    path = run_dir / f"ckpt_{which}.pt"
    if which == "best" and not path.exists() and (run_dir / LAST_CKPT).exists():
        path = run_dir / LAST_CKPT
    if which == "last" and not path.exists() and (run_dir / IMPORTED).is_file():
        raise UserError(f"{run_dir} holds imported weights (hf.py import) and no {LAST_CKPT}: use --checkpoint best")
    ckpt = load_checkpoint(path, map_location=device)
    if ckpt.get("tokenizer") != tokenizer.to_dict():
        raise UserError(
            f"{path} was trained with another tokenizer than {run_dir / 'tokenizer.json'}: restore the run's tokenizer.json"
        )
    # Many edits of config.json keep every tensor's shape (n_head, mlp, logit_softcap, rope_theta...), so the
    # weights would load into another function: the checkpoint's own config decides, as on a resume.
    edit = edited_setting(ckpt.get("config", {}), cfg.to_dict(), sections=("model",))
    if edit is not None:
        full, value, was = edit
        raise UserError(
            f"{run_dir / CONFIG} says {full}={value!r} but {path} was trained with {was!r}: restore {CONFIG}"
        )
    model = GPT(cfg.model)
    if cfg.untie_step() is not None and ckpt.get("tie_embeddings") is False and model.tied:
        model.untie()  # saved after the run's tie-then-untie switch
    load_model_state(model, ckpt, source=str(path), fix=f"restore {CONFIG}")
    return model.to(device).eval(), tokenizer, ckpt


def next_steps(run_dir: Path, summary: dict, cfg: RunConfig, world_size: int) -> str:
    """The end of a run's output: where its files are and the commands that use them."""
    prompt = cfg.train.sample_prompt
    # sample.py's default prompt is a newline; a multi-line prompt would not paste as one command line.
    prompt_flag = f" --prompt {shlex.quote(prompt)}" if prompt.strip() and "\n" not in prompt else ""
    more = 2 * cfg.train.max_iters
    further = f"  {faults.resume_command(run_dir, world_size)} --train.max_iters={more}   # train on to step {more} (it says what the learning rate does)"
    # A compare.py run (a budget design's one folder further down): trained on by hand, it would not be its draw.
    experiment = next((p for p in (run_dir.parent, run_dir.parent.parent) if (p / EXPERIMENT_FILE).is_file()), None)
    if experiment is not None:
        further = (
            f"  python compare.py {shlex.quote(str(experiment))}   # the report of the experiment this run is part of"
        )
    return "\n".join(
        [
            f"run folder:  {run_dir}  (config.json, metrics.jsonl, summary.json{', loss.png' * cfg.train.loss_plot})",
            f"best model:  {run_dir / BEST_CKPT}  (val loss {summary['best_val_loss']:.4f}); last: ckpt_last.pt",
            "next:",
            f"  python sample.py --run {shlex.quote(str(run_dir))}{prompt_flag} --top-k 50   # generate",
            further,
            "  python list_runs.py"
            + ("" if run_dir.parent == Path(TrainConfig.out_dir) else f" --out-dir {shlex.quote(str(run_dir.parent))}")
            + "   # every run side by side",
        ]
    )
