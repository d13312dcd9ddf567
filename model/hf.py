"""Hugging Face weights in and out: GPT-2, Llama and Qwen3 checkpoints to tinygpt models and back.

The commands are ``hf.py`` (run folders in and out) and ``train.py --init-from``; from Python::

    from model.hf import from_hf, export
    model = from_hf(GPT2LMHeadModel(GPT2Config(...)))   # or a folder written by save_pretrained
    export(model, "hf/mine")                               # config.json + model.safetensors

The layouts (transformers' ``modeling_gpt2.py``): HF keeps each block's q, k and v projections
in one ``c_attn`` ``Conv1D`` whose weight is ``(in, 3 * out)`` -- ``y = x @ W + b``, the
transpose of ``nn.Linear``'s ``(out_features, in_features)`` -- and likewise ``c_proj``,
``mlp.c_fc`` and ``mlp.c_proj``.  Import splits ``c_attn`` into ``q_proj`` / ``k_proj`` /
``v_proj`` and transposes; export does the reverse.  GPT-2 ties ``lm_head`` to ``wte``.

Which architecture a model exports as is :func:`architecture`: GPT-2's block as
``GPT2LMHeadModel`` (this module), RoPE + RMSNorm + SwiGLU as ``LlamaForCausalLM`` and with
QK-norm as ``Qwen3ForCausalLM`` (:mod:`model.hf_llama`, which holds their configs and names).

``transformers`` and ``safetensors`` are optional (training does not need them): they are
imported on first use (:mod:`core.optional`), and a missing one is a one-line :class:`UserError`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from core import optional
from core.errors import UserError, first_line
from core.files import move_into_place, sha256_file, temp_folder_beside
from model import hf_llama
from model.config import GPTConfig
from model.gpt import GPT

GPT2_VOCAB_SIZE = 50257  # the gpt2 tokenizer: 50,000 merges + 256 bytes + <|endoftext|>
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which tinygpt uses; GPT-2's layer_norm_epsilon
# gelu_new (GPT-2's) and gelu_pytorch_tanh are both 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
# which is F.gelu(approximate="tanh") in our MLP; Hugging Face's "gelu" is the exact erf form.
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
EXACT_GELU = "gelu"
GPT2 = "GPT2LMHeadModel"
MODEL_TYPES = {"gpt2": GPT2, **hf_llama.MODEL_TYPES}  # config.json's model_type -> the class that loads it
NAMES = {GPT2: "GPT-2", hf_llama.LLAMA: "Llama", hf_llama.QWEN3: "Qwen3"}  # for messages and the model card
TAGS = {arch: model_type for model_type, arch in MODEL_TYPES.items()}  # the model card's tag: the model_type


def architecture(config: GPTConfig) -> str:
    """The ``transformers`` class that expresses ``config``: ``GPT2LMHeadModel``, ``LlamaForCausalLM`` or
    ``Qwen3ForCausalLM``.

    GPT-2's block (no choice of ``docs/model.md`` set) is GPT-2; RoPE + RMSNorm + SwiGLU (any
    ``n_kv_head``, ``mlp_hidden``, ``rope_theta``) is Llama, and with ``qk_norm`` Qwen3.  Raises
    :class:`UserError` in one line naming the choice for any other set: a logit soft-cap or
    ReLU² (no architecture has them), or a mix of the two blocks (learned positions with RMSNorm, ...).
    """
    if config.logit_softcap:
        raise UserError(
            f"model.logit_softcap={config.logit_softcap} has no Hugging Face export (GPT-2, Llama and Qwen3 "
            "do not cap logits): export a model trained without it"
        )
    if config.mlp == "relu2":
        raise UserError(
            "model.mlp=relu2 has no Hugging Face export (GPT-2's MLP is GELU, Llama's and Qwen3's SwiGLU): "
            "export a model trained with model.mlp=gelu or swiglu"
        )
    # Spelt-out defaults are GPT-2's block too: as many kv heads as heads, GELU's 4 n_embd hidden width.
    plain = replace(
        config,
        n_kv_head=0 if config.kv_heads == config.n_head else config.n_kv_head,
        mlp_hidden=0 if config.mlp == "gelu" and config.mlp_hidden == 4 * config.n_embd else config.mlp_hidden,
    )
    choices = plain.non_default_choices()
    if not choices:
        return GPT2
    missing = [f"model.{k}={v}" for k, v in hf_llama.LLAMA_BLOCK.items() if getattr(config, k) != v]
    if missing:
        raise UserError(
            f"{choices[0]} without {', '.join(missing)} has no Hugging Face export: GPT-2's block exports as "
            "GPT2LMHeadModel, RoPE + RMSNorm + SwiGLU as LlamaForCausalLM (with model.qk_norm, Qwen3ForCausalLM)"
        )
    return hf_llama.QWEN3 if config.qk_norm else hf_llama.LLAMA


# ----------------------------------------------------------------------------- configs


def config_from_hf(hf_config, tie_embeddings: bool | None = None, block_size: int | None = None) -> GPTConfig:
    """Our :class:`GPTConfig` for a ``transformers.GPT2Config``; ``UserError`` if tinygpt cannot represent it.

    A ``LlamaConfig`` or ``Qwen3Config`` goes to :func:`model.hf_llama.config_from_hf`.

    ``n_positions`` -> ``block_size`` (or the smaller ``block_size`` given: the position table
    is then cropped, as nanoGPT's ``crop_block_size``), ``n_embd``, ``n_layer``, ``n_head``,
    ``vocab_size`` are taken over; ``tie_embeddings`` defaults to ``tie_word_embeddings``
    (asking for an untied model from a tied one copies the matrix into both).  Refused: another
    ``model_type``, an activation other than GELU (tanh or exact), ``layer_norm_epsilon`` other than 1e-5,
    an MLP width other than 4 n_embd, and the attention variants tinygpt does not have.
    Dropout is left at 0 (set ``model.dropout`` to fine-tune with it).
    """
    c = hf_config
    if getattr(c, "model_type", None) in hf_llama.MODEL_TYPES:
        return hf_llama.config_from_hf(c, tie_embeddings, block_size)
    if getattr(c, "model_type", None) != "gpt2":
        raise UserError(
            f"this is a {getattr(c, 'model_type', None)!r} model: tinygpt imports GPT-2, Llama and Qwen3 only"
        )
    problems = []
    if c.activation_function not in (*TANH_GELUS, EXACT_GELU):
        problems.append(
            f"activation_function={c.activation_function!r} (tinygpt's MLP uses GELU: "
            f"{', '.join(TANH_GELUS)} or {EXACT_GELU})"
        )
    if abs(c.layer_norm_epsilon - LAYER_NORM_EPS) > 1e-12:
        problems.append(f"layer_norm_epsilon={c.layer_norm_epsilon} (tinygpt's LayerNorms use {LAYER_NORM_EPS})")
    if c.n_inner not in (None, 4 * c.n_embd):
        problems.append(f"n_inner={c.n_inner} (tinygpt's MLP is 4 * n_embd = {4 * c.n_embd} wide)")
    for flag, want in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if getattr(c, flag, want) != want:
            problems.append(f"{flag}={getattr(c, flag)} (tinygpt needs {want})")
    if block_size is not None and not 1 <= block_size <= c.n_positions:
        problems.append(
            f"block_size={block_size} (at most n_positions={c.n_positions}: the positions beyond were never trained)"
        )
    if tie_embeddings and not c.tie_word_embeddings:
        problems.append(
            "tie_word_embeddings=False while a tied model was asked for (its two matrices differ): import it untied"
        )
    if problems:
        raise UserError(f"this GPT-2 config does not fit tinygpt: {'; '.join(problems)}")
    return GPTConfig(
        vocab_size=c.vocab_size,
        block_size=block_size or c.n_positions,
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.n_embd,
        dropout=0.0,
        bias=True,
        tie_embeddings=c.tie_word_embeddings if tie_embeddings is None else tie_embeddings,
        gelu_approximate="none" if c.activation_function == EXACT_GELU else "tanh",
    )


GUESS_EOT = -1  # export's eot when the tokenizer is not known: <|endoftext|> guessed from a 50,257-token vocabulary


def config_to_hf(config: GPTConfig, eot: int | None = GUESS_EOT):
    """The ``transformers`` config of our ``config``, for the class :func:`architecture` picks (``architectures``).

    GPT-2's block gives a ``GPT2Config`` (``UserError`` for ``bias=False`` or ``lm_head_bias=True``);
    Llama's and Qwen3's come from :func:`model.hf_llama.config_to_hf`.  ``eot``: the tokenizer's
    end-of-text id, written as bos and eos (None: it has none); :data:`GUESS_EOT` guesses
    ``<|endoftext|>`` from a 50,257-token vocabulary, which a ``bpe:50257`` run also has.  Raises
    :class:`UserError` as :func:`architecture` does for a set no architecture expresses.
    """
    arch = architecture(config)
    if eot == GUESS_EOT:
        eot = GPT2_VOCAB_SIZE - 1 if config.vocab_size == GPT2_VOCAB_SIZE else None  # <|endoftext|> for gpt2
    if arch != GPT2:
        return hf_llama.config_to_hf(config, arch, eot)
    if not config.bias:
        raise UserError(
            "model.bias=false has no GPT-2 equivalent (GPT-2's Linears and LayerNorms all have biases): "
            "export a model trained with model.bias=true"
        )
    if config.lm_head_bias:
        raise UserError(
            "model.lm_head_bias=true has no GPT-2 equivalent (GPT2LMHeadModel's lm_head has no bias): "
            "export a model trained without it"
        )
    return optional.transformers().GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=None,
        layer_norm_epsilon=LAYER_NORM_EPS,
        activation_function="gelu_new" if config.gelu_approximate == "tanh" else EXACT_GELU,
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        tie_word_embeddings=config.tie_embeddings,
        bos_token_id=eot,
        eos_token_id=eot,
        architectures=["GPT2LMHeadModel"],
    )


# ----------------------------------------------------------------------------- weights


def state_from_hf(hf_state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """A ``GPT2LMHeadModel.state_dict()`` -> our ``GPT(config).state_dict()`` keys, float32.

    A Llama or Qwen3 ``config`` (RoPE) goes to :func:`model.hf_llama.state_from_hf`.

    ``c_attn.weight`` ``(n_embd, 3 n_embd)`` splits into three ``(n_embd, n_embd)`` blocks,
    each transposed into an ``nn.Linear`` weight ``(out, in)``; every other Conv1D weight is
    transposed.  The position table is cropped to ``config.block_size``.  Tied (GPT-2's
    ``lm_head`` is ``wte``) into untied: the matrix is copied into both.
    Raises :class:`UserError` for a missing or unexpected weight.
    """
    if config.position == "rope":
        return hf_llama.state_from_hf(hf_state, config)
    state = {
        k: v for k, v in hf_state.items() if not re.search(r"\.attn\.(masked_)?bias$", k)
    }  # old causal-mask buffers
    C = config.n_embd
    used = set()

    def take(key: str) -> torch.Tensor:
        if key not in state:
            raise UserError(f"the GPT-2 weights lack {key}: use a complete GPT2LMHeadModel checkpoint")
        used.add(key)
        return state[key].detach().to(torch.float32)

    out = {
        "wte.weight": take("transformer.wte.weight"),
        "wpe.weight": take("transformer.wpe.weight")[: config.block_size],
    }
    for i in range(config.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        w, bias = take(h + "attn.c_attn.weight"), take(h + "attn.c_attn.bias")  # (C, 3C), (3C,)
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[b + f"attn.{name}.weight"] = w[:, j * C : (j + 1) * C].t()  # (C, C) as (out, in)
            out[b + f"attn.{name}.bias"] = bias[j * C : (j + 1) * C]
        for ours, theirs in (
            ("attn.out_proj", "attn.c_proj"),
            ("mlp.up_proj", "mlp.c_fc"),
            ("mlp.down_proj", "mlp.c_proj"),
        ):
            out[b + ours + ".weight"] = take(h + theirs + ".weight").t()  # Conv1D (in, out) -> Linear (out, in)
            out[b + ours + ".bias"] = take(h + theirs + ".bias")
        for ln in ("ln_1", "ln_2"):
            out[b + ln + ".weight"], out[b + ln + ".bias"] = take(h + ln + ".weight"), take(h + ln + ".bias")
    out["ln_f.weight"], out["ln_f.bias"] = take("transformer.ln_f.weight"), take("transformer.ln_f.bias")
    out["lm_head.weight"] = take("lm_head.weight") if "lm_head.weight" in state else out["wte.weight"]
    if config.tie_embeddings and not torch.equal(out["lm_head.weight"], out["wte.weight"]):
        raise UserError("the GPT-2 checkpoint's lm_head differs from its wte: import it untied (tie_embeddings=false)")
    extra = sorted(set(state) - used)
    if extra:
        raise UserError(
            f"the GPT-2 weights hold {extra[0]} ({len(extra)} unexpected tensors): "
            f"check that the config's n_layer={config.n_layer} matches the checkpoint"
        )
    return out


def state_to_hf(model: GPT) -> dict[str, torch.Tensor]:
    """Our model -> ``GPT2LMHeadModel`` state-dict keys, contiguous CPU float32 tensors, none sharing memory.

    Llama's and Qwen3's blocks (:func:`architecture`) go to :func:`model.hf_llama.state_to_hf`.

    The inverse of :func:`state_from_hf`.  A tied model's matrix appears once (as
    ``transformer.wte.weight``, HF's tied source), so safetensors, which refuses tensors
    that share memory, can write it; an untied model adds ``lm_head.weight``.
    """
    if architecture(model.config) != GPT2:
        return hf_llama.state_to_hf(model)
    ours = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": ours["wte.weight"], "transformer.wpe.weight": ours["wpe.weight"]}
    for i in range(model.config.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        qkv = ("q_proj", "k_proj", "v_proj")
        out[h + "attn.c_attn.weight"] = torch.cat([ours[b + f"attn.{n}.weight"].t() for n in qkv], dim=1)  # (C, 3C)
        out[h + "attn.c_attn.bias"] = torch.cat([ours[b + f"attn.{n}.bias"] for n in qkv])
        for ours_name, theirs in (
            ("attn.out_proj", "attn.c_proj"),
            ("mlp.up_proj", "mlp.c_fc"),
            ("mlp.down_proj", "mlp.c_proj"),
        ):
            out[h + theirs + ".weight"] = ours[b + ours_name + ".weight"].t()  # Linear (out, in) -> Conv1D (in, out)
            out[h + theirs + ".bias"] = ours[b + ours_name + ".bias"]
        for ln in ("ln_1", "ln_2"):
            out[h + ln + ".weight"], out[h + ln + ".bias"] = ours[b + ln + ".weight"], ours[b + ln + ".bias"]
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = ours["ln_f.weight"], ours["ln_f.bias"]
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = ours["lm_head.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}  # clone: no view of the live model goes to disk


def is_hub_id(source: str) -> bool:
    """Whether ``source`` could name a hub repository ('gpt2', 'openai-community/gpt2'), not a path.

    A name whose first component exists here (``hf/nope`` beside an ``hf/`` folder) is a
    mistyped local path: trying it on the hub would only cost a minute of retries.
    """
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", source) or source.startswith((".", "~")):
        return False
    return not Path(source.split("/")[0]).exists() or "/" not in source


def where(source) -> str:
    """What to hand ``from_pretrained``: the expanded path of a local folder, else the hub id as given."""
    path = Path(str(source)).expanduser()
    return str(path) if path.exists() else str(source)


def read_hf(read, source, what: str = "GPT-2"):
    """``read()``, with transformers' errors (no network, no such repo, unreadable, truncated or
    misshapen weight files) as one-line UserErrors naming ``what`` was read."""
    try:
        return read()
    except Exception as e:  # OSError, ValueError, RuntimeError (size mismatch), SafetensorError, ...
        first = first_line(e)
        raise UserError(
            f"cannot load {what} from {source} ({first}): give a local folder written by save_pretrained"
        ) from None


def load_hf_model(source):
    """A ``GPT2LMHeadModel``, ``LlamaForCausalLM`` or ``Qwen3ForCausalLM`` from a folder or a hub id (in eval
    mode), or one already in memory (returned as is).

    A folder is read with the ``from_pretrained`` of the class its ``model_type`` names
    (:data:`MODEL_TYPES`; safetensors, or PyTorch weights with ``weights_only=True``); a name
    that is not a folder is tried on the hub, which works only where it is reachable.  Raises
    :class:`UserError` for a missing folder, an unreachable hub, another architecture, or a
    checkpoint missing weights (which ``from_pretrained`` would otherwise fill with random values).
    """
    transformers = optional.transformers()
    classes = tuple(getattr(transformers, name) for name in MODEL_TYPES.values())
    if isinstance(source, transformers.PreTrainedModel):
        if not isinstance(source, classes):
            raise UserError(
                f"{type(source).__name__} is not one of {', '.join(MODEL_TYPES.values())}: tinygpt imports those only"
            )
        return source
    path = Path(source).expanduser()
    if not path.exists() and not is_hub_id(str(source)):
        raise UserError(
            f"folder {source} does not exist: give a folder written by save_pretrained (config.json + weights)"
        )
    if path.exists() and not (path / "config.json").is_file():
        raise UserError(f"{source} has no config.json: give a folder written by save_pretrained")
    config = read_hf(lambda: transformers.AutoConfig.from_pretrained(where(source)), source, "a config")
    if config.model_type not in MODEL_TYPES:
        raise UserError(
            f"{source} holds a {config.model_type!r} model: tinygpt imports {', '.join(MODEL_TYPES)} models only"
        )
    arch = MODEL_TYPES[config.model_type]
    model, info = read_hf(
        lambda: getattr(transformers, arch).from_pretrained(where(source), output_loading_info=True),
        source,
        NAMES[arch],
    )
    missing = [k for k in info["missing_keys"] if k != "lm_head.weight" or not config.tie_word_embeddings]
    mismatched = [m[0] if isinstance(m, tuple) else m for m in info["mismatched_keys"]]
    # from_pretrained drops weights its config has no place for (a config.json that lists fewer
    # layers than the file holds): refuse them, but for the attention-mask buffers old GPT-2
    # checkpoints carry and the heads of other GPT-2 models.
    unexpected = [
        k
        for k in info["unexpected_keys"]
        if not k.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"))
        and not k.startswith(("score.", "multiple_choice_head."))
    ]
    if missing or mismatched or unexpected:
        bad = sorted(missing or mismatched or unexpected)[0]
        what = "is missing or misshapen" if missing or mismatched else "has no place in its config.json"
        raise UserError(
            f"the weights in {source} do not fit their config ({bad} {what}): "
            "use a complete checkpoint written by save_pretrained"
        )
    return model.eval()


def from_hf(source, tie_embeddings: bool | None = None, block_size: int | None = None) -> GPT:
    """Our :class:`GPT` (eval mode) holding the weights of a GPT-2, Llama or Qwen3 folder, hub id or model.

    Same logits as the HF model (within float rounding: 1e-5 is tested).  ``tie_embeddings``
    and ``block_size`` as in :func:`config_from_hf`.  Raises :class:`UserError` as
    :func:`load_hf_model` and :func:`config_from_hf` do.
    """
    hf_model = load_hf_model(source)
    config = config_from_hf(hf_model.config, tie_embeddings, block_size)
    model = GPT(config)
    model.load_state_dict(state_from_hf(hf_model.state_dict(), config))
    return model.eval()


def load_into(model: GPT, source) -> dict:
    """Copy GPT-2 weights into an existing ``model`` of the same shape (``train.py --init-from``).

    The parameters are overwritten in place, so an optimizer built on them stays valid.
    Returns a record of where the weights came from (source, GPT-2 config, sha256 of the
    weight files of a local folder), for the run folder.  Raises :class:`UserError` when the
    checkpoint does not fit ``model.config`` (other shape or GELU form, or a tied model from untied weights).
    """
    hf_model = load_hf_model(source)
    if hf_model.config.model_type != "gpt2":
        raise UserError(
            f"{source} holds a {hf_model.config.model_type!r} model and --init-from reads GPT-2 only: "
            f"import it with hf.py import --hf {source}"
        )
    config = config_from_hf(hf_model.config, model.config.tie_embeddings, model.config.block_size)
    if (config.n_layer, config.n_head, config.n_embd, config.vocab_size, config.gelu_approximate) != (
        model.config.n_layer,
        model.config.n_head,
        model.config.n_embd,
        model.config.vocab_size,
        model.config.gelu_approximate,
    ):
        raise UserError(
            f"the GPT-2 weights in {source} are {config.n_layer} layers x {config.n_head} heads x "
            f"{config.n_embd} wide with {config.vocab_size} tokens and gelu_approximate="
            f"{config.gelu_approximate!r}; the model to fill differs: take its shape from them"
        )
    state = state_from_hf(hf_model.state_dict(), config)
    # The shape matches, but the block may not be GPT-2's (no biases, rotary positions, another MLP): a
    # weight GPT-2 has that the model lacks, or the reverse, would be dropped or missing without a word.
    mine = model.state_dict()
    extra, missing = sorted(state.keys() - mine.keys()), sorted(mine.keys() - state.keys())
    if extra or missing:
        name = (extra or missing)[0]
        raise UserError(
            f"the model to fill is not GPT-2's block: {name} is {'in' if extra else 'missing from'} the GPT-2 "
            f"weights in {source} {'but not in the model' if extra else 'though the model has it'}; give it GPT-2's "
            "choices (learned positions, LayerNorm, GELU, biases)"
        )
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            tensor.copy_(state[name])  # a tied matrix is one Parameter under two names: copied twice, same values
    folder = Path(str(source)).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")) if folder.is_dir() else []
    return {
        "source": str(folder.resolve()) if folder.is_dir() else str(source),
        "hf_config": {
            k: getattr(hf_model.config, k)
            for k in (
                "model_type",
                "vocab_size",
                "n_positions",
                "n_embd",
                "n_layer",
                "n_head",
                "activation_function",
                "tie_word_embeddings",
            )
        },
        "sha256": {p.name: sha256_file(p) for p in files},  # in chunks: weight files may be GBs
    }


# ----------------------------------------------------------------------------- export


def export(
    model: GPT, out_dir: Path, write_more: Callable[[Path], None] | None = None, *, eot: int | None = GUESS_EOT
) -> Path:
    """Write ``model`` as a folder the ``from_pretrained`` of its :func:`architecture` loads; returns ``out_dir``.

    ``config.json`` (:func:`config_to_hf`) and ``model.safetensors`` (:func:`state_to_hf`: a
    tied matrix once, reloaded tied because ``tie_word_embeddings=True``; an untied model
    adds ``lm_head.weight`` and ``tie_word_embeddings=False``); then ``write_more(folder)``
    adds files of the caller's (the tokenizer's: :func:`data.hf_tokenizer.write_tokenizer_files`).
    ``eot``: the tokenizer's end-of-text id for bos and eos (:func:`config_to_hf`).
    The folder is built under a temporary name and renamed into place whole
    (:func:`core.files.move_into_place`), so a failed export leaves nothing half-written.
    Raises :class:`UserError` if ``out_dir`` exists and is not empty, or no architecture expresses the model.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir} already exists and is not empty: give a new --out folder")
    hf_config = config_to_hf(model.config, eot)
    save_file = optional.safetensors_torch().save_file
    tmp = temp_folder_beside(out_dir)  # readable by others: an export is for others to load
    try:
        hf_config.save_pretrained(str(tmp))
        save_file(state_to_hf(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})  # HF checks format=pt
        if write_more is not None:
            write_more(tmp)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        move_into_place(tmp, out_dir)  # never over a folder that filled up since the check above
    except FileExistsError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{out_dir} was filled by something else during the export: give a new --out folder") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
