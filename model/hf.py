"""GPT-2 weights in and out: import Hugging Face GPT-2 checkpoints, export tinygpt models to them.

    python -m model.hf export --run runs/default --out hf/default   # a folder GPT2LMHeadModel.from_pretrained loads
    python -m model.hf import --hf hf/default --out runs/imported   # a run folder sample.py reads
    python -m model.hf import --hf openai-community/gpt2 --out runs/gpt2   # a hub id: only where the hub is reachable
    python train.py --init-from hf/gpt2 --data.tokenizer=gpt2 ...   # fine-tune imported weights (train.py)

From Python::

    from model.hf import from_hf, export
    model = from_hf(GPT2LMHeadModel(GPT2Config(...)))   # or a folder written by save_pretrained
    export(model, "hf/mine", tokenizer)                    # config.json + model.safetensors + tokenizer files

The layouts (transformers' ``modeling_gpt2.py``): HF keeps each block's q, k and v projections
in one ``c_attn`` ``Conv1D`` whose weight is ``(in, 3 * out)`` -- ``y = x @ W + b``, the
transpose of ``nn.Linear``'s ``(out_features, in_features)`` -- and likewise ``c_proj``,
``mlp.c_fc`` and ``mlp.c_proj``.  Import splits ``c_attn`` into ``q_proj`` / ``k_proj`` /
``v_proj`` and transposes; export does the reverse.  GPT-2 ties ``lm_head`` to ``wte``.

``transformers`` and ``safetensors`` are optional (training does not need them): they are
imported inside the functions here, and a missing one is a one-line :class:`UserError`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from errors import UserError, first_line
from model.gpt import GPT, GPTConfig

GPT2_VOCAB_SIZE = 50257  # the gpt2 tokenizer: 50,000 merges + 256 bytes + <|endoftext|>
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which tinygpt uses; GPT-2's layer_norm_epsilon
# gelu_new (GPT-2's) and gelu_pytorch_tanh are both 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
# which is F.gelu(approximate="tanh") in our MLP.
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
TOKENIZER_FILE = "tinygpt_tokenizer.json"  # our own tokenizer description in an exported folder


def _transformers():
    """The ``transformers`` module, or a one-line :class:`UserError` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError("GPT-2 import/export needs Hugging Face transformers: pip install transformers safetensors") from None
    transformers.logging.set_verbosity_error()  # its notices and progress bars would break our one-line output
    transformers.logging.disable_progress_bar()
    import huggingface_hub.utils

    huggingface_hub.utils.logging.set_verbosity_error()  # its "Retrying in Ns" lines too
    return transformers


def _safetensors_torch():
    """``safetensors.torch``, or a one-line :class:`UserError` saying how to install it."""
    try:
        import safetensors.torch
    except ImportError:
        raise UserError("GPT-2 export needs safetensors: pip install transformers safetensors") from None
    return safetensors.torch


# ----------------------------------------------------------------------------- configs


def config_from_hf(hf_config, tie_embeddings: bool | None = None, block_size: int | None = None) -> GPTConfig:
    """Our :class:`GPTConfig` for a ``transformers.GPT2Config``; ``UserError`` if tinygpt cannot represent it.

    ``n_positions`` -> ``block_size`` (or the smaller ``block_size`` given: the position table
    is then cropped, as nanoGPT's ``crop_block_size``), ``n_embd``, ``n_layer``, ``n_head``,
    ``vocab_size`` are taken over; ``tie_embeddings`` defaults to ``tie_word_embeddings``
    (asking for an untied model from a tied one copies the matrix into both).  Refused: another
    ``model_type``, an activation other than tanh-GELU, ``layer_norm_epsilon`` other than 1e-5,
    an MLP width other than 4 n_embd, and the attention variants tinygpt does not have.
    Dropout is left at 0 (set ``model.dropout`` to fine-tune with it).
    """
    c = hf_config
    if getattr(c, "model_type", None) != "gpt2":
        raise UserError(f"this is a {getattr(c, 'model_type', None)!r} model, not GPT-2: tinygpt imports GPT-2 only")
    problems = []
    if c.activation_function not in TANH_GELUS:
        problems.append(f"activation_function={c.activation_function!r} (tinygpt's MLP uses tanh GELU: {' or '.join(TANH_GELUS)})")
    if abs(c.layer_norm_epsilon - LAYER_NORM_EPS) > 1e-12:
        problems.append(f"layer_norm_epsilon={c.layer_norm_epsilon} (tinygpt's LayerNorms use {LAYER_NORM_EPS})")
    if c.n_inner not in (None, 4 * c.n_embd):
        problems.append(f"n_inner={c.n_inner} (tinygpt's MLP is 4 * n_embd = {4 * c.n_embd} wide)")
    for flag, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False), ("add_cross_attention", False)):
        if getattr(c, flag, want) != want:
            problems.append(f"{flag}={getattr(c, flag)} (tinygpt needs {want})")
    if block_size is not None and not 1 <= block_size <= c.n_positions:
        problems.append(f"block_size={block_size} (at most n_positions={c.n_positions}: the positions beyond were never trained)")
    if tie_embeddings and not c.tie_word_embeddings:
        problems.append("tie_word_embeddings=False while a tied model was asked for (its two matrices differ): import it untied")
    if problems:
        raise UserError(f"this GPT-2 config does not fit tinygpt: {'; '.join(problems)}")
    return GPTConfig(
        vocab_size=c.vocab_size, block_size=block_size or c.n_positions, n_layer=c.n_layer, n_head=c.n_head,
        n_embd=c.n_embd, dropout=0.0, bias=True,
        tie_embeddings=c.tie_word_embeddings if tie_embeddings is None else tie_embeddings,
    )


def config_to_hf(config: GPTConfig):
    """The ``transformers.GPT2Config`` of our ``config``; ``UserError`` for ``bias=False`` (GPT-2 always has biases)."""
    if not config.bias:
        raise UserError("model.bias=false has no GPT-2 equivalent (GPT-2's Linears and LayerNorms all have biases): "
                        "export a model trained with model.bias=true")
    eot = GPT2_VOCAB_SIZE - 1 if config.vocab_size == GPT2_VOCAB_SIZE else None  # <|endoftext|> for gpt2
    return _transformers().GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd, n_layer=config.n_layer,
        n_head=config.n_head, n_inner=None, activation_function="gelu_new", layer_norm_epsilon=LAYER_NORM_EPS,
        resid_pdrop=config.dropout, embd_pdrop=config.dropout, attn_pdrop=config.dropout,
        tie_word_embeddings=config.tie_embeddings, bos_token_id=eot, eos_token_id=eot,
        architectures=["GPT2LMHeadModel"],
    )


# ----------------------------------------------------------------------------- weights


def state_from_hf(hf_state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """A ``GPT2LMHeadModel.state_dict()`` -> our ``GPT(config).state_dict()`` keys, float32.

    ``c_attn.weight`` ``(n_embd, 3 n_embd)`` splits into three ``(n_embd, n_embd)`` blocks,
    each transposed into an ``nn.Linear`` weight ``(out, in)``; every other Conv1D weight is
    transposed.  The position table is cropped to ``config.block_size``.  Tied (GPT-2's
    ``lm_head`` is ``wte``) into untied: the matrix is copied into both.
    Raises :class:`UserError` for a missing or unexpected weight.
    """
    state = {k: v for k, v in hf_state.items() if not re.search(r"\.attn\.(masked_)?bias$", k)}  # old causal-mask buffers
    C = config.n_embd
    used = set()

    def take(key: str) -> torch.Tensor:
        if key not in state:
            raise UserError(f"the GPT-2 weights lack {key}: use a complete GPT2LMHeadModel checkpoint")
        used.add(key)
        return state[key].detach().to(torch.float32)

    out = {"wte.weight": take("transformer.wte.weight"), "wpe.weight": take("transformer.wpe.weight")[: config.block_size]}
    for i in range(config.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        w, bias = take(h + "attn.c_attn.weight"), take(h + "attn.c_attn.bias")  # (C, 3C), (3C,)
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[b + f"attn.{name}.weight"] = w[:, j * C:(j + 1) * C].t()  # (C, C) as (out, in)
            out[b + f"attn.{name}.bias"] = bias[j * C:(j + 1) * C]
        for ours, theirs in (("attn.out_proj", "attn.c_proj"), ("mlp.up_proj", "mlp.c_fc"), ("mlp.down_proj", "mlp.c_proj")):
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
        raise UserError(f"the GPT-2 weights hold {extra[0]} ({len(extra)} unexpected tensors): "
                        f"check that the config's n_layer={config.n_layer} matches the checkpoint")
    return out


def state_to_hf(model: GPT) -> dict[str, torch.Tensor]:
    """Our model -> ``GPT2LMHeadModel`` state-dict keys, contiguous CPU float32 tensors, none sharing memory.

    The inverse of :func:`state_from_hf`.  A tied model's matrix appears once (as
    ``transformer.wte.weight``, HF's tied source), so safetensors, which refuses tensors
    that share memory, can write it; an untied model adds ``lm_head.weight``.
    """
    ours = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": ours["wte.weight"], "transformer.wpe.weight": ours["wpe.weight"]}
    for i in range(model.config.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        qkv = ("q_proj", "k_proj", "v_proj")
        out[h + "attn.c_attn.weight"] = torch.cat([ours[b + f"attn.{n}.weight"].t() for n in qkv], dim=1)  # (C, 3C)
        out[h + "attn.c_attn.bias"] = torch.cat([ours[b + f"attn.{n}.bias"] for n in qkv])
        for ours_name, theirs in (("attn.out_proj", "attn.c_proj"), ("mlp.up_proj", "mlp.c_fc"), ("mlp.down_proj", "mlp.c_proj")):
            out[h + theirs + ".weight"] = ours[b + ours_name + ".weight"].t()  # Linear (out, in) -> Conv1D (in, out)
            out[h + theirs + ".bias"] = ours[b + ours_name + ".bias"]
        for ln in ("ln_1", "ln_2"):
            out[h + ln + ".weight"], out[h + ln + ".bias"] = ours[b + ln + ".weight"], ours[b + ln + ".bias"]
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = ours["ln_f.weight"], ours["ln_f.bias"]
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = ours["lm_head.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}  # clone: no view of the live model goes to disk


def _is_hub_id(source: str) -> bool:
    """Whether ``source`` could name a hub repository ('gpt2', 'openai-community/gpt2'), not a path.

    A name whose first component exists here (``hf/nope`` beside an ``hf/`` folder) is a
    mistyped local path: trying it on the hub would only cost a minute of retries.
    """
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", source) or source.startswith((".", "~")):
        return False
    return not Path(source.split("/")[0]).exists() or "/" not in source


def _where(source) -> str:
    """What to hand ``from_pretrained``: the expanded path of a local folder, else the hub id as given."""
    path = Path(str(source)).expanduser()
    return str(path) if path.exists() else str(source)


def _read_hf(read, source):
    """``read()``, with transformers' errors (no network, no such repo, unreadable, truncated or
    misshapen weight files) as one-line UserErrors."""
    try:
        return read()
    except Exception as e:  # OSError, ValueError, RuntimeError (size mismatch), SafetensorError, ...
        first = first_line(e)
        raise UserError(f"cannot load GPT-2 from {source} ({first}): give a local folder written by save_pretrained") from None


def load_hf_model(source):
    """A ``GPT2LMHeadModel`` from a folder or a hub id (in eval mode), or one already in memory (returned as is).

    A folder is read with ``GPT2LMHeadModel.from_pretrained`` (safetensors, or PyTorch weights
    with ``weights_only=True``); a name that is not a folder is tried on the hub, which works
    only where it is reachable.  Raises :class:`UserError` for a missing folder, an
    unreachable hub, another architecture, or a checkpoint missing weights (which
    ``from_pretrained`` would otherwise fill with random values).
    """
    transformers = _transformers()
    if isinstance(source, transformers.PreTrainedModel):
        if not isinstance(source, transformers.GPT2LMHeadModel):
            raise UserError(f"{type(source).__name__} is not a GPT2LMHeadModel: tinygpt imports GPT-2 only")
        return source
    path = Path(source).expanduser()
    if not path.exists() and not _is_hub_id(str(source)):
        raise UserError(f"GPT-2 folder {source} does not exist: give a folder written by save_pretrained (config.json + weights)")
    if path.exists() and not (path / "config.json").is_file():
        raise UserError(f"{source} has no config.json: give a folder written by save_pretrained")
    config = _read_hf(lambda: transformers.AutoConfig.from_pretrained(_where(source)), source)
    if config.model_type != "gpt2":
        raise UserError(f"{source} holds a {config.model_type!r} model, not GPT-2: tinygpt imports GPT-2 only")
    model, info = _read_hf(lambda: transformers.GPT2LMHeadModel.from_pretrained(_where(source), output_loading_info=True),
                           source)
    missing = [k for k in info["missing_keys"] if k != "lm_head.weight" or not config.tie_word_embeddings]
    mismatched = [m[0] if isinstance(m, tuple) else m for m in info["mismatched_keys"]]
    # from_pretrained drops weights its config has no place for (a config.json that lists fewer
    # layers than the file holds): refuse them, but for the attention-mask buffers old GPT-2
    # checkpoints carry and the heads of other GPT-2 models.
    unexpected = [k for k in info["unexpected_keys"]
                  if not k.endswith((".attn.bias", ".attn.masked_bias")) and not k.startswith(("score.", "multiple_choice_head."))]
    if missing or mismatched or unexpected:
        bad = sorted(missing or mismatched or unexpected)[0]
        what = "is missing or misshapen" if missing or mismatched else "has no place in its config.json"
        raise UserError(f"the weights in {source} do not fit their config ({bad} {what}): "
                        "use a complete checkpoint written by save_pretrained")
    return model.eval()


def from_hf(source, tie_embeddings: bool | None = None, block_size: int | None = None) -> GPT:
    """Our :class:`GPT` (eval mode) holding the weights of a GPT-2 folder, hub id or ``GPT2LMHeadModel``.

    Same logits as the HF model (within float rounding: 1e-5 is tested).  ``tie_embeddings``
    and ``block_size`` as in :func:`config_from_hf`.  Raises :class:`UserError` as
    :func:`load_hf_model` and :func:`config_from_hf` do.
    """
    hf_model = load_hf_model(source)
    config = config_from_hf(hf_model.config, tie_embeddings, block_size)
    model = GPT(config)
    model.load_state_dict(state_from_hf(hf_model.state_dict(), config))
    return model.eval()


def _sha256_file(path: Path) -> str:
    from data.tokenizers import sha256_file  # data/ is imported lazily here, as elsewhere in this module

    return sha256_file(path)


def load_into(model: GPT, source) -> dict:
    """Copy GPT-2 weights into an existing ``model`` of the same shape (``train.py --init-from``).

    The parameters are overwritten in place, so an optimizer built on them stays valid.
    Returns a record of where the weights came from (source, GPT-2 config, sha256 of the
    weight files of a local folder), for the run folder.  Raises :class:`UserError` when the
    checkpoint does not fit ``model.config`` (other shape, or a tied model from untied weights).
    """
    hf_model = load_hf_model(source)
    config = config_from_hf(hf_model.config, model.config.tie_embeddings, model.config.block_size)
    if (config.n_layer, config.n_head, config.n_embd, config.vocab_size) != (
            model.config.n_layer, model.config.n_head, model.config.n_embd, model.config.vocab_size):
        raise UserError(f"the GPT-2 weights in {source} are {config.n_layer} layers x {config.n_head} heads x "
                        f"{config.n_embd} wide with {config.vocab_size} tokens; the model to fill differs: take its shape from them")
    state = state_from_hf(hf_model.state_dict(), config)
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            tensor.copy_(state[name])  # a tied matrix is one Parameter under two names: copied twice, same values
    folder = Path(str(source)).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")) if folder.is_dir() else []
    return {
        "source": str(folder.resolve()) if folder.is_dir() else str(source),
        "hf_config": {k: getattr(hf_model.config, k) for k in ("model_type", "vocab_size", "n_positions", "n_embd", "n_layer",
                                                             "n_head", "activation_function", "tie_word_embeddings")},
        "sha256": {p.name: _sha256_file(p) for p in files},  # in chunks: weight files may be GBs
    }


# ----------------------------------------------------------------------------- tokenizer files


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (``encoder.py`` in openai/gpt-2), as vocab.json spells tokens."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(rest)}}


def gpt2_vocab_and_merges(bpe_path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's ``vocab.json`` and ``merges.txt`` contents, rebuilt from the tiktoken rank file.

    ``gpt2.tiktoken`` lists each token's bytes with its rank, which is its GPT-2 id (tiktoken
    builds the ranks from ``encoder.json`` and checks they agree).  Rank ``r >= 256`` was
    made by merge ``r - 256``; its two halves are what byte-pair encoding of the token's
    bytes with the merges of lower rank alone leaves (tiktoken's own merge rule), so the
    merges come out in GPT-2's order.  The tokens are spelled through
    :func:`_bytes_to_unicode`.  ``tests/test_hf.py`` checks that a tokenizer built from these
    encodes text exactly as tiktoken does.
    """
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in bpe_path.read_bytes().splitlines() if line)}
    spell = _bytes_to_unicode()
    text = {tok: "".join(spell[b] for b in tok) for tok in ranks}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(tok) == 1:
            continue
        parts = [bytes([b]) for b in tok]
        while len(parts) > 2:  # apply the lowest-ranked merge that exists before this token, as tiktoken does
            r, i = min((ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1))
            if r >= rank:
                raise UserError(f"{bpe_path}: token {tok!r} cannot be built from earlier merges: it is not a GPT-2 BPE file")
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        merges.append((text[parts[0]], text[parts[1]]))
    vocab = {text[tok]: rank for tok, rank in ranks.items()}
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def write_tokenizer_files(tokenizer, folder: Path, max_length: int | None = None) -> None:
    """Write the tokenizer files a Hugging Face user needs into ``folder``.

    gpt2: ``vocab.json`` and ``merges.txt`` (GPT-2's own format), ``tokenizer.json`` +
    ``tokenizer_config.json`` (written by transformers' ``GPT2TokenizerFast`` loaded from the
    first two, so ``AutoTokenizer.from_pretrained(folder)`` works; ``model_max_length`` is
    ``max_length``, the model's block_size) and ``gpt2.tiktoken`` (tiktoken's and tinygpt's
    format).  Every tokenizer also gets ``tinygpt_tokenizer.json`` (our description).  The
    char tokenizer has no Hugging Face equivalent: for it that last file is all (its
    ``chars[i]`` is token ``i``).
    """
    from data.tokenizers import GPT2Tokenizer, atomic_write_bytes

    atomic_write_bytes(folder / TOKENIZER_FILE, (json.dumps(tokenizer.to_dict(), ensure_ascii=False) + "\n").encode())
    if not isinstance(tokenizer, GPT2Tokenizer):
        return
    vocab, merges = gpt2_vocab_and_merges(tokenizer.bpe_path)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    kwargs = {"model_max_length": max_length} if max_length else {}
    _transformers().GPT2TokenizerFast.from_pretrained(str(folder), **kwargs).save_pretrained(str(folder))
    shutil.copyfile(tokenizer.bpe_path, folder / "gpt2.tiktoken")


# ----------------------------------------------------------------------------- export


def export(model: GPT, out_dir: Path, tokenizer=None) -> Path:
    """Write ``model`` as a folder ``GPT2LMHeadModel.from_pretrained(out_dir)`` loads; returns ``out_dir``.

    ``config.json`` (:func:`config_to_hf`), ``model.safetensors`` (:func:`state_to_hf`: a
    tied matrix once, reloaded tied because ``tie_word_embeddings=True``; an untied model
    adds ``lm_head.weight`` and ``tie_word_embeddings=False``) and, given a ``tokenizer``,
    :func:`write_tokenizer_files`.  The folder is built under a temporary name and renamed
    into place, so a failed export leaves nothing half-written.  Raises :class:`UserError`
    if ``out_dir`` exists and is not empty, or the model has no GPT-2 form.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir} already exists and is not empty: give a new --out folder")
    hf_config = config_to_hf(model.config)
    save_file = _safetensors_torch().save_file
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private (0o700): an export is for others to load
        hf_config.save_pretrained(str(tmp))
        save_file(state_to_hf(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})  # HF checks format=pt
        if tokenizer is not None:
            write_tokenizer_files(tokenizer, tmp, model.config.block_size)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


# ----------------------------------------------------------------------------- train.py --init-from


def init_from_overrides(source: str, config_path: str | None, overrides: dict) -> dict:
    """The config overrides of a ``train.py --init-from`` run: the model shape comes from the GPT-2 config.

    ``n_layer``, ``n_head``, ``n_embd``, ``block_size`` (``n_positions``) and ``bias`` are
    set from ``source``'s config (read without loading weights); ``tie_embeddings`` from
    ``tie_word_embeddings`` unless the user chose (untied from tied copies the matrix).  A
    smaller ``block_size`` is allowed (the position table is cropped).  Raises
    :class:`UserError` when the TOML file or ``--model.*`` sets another shape, the tokenizer
    is not gpt2, or the vocabulary is not GPT-2's 50257 tokens.
    """
    from config import load_toml, merge

    transformers = _transformers()
    if not Path(source).expanduser().exists() and not _is_hub_id(source):
        raise UserError(f"--init-from {source} does not exist: give a folder written by save_pretrained (config.json + weights)")
    hf = _read_hf(lambda: transformers.AutoConfig.from_pretrained(_where(source)), source)
    config_from_hf(hf)  # refuses what tinygpt cannot represent
    user = merge(load_toml(config_path) if config_path else {}, overrides)
    tokenizer = user.get("data", {}).get("tokenizer", "gpt2")
    if tokenizer != "gpt2":
        raise UserError(f"--init-from needs the gpt2 tokenizer the weights were trained with, not {tokenizer!r}: "
                        "use --data.tokenizer=gpt2")
    if hf.vocab_size != GPT2_VOCAB_SIZE:
        raise UserError(f"--init-from {source} has {hf.vocab_size} tokens, not the gpt2 tokenizer's {GPT2_VOCAB_SIZE}: "
                        "give a GPT-2 checkpoint")
    shape = {"n_layer": hf.n_layer, "n_head": hf.n_head, "n_embd": hf.n_embd, "block_size": hf.n_positions, "bias": True}
    model = dict(user.get("model", {}))
    for key, value in shape.items():
        if key in model and model[key] != value and not (key == "block_size" and 1 <= model[key] < value):
            where = f"{config_path} or the command line" if config_path else "the command line"
            raise UserError(f"model.{key}={model[key]} (from {where}) conflicts with --init-from {source}, which has "
                            f"{key}={value}: drop it, the shape comes from the imported weights")
        model.setdefault(key, value)
    if model.get("tie_embeddings") and not hf.tie_word_embeddings:
        where = f"{config_path} or the command line" if config_path else "the command line"
        raise UserError(f"--init-from {source} has an untied lm_head but model.tie_embeddings=true (from {where}): "
                        "drop it, or set it to false")
    model.setdefault("tie_embeddings", bool(hf.tie_word_embeddings))
    return merge(overrides, {"model": model})


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``python -m model.hf export|import``; returns the exit status (2 on bad input)."""
    from config import ArgumentParser

    parser = ArgumentParser(prog="python -m model.hf", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="Run folder -> Hugging Face GPT-2 folder.")
    ex.add_argument("--run", required=True, type=Path, help="Run folder, e.g. runs/default.")
    ex.add_argument("--checkpoint", choices=("best", "last"), default="best", help="Which checkpoint to export.")
    ex.add_argument("--out", required=True, type=Path, help="New folder to write (config.json, model.safetensors, tokenizer).")
    im = sub.add_parser("import", help="Hugging Face GPT-2 folder (or hub id) -> run folder for sample.py.")
    im.add_argument("--hf", required=True, help="Folder written by save_pretrained, or a hub id where the hub is reachable.")
    im.add_argument("--out", required=True, type=Path, help="New run folder to write, e.g. runs/gpt2.")
    im.add_argument("--untied", action="store_true", help="Import into an untied model (the matrix is copied into both).")
    try:
        args = parser.parse_args(argv)
        if args.command == "export":
            from runs import load_run

            model, tokenizer, _ = load_run(args.run, args.checkpoint, torch.device("cpu"))
            export(model, args.out, tokenizer)
            print(f"wrote {args.out}: {', '.join(sorted(p.name for p in args.out.iterdir()))}")
        else:
            import_run(args.hf, args.out, tie_embeddings=False if args.untied else None)
            print(f"wrote {args.out}: sample with python sample.py --run {args.out}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def import_run(source, out_dir: Path, tie_embeddings: bool | None = None) -> Path:
    """Write a run folder ``sample.py`` and ``export`` read (config, tokenizer, ``ckpt_best.pt``) from GPT-2 weights.

    The tokenizer is gpt2 for a 50257-token model, or the ``tinygpt_tokenizer.json`` of a
    folder tinygpt exported.  The checkpoint records the source (step 0, no val loss).  It
    holds no optimizer state, so ``train.py --resume`` refuses it: fine-tune with
    ``train.py --init-from`` instead.  Raises :class:`UserError` if ``out_dir`` exists or no
    tokenizer fits.
    """
    import runs
    from config import RunConfig
    from data.tokenizers import build_tokenizer, save_tokenizer, tokenizer_from_dict
    from model.checkpoint import save_checkpoint

    out_dir = Path(out_dir)
    if out_dir.exists():
        raise UserError(f"{out_dir} already exists: give a new --out folder")
    model = from_hf(source, tie_embeddings)
    folder = Path(str(source)).expanduser()
    if (folder / TOKENIZER_FILE).is_file():
        tokenizer = tokenizer_from_dict(json.loads((folder / TOKENIZER_FILE).read_text(encoding="utf-8")), search_dirs=(folder,))
    elif model.config.vocab_size == GPT2_VOCAB_SIZE:
        tokenizer = build_tokenizer("gpt2", search_dirs=(folder,) if folder.is_dir() else ())
    else:
        raise UserError(f"{source} has {model.config.vocab_size} tokens and no {TOKENIZER_FILE}: tinygpt cannot tell its tokenizer")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise UserError(f"{source}: its tokenizer has {tokenizer.vocab_size} tokens but the model {model.config.vocab_size}")
    cfg = RunConfig.from_dict({"model": vars(model.config), "data": {"tokenizer": tokenizer.name}}, str(source))
    out_dir.mkdir(parents=True)
    save_tokenizer(tokenizer, out_dir)
    runs.write_json(out_dir / "config.json", cfg.to_dict())
    save_checkpoint(out_dir / "ckpt_best.pt", {
        "model": model.state_dict(), "step": 0, "tie_embeddings": model.config.tie_embeddings,
        "tokenizer": tokenizer.to_dict(), "config": cfg.to_dict(), "val_loss": None,
        "imported_from": str(folder.resolve()) if folder.is_dir() else str(source),
    })
    return out_dir


if __name__ == "__main__":
    sys.exit(main())
