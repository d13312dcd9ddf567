"""Many-document corpora read with Hugging Face ``datasets``: ``hf:<id or folder>``, ``.jsonl``, ``.parquet``.

:class:`DatasetSource` streams the documents of a hub dataset, a local dataset folder or local
JSON-lines / Parquet files in a fixed order, val being a named split or every M-th document;
:func:`data.sources.resolve_source` picks it for such a source.  ``datasets`` is imported only
when one is used (it takes about a second).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from core.errors import UserError, first_line
from data.corpus import holdout_period, safe_name, short_hash, slug

HF_PREFIX = "hf:"
# Suffix -> `datasets` builder for local many-document files.
FILE_BUILDERS = {".jsonl": "json", ".parquet": "parquet"}
# Rows fetched per `datasets` batch: large enough to amortise Arrow -> Python conversion.
ROWS_PER_BATCH = 1024


def _innermost(error: BaseException) -> str:
    """``Type: first line`` of the deepest cause of ``error`` (datasets wraps reader errors)."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


@contextlib.contextmanager
def _hub_cache_in(folder: Path):
    """Point huggingface_hub's own file cache (dataset cards, xet chunks) into ``folder`` for a while.

    ``load_dataset(cache_dir=...)`` covers the dataset files, but the hub client
    downloads the dataset card through its global cache (``~/.cache/huggingface``),
    read from these module constants at call time.  Restored on exit.
    """
    import huggingface_hub.constants as hc

    saved = {name: getattr(hc, name) for name in ("HF_HUB_CACHE", "HF_XET_CACHE") if hasattr(hc, name)}
    try:
        for name in saved:
            setattr(hc, name, str(folder / name.lower()))
        yield
    finally:
        for name, value in saved.items():
            setattr(hc, name, value)


class DatasetSource:
    """Many documents read with Hugging Face ``datasets``: ``hf:<id or folder>``, ``.jsonl``, ``.parquet``.

    Args:
        source: the source string (``hf:...`` or a local path).
        kind: ``"hf"``, ``"jsonl"`` or ``"parquet"``.
        files: for jsonl/parquet, the files in read order (None for hf).
        subset, split, val_split, text_field, streaming: see :class:`data.config.DataConfig`.
        hf_cache: ``cache_dir`` given to ``datasets`` (``<data cache>/hf``).

    Attributes:
        name: the hub id or local folder (hf), else the path.
        is_hub: True for a hub id (not a local folder): a finished prepared
            folder is then reused without contacting the hub (``--force`` refreshes).
        slug: the prepared folder's name stem.
    """

    def __init__(
        self,
        source: str,
        kind: str,
        files: list[Path] | None,
        subset: str,
        split: str,
        val_split: str,
        text_field: str,
        streaming: bool,
        hf_cache: Path,
    ) -> None:
        self.source, self.kind, self.files = source, kind, files
        self.subset, self.split, self.val_split = subset, split, val_split
        self.text_field, self.streaming, self.hf_cache = text_field, streaming, Path(hf_cache)
        self._builder = None
        if kind == "hf":
            self.name = source[len(HF_PREFIX) :]
            local = Path(self.name).expanduser()
            self.is_hub = not local.is_dir()
            readable = self.name if self.is_hub else local.resolve().name
            ident = self.name if self.is_hub else str(local.resolve())
            self.slug = f"hf-{safe_name(readable)}{'-' + safe_name(subset) if subset else ''}-{short_hash(ident + '|' + subset)}"
        else:
            self.name = source
            self.is_hub = False
            self.slug = slug(source)

    @property
    def is_remote(self) -> bool:
        """Fetched over the network (a hub id): a finished prepared folder is reused without it."""
        return self.is_hub

    # ------------------------------------------------------------------ loading

    def _load_builder(self):
        """``datasets.load_dataset_builder`` for this source (once), with one-line errors.

        This is the first half of ``datasets.load_dataset`` (which is
        ``load_dataset_builder`` followed by ``as_streaming_dataset`` or
        ``download_and_prepare`` + ``as_dataset``): keeping the builder lets us
        fingerprint the exact data files (hub files carry their commit) and open
        two splits from one hub lookup.
        """
        if self._builder is not None:
            return self._builder
        import datasets  # slow import (~1 s): only when such a source is used

        self.hf_cache.mkdir(parents=True, exist_ok=True)
        subset = f" subset '{self.subset}'" if self.subset else ""
        try:
            with _hub_cache_in(self.hf_cache):
                if self.kind == "hf":
                    path = self.name if self.is_hub else str(Path(self.name).expanduser().resolve())
                    builder = datasets.load_dataset_builder(
                        path, name=self.subset or None, cache_dir=str(self.hf_cache)
                    )
                else:
                    builder = datasets.load_dataset_builder(
                        FILE_BUILDERS[f".{self.kind}"],
                        data_files=[str(f) for f in self.files],
                        cache_dir=str(self.hf_cache),
                    )
        except ConnectionError as e:  # datasets turns every failed hub lookup into the builtin ConnectionError
            reason = str(e).split(" on the Hub ")[-1].strip("() ") or type(e).__name__
            raise UserError(
                f"cannot reach the Hugging Face hub for dataset '{self.name}' ({reason}): on a machine with "
                f"internet run `hf download {self.name} --repo-type dataset --local-dir <folder>`, then use "
                "--data.source=hf:<folder>"
            ) from None
        except FileNotFoundError:
            raise UserError(
                f"dataset '{self.name}' is neither a local folder nor a dataset on the Hugging Face hub: "
                "check the name (hub ids look like owner/name)"
            ) from None
        except ValueError as e:  # e.g. "BuilderConfig 'x' not found. Available: [...]"
            first = first_line(e, limit=10_000)
            raise UserError(f"cannot load dataset '{self.name}'{subset}: {first}: check --data.subset") from None
        self._builder = builder
        return builder

    def _splits_available(self) -> list[str] | None:
        """Split names the builder knows (from its data files or info), or None if it cannot tell."""
        b = self._load_builder()
        if b.config.data_files:
            return [str(s) for s in b.config.data_files]
        if b.info.splits:
            return [str(s) for s in b.info.splits]
        return None

    def _dataset(self, split: str):
        """One split as a (streaming) ``datasets`` dataset; UserError for a split the dataset lacks."""
        b = self._load_builder()
        known = self._splits_available()
        if known is not None and split not in known:
            option = "--data.val_split" if split == self.val_split else "--data.split"
            raise UserError(f"dataset '{self.name}' has no split '{split}' (it has {', '.join(known)}): set {option}")
        with _hub_cache_in(self.hf_cache):
            if self.streaming:
                return b.as_streaming_dataset(split=split)
            b.download_and_prepare()  # downloads into cache_dir once; a rerun reuses it
            return b.as_dataset(split=split)

    def _texts(self, split: str) -> Iterator[str]:
        """The ``text_field`` of every row of ``split``, in order ("" for a null value).

        Raises UserError if the field is missing or holds something other than strings.
        """
        ds = self._dataset(split)
        field = self.text_field
        fix = f"set --data.text_field to the column holding the text of '{self.name}'"
        columns = ds.column_names
        if columns is not None:
            if field not in columns:
                raise UserError(f"'{self.name}' has no field '{field}' (its fields: {', '.join(columns)}): {fix}")
            if len(columns) > 1:
                ds = ds.select_columns([field])  # skip converting the other columns to Python
        batches = ds.iter(batch_size=ROWS_PER_BATCH)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except Exception as e:
                if self.is_hub:
                    raise  # network trouble: the preparation keeps its progress and a rerun continues
                raise UserError(f"cannot read '{self.name}' ({_innermost(e)}): fix or remove the bad file") from None
            if field not in batch:
                raise UserError(f"'{self.name}' has no field '{field}' (its fields: {', '.join(batch)}): {fix}")
            for text in batch[field]:
                if text is None:
                    yield ""
                elif isinstance(text, str):
                    yield text
                else:
                    raise UserError(
                        f"field '{field}' of '{self.name}' holds {type(text).__name__} values, not text: {fix}"
                    )

    # ------------------------------------------------------------------ what prepare uses

    def settings(self) -> dict:
        """Source options that change the token files (a change rebuilds the prepared folder)."""
        out = {"kind": self.kind, "text_field": self.text_field}
        if self.kind == "hf":
            out.update(subset=self.subset, split=self.split, val_split=self.val_split)
        return out

    def fingerprint(self) -> str:
        """sha256 of the data files this source reads and their origin stamps.

        Hub files are named with their commit (``hf://datasets/<id>@<sha>/...``),
        local files carry their modification time (``datasets``' own origin
        metadata), so an edited or updated dataset gets a new fingerprint
        without reading gigabytes of text to hash them.
        """
        b = self._load_builder()
        used = {self.split, self.val_split} - {""}
        files = {}
        for split, lst in (b.config.data_files or {}).items():
            if str(split) in used or self.kind != "hf":  # keys are datasets.NamedSplit
                files[str(split)] = [[str(f), list(m)] for f, m in zip(lst, lst.origin_metadata or [()] * len(lst))]
        blob = {"config": b.config.name, "files": files} if files else {"config": b.config.name, "hash": b.hash}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()

    def pieces(self, val_fraction: float) -> Iterator[tuple[str, str]]:
        """``(split, text)`` for every document, streamed in a fixed order.

        With ``val_split``: every document of ``val_split`` (as "val"), then every
        document of ``split`` (as "train").  Without: the documents of ``split``,
        the M-th, 2M-th, ... of which go to "val" (M = :func:`holdout_period`),
        so the held-out set is the same on every machine and whole documents
        never straddle the two splits.
        """
        if self.val_split:
            yield from (("val", t) for t in self._texts(self.val_split))
            yield from (("train", t) for t in self._texts(self.split))
            return
        m = holdout_period(val_fraction)
        for i, text in enumerate(self._texts(self.split)):
            yield ("val" if i % m == m - 1 else "train"), text

    def texts(self) -> Iterator[str]:
        """Every document's text, train and val (for the char tokenizer's vocabulary; a full pass)."""
        return (text for _, text in self.pieces(0.5))

    def total(self) -> int | None:
        """Number of documents the pieces will yield, if the dataset says so (for the progress bar)."""
        splits = self._load_builder().info.splits
        try:
            return sum(int(splits[s].num_examples) for s in {self.split, self.val_split} - {""}) or None
        except (KeyError, TypeError, AttributeError):
            return None

    def describe(self) -> dict:
        """Facts for meta.json: the dataset name and, for a hub dataset, that it came from the hub."""
        return {"dataset": self.name, "hub": self.is_hub}
