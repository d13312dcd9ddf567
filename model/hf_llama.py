"""Llama and Qwen3 weights in and out: the configs and weight names of ``LlamaForCausalLM`` / ``Qwen3ForCausalLM``.

A tinygpt model with RoPE, RMSNorm and SwiGLU (``model.position=rope``, ``model.norm=rmsnorm``,
``model.mlp=swiglu``; grouped-query attention allowed) is Llama's block; with ``model.qk_norm`` it
is Qwen3's.  :mod:`model.hf` picks the architecture (:func:`model.hf.architecture`) and calls
this module for those two; GPT-2's block stays there.

The layouts (transformers' ``modeling_llama.py`` and ``modeling_qwen3.py``) are ours up to names:
every projection is an ``nn.Linear`` ``(out, in)``; RoPE pairs dimension i with i + head_dim/2
(``rotate_half``), as :mod:`model.rope` does, so q_proj / k_proj need no permutation; the
attention scale is 1/sqrt(head_dim); Qwen3's ``q_norm`` / ``k_norm`` are RMSNorms over each head
before the rotation, as ours.  The weights are copied under other names, never transformed.
"""

from __future__ import annotations

import re

import torch

from core import optional
from core.errors import UserError
from model.config import DEFAULT_ROPE_THETA, GPTConfig
from model.gpt import GPT
from model.norm import RMS_NORM_EPS

LLAMA = "LlamaForCausalLM"
QWEN3 = "Qwen3ForCausalLM"
MODEL_TYPES = {"llama": LLAMA, "qwen3": QWEN3}  # config.json's model_type -> the class that loads it
# What Llama's (and Qwen3's) block is in tinygpt's choices; qk_norm then tells the two apart.
LLAMA_BLOCK = {"position": "rope", "norm": "rmsnorm", "mlp": "swiglu"}

# Our state_dict names -> theirs, first match wins (lm_head.weight keeps its name).
_RENAMES = (
    (r"^wte\.", "model.embed_tokens."),
    (r"^ln_f\.", "model.norm."),
    (r"^blocks\.(\d+)\.ln_1\.", r"model.layers.\1.input_layernorm."),
    (r"^blocks\.(\d+)\.ln_2\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blocks\.(\d+)\.attn\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
    (r"^blocks\.(\d+)\.attn\.", r"model.layers.\1.self_attn."),  # q/k/v_proj, q_norm, k_norm: the same names
    (r"^blocks\.(\d+)\.mlp\.", r"model.layers.\1.mlp."),  # gate/up/down_proj: the same names
)


def hf_name(ours: str) -> str:
    """The Llama / Qwen3 state-dict key of one of our keys: ``blocks.0.attn.out_proj.weight`` ->
    ``model.layers.0.self_attn.o_proj.weight``."""
    for pattern, repl in _RENAMES:
        theirs, n = re.subn(pattern, repl, ours)
        if n:
            return theirs
    return ours


# ----------------------------------------------------------------------------- configs


def config_to_hf(config: GPTConfig, architecture: str, eot: int | None):
    """The ``LlamaConfig`` or ``Qwen3Config`` (``architecture``: :data:`LLAMA` or :data:`QWEN3`) of ``config``.

    ``eot`` is the bos and eos token id (the gpt2 tokenizer's ``<|endoftext|>``, or None), as
    the GPT-2 export sets them: ``LlamaConfig``'s own defaults (1, 2) would name ordinary tokens.

    ``config`` must already be Llama's block (:func:`model.hf.architecture` checks).  Raises
    :class:`UserError` for ``model.bias=true`` under Qwen3 (its MLP has no biases) and for
    ``model.lm_head_bias`` (neither head has a bias).  Under Llama ``model.bias=true`` is
    ``attention_bias`` and ``mlp_bias`` (q, k, v, o and gate, up, down all biased, as ours).
    """
    if config.lm_head_bias:
        raise UserError(
            f"model.lm_head_bias=true has no {architecture} equivalent (its lm_head has no bias): "
            "export a model trained without it"
        )
    if config.bias and architecture == QWEN3:
        raise UserError(
            "model.bias=true with model.qk_norm has no Qwen3ForCausalLM equivalent (Qwen3's MLP has no biases): "
            "export a model trained with model.bias=false"
        )
    transformers = optional.transformers()
    common = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.n_embd,
        intermediate_size=config.mlp_width,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_size,
        hidden_act="silu",
        max_position_embeddings=config.block_size,
        rms_norm_eps=RMS_NORM_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        attention_bias=config.bias,
        attention_dropout=config.dropout,
        tie_word_embeddings=config.tie_embeddings,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=None,
        architectures=[architecture],
    )
    if architecture == QWEN3:
        hf_config = transformers.Qwen3Config(**common, use_sliding_window=False)
    else:
        hf_config = transformers.LlamaConfig(**common, mlp_bias=config.bias)
    # transformers 4.x reads the rotary base at the top level only (without it: 10,000, silently); 5.x reads
    # rope_parameters and keeps the extra key.  Both loaders then rotate by the model's theta.
    hf_config.rope_theta = float(config.rope_theta)
    return hf_config


def _rope(c) -> tuple[dict, list[str]]:
    """(the rope parameters of a Llama / Qwen3 config, what in them tinygpt cannot represent)."""
    params = dict(getattr(c, "rope_parameters", None) or {})
    if not params and getattr(c, "rope_theta", None) is not None:  # older transformers keep it at the top level
        params = {"rope_type": "default", "rope_theta": c.rope_theta}
    problems = []
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        problems.append(f"rope_type={kind!r} (rope scaling; tinygpt's RoPE is the plain one)")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        problems.append(f"partial_rotary_factor={params['partial_rotary_factor']} (tinygpt rotates whole heads)")
    return params, problems


def config_from_hf(hf_config, tie_embeddings: bool | None = None, block_size: int | None = None) -> GPTConfig:
    """Our :class:`GPTConfig` for a ``LlamaConfig`` or ``Qwen3Config``; ``UserError`` naming what tinygpt cannot represent.

    ``hidden_size`` -> ``n_embd``, ``num_hidden_layers`` -> ``n_layer``, ``num_attention_heads`` ->
    ``n_head``, ``num_key_value_heads`` -> ``n_kv_head`` (0 when equal), ``intermediate_size`` ->
    ``mlp_hidden`` (0 when it is the automatic width), ``rope_theta``, ``max_position_embeddings``
    -> ``block_size`` (or the smaller one given), ``tie_word_embeddings`` -> ``tie_embeddings``
    (unless given; untied from tied copies the matrix).  Qwen3 sets ``qk_norm``.  Refused: an
    activation other than silu, ``rms_norm_eps`` other than 1e-6, a ``head_dim`` other than
    hidden_size / heads, rope scaling or partial rotation, Qwen3's sliding window, Llama's
    ``attention_bias`` differing from ``mlp_bias``, any Qwen3 ``attention_bias``, and a tied
    model asked of untied weights.
    """
    c = hf_config
    kind = c.model_type
    problems = []
    if c.hidden_act != "silu":
        problems.append(f"hidden_act={c.hidden_act!r} (tinygpt's SwiGLU uses silu)")
    if abs(c.rms_norm_eps - RMS_NORM_EPS) > 1e-12:
        problems.append(f"rms_norm_eps={c.rms_norm_eps} (tinygpt's RMSNorms use {RMS_NORM_EPS})")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        problems.append(
            f"head_dim={head_dim} (tinygpt's heads are hidden_size / num_attention_heads = "
            f"{c.hidden_size / c.num_attention_heads:g} wide)"
        )
    rope, rope_problems = _rope(c)
    problems += rope_problems
    bias = bool(getattr(c, "attention_bias", False))
    if kind == "qwen3":
        if getattr(c, "use_sliding_window", False):
            problems.append("use_sliding_window=True (tinygpt attends to the whole window)")
        if bias:
            problems.append("attention_bias=True (tinygpt's model.bias would bias the MLP too, which Qwen3's lacks)")
    elif bias != bool(getattr(c, "mlp_bias", False)):
        problems.append(
            f"attention_bias={bias} with mlp_bias={getattr(c, 'mlp_bias', False)} (tinygpt's model.bias sets both)"
        )
    if block_size is not None and not 1 <= block_size <= c.max_position_embeddings:
        problems.append(f"block_size={block_size} (at most max_position_embeddings={c.max_position_embeddings})")
    if tie_embeddings and not c.tie_word_embeddings:
        problems.append(
            "tie_word_embeddings=False while a tied model was asked for (its two matrices differ): import it untied"
        )
    if problems:
        raise UserError(f"this {kind} config does not fit tinygpt: {'; '.join(problems)}")
    config = GPTConfig(
        vocab_size=c.vocab_size,
        block_size=block_size or c.max_position_embeddings,
        n_layer=c.num_hidden_layers,
        n_head=c.num_attention_heads,
        n_embd=c.hidden_size,
        dropout=0.0,
        bias=bias,
        tie_embeddings=c.tie_word_embeddings if tie_embeddings is None else tie_embeddings,
        position="rope",
        rope_theta=float(rope.get("rope_theta", DEFAULT_ROPE_THETA)),
        norm="rmsnorm",
        qk_norm=kind == "qwen3",
        mlp="swiglu",
        n_kv_head=0 if c.num_key_value_heads in (None, c.num_attention_heads) else c.num_key_value_heads,
    )
    if config.mlp_width != c.intermediate_size:  # 0 (automatic) where it is, so a round trip keeps the config
        config.mlp_hidden = c.intermediate_size
    return config


# ----------------------------------------------------------------------------- weights


def state_to_hf(model: GPT) -> dict[str, torch.Tensor]:
    """Our model -> ``LlamaForCausalLM`` / ``Qwen3ForCausalLM`` keys (:func:`hf_name`), contiguous CPU float32 copies.

    A tied model's matrix appears once, as ``model.embed_tokens.weight`` (safetensors refuses
    tensors that share memory; ``tie_word_embeddings=True`` ties it again on load); an untied
    model adds ``lm_head.weight``.
    """
    out = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.tied:
            continue
        out[hf_name(name)] = tensor.detach().to("cpu", torch.float32).contiguous().clone()
    return out


def state_from_hf(hf_state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """A Llama / Qwen3 ``state_dict()`` -> our ``GPT(config).state_dict()`` keys, float32.

    Tied (``lm_head.weight`` absent or equal to the embedding) into untied: the matrix is copied
    into both.  Raises :class:`UserError` for a missing or unexpected weight, or a tied model
    asked of a checkpoint whose head differs from its embedding.
    """
    state = {k: v for k, v in hf_state.items() if not k.endswith("rotary_emb.inv_freq")}  # old buffers
    used = set()
    out = {}
    with torch.device("meta"):  # the key set only: no memory for weights that are never used
        keys = list(GPT(config).state_dict())
    for ours in keys:
        theirs = hf_name(ours)
        if ours == "lm_head.weight" and theirs not in state:
            theirs = "model.embed_tokens.weight"  # a tied checkpoint written without its head
        if theirs not in state:
            raise UserError(f"the weights lack {theirs}: use a complete checkpoint written by save_pretrained")
        used.add(theirs)
        out[ours] = state[theirs].detach().to(torch.float32)
    if config.tie_embeddings and not torch.equal(out["lm_head.weight"], out["wte.weight"]):
        raise UserError(
            "the checkpoint's lm_head differs from its embed_tokens: import it untied (tie_embeddings=false)"
        )
    extra = sorted(set(state) - used)
    if extra:
        raise UserError(
            f"the weights hold {extra[0]} ({len(extra)} unexpected tensors): "
            f"check that the config's num_hidden_layers={config.n_layer} matches the checkpoint"
        )
    return out
