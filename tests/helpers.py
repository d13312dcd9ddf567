"""Helpers shared by the test modules: a small corpus, tiny-run arguments, stderr parsing.

Not a test module (pytest collects ``test_*.py`` only); imported as ``from helpers import ...``
because pytest puts the ``tests/`` folder on ``sys.path``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from training.runs import read_metrics

REPO = Path(__file__).resolve().parent.parent

VERSE = (
    "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\n"
    "JULIET:\nO Romeo, Romeo, wherefore art thou Romeo?\nDeny thy father and refuse thy name.\n\n"
)


# One [model] config per modern choice, and all of them together (the shape of configs/modern_cpu.toml),
# for tiny models of 2 heads (n_kv_head=1 is grouped-query attention with both heads on one key/value head).
MODEL_CHOICES = {
    "rope": dict(position="rope"),
    "rmsnorm": dict(norm="rmsnorm"),
    "qk-norm": dict(qk_norm=True),
    "swiglu": dict(mlp="swiglu"),
    "relu2": dict(mlp="relu2"),
    "gqa": dict(n_kv_head=1),
    "softcap": dict(logit_softcap=3.0),
    "modern": dict(position="rope", norm="rmsnorm", qk_norm=True, mlp="relu2", n_kv_head=1, logit_softcap=15.0),
}


def write_corpus(folder: Path) -> Path:
    """A small local text corpus (~30 KB) that the char tokenizer trains on in seconds."""
    path = Path(folder) / "verse.txt"
    path.write_text(VERSE * 150)
    return path


def tiny_args(tmp_path: Path, corpus: Path, *extra: str) -> list[str]:
    """CLI arguments for a tiny, fast run (char tokenizer, 2 layers, 32 wide) writing under tmp_path."""
    return [
        f"--data.source={corpus}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path / 'runs'}",
        "--model.n_layer=2",
        "--model.n_head=2",
        "--model.n_embd=32",
        "--model.block_size=32",
        "--train.batch_size=4",
        "--train.eval_iters=2",
        "--train.eval_interval=4",
        "--train.log_interval=1",
        "--train.warmup_iters=2",
        "--train.sample_tokens=0",
        "--train.device=cpu",
        *extra,  # CPU: the bit-exact resume checks need deterministic kernels
    ]


def tiny_compare_args(tmp_path: Path, max_iters: int | None = 6) -> list[str]:
    """compare.py flags for a tiny experiment ``exp`` on a local char corpus, everything under tmp_path
    (``max_iters`` None: no length, for ``--budgets``, which sets each run's own)."""
    path = tmp_path / "c.txt"
    path.write_text("ROMEO:\nWhat light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n\n" * 200)
    return [
        *("--config", "configs/debug.toml", "--name", "exp", f"--data.source={path}", "--data.tokenizer=char"),
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
        *([f"--train.max_iters={max_iters}"] if max_iters else []),
        *("--train.eval_interval=3", "--train.sample_tokens=0"),
    ]


def error_lines(stderr: str) -> list[str]:
    """Lines of ``stderr`` that mention an error (progress-bar redraws split into lines)."""
    return [line for line in stderr.replace("\r", "\n").splitlines() if "error" in line]


def error_line(capsys) -> str:
    """The one 'error: ...' line on captured stderr (progress bars may precede it), checked to be alone."""
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def train_rows(run_dir: Path) -> list[dict]:
    """The ``kind == "train"`` rows of a run's metrics.jsonl."""
    return [r for r in read_metrics(Path(run_dir) / "metrics.jsonl") if r["kind"] == "train"]


def loss_curve(run_dir: Path) -> list[tuple]:
    """(kind, step, losses) of every train and eval row: the run's maths, without timings."""
    keys = ("train_loss", "val_loss")
    return [
        (r["kind"], r["step"], tuple(r.get(k) for k in keys))
        for r in read_metrics(Path(run_dir) / "metrics.jsonl")
        if r["kind"] in ("train", "eval")
    ]


def train_cmd(*args: str) -> list[str]:
    """``python train.py ARGS`` as an argv list."""
    return [sys.executable, str(REPO / "train.py"), *args]


def run_train(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` to completion, output captured."""
    return subprocess.run(train_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=300, **kwargs)
