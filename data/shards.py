"""Token shard files: the dtype rule, shard names, and a writer that stops and resumes cleanly.

A prepared split is one or more shard files ``<split>-00000.bin``,
``<split>-00001.bin``, ... of flat little-endian token ids (nanoGPT's format,
one file per shard), listed in the folder's ``meta.json`` with their token
counts and largest id.  A shard ends at a document boundary once it holds at
least ``shard_tokens`` tokens, so no document is split across two shards (a
document longer than ``shard_tokens`` makes one long shard).

Library module, used by ``data.prepare`` (writing) and ``data.loader`` (the dtype rule).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from core.errors import UserError

UINT16_VOCAB = 1 << 16  # a vocabulary of up to 65,536 ids fits uint16 (ids 0..65535)


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian dtype of a token file for ``vocab_size`` ids: ``<u2`` up to 65,536, else ``<u4``.

    uint16 halves disk and page-cache use for GPT-2's 50,257 ids (nanoGPT's
    choice); larger vocabularies (e.g. a char tokenizer over a huge alphabet)
    need uint32.  Raises UserError above 2**32 ids.
    """
    if vocab_size <= UINT16_VOCAB:
        return np.dtype("<u2")
    if vocab_size <= 1 << 32:
        return np.dtype("<u4")
    raise UserError(f"vocabulary of {vocab_size} tokens does not fit uint32 token files: use a smaller tokenizer")


def shard_name(split: str, index: int) -> str:
    """File name of shard ``index`` (0-based) of ``split``: ``train-00000.bin``."""
    return f"{split}-{index:05d}.bin"


class ResumeMismatch(Exception):
    """The files on disk do not match a saved writer state: the preparation must start over."""


class ShardWriter:
    """Appends one split's token ids to shard files of about ``shard_tokens`` tokens.

    The shard being filled is ``<name>.tmp``, opened for appending.  When it
    reaches ``shard_tokens`` tokens (checked after each document) it is
    flushed, fsync'ed and renamed to its final name, so a ``.bin`` file is
    always complete.  :meth:`state` captures the writer at a checkpoint (after
    :meth:`sync`); passing that state back reopens the same files, truncating
    anything written after the checkpoint.

    Attributes:
        shards: finished shards, ``[{"file", "tokens", "max_id"}, ...]``.
        tokens, max_id: size and largest id of the shard being filled (0, -1 when empty).
        documents, chars: documents and characters added to this split so far.
    """

    def __init__(self, folder: Path, split: str, dtype: np.dtype, shard_tokens: int, state: dict | None = None):
        """Open (or, with ``state``, reopen) ``split``'s shards in ``folder``.

        Raises ResumeMismatch if ``state`` names files that are missing or too short.
        """
        self.folder, self.split, self.dtype, self.shard_tokens = Path(folder), split, np.dtype(dtype), shard_tokens
        self.shards: list[dict] = []
        self.tokens, self.max_id, self.documents, self.chars = 0, -1, 0, 0
        self._f = None
        if state is not None:
            self._restore(state)

    def _path(self, index: int, tmp: bool = False) -> Path:
        return self.folder / (shard_name(self.split, index) + (".tmp" if tmp else ""))

    def _restore(self, state: dict) -> None:
        """Reopen the files of a checkpoint; see __init__."""
        try:
            self.shards = [dict(s) for s in state["shards"]]
            self.tokens, self.max_id = int(state["tokens"]), int(state["max_id"])
            self.documents, self.chars = int(state["documents"]), int(state["chars"])
        except (KeyError, TypeError, ValueError):
            raise ResumeMismatch(f"bad {self.split} writer state") from None
        for i, s in enumerate(self.shards):
            path = self._path(i)
            if (
                s.get("file") != path.name
                or not path.is_file()
                or path.stat().st_size != s["tokens"] * self.dtype.itemsize
            ):
                raise ResumeMismatch(f"shard {path.name} is missing or has the wrong size")
        k, want = len(self.shards), self.tokens * self.dtype.itemsize
        tmp, final = self._path(k, tmp=True), self._path(k)
        if not tmp.exists() and final.exists():
            # Killed between finishing shard k (rename) and recording it: the finished file
            # holds the checkpoint's tokens plus later ones; reopen it as the shard being filled.
            os.replace(final, tmp)
        if want:
            if not tmp.is_file() or tmp.stat().st_size < want:
                raise ResumeMismatch(f"{tmp.name} is missing or shorter than recorded")
            os.truncate(tmp, want)  # drop tokens written after the checkpoint
        else:
            tmp.unlink(missing_ok=True)

    def add(self, ids: np.ndarray, chars: int) -> bool:
        """Append one document's ids (1-D, already of ``dtype``); True if that finished a shard."""
        if self._f is None:
            self._f = open(self._path(len(self.shards), tmp=True), "ab")  # noqa: SIM115 (open across calls)
        self._f.write(np.ascontiguousarray(ids, dtype=self.dtype).data)
        self.tokens += int(ids.size)
        self.max_id = max(self.max_id, int(ids.max()))
        self.documents += 1
        self.chars += chars
        if self.tokens >= self.shard_tokens:
            self._finish_shard()
            return True
        return False

    def sync(self) -> None:
        """Flush and fsync the shard being filled, so a checkpoint's state is on disk."""
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())

    def _finish_shard(self) -> None:
        """Close the shard being filled and give it its final name."""
        self.sync()
        self._f.close()
        self._f = None
        index = len(self.shards)
        os.replace(self._path(index, tmp=True), self._path(index))
        self.shards.append({"file": shard_name(self.split, index), "tokens": self.tokens, "max_id": self.max_id})
        self.tokens, self.max_id = 0, -1

    def finish(self) -> list[dict]:
        """Finish the last (possibly short) shard and return every shard of the split."""
        if self.tokens:
            self._finish_shard()
        elif self._f is not None:
            self._f.close()
            self._f = None
        self._path(len(self.shards), tmp=True).unlink(missing_ok=True)
        return self.shards

    def close(self) -> None:
        """Close the open file without finishing the shard (on an error; the state stays resumable)."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def state(self) -> dict:
        """JSON-able state for a checkpoint (call :meth:`sync` first)."""
        return {
            "shards": [dict(s) for s in self.shards],
            "tokens": self.tokens,
            "max_id": self.max_id,
            "documents": self.documents,
            "chars": self.chars,
        }

    @property
    def total_tokens(self) -> int:
        """Tokens written to this split so far, finished shards and the one being filled."""
        return sum(s["tokens"] for s in self.shards) + self.tokens
