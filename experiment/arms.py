"""The arms of the tied-vs-untied experiment: each one a handful of ``train.py`` settings.

Every arm is a plain training config too: ``python train.py`` with the arm's
``--section.key=value`` flags (:func:`arm_argv`) trains it alone.  A run folder's arm is read
back from its ``config.json`` (:func:`arm_of`), so a report needs nothing but the folders.

Sources for the settings: GPT-2 / nanoGPT tie the head to the embedding; Press & Wolf 2017
("Using the Output Embedding to Improve Language Models") argue for it; nanochat and
modded-nanogpt untie, start the head at zero and train the embedding and the head at very
different learning rates.  ``untied-split`` takes nanochat's earlier ratios (embedding 0.2,
unembedding 0.004 against a 0.02 Muon matrix rate: 10x and 0.2x) to this project's AdamW; nanochat
today uses 0.3 / 0.008 scaled by (d/768)^-0.5, initialises its head N(0, 0.001) and normalises the
embedding's output, which this arm does not.  modded-nanogpt's record of 2024-11-03 unties at 2/3
of the run; ``tie-untie-cooldown`` unties where a warmup-stable-decay run starts its cooldown
(``train.untie_at_cooldown``), so on the budget axis it branches from the tied arm's trunk.
"""

from __future__ import annotations

import math

from core.errors import UserError
from core.settings import overrides_to_argv
from training.config import RunConfig

ARMS: dict[str, dict[str, object]] = {
    "tied": {"model.tie_embeddings": True},
    "untied": {"model.tie_embeddings": False},
    "tied-bias": {"model.tie_embeddings": True, "model.lm_head_bias": True},
    "untied-split": {
        "model.tie_embeddings": False,
        "model.zero_init_head": True,
        "train.embedding_lr_scale": 10.0,
        "train.head_lr_scale": 0.2,
    },
    "tie-then-untie": {"model.tie_embeddings": True, "train.untie_at": 2 / 3},
    "tie-untie-cooldown": {"model.tie_embeddings": True, "train.untie_at_cooldown": True},
}
DESCRIPTIONS = {
    "tied": "one matrix for the embedding and lm_head (W = E), GPT-2's choice",
    "untied": "two matrices, trained alike",
    "tied-bias": "tied, plus a learned lm_head bias (a free unigram offset, vocab_size parameters)",
    "untied-split": "untied, lm_head initialised to zero, embedding at 10x and lm_head at 0.2x the learning rate "
    "(nanochat's ratios)",
    "tie-then-untie": "tied for the first 2/3 of the steps, then lm_head becomes its own copy of the matrix "
    "with a copy of its AdamW state (modded-nanogpt's schedule)",
    "tie-untie-cooldown": "tied until the WSD cooldown starts, then lm_head becomes its own copy of the matrix with a "
    "copy of its AdamW state (a cooldown branch of the tied trunk)",
}
DEFAULT_ARMS = ("tied", "untied")
# Every key some arm sets: a run's values of these name its arm.
ARM_KEYS = sorted({key for settings in ARMS.values() for key in settings})


def parse_arms(text: str) -> list[str]:
    """``"tied,untied-split"`` -> ``["tied", "untied-split"]``; UserError for an unknown or repeated name."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        raise UserError(f"unknown arm {unknown[0] if unknown else repr(text)}: choose from {', '.join(ARMS)}")
    if len(set(names)) != len(names):
        raise UserError(f"--arms names an arm twice ({text}): give each once")
    return names


def arm_argv(arm: str) -> list[str]:
    """The ``train.py`` flags of ``arm``, e.g. ``["--model.tie_embeddings=false"]``."""
    nested: dict = {}
    for key, value in ARMS[arm].items():
        section, name = key.split(".")
        nested.setdefault(section, {})[name] = value
    return overrides_to_argv(nested)


def arm_of(flat_config: dict, where: str = "run") -> str:
    """The arm whose settings ``flat_config`` (``{"model.tie_embeddings": ...}``) has.

    Keys of :data:`ARM_KEYS` the arm does not set must be at their defaults (a missing key,
    from a run older than the key, counts as its default).  Raises :class:`UserError` when no
    arm matches, naming the settings.
    """
    defaults = {f"{s}.{k}": v for s, values in RunConfig().to_dict().items() for k, v in values.items()}
    have = {k: flat_config.get(k, defaults[k]) for k in ARM_KEYS}

    def same(a, b) -> bool:  # 0.6667 on a command line is the 2/3 of tie-then-untie
        floats = isinstance(a, float) and isinstance(b, float)
        return math.isclose(a, b, rel_tol=1e-3) if floats else a == b

    for arm, settings in ARMS.items():
        if all(same(have[k], settings.get(k, defaults[k])) for k in ARM_KEYS):
            return arm
    detail = ", ".join(f"{k}={have[k]!r}" for k in ARM_KEYS if have[k] != defaults[k]) or "the defaults"
    raise UserError(
        f"{where} has {detail}, which is none of the arms ({', '.join(ARMS)}): "
        "compare runs trained by compare.py or with one arm's settings"
    )
