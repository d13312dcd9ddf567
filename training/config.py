"""A run's whole configuration: the model, data, train and wandb sections, TOML files and CLI overrides.

A run's configuration is four sections -- ``model`` (:class:`model.gpt.GPTConfig`), ``data``
(:class:`data.config.DataConfig`), ``train`` and ``wandb`` -- each a dataclass validated in
``__post_init__``.  Values come, in increasing priority, from the dataclass defaults, a TOML
file (``--config configs/x.toml``, data that is never executed) and command-line overrides
such as ``--model.tie_embeddings=false`` (the machinery is :mod:`core.settings`).  An unknown
key or a badly typed value is a :class:`UserError` that names the valid keys.

    from training.config import RunConfig, parse_config
    cfg = parse_config("configs/shakespeare.toml", {"train": {"max_iters": 100}})
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from core.settings import Schema, doc_field, load_toml, merge
from data.bpe import tokenizer_label
from data.config import DataConfig
from model.config import GPTConfig


@dataclass
class TrainConfig:
    """Optimisation, schedule, evaluation and bookkeeping.

    The defaults train the default model on 2.05M tokens (2000 steps of 8 x 128) in about 7 minutes
    on a 2-core CPU with bf16 matmul instructions (about 11 in float32, estimated from the step
    time); the sweep that chose them is in results/default-sweep-cpu-2026-11-24/.
    """

    max_iters: int = doc_field(2000, "Optimizer steps to train for.")
    batch_size: int = doc_field(8, "Sequences per micro-batch (B).")
    grad_accum_steps: int = doc_field(
        1, "Micro-batches per optimizer step; tokens/step = grad_accum_steps * batch_size * block_size."
    )
    learning_rate: float = doc_field(2e-3, "Peak learning rate, reached after warmup_iters.")
    min_lr: float = doc_field(2e-4, "Learning rate at the end of the cosine decay (nanoGPT: learning_rate / 10).")
    warmup_iters: int = doc_field(30, "Steps of linear warmup from 0 to learning_rate.")
    lr_decay_iters: int = doc_field(
        0, "Step at which the cosine decay reaches min_lr; 0 means max_iters. Resolved and saved with the run."
    )
    lr_schedule: str = doc_field(
        "cosine",
        "'cosine' (warmup, then cosine decay to min_lr at lr_decay_iters; nanoGPT) or 'wsd' (warmup-stable-decay: "
        "warmup, learning_rate held, then a cooldown to min_lr over the last cooldown_frac of lr_decay_iters; "
        "MiniCPM, Hu et al. 2024; Hägele et al. 2024, arXiv:2405.18392). A WSD run can branch: see --branch-from.",
    )
    cooldown_frac: float = doc_field(
        0.2,
        "With lr_schedule='wsd': the cooldown's share of the schedule's horizon (lr_decay_iters). Hägele et al. 2024 "
        "find 10-20% matches a cosine.",
    )
    cooldown_shape: str = doc_field(
        "linear",
        "With lr_schedule='wsd': how the cooldown falls from learning_rate to min_lr: 'linear', or '1-sqrt' "
        "(1 - sqrt of the cooldown's progress; Hägele et al. 2024, its best shape).",
    )
    weight_decay: float = doc_field(0.1, "AdamW weight decay, applied to weights with dim >= 2 only.")
    embedding_weight_decay: bool = doc_field(
        True,
        "Decay the embedding matrices too (wte, wpe, lm_head tied or not): true is nanoGPT's policy, false minGPT's.",
    )
    embedding_lr_scale: float = doc_field(
        1.0,
        "Learning rate of the token embedding (wte; the tied matrix when tied) as a multiple of learning_rate. nanochat's earlier recipe trained its embedding at 10x its (Muon) matrix learning rate.",
    )
    head_lr_scale: float = doc_field(
        1.0,
        "Learning rate of an untied lm_head as a multiple of learning_rate. nanochat's earlier recipe trained its unembedding at 0.2x its (Muon) matrix learning rate.",
    )
    untie_at: float = doc_field(
        0.0,
        "Fraction of the schedule (lr_decay_iters, i.e. max_iters by default) after which a tied model unties: lm_head becomes its own copy of the matrix, with a copy of its AdamW state (modded-nanogpt unties at 2/3); 0 never. Needs model.tie_embeddings=true.",
    )
    untie_at_cooldown: bool = doc_field(
        False,
        "With lr_schedule='wsd': a tied model unties at the first step of its cooldown (as train.untie_at does "
        "at a fraction of the run), so a branch from a tied trunk trains its cooldown untied. Needs "
        "model.tie_embeddings=true.",
    )
    optimizer: str = doc_field(
        "adamw",
        "'adamw' (every parameter) or 'muon': torch.optim.Muon (momentum orthogonalised by Newton-Schulz; Jordan et al. 2024, modded-nanogpt, nanochat) on the 2-D weight matrices inside the blocks, AdamW with the usual groups on the embeddings, lm_head (tied or not), norms and biases.",
    )
    muon_learning_rate: float = doc_field(
        0.02,
        "With optimizer='muon': Muon's peak learning rate (modded-nanogpt and nanochat use 0.02-0.05); the schedule scales it by the same factor as learning_rate.",
    )
    muon_momentum: float = doc_field(
        0.95,
        "With optimizer='muon': Muon's (Nesterov) momentum. Muon's decoupled weight decay is weight_decay, times its learning rate.",
    )
    beta1: float = doc_field(0.9, "AdamW beta1.")
    beta2: float = doc_field(0.99, "AdamW beta2 (nanoGPT uses 0.99 for small models, 0.95 for GPT-2 scale).")
    grad_clip: float = doc_field(1.0, "Clip the global gradient norm to this; 0 disables clipping.")
    eval_interval: int = doc_field(200, "Evaluate train/val loss every this many steps (and at the last step).")
    eval_iters: int = doc_field(20, "Fixed batches per split in each evaluation.")
    log_interval: int = doc_field(10, "Write a training row to metrics.jsonl every this many steps.")
    checkpoint_interval: int = doc_field(
        0, "Write ckpt_last.pt every this many steps (a crash loses at most this many); 0 means every eval_interval."
    )
    save_at: list[int] = doc_field(
        [],
        "Steps at which to keep a resumable checkpoint ckpt_step<N>.pt (weights, AdamW state, RNG, data position) "
        "besides ckpt_last.pt: the branch points of a WSD trunk (train.py --branch-from RUN@N).",
    )
    max_skipped_steps: int = doc_field(
        0,
        "Steps with a non-finite loss or gradient that may be skipped (no update; counted in metrics.jsonl and summary.json) before the run stops; 0 stops at the first.",
    )
    seed: int = doc_field(1337, "Seed for init, dropout and the data order.")
    device: str = doc_field("auto", "'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:N' or 'mps'.")
    dtype: str = doc_field(
        "auto",
        "'auto' (bfloat16 autocast on CUDA and on CPUs with bf16 matmul instructions, AVX512-BF16 or AMX; else float32), 'float32' or 'bfloat16'.",
    )
    compile: bool = doc_field(False, "Wrap the model in torch.compile (faster on GPU; the first steps are slow).")
    head_loss: str = doc_field(
        "auto",
        "How the loss meets the head: 'logits' builds all (B, T, vocab_size) logits, then nn.CrossEntropyLoss (nanoGPT); 'chunked' computes lm_head and the cross-entropy, with their gradients, a slice of rows at a time and never holds all logits (far less memory, the same speed on a CPU within noise); 'fused' is Liger-Kernel's fused linear cross-entropy (CUDA only, pip install liger-kernel; much less memory, slower: for a step that would not fit otherwise; measured in results/README.md); 'auto' is chunked on a CPU when a micro-batch's logits (batch_size x block_size x vocab_size) would exceed one 16M-value slice, logits otherwise and elsewhere. Resolved and saved with the run. The same loss up to float rounding.",
    )
    pad_vocab_multiple: int = doc_field(
        0,
        "Pad lm_head's rows (the tied matrix's too) with zeros to a multiple of this for the head's matmul alone, which runs faster on GPUs at aligned sizes (50,257 -> 50,304 at 64). The padded logits are cut off (or masked) before the loss and sampling, so the model stays a vocab_size model: checkpoints, parameter counts, MFU and export are unchanged. 1 pads nothing; 0 is auto: 64 on CUDA, 1 elsewhere. Resolved and saved with the run.",
    )
    out_dir: str = doc_field("runs", "Folder holding run folders: a run writes to <out_dir>/<run-name>/.")
    sample_prompt: str = doc_field("\n", "Prompt for the sample printed at the end of training.")
    sample_tokens: int = doc_field(200, "Tokens in the sample printed at the end of training; 0 prints none.")
    loss_plot: bool = doc_field(
        True,
        "Draw loss.png in the run folder with matplotlib, redrawn at evals at most every 30 s and at the end; false draws none, and matplotlib never loads (less peak memory). metrics.jsonl and summary.json are written either way.",
    )
    final_eval_tokens: int = doc_field(
        2_000_000,
        "Tokens of the val split scored once at the end: non-overlapping block_size windows from its start, the same for every seed and arm of one block_size and tokenizer (summary.json's final_val_loss); 0 skips it.",
    )

    def __post_init__(self) -> None:
        positive = ("max_iters", "batch_size", "grad_accum_steps", "eval_interval", "eval_iters", "log_interval")
        for name in positive:
            if getattr(self, name) < 1:
                raise UserError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "warmup_iters",
            "lr_decay_iters",
            "checkpoint_interval",
            "max_skipped_steps",
            "sample_tokens",
            "final_eval_tokens",
        ):
            if getattr(self, name) < 0:
                raise UserError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if not self.learning_rate > 0 or self.min_lr < 0 or self.min_lr > self.learning_rate:
            raise UserError(
                f"need 0 <= train.min_lr <= train.learning_rate and learning_rate > 0, "
                f"got learning_rate={self.learning_rate}, min_lr={self.min_lr}"
            )
        # A horizon at or past the run's end is no decay inside the run: a run shorter than its warmup
        # records lr_decay_iters = max_iters, and must load (and resume) again.
        if self.lr_decay_iters and self.lr_decay_iters < min(self.warmup_iters, self.max_iters):
            raise UserError(
                f"train.lr_decay_iters={self.lr_decay_iters} is before the end of warmup "
                f"(train.warmup_iters={self.warmup_iters}): raise it, or set 0 for max_iters"
            )
        if self.sample_tokens and not self.sample_prompt:
            raise UserError("train.sample_prompt is empty: give a prompt, or set train.sample_tokens=0")
        check_seed(self.seed, "train.seed")
        if not (self.embedding_lr_scale > 0 and self.head_lr_scale > 0):
            raise UserError(
                f"train.embedding_lr_scale and train.head_lr_scale must be > 0, got "
                f"{self.embedding_lr_scale}, {self.head_lr_scale}"
            )
        if not 0 <= self.untie_at < 1:
            raise UserError(
                f"train.untie_at must be in [0, 1) (a fraction of the schedule; 0 never unties), got {self.untie_at}"
            )
        if self.lr_schedule not in ("cosine", "wsd"):
            raise UserError(f"train.lr_schedule must be 'cosine' or 'wsd', got {self.lr_schedule!r}")
        if not 0 < self.cooldown_frac <= 1:
            raise UserError(f"train.cooldown_frac must be in (0, 1] (a share of the horizon), got {self.cooldown_frac}")
        if self.cooldown_shape not in ("linear", "1-sqrt"):
            raise UserError(f"train.cooldown_shape must be 'linear' or '1-sqrt', got {self.cooldown_shape!r}")
        if self.untie_at_cooldown and self.lr_schedule != "wsd":
            raise UserError(
                "train.untie_at_cooldown needs a cooldown: set train.lr_schedule=wsd, or use train.untie_at"
            )
        if any(step < 1 for step in self.save_at):
            raise UserError(f"train.save_at lists steps >= 1, got {self.save_at}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise UserError("train.weight_decay and train.grad_clip must be >= 0")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise UserError(f"train.beta1 and train.beta2 must be in [0, 1), got {self.beta1}, {self.beta2}")
        if self.optimizer not in ("adamw", "muon"):
            raise UserError(f"train.optimizer must be 'adamw' or 'muon', got {self.optimizer!r}")
        if not (self.muon_learning_rate > 0 and 0 <= self.muon_momentum < 1):
            raise UserError(
                f"need train.muon_learning_rate > 0 and train.muon_momentum in [0, 1), got "
                f"{self.muon_learning_rate}, {self.muon_momentum}"
            )
        if self.optimizer != "muon":
            for name in ("muon_learning_rate", "muon_momentum"):
                if getattr(self, name) != TrainConfig.__dataclass_fields__[name].default:
                    raise UserError(f"train.{name} needs train.optimizer=muon: set it, or drop train.{name}")
        if self.head_loss not in ("auto", "logits", "chunked", "fused"):
            raise UserError(f"train.head_loss must be 'auto', 'logits', 'chunked' or 'fused', got {self.head_loss!r}")
        if self.pad_vocab_multiple < 0:
            raise UserError(f"train.pad_vocab_multiple must be >= 0 (0 auto, 1 none), got {self.pad_vocab_multiple}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise UserError(f"train.dtype must be 'auto', 'float32' or 'bfloat16', got {self.dtype!r}")
        if not (self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:")):
            raise UserError(f"train.device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")

    def cooldown_start(self) -> int:
        """The first step of a WSD schedule's cooldown: ``horizon - round(cooldown_frac * horizon)``.

        ``horizon`` is ``lr_decay_iters`` (``max_iters`` where 0).  Steps before it train at
        ``learning_rate`` (after warmup), so two WSD runs that differ only in horizon agree on
        every step before the earlier of their cooldowns: the property cooldown branches rest on.
        """
        horizon = self.lr_decay_iters or self.max_iters
        return horizon - round(self.cooldown_frac * horizon)


@dataclass
class WandbConfig:
    """Weights & Biases logging.  Off by default; 'offline' needs no network or account."""

    mode: str = doc_field(
        "",
        "'online', 'offline' (sync later with `wandb sync`) or 'disabled'; empty: wandb's own WANDB_MODE "
        "environment variable if set, else 'disabled'. This flag wins over WANDB_MODE.",
    )
    project: str = doc_field("tinygpt", "wandb project.")
    group: str = doc_field("", "wandb group (e.g. one tied-vs-untied experiment); empty for none.")
    name: str = doc_field("", "wandb run name; empty means the run folder's name.")
    tags: list = doc_field([], "wandb tags, e.g. ['tied']; 'tied' or 'untied' is always added.")

    def __post_init__(self) -> None:
        if self.mode not in ("", "online", "offline", "disabled"):
            raise UserError(f"wandb.mode must be 'online', 'offline' or 'disabled', got {self.mode!r}")
        self.resolved_mode()  # a WANDB_MODE wandb does not know is refused now, before any work

    def resolved_mode(self, environ: Mapping[str, str] | None = None) -> str:
        """The mode a run logs in: ``mode`` if set, else wandb's ``WANDB_MODE`` (its aliases ``dryrun`` and
        ``run`` read as offline and online; https://docs.wandb.ai/guides/track/environment-variables), else
        'disabled'.  Raises :class:`UserError` for a WANDB_MODE wandb does not know either."""
        if self.mode:
            return self.mode
        env = (os.environ if environ is None else environ).get("WANDB_MODE", "").strip().lower()
        mode = {"dryrun": "offline", "run": "online"}.get(env, env) or "disabled"
        if mode not in ("online", "offline", "disabled"):
            raise UserError(f"WANDB_MODE={env!r} is not a wandb mode: set it to online, offline or disabled")
        return mode


# Keys a user may not set: derived from something else and filled in by train.py.
DERIVED = {"model.vocab_size": "it is set by the tokenizer (choose --data.tokenizer instead)"}
SECTIONS: dict[str, type] = {"model": GPTConfig, "data": DataConfig, "train": TrainConfig, "wandb": WandbConfig}
SCHEMA = Schema(SECTIONS, DERIVED)


# The one list of settings that change neither the weights a run trains nor what it measures:
# where it runs and writes, what it prints and logs, how the data is read (not which data).
# A resume may change them (RESUME_OVERRIDABLE) and a comparison ignores them
# (experiment.runs.record.BOOKKEEPING); each of those adds its own few keys.
BOOKKEEPING = frozenset(
    {
        "train.out_dir",
        "train.device",
        "train.compile",
        "train.head_loss",
        "train.pad_vocab_multiple",
        "train.sample_prompt",
        "train.sample_tokens",
        "train.loss_plot",
        "train.log_interval",
        "train.checkpoint_interval",
        "train.save_at",
        "data.cache_dir",
        "data.num_proc",
        "data.streaming",
        "data.allow_smaller_vocab",  # a bpe:N that fell short is told apart by model.vocab_size, which is compared
        "wandb.mode",
        "wandb.name",
        "wandb.tags",
        "wandb.group",
        "wandb.project",
    }
)

# What may change when a run is resumed: bookkeeping, and the length, schedule horizon, eval
# spacing and skip budget of the steps still to come; never the maths of a step.
RESUME_OVERRIDABLE = BOOKKEEPING | {
    "train.max_iters",
    "train.lr_decay_iters",
    "train.eval_interval",
    "train.max_skipped_steps",
    "train.final_eval_tokens",
}


def check_seed(seed: int, name: str) -> None:
    """Raise :class:`UserError` unless ``seed`` fits torch's 64-bit seeds (``torch.manual_seed``, ``Generator``)."""
    if not -(2**63) <= seed < 2**63:
        raise UserError(f"{name} must fit in 64 bits (|seed| < 2**63), got {seed}: pick a smaller seed")


def edited_setting(
    saved: dict, now: dict, sections: tuple[str, ...] | None = None
) -> tuple[str, object, object] | None:
    """The first setting a resume may not change that differs between two configs, or None.

    ``saved`` is the config a checkpoint was trained with (``ckpt['config']``), ``now`` the run
    folder's ``config.json`` as ``RunConfig.to_dict()`` gives it; both map section -> key -> value.
    Returns ``(section.key, value now, value saved)``.  Keys in RESUME_OVERRIDABLE are skipped, and
    so are keys the checkpoint does not have (settings newer than the run).
    """
    for section, values in now.items():
        if sections is not None and section not in sections:
            continue
        was = saved.get(section, {})
        for key, value in values.items():
            full = f"{section}.{key}"
            if full not in RESUME_OVERRIDABLE and key in was and was[key] != value:
                return full, value, was[key]
    return None


# Settings whose default means "derive it"; a new run records the derived value (training.setup.setup_run).
RESOLVED_AT_START = (
    "train.lr_decay_iters",
    "train.checkpoint_interval",
    "train.dtype",
    "train.head_loss",
    "train.pad_vocab_multiple",
)


def describe_config(cfg: RunConfig) -> str:
    """A short readable block: the settings that differ from the defaults, one ``key = value`` per line.

    Values are written as TOML writes them (``true``, ``"iambic"``, ``0.002``), so a line can be
    pasted into a config file.  ``model.vocab_size`` (set by the tokenizer) is left out, but a
    ``bpe:N`` that trained fewer than N tokens says so in a TOML comment; the settings derived at
    the start of a run go on one ``resolved:`` line.
    """
    default, have = RunConfig().to_dict(), cfg.to_dict()
    changed, resolved = [], []
    for section, values in have.items():
        for key, value in values.items():
            full = f"{section}.{key}"
            if full in DERIVED or value == default[section][key]:
                continue
            line = f"{full} = {json.dumps(value)}"
            if full == "data.tokenizer" and tokenizer_label(value, cfg.model.vocab_size) != value:
                line += f"  # {cfg.model.vocab_size:,} tokens trained: the corpus has no more pairs to merge"
            (resolved if full in RESOLVED_AT_START else changed).append(line)
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

    def __post_init__(self) -> None:
        """Rules across sections; each section has checked its own values already."""
        tied, tc = self.model.tie_embeddings, self.train
        if tc.untie_at and not tied:
            raise UserError("train.untie_at unties a tied model: set model.tie_embeddings=true, or drop train.untie_at")
        if tc.untie_at_cooldown and (not tied or tc.untie_at):
            raise UserError(
                "train.untie_at_cooldown unties a tied model once: set model.tie_embeddings=true and drop train.untie_at"
            )
        if self.model.logit_softcap and tc.head_loss == "fused":
            raise UserError(
                "train.head_loss=fused has no logit soft-cap (Liger's kernel is not given it): use train.head_loss=logits "
                "or chunked, or drop model.logit_softcap"
            )
        unties = tc.untie_at or tc.untie_at_cooldown
        if tied and not unties and tc.head_lr_scale != 1.0:
            raise UserError(
                "train.head_lr_scale needs an lm_head of its own: a tied matrix has one learning rate "
                "(train.embedding_lr_scale); set model.tie_embeddings=false, or drop train.head_lr_scale"
            )

    def untie_step(self) -> int | None:
        """The optimizer step after which a tie-then-untie run unties, or None.

        ``train.untie_at`` of the schedule's horizon (``lr_decay_iters``, resolved and saved when the
        run starts), so extending a run with ``--resume --train.max_iters`` does not move it; with
        ``train.untie_at_cooldown``, the first step of the WSD cooldown (:meth:`TrainConfig.cooldown_start`,
        or the end of warmup where that comes later: where :func:`training.schedule.get_lr` starts
        the cooldown).
        """
        horizon = self.train.lr_decay_iters or self.train.max_iters
        if self.train.untie_at_cooldown:
            return max(self.train.cooldown_start(), self.train.warmup_iters)
        return max(1, round(self.train.untie_at * horizon)) if self.train.untie_at else None

    def check_unties(self) -> None:
        """Raise :class:`UserError` when a tie-then-untie run's switch (:meth:`untie_step`) is not before
        ``train.max_iters``: it would end tied, a run of another arm than its settings say."""
        tc, step = self.train, self.untie_step()
        if step is not None and step >= tc.max_iters:
            raise UserError(
                f"the untie step of {'the cooldown' if tc.untie_at_cooldown else f'train.untie_at={tc.untie_at:g}'} of "
                f"the schedule's {tc.lr_decay_iters or tc.max_iters} steps is step {step}, not before "
                f"train.max_iters={tc.max_iters}: the run would never untie; lower train.untie_at or "
                "train.lr_decay_iters, or raise train.max_iters"
            )

    def with_values(self, **sections: dict) -> RunConfig:
        """A validated copy with ``sections`` changed, e.g. ``cfg.with_values(train={"out_dir": "runs"})``.

        ``self`` is left as it was and shares nothing with the copy (lists included): a config is
        resolved by making a new one, never rewritten after its checks.  The copy is built as a
        config file is read (:meth:`from_dict`: keys, types, every section's and the cross-section
        rules); raises :class:`UserError` where the new values break one.
        """
        return RunConfig.from_dict(merge(self.to_dict(), sections), "the resolved config")

    def to_dict(self) -> dict:
        """Plain nested dict (JSON- and TOML-friendly)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "config") -> RunConfig:
        """Build from a nested dict, checking every key and type; raises :class:`UserError`."""
        return cls(**SCHEMA.build(d, where))


def parse_config(toml_path: str | Path | None, overrides: dict) -> RunConfig:
    """Resolve defaults <- TOML file <- CLI overrides into a validated :class:`RunConfig`."""
    file_values = load_toml(toml_path) if toml_path else {}
    where = str(toml_path) if toml_path else "command line"
    # Keys and types are checked against the file's name; cross-field rules (n_embd % n_head, ...)
    # only on the merged result, since the command line may complete what the file starts.
    SCHEMA.check_keys_and_types(file_values, where)
    return RunConfig.from_dict(merge(file_values, overrides), f"{where} + command line" if overrides else where)


def parse_cli(
    parser: argparse.ArgumentParser, argv: list[str] | None, exclude: typing.Iterable[str] = ()
) -> tuple[argparse.Namespace, dict]:
    """:meth:`core.settings.Schema.parse_cli` for a run's four sections: ``(namespace, overrides)``."""
    return SCHEMA.parse_cli(parser, argv, exclude)
