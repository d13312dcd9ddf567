"""``train.py --init-from``: a run's configuration fitted to GPT-2 weights from a Hugging Face folder or the Hub.

:mod:`model.hf` converts the weights; :mod:`training.hf_folders` moves whole run folders in and out
for ``hf.py``, and stays out of a training run's imports.
"""

from __future__ import annotations

from pathlib import Path


from core import optional
from core.errors import UserError
from core.settings import load_toml, merge
from model import hf
from model.config import choices_set


def init_from_overrides(source: str, config_path: str | None, overrides: dict) -> dict:
    """The config overrides of a ``train.py --init-from`` run: the model shape comes from the GPT-2 config.

    ``n_layer``, ``n_head``, ``n_embd``, ``block_size`` (``n_positions``) and ``bias`` are
    set from ``source``'s config (read without loading weights); ``tie_embeddings`` from
    ``tie_word_embeddings`` unless the user chose (untied from tied copies the matrix).  A
    smaller ``block_size`` is allowed (the position table is cropped).  Raises
    :class:`UserError` when the TOML file or ``--model.*`` sets another shape, the tokenizer
    is not gpt2, the vocabulary is not GPT-2's 50257 tokens, or a model choice is not GPT-2's (``model.position=rope``, ...).
    """
    transformers = optional.transformers()
    if not Path(source).expanduser().exists() and not hf.is_hub_id(source):
        raise UserError(
            f"--init-from {source} does not exist: give a folder written by save_pretrained (config.json + weights)"
        )
    hf_cfg = hf.read_hf(lambda: transformers.AutoConfig.from_pretrained(hf.where(source)), source)
    if hf_cfg.model_type != "gpt2":  # the shape overrides below are GPT-2's fields
        raise UserError(
            f"--init-from {source} holds a {hf_cfg.model_type!r} model and --init-from reads GPT-2 only: "
            f"hf.py import --hf {source} reads it for sample.py and hf.py export, not for training"
        )
    ours = hf.config_from_hf(hf_cfg)  # refuses what tinygpt cannot represent
    user = merge(load_toml(config_path) if config_path else {}, overrides)
    if user.get("model", {}).get("lm_head_bias"):
        raise UserError("--init-from loads GPT-2 weights, whose lm_head has no bias: drop model.lm_head_bias")
    if hf_cfg.vocab_size != hf.GPT2_VOCAB_SIZE:  # first: a char or bpe:N export was not trained with gpt2
        raise UserError(
            f"--init-from {source} has {hf_cfg.vocab_size} tokens, not the gpt2 tokenizer's {hf.GPT2_VOCAB_SIZE}: "
            "--init-from fine-tunes weights of GPT-2's vocabulary only (hf.py import reads others for sample.py)"
        )
    tokenizer = user.get("data", {}).get("tokenizer", "gpt2")
    if tokenizer != "gpt2":
        raise UserError(
            f"--init-from {source} was trained with the gpt2 tokenizer, not {tokenizer!r}: use --data.tokenizer=gpt2"
        )
    # The GELU form is part of what the weights were trained with, like the shape.
    shape = {
        "n_layer": hf_cfg.n_layer,
        "n_head": hf_cfg.n_head,
        "n_embd": hf_cfg.n_embd,
        "block_size": hf_cfg.n_positions,
        "bias": True,
        "gelu_approximate": ours.gelu_approximate,
    }
    model = dict(user.get("model", {}))
    choices = choices_set(model)
    if choices:
        raise UserError(f"--init-from loads GPT-2 weights, which have GPT-2's block, not {choices[0]}: drop it")
    for key, value in shape.items():
        if key in model and model[key] != value and not (key == "block_size" and 1 <= model[key] < value):
            where = f"{config_path} or the command line" if config_path else "the command line"
            raise UserError(
                f"model.{key}={model[key]} (from {where}) conflicts with --init-from {source}, which has "
                f"{key}={value}: drop it, the shape comes from the imported weights"
            )
        model.setdefault(key, value)
    if model.get("tie_embeddings") and not hf_cfg.tie_word_embeddings:
        where = f"{config_path} or the command line" if config_path else "the command line"
        raise UserError(
            f"--init-from {source} has an untied lm_head but model.tie_embeddings=true (from {where}): "
            "drop it, or set it to false"
        )
    model.setdefault("tie_embeddings", bool(hf_cfg.tie_word_embeddings))
    return merge(overrides, {"model": model})
