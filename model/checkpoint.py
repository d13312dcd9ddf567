"""Saving and loading checkpoints safely.

A checkpoint is a ``torch.save`` of tensors and plain data only (dicts, lists, numbers,
strings), so it loads with ``torch.load(weights_only=True)`` and a file carrying a pickled
object is refused rather than executed.  Files are written atomically (temp file, fsync,
rename), so a crash mid-write never replaces a good checkpoint with a half-written one.

Used by ``train.py`` (save, resume), ``sample.py`` and ``bench.py`` (load)::

    from model.checkpoint import save_checkpoint, load_checkpoint, load_model_state
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from errors import UserError
from model.gpt import GPT

FORMAT = "tinygpt-checkpoint-1"


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write ``payload`` (tensors and plain data) to ``path`` atomically.

    The bytes go to a temp file in the same folder, are fsync'ed, then ``os.replace``'d over
    ``path`` (atomic on POSIX), so readers see either the old file or the complete new one.
    """
    path = Path(path)
    payload = {"format": FORMAT, **payload}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint dict with ``torch.load(weights_only=True)``.

    Raises :class:`UserError` when the file is missing, truncated or corrupt, carries
    pickled objects (refused, never executed), or is not a tinygpt checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist: check the run folder, or train one with train.py")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for bad files
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"checkpoint {path} could not be loaded safely ({first_line[:160]}): "
            "it is corrupt or not a tinygpt checkpoint; use another checkpoint (ckpt_best.pt / ckpt_last.pt)"
        ) from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a tinygpt checkpoint (format {FORMAT!r} expected)")
    return ckpt


def load_model_state(model: GPT, ckpt: dict, source: str = "checkpoint") -> None:
    """Load ``ckpt['model']`` into ``model``, checking the embedding tie first.

    PyTorch would silently load an untied checkpoint into a tied model (both keys copy into
    the one shared tensor, the last one wins), so a ``tie_embeddings`` mismatch is an error.
    Afterwards a tied model's head still *is* its embedding.
    Raises :class:`UserError` on a tie mismatch or on missing / unexpected / misshapen keys.
    """
    want = model.config.tie_embeddings
    have = ckpt.get("tie_embeddings")
    if have is not want:
        raise UserError(
            f"{source} has tie_embeddings={have} but the model has tie_embeddings={want}: "
            f"set --model.tie_embeddings={str(have).lower()} to match the checkpoint"
        )
    try:
        model.load_state_dict(ckpt["model"], strict=True)
    except (RuntimeError, KeyError) as e:
        raise UserError(
            f"{source} does not fit this model ({str(e).splitlines()[0][:200]}): "
            "use the model config the checkpoint was trained with"
        ) from e
    if want:
        assert model.lm_head.weight is model.wte.weight, "tied weights came apart while loading"
