"""Run folders and the plumbing shared by ``train.py``, ``sample.py`` and ``bench.py``.

A run folder ``runs/<run-name>/`` holds everything needed to inspect, resume or sample
from a run: ``config.json`` (resolved config), ``env.json`` (git commit, library versions,
hardware), ``metrics.jsonl`` (one JSON object per log/eval step), ``tokenizer.json``
(+ ``gpt2.tiktoken`` for the BPE tokenizer), ``ckpt_last.pt``, ``ckpt_best.pt`` and, once
the run finishes, ``summary.json`` (final and best val loss, unigram baseline, tokens/s).

This module also picks the device and autocast dtype and provides the experiment loggers
(:class:`MetricsLog`, always on, local JSONL; a wandb logger that is a no-op when wandb is
disabled).  The guards a long run needs (lock, stop signals, path checks) are in ``faults.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from config import RunConfig
from data.tokenizers import atomic_write_bytes, load_tokenizer
from errors import UserError, first_line
from model.checkpoint import load_checkpoint, load_model_state
from model.gpt import GPT

REPO_ROOT = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- device


def pick_device(name: str = "auto") -> torch.device:
    """``'auto'`` -> cuda if available, else mps, else cpu; other names are checked to exist.

    Raises :class:`UserError` if the requested device is not available.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but CUDA is not available: use --train.device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError("device 'mps' requested but MPS is not available: use --train.device=cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    return device


def keep_freed_memory_on_cpu() -> bool:
    """Stop glibc from handing large freed blocks back to the OS (Linux only); True if applied.

    glibc serves allocations above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
    and unmaps them on free, so every training step page-faults its big tensors in anew --
    with a 50257-token vocabulary the logits alone are ``B*T*vocab_size*4`` bytes (400 MiB at
    B=16, T=128).  ``mallopt(M_MMAP_MAX, 0)`` plus a high ``M_TRIM_THRESHOLD`` keeps that memory
    in the heap for reuse (glibc manual, "Malloc Tunable Parameters").  Measured with
    ``python bench.py`` on a 2-core CPU: 1144 -> 725 ms/iter, at ~0.7 GiB more peak RSS.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # from glibc's malloc.h
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))
    except (OSError, AttributeError):  # not glibc (e.g. musl): leave the allocator alone
        return False


def autocast_dtype(device: torch.device, dtype: str) -> torch.dtype | None:
    """The autocast dtype for ``dtype`` ('auto' -> bf16 on CUDA with bf16 support, else None = fp32)."""
    if dtype == "float32":
        return None
    if dtype == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """A ``torch.autocast`` context for ``dtype``, or a null context for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def peak_memory_mib(device: torch.device) -> float:
    """Peak memory so far in MiB: CUDA's max allocated bytes, else the process's max RSS (Linux: KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource  # POSIX only; imported here so the module still loads elsewhere

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------- run folder


def environment(device: torch.device) -> dict:
    """What a reader needs to reproduce a run: git commit, versions, hardware (modded-nanogpt style)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
        dirty = bool(subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
            capture_output=True, text=True, timeout=10,
        ).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("numpy", "tiktoken", "datasets", "tqdm", "wandb"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # an optional library that is absent or broken is recorded as such
            versions[mod] = None
    env = {
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": versions,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "argv": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return env


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically, so a crash never leaves half a file (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj) -> None:
    """Write JSON atomically (temp file + rename), so a crash never leaves half a file."""
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


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


def read_json(path: Path, what: str) -> dict:
    """Read a JSON file or raise :class:`UserError` naming it."""
    if not path.is_file():
        raise UserError(f"{what} {path} does not exist: is this a tinygpt run folder?")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {path} is not valid JSON ({e}): restore it from the run's checkpoint") from None


def load_run_config(run_dir: Path) -> RunConfig:
    """The resolved :class:`RunConfig` saved in ``run_dir/config.json``."""
    d = read_json(run_dir / "config.json", "run config")
    return RunConfig.from_dict(d, str(run_dir / "config.json"))


class MetricsLog:
    """Append-only ``metrics.jsonl``: one JSON object per line, flushed at once.

    On resume, rows past the checkpoint's step (written after the last checkpoint by a run
    that then died) are dropped, so the file reads as if the run had never stopped.
    """

    def __init__(self, path: Path, resume_step: int | None = None) -> None:
        self.path = path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines() if _kept_on_resume(line, resume_step)]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        self._f = open(path, "a")

    def log(self, row: dict) -> None:
        """Append one row (a JSON object) and flush it to disk at once.

        NaN and infinities become null: JSON has no such numbers (``json.dumps`` would write
        a bare ``NaN`` that jq and JavaScript reject).
        """
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self._f.write(json.dumps(clean, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file (again is fine)."""
        self._f.close()

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _kept_on_resume(line: str, resume_step: int) -> bool:
    """Whether a metrics line stays when a run resumes from ``resume_step``.

    Dropped: rows past the checkpoint, a torn or blank line (a crash mid-write), and "stop"
    rows, which mark where a segment ended: the file then reads as one uninterrupted run.
    """
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and row.get("step", 0) <= resume_step and row.get("kind") != "stop"


def read_metrics(path: Path) -> list[dict]:
    """All rows of a ``metrics.jsonl`` file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


class NullLogger:
    """Stands in for wandb when it is disabled, and for every log on ranks > 0: each call does nothing."""

    def log(self, row: dict, step: int | None = None) -> None:
        """Do nothing."""

    def finish(self) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


class WandbLogger:
    """Thin wrapper over a wandb run; created only when ``wandb.mode`` is online or offline."""

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
                mode=cfg.wandb.mode,
                id=(run_dir / ".wandb_id").read_text().strip() if resume and (run_dir / ".wandb_id").exists() else None,
                resume="allow" if resume else None,
            )
        write_text_atomic(run_dir / ".wandb_id", self._run.id)

    def log(self, row: dict, step: int) -> None:
        """Send one row of metrics to wandb at optimizer step ``step`` (missing and non-finite values left out)."""
        self._run.log({k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and not math.isfinite(v))},
                      step=step)

    def finish(self) -> None:
        """Flush and close the wandb run."""
        self._run.finish()


def make_logger(cfg: RunConfig, run_dir: Path, run_name: str, resume: bool):
    """A :class:`WandbLogger` if wandb is on, else a :class:`NullLogger`."""
    if cfg.wandb.mode == "disabled":
        return NullLogger()
    try:
        return WandbLogger(cfg, run_dir, run_name, resume)
    except Exception as e:  # wandb raises many types (auth, network, install); all mean "cannot log"
        first = first_line(e, 160)
        raise UserError(
            f"wandb could not start in {cfg.wandb.mode} mode ({first}): run `wandb login`, "
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
    import matplotlib

    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir / "metrics.jsonl")
    train = [(r["step"], r["train_loss"]) for r in rows if r["kind"] == "train"]
    evals = [(r["step"], r["val_loss"]) for r in rows if r["kind"] == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
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
    plt.close(fig)
    atomic_write_bytes(run_dir / "loss.png", buf.getvalue())
    return run_dir / "loss.png"


def load_run(run_dir: Path, which: str, device: torch.device) -> tuple[GPT, object, dict]:
    """Load ``(model, tokenizer, checkpoint)`` from a run folder (``which`` is 'best' or 'last').

    Raises :class:`UserError` if the folder, its config, tokenizer or checkpoint is missing,
    corrupt, or disagrees with the others.
    """
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist: give --run runs/<run-name>")
    cfg = load_run_config(run_dir)
    tokenizer = load_tokenizer(run_dir)
    path = run_dir / f"ckpt_{which}.pt"
    if which == "best" and not path.exists() and (run_dir / "ckpt_last.pt").exists():
        path = run_dir / "ckpt_last.pt"
    ckpt = load_checkpoint(path, map_location=device)
    if ckpt.get("tokenizer") != tokenizer.to_dict():
        raise UserError(f"{path} was trained with another tokenizer than {run_dir / 'tokenizer.json'}: restore the run's tokenizer.json")
    model = GPT(cfg.model)
    load_model_state(model, ckpt, source=str(path))
    return model.to(device).eval(), tokenizer, ckpt
