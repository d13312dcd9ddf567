"""Saving and loading checkpoints safely.

A checkpoint is a ``torch.save`` of tensors and plain data only (dicts, lists, numbers,
strings), so it loads with ``torch.load(weights_only=True)`` and a file carrying a pickled
object is refused rather than executed.  Files are written atomically (temp file, fsync,
rename), so a crash mid-write never replaces a good checkpoint with a half-written one.
Each file carries a sha256 digest of its contents, checked on load: ``torch.load`` alone
happily returns tensors whose bytes were flipped on disk.

Used by ``train.py`` (save, resume), ``sample.py`` and ``bench.py`` (load)::

    from model.checkpoint import save_checkpoint, load_checkpoint, load_model_state
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import torch

from core.errors import UserError, first_line
from core.files import atomic_write
from model.gpt import GPT

FORMAT = "tinygpt-checkpoint-2"  # 2 adds the "sha256" content digest
READABLE_FORMATS = ("tinygpt-checkpoint-1", FORMAT)  # format 1 files (no digest) still load


def payload_digest(payload: dict) -> str:
    """sha256 (hex) over every key, tensor (dtype, shape, bytes) and value of ``payload``.

    The walk is in the dicts' insertion order, which ``torch.save`` / ``torch.load`` keep;
    the ``"sha256"`` key itself is skipped.  Tensors are hashed on the CPU.
    """
    h = hashlib.sha256()

    def walk(obj) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(obj.shape)}".encode())
            h.update(memoryview(t.view(torch.uint8).numpy()))  # raw bytes, whatever the dtype (bf16 too)
        elif isinstance(obj, dict):
            h.update(b"{")
            for key, value in obj.items():
                if key == "sha256" and obj is payload:
                    continue
                h.update(repr(key).encode() + b":")
                walk(value)
            h.update(b"}")
        elif isinstance(obj, (list, tuple)):
            h.update(b"[")
            for value in obj:
                walk(value)
            h.update(b"]")
        else:  # str, int, float (repr round-trips exactly), bool, None
            h.update(f"{type(obj).__name__}:{obj!r};".encode())

    walk(payload)
    return h.hexdigest()


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write ``payload`` (tensors and plain data) to ``path`` atomically.

    Through :func:`core.files.atomic_write` (temp file, fsync, rename, fsync of the folder):
    readers see either the old file or the complete new one, even after a power cut.  On any
    failure (a full disk: ``OSError`` ENOSPC) ``path`` is untouched and the error propagates.
    """
    path = Path(path)
    payload = {"format": FORMAT, **payload}
    payload["sha256"] = payload_digest(payload)
    atomic_write(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint dict with ``torch.load(weights_only=True)``.

    Raises :class:`UserError` when the file is missing, truncated or corrupt, carries
    pickled objects (refused, never executed), is not a tinygpt checkpoint, or its contents
    do not match the sha256 digest written with them (bytes changed on disk).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist: check the run folder, or train one with train.py")
    try:
        with warnings.catch_warnings():  # a damaged file can make torch warn first: one line is enough
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for bad files
        raise UserError(
            f"checkpoint {path} could not be loaded safely ({first_line(e, 160)}): "
            "it is corrupt or not a tinygpt checkpoint; use another checkpoint (ckpt_best.pt / ckpt_last.pt)"
        ) from e
    if not isinstance(ckpt, dict) or ckpt.get("format") not in READABLE_FORMATS:
        raise UserError(
            f"{path} is not a tinygpt checkpoint (format {FORMAT!r} expected): use a file written by train.py"
        )
    # Checked whenever a digest is present (so relabelling a file as format 1 does not skip it);
    # only format 1 files, written before digests existed, may lack one.
    if ("sha256" in ckpt or ckpt["format"] != READABLE_FORMATS[0]) and ckpt.get("sha256") != payload_digest(ckpt):
        raise UserError(
            f"checkpoint {path} fails its sha256 check (its bytes changed after it was written): "
            "it is corrupt or was tampered with; use another checkpoint (ckpt_best.pt / ckpt_last.pt)"
        )
    return ckpt


_LOAD_FIX = (
    ": load it with the model config and the code it was trained with (the run's config.json, and the "
    "git_commit in its env.json)"
)


def _state_mismatch(model: GPT, ckpt: dict, error: Exception) -> str:
    """What does not fit, in one line: the parameters the checkpoint lacks, those the model lacks, and those of
    another shape (each list cut at 4 names); PyTorch's first line when none of these is the cause."""
    state = ckpt.get("model") if isinstance(ckpt.get("model"), dict) else {}
    own = model.state_dict()
    parts = []
    for what, names in (
        ("missing from the checkpoint", sorted(set(own) - set(state))),
        ("not in this model", sorted(set(state) - set(own))),
        (
            "of another shape",
            sorted(k for k in set(own) & set(state) if getattr(state[k], "shape", None) != own[k].shape),
        ),
    ):
        if names:
            parts.append(f"{what}: {', '.join(names[:4])}{f' and {len(names) - 4} more' if len(names) > 4 else ''}")
    return "; ".join(parts) or first_line(error)


def load_model_state(model: GPT, ckpt: dict, source: str = "checkpoint", fix: str | None = None) -> None:
    """Load ``ckpt['model']`` into ``model``, checking the embedding tie first.

    PyTorch would silently load an untied checkpoint into a tied model (both keys copy into
    the one shared tensor, the last one wins), so a ``tie_embeddings`` mismatch is an error.
    Afterwards a tied model's head still *is* its embedding.
    ``fix`` is the advice a tie mismatch ends with (by default: set ``--model.tie_embeddings``).
    Raises :class:`UserError` on a tie mismatch, on a checkpoint labelled tied whose ``wte`` and
    ``lm_head`` matrices differ, or on missing / unexpected / misshapen keys.
    """
    want = model.tied  # after a tie-then-untie switch the model is untied though its config began tied
    have = ckpt.get("tie_embeddings")
    if not isinstance(have, bool):
        raise UserError(
            f"{source} does not say whether its embedding and head are tied: it is not a tinygpt checkpoint"
        )
    if have is not want:
        raise UserError(
            f"{source} has tie_embeddings={str(have).lower()} but the model has tie_embeddings={str(want).lower()}: "
            + (fix or f"set --model.tie_embeddings={str(have).lower()} to match the checkpoint")
        )
    state = ckpt.get("model")
    if want and isinstance(state, dict):
        # A tied state dict holds the one matrix under both names.  A file labelled tied whose two
        # matrices differ (hand-made, or from another tool) would load with the head's silently
        # winning, so it is refused: the label alone is not trusted.
        wte, head = state.get("wte.weight"), state.get("lm_head.weight")
        if (
            isinstance(wte, torch.Tensor)
            and isinstance(head, torch.Tensor)
            and not (wte.shape == head.shape and torch.equal(wte, head))
        ):
            raise UserError(
                f"{source} says tie_embeddings=true but its wte.weight and lm_head.weight differ: "
                "it is not a tied checkpoint; load it with --model.tie_embeddings=false after relabelling it untied"
            )
    try:
        model.load_state_dict(ckpt["model"], strict=True)
    except (RuntimeError, KeyError) as e:
        raise UserError(f"{source} does not fit this model ({_state_mismatch(model, ckpt, e)}){_LOAD_FIX}") from e
    if want:
        assert model.lm_head.weight is model.wte.weight, "tied weights came apart while loading"
