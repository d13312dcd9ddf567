"""Tokenize documents in order with a pool of worker processes: the engine of ``data/prepare.py``.

:func:`encoder` yields a function from ``(split, text)`` pieces to ``(split, ids, characters)``,
one per piece, in input order whatever the number of workers, so the token files never
depend on ``data.num_proc``.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import signal
import sys
from pathlib import Path

import numpy as np

from data.tokenizers import tokenizer_from_dict

MAX_CHUNK_DOCS = 256  # documents per task sent to a worker: amortises inter-process overhead on short documents

_WORKER: dict = {}  # this process's tokenizer, dtype and document delimiters (set by _init_worker)


def _init_worker(tok_dict: dict, search_dirs: list[str], dtype: str, prefix: list[int], suffix: str) -> None:
    """Pool initializer: build this worker's tokenizer once, from ``tokenizer.to_dict()``.

    Workers ignore SIGINT: Ctrl-C is handled once, by the parent, which saves progress.  SIGTERM
    and SIGHUP take their default action (a worker the pool replaces after the parent's stop
    handlers are installed would inherit them, and then ignore the pool's own terminate).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    _set_worker(tokenizer_from_dict(tok_dict, search_dirs=search_dirs), dtype, prefix, suffix)


def _set_worker(tok, dtype: str, prefix: list[int], suffix: str) -> None:
    _WORKER.update(tok=tok, dtype=np.dtype(dtype), prefix=np.asarray(prefix, dtype=dtype), suffix=suffix)


def _encode(piece: tuple[str, str]) -> tuple[str, np.ndarray, int]:
    """``(split, text)`` -> ``(split, ids, characters)``; a blank document gives no ids.

    ids = prefix + encode(text + suffix) as the token dtype (prefix/suffix are
    the document delimiters; both empty for the named and .txt sources).
    """
    split, text = piece
    w = _WORKER
    if not text.strip():
        return split, np.empty(0, dtype=w["dtype"]), 0
    ids = np.asarray(w["tok"].encode(text + w["suffix"]), dtype=w["dtype"])
    if w["prefix"].size:
        ids = np.concatenate([w["prefix"], ids])
    return split, ids, len(text)


def _encode_chunk(pieces: list[tuple[str, str]]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Encode several documents: (splits, token counts, character counts, all their ids concatenated).

    One array per chunk instead of one per document: far less pickling between
    the worker and the parent, which would otherwise limit a many-core pool.
    """
    out = [_encode(p) for p in pieces]
    counts = np.array([len(ids) for _, ids, _ in out], dtype=np.int64)
    chars = np.array([c for _, _, c in out], dtype=np.int64)
    ids = np.concatenate([ids for _, ids, _ in out]) if out else np.empty(0, dtype=_WORKER["dtype"])
    return [split for split, _, _ in out], counts, chars, ids


def _chunks(items, size: int):
    """Lists of ``size`` consecutive items (the last may be shorter), read lazily."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _pool_context():
    """fork on Linux (workers start in milliseconds and share the parent's imports), spawn elsewhere."""
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method)


@contextlib.contextmanager
def encoder(tok, search_dir: Path, dtype: np.dtype, prefix: list[int], suffix: str, num_proc: int, total: int | None):
    """Yield ``encode_all(pieces) -> iterator of (split, ids, characters)``, one per piece, in input order.

    ``num_proc > 1``: a ``multiprocessing`` Pool whose ``imap`` keeps the order
    (so the token files do not depend on the number of workers); its feeder
    reads the input as the workers take tasks, so a stream is never loaded
    whole; documents travel in chunks (see :func:`_encode_chunk`), sized from
    ``total`` (documents, if known) so that a few long documents still spread
    over all workers.  ``num_proc == 1``: :func:`_encode` in this process.
    """
    size = MAX_CHUNK_DOCS if total is None else max(1, min(MAX_CHUNK_DOCS, total // (16 * num_proc)))

    def unpack(results):
        for splits, counts, chars, ids in results:
            ends = np.cumsum(counts)
            for split, end, n, c in zip(splits, ends, counts, chars):
                yield split, ids[end - n : end], int(c)

    if num_proc == 1:
        _set_worker(tok, dtype.str, prefix, suffix)
        try:
            yield lambda pieces: map(_encode, pieces)  # no inter-process traffic to amortise: no chunks
        finally:
            _WORKER.clear()
        return
    args = (tok.to_dict(), [str(search_dir)], dtype.str, prefix, suffix)
    with _pool_context().Pool(num_proc, initializer=_init_worker, initargs=args) as pool:
        yield lambda pieces: unpack(pool.imap(_encode_chunk, _chunks(pieces, size)))
