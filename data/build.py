"""One resumable (re)build of a prepared folder: tokenize a source's documents into shards, then swap it in.

:func:`data.prepare.prepare_from_config` decides whether a folder must be built and holds its
lock; :class:`Build` does the work inside ``<cache-dir>/.<name>.partial/``: a pool of workers
tokenizes the documents in order, each shard is written whole, and ``progress.json`` records how
many documents are done, so a rerun after a crash or Ctrl-C continues from the last finished
shard.  :meth:`Build.finish` writes ``meta.json`` and swaps the folder in atomically.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from core.errors import Interrupted, UserError
from core.files import atomic_write_bytes, swap_in_folder
from core.signals import StopSignals
from data.bpe import check_trained_size
from data.config import DataConfig
from data.encode import encoder
from data.hf_source import DatasetSource
from data.shards import ResumeMismatch, ShardWriter, token_dtype
from data.sources import char_vocabulary_text
from data.tokenizers import build_tokenizer, load_tokenizer, save_tokenizer

SPLITS = ("train", "val")
PROGRESS_FILE = "progress.json"
# Document delimiters for many-document sources (hf, jsonl, parquet): gpt2 puts <|endoftext|> before each
# document (GPT-2's and nanoGPT's convention); char and bpe:N, which have no special token, end each with a blank line.
CHAR_DOC_SUFFIX = "\n\n"


def _load_progress(partial: Path, want: dict) -> dict | None:
    """The partial folder's progress record if it was made with exactly ``want``, else None."""
    try:
        progress = json.loads((partial / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return progress if isinstance(progress, dict) and progress.get("want") == want else None


def _clear(folder: Path) -> None:
    """Delete everything inside ``folder``, which exists afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in folder.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


class Build:
    """One (re)build of a prepared folder inside its partial folder, resumable at shard boundaries."""

    def __init__(self, src, cfg: DataConfig, want: dict, partial: Path, force: bool) -> None:
        self.src, self.cfg, self.want, self.partial = src, cfg, want, partial
        progress = None if force else _load_progress(partial, want)
        self.writers: dict[str, ShardWriter] = {}
        if progress is not None:
            try:
                self.tok = load_tokenizer(partial)
                dtype = token_dtype(self.tok.vocab_size)
                self.writers = {
                    s: ShardWriter(partial, s, dtype, cfg.shard_tokens, progress["splits"][s]) for s in SPLITS
                }
                self.consumed = int(progress["consumed"])
            except (ResumeMismatch, UserError, KeyError, TypeError, ValueError) as e:
                print(f"note: cannot resume the preparation in {partial} ({e}): starting over", file=sys.stderr)
                progress = None
        if progress is None:
            _clear(partial)
            try:
                self.tok = self._new_tokenizer()
                save_tokenizer(self.tok, partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)  # nothing done yet: leave no folder behind
                raise
            dtype = token_dtype(self.tok.vocab_size)
            self.writers = {s: ShardWriter(partial, s, dtype, cfg.shard_tokens) for s in SPLITS}
            self.consumed = 0
        else:
            done = sum(len(w.shards) for w in self.writers.values())
            print(
                f"resuming the preparation in {partial}: {self.consumed:,} documents done, "
                f"{done} finished shard{'s' if done != 1 else ''} kept",
                file=sys.stderr,
                flush=True,
            )
        self.dtype = dtype
        self.saved = self.consumed  # documents covered by progress.json
        self.in_flight = False  # a document is being written (the writers and `consumed` may disagree)

    def _new_tokenizer(self):
        """The tokenizer; char's vocabulary is every character of the corpus (plus the delimiter), bpe:N is
        trained on the train split's pieces (one pass over a streamed source before the tokenizing pass)."""
        if self.cfg.tokenizer.startswith("bpe:"):
            train = (text for split, text in self.src.pieces(self.cfg.val_fraction) if split == "train")
            tok = build_tokenizer(self.cfg.tokenizer, train_texts=train)
            note = check_trained_size(self.cfg.tokenizer, tok.vocab_size, self.cfg.allow_smaller_vocab, self.cfg.source)
            if note:  # before the tokenizing pass: a refused size costs only the merges' training
                print(note, file=sys.stderr, flush=True)
            return tok
        if self.cfg.tokenizer != "char":
            return build_tokenizer(self.cfg.tokenizer)
        extra = CHAR_DOC_SUFFIX if isinstance(self.src, DatasetSource) else "\n"  # split_parts ends pieces in one
        return build_tokenizer("char", text=char_vocabulary_text(self.src, extra))

    def checkpoint(self) -> None:
        """Make the writers' files durable, then record them and the documents done in progress.json."""
        for w in self.writers.values():
            w.sync()
        record = {
            "want": self.want,
            "consumed": self.consumed,
            "splits": {s: w.state() for s, w in self.writers.items()},
            "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        atomic_write_bytes(self.partial / PROGRESS_FILE, (json.dumps(record, indent=1) + "\n").encode())
        self.saved = self.consumed

    def run(self) -> None:
        """Tokenize every document not yet done, in order, into the shard writers."""
        many = isinstance(self.src, DatasetSource)
        prefix = [self.tok.eot_token] if many and self.cfg.tokenizer == "gpt2" else []
        suffix = CHAR_DOC_SUFFIX if many and self.cfg.tokenizer != "gpt2" else ""
        bar = None
        try:
            pieces = self.src.pieces(self.cfg.val_fraction)
            total = len(pieces) if isinstance(pieces, list) else self.src.total()
            num_proc = self.cfg.num_proc or os.cpu_count() or 1
            if total is not None:
                num_proc = max(1, min(num_proc, total - self.consumed))  # no idle workers on a small corpus
            if self.consumed == 0:
                self.checkpoint()  # progress.json marks the folder as resumable from the start
            bar = tqdm(
                total=total,
                initial=self.consumed,
                unit="doc",
                leave=False,
                dynamic_ncols=True,
                desc=f"tokenizing ({self.tok.name}, {num_proc} process{'es' if num_proc > 1 else ''})",
            )
            with (  # the workers start before the handlers: they must not inherit them
                encoder(self.tok, self.partial, self.dtype, prefix, suffix, num_proc, total) as encode_all,
                StopSignals("stopping after this document and keeping the progress") as stop,
            ):
                for split, ids, chars in encode_all(itertools.islice(pieces, self.consumed, None)):
                    # A document is in the files and counted, or neither: a stop waits for the pair.
                    self.in_flight = True
                    finished = ids.size > 0 and self.writers[split].add(ids, chars)
                    self.consumed += 1
                    self.in_flight = False
                    bar.update()
                    if finished:
                        self.checkpoint()
                    if stop.received:
                        raise Interrupted(stop.received, "stopped on request")
        except BaseException as e:
            if bar is not None:
                bar.close()  # before the messages below, which would otherwise share its line
                bar = None
            kept = self._save_on_error(e)
            if isinstance(e, Interrupted):  # exit 128 + signum, as training's stop does
                raise Interrupted(e.signum, f"{signal.Signals(e.signum).name} received: {kept}") from None
            raise
        finally:
            if bar is not None:
                bar.close()

    def _save_on_error(self, error: BaseException) -> str:
        """Keep what is done for a rerun (or drop a build that has nothing worth keeping); returns what was kept."""
        try:
            # Stopped inside a document's write (a second Ctrl-C, a full disk), the writers may count it
            # while `consumed` does not: the last checkpoint stands, and a rerun truncates past it.
            if self.consumed > self.saved and not self.in_flight:
                self.checkpoint()
        except Exception as e:  # noqa: BLE001 (a second failure, e.g. a full disk: the last checkpoint stands)
            print(
                f"note: could not record the latest progress ({type(e).__name__}); the last finished shard is kept",
                file=sys.stderr,
            )
        for w in self.writers.values():
            w.close()
        if self.saved == 0:
            shutil.rmtree(self.partial, ignore_errors=True)
            return "preparation stopped before any document was done; nothing is kept"
        kept = (
            f"preparation stopped after {self.saved:,} documents; progress is kept in {self.partial}: "
            "rerun the same command (without --force) to continue"
        )
        if not isinstance(error, UserError | Interrupted):  # those print their own line
            print(kept.replace("documents;", f"documents ({type(error).__name__});", 1), file=sys.stderr)
        return kept

    def _grow_hint(self, split: str) -> str:
        """What grows an empty ``split``: the val share moves text between the splits; hf: names splits."""
        if self.cfg.val_split and split == "val":
            return f"name a split with text in it as --data.val_split (not {self.cfg.val_split!r})"
        share = "raise --data.val_fraction" if split == "val" else "lower --data.val_fraction"
        named = (
            ", or name a split with --data.val_split" if self.cfg.source.startswith("hf:") and split == "val" else ""
        )
        return f"use a bigger corpus or {share}{named}"

    def finish(self, folder: Path, t0: float) -> None:
        """Close the last shards, write meta.json and swap the partial folder in as ``folder``."""
        shards = {s: w.finish() for s, w in self.writers.items()}
        for split, w in self.writers.items():
            if w.total_tokens == 0:
                shutil.rmtree(self.partial, ignore_errors=True)
                raise UserError(
                    f"the {split} split of '{self.cfg.source}' is empty ({w.documents} documents with text): "
                    f"{self._grow_hint(split)}"
                )
        splits = {
            s: {"tokens": w.total_tokens, "documents": w.documents, "chars": w.chars, "shards": shards[s]}
            for s, w in self.writers.items()
        }
        meta = {
            **self.want,
            "source": self.cfg.source,
            "vocab_size": self.tok.vocab_size,
            "dtype": self.dtype.name,  # little-endian on disk whatever the machine ('<u2' / '<u4')
            "val_fraction": self.cfg.val_fraction,
            "train_tokens": splits["train"]["tokens"],
            "val_tokens": splits["val"]["tokens"],
            "train_chars": splits["train"]["chars"],
            "val_chars": splits["val"]["chars"],
            "documents": splits["train"]["documents"] + splits["val"]["documents"],
            **self.src.describe(),
            "splits": splits,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        atomic_write_bytes(self.partial / "meta.json", (json.dumps(meta, indent=2) + "\n").encode())
        (self.partial / PROGRESS_FILE).unlink()
        os.chmod(self.partial, 0o755)
        swap_in_folder(self.partial, folder)
        n = {s: len(shards[s]) for s in SPLITS}
        print(
            f"prepared {folder}: train {meta['train_tokens']:,} tokens in {n['train']} shard{'s' * (n['train'] > 1)}, "
            f"val {meta['val_tokens']:,} tokens in {n['val']} shard{'s' * (n['val'] > 1)} ({self.tok.name}, "
            f"vocab {self.tok.vocab_size:,}, {self.dtype.name}, {meta['documents']:,} "
            f"document{'s' if meta['documents'] != 1 else ''}) in {time.perf_counter() - t0:.1f}s"
        )
