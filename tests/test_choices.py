"""The modern model choices (RoPE, RMSNorm, QK-norm, SwiGLU / ReLU², grouped-query attention, logit soft-cap):
GPT-2's block stays the default bit for bit, each choice builds the layers it names and computes what its paper says.

Run: ``python -m pytest -q tests/test_choices.py``  (CPU, a few seconds).
"""

import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import MODEL_CHOICES

from core.errors import UserError
from experiment.arms import parse_arm
from model.attention import _norm_f32
from model.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from model.config import GPTConfig
from model.gpt import GPT
from model.head_loss import linear_cross_entropy, softcap
from model.kv_cache import KVCache
from model.rope import RotaryEmbedding, apply_rotary
from training.config import RunConfig, parse_config

TINY = dict(vocab_size=97, block_size=16, n_layer=2, n_head=2, n_embd=32)

# Each choice of tests/helpers.py, and RoPE at another base.
CHOICES = {**MODEL_CHOICES, "rope-theta": dict(position="rope", rope_theta=500.0)}


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, **kw}))


# Measured on commit 77b5df7 (before the modern choices existed), torch 2.13.0 on CPU: the first four
# losses of the run in first_losses(), tied and untied, through the logits path.
LOSSES_AT_77B5DF7 = {
    True: [4.561010837554932, 4.4536638259887695, 4.375483989715576, 4.31999397277832],
    False: [4.577547550201416, 4.460814952850342, 4.367947578430176, 4.296345233917236],
}
KEYS_AT_77B5DF7 = (
    ["wte.weight", "wpe.weight"]
    + [
        f"blocks.{i}.{name}.{kind}"
        for i in range(2)
        for name in (
            "ln_1",
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.out_proj",
            "ln_2",
            "mlp.up_proj",
            "mlp.down_proj",
        )
        for kind in ("weight", "bias")
    ]
    + ["ln_f.weight", "ln_f.bias", "lm_head.weight"]
)


def first_losses(config: GPTConfig, steps: int = 4) -> list[float]:
    """The first ``steps`` training losses of a seeded model and batch under AdamW (lr 1e-3, decay 0.1)."""
    torch.manual_seed(1234)
    model = GPT(config)
    idx = torch.randint(0, 97, (4, 17), generator=torch.Generator().manual_seed(99))
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3)
    losses = []
    for _ in range(steps):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


@pytest.mark.parametrize("tie", [True, False])
def test_the_default_block_is_gpt2_as_before(tie):
    """The default config has the state_dict keys and the first training losses of the code before the choices."""
    config = GPTConfig(**TINY, tie_embeddings=tie)
    keys = list(GPT(config).state_dict())
    assert keys == KEYS_AT_77B5DF7  # lm_head.weight is listed tied or not (one Parameter under two names)
    # abs=1e-6: the same arithmetic; any change to the default block's init or maths moves these by far more.
    assert first_losses(config) == pytest.approx(LOSSES_AT_77B5DF7[tie], rel=0, abs=1e-6)
    assert GPTConfig().non_default_choices() == []


@pytest.mark.parametrize("name", CHOICES)
def test_every_choice_is_causal_and_trains(name):
    """Each choice: (B, T) -> (B, T, vocab_size) logits, token t never changes earlier logits, and a few
    AdamW steps lower the loss on a fixed batch."""
    model = tiny(**CHOICES[name])
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 97
    with torch.no_grad():
        a, b = model(idx)[0], model(changed)[0]
    assert a.shape == (2, 16, 97)
    assert torch.equal(a[:, :9], b[:, :9]) and not torch.allclose(a[:, 9:], b[:, 9:])
    opt = torch.optim.AdamW(model.param_groups(0.0), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = model(idx[:, :-1], idx[:, 1:])[1]
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0] - 0.5


def test_rope_has_no_position_table_and_rotates_queries_and_keys():
    """position='rope': no wpe parameter, and permuting nothing but positions changes the output
    (the model knows order without a table)."""
    model = tiny(position="rope").eval()
    assert model.wpe is None and not any("wpe" in k for k in model.state_dict())
    idx = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert not torch.allclose(model(idx)[0][:, -1], model(idx.flip(1))[0][:, -1])


def test_rope_scores_depend_on_relative_position_only():
    """RoFormer's property: q at position m dotted with k at position n equals the same vectors at m + s, n + s."""
    rotary = RotaryEmbedding(head_size=8, theta=10000.0, max_positions=64)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)

    def score(m: int, n: int) -> torch.Tensor:
        return (apply_rotary(q, *rotary(m, 1)) * apply_rotary(k, *rotary(n, 1))).sum()

    torch.testing.assert_close(score(5, 2), score(45, 42), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 3))
    cos, sin = rotary(0, 64)
    assert cos.shape == (64, 8) and torch.equal(cos[0], torch.ones(8)) and torch.equal(sin[0], torch.zeros(8))
    torch.testing.assert_close(cos[:, 0], torch.arange(64.0).cos())  # pair 0 turns by 1 radian per position


def test_rope_table_rows_are_the_same_bits_at_any_offset():
    """A position's (cos, sin) is one row of one table: scored in a window or one at a time from a cache, the same bits."""
    rotary = RotaryEmbedding(head_size=16, theta=10000.0, max_positions=32)
    cos, sin = rotary(0, 32)
    for start in (0, 7, 31):
        one_cos, one_sin = rotary(start, 1)
        assert torch.equal(one_cos[0], cos[start]) and torch.equal(one_sin[0], sin[start])


def test_rmsnorm_is_torch_rmsnorm_without_bias():
    """norm='rmsnorm': every block norm and ln_f is torch.nn.RMSNorm (a gain, no bias), even with model.bias."""
    model = tiny(norm="rmsnorm")
    norms = [model.ln_f] + [m for b in model.blocks for m in (b.ln_1, b.ln_2)]
    assert all(isinstance(m, nn.RMSNorm) for m in norms)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert not any(k.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias")) for k in model.state_dict())


def test_qk_norm_normalises_each_heads_queries_and_keys():
    """qk_norm: q_norm and k_norm are RMSNorms with a (head_size,) gain (Qwen3); scaling q_proj's weights then
    leaves the attention output unchanged, since each head's queries are normalised."""
    model = tiny(qk_norm=True).eval()
    attn = model.blocks[0].attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (16,)
    assert "blocks.0.attn.q_norm.weight" in model.state_dict()
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = attn(x)
        attn.q_proj.weight.mul_(7.0)
        attn.q_proj.bias.mul_(7.0)
        torch.testing.assert_close(attn(x), before, atol=1e-4, rtol=1e-4)
    assert tiny().blocks[0].attn.q_norm is None


def test_qk_norm_of_a_bfloat16_model_runs_in_float32_without_a_warning():
    """A model cast with .to(torch.bfloat16) normalises q and k in float32 with its gain cast up, as under
    autocast: the same values as a float32 norm of the bf16 tensors, and no fused-path dtype warning."""
    model = tiny(qk_norm=True).to(torch.bfloat16).eval()
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    q = torch.randn(2, 2, 8, 16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    want = F.rms_norm(q.float(), (16,), attn.q_norm.weight.float(), attn.q_norm.eps).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(_norm_f32(attn.q_norm, q), want, atol=0, rtol=0)
        logits, _ = model(torch.zeros(1, 8, dtype=torch.long))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def test_swiglu_is_silu_gate_times_up_with_about_gelus_parameters():
    """mlp='swiglu': down_proj(silu(gate_proj x) * up_proj x), hidden 2/3 of 4 n_embd rounded up to 32."""
    model = tiny(mlp="swiglu")
    mlp = model.blocks[0].mlp
    assert mlp.gate_proj.out_features == mlp.up_proj.out_features == 96  # 2/3 * 128 = 85.3 -> 96
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(mlp(x), mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x)))
    assert GPTConfig(**{**TINY, "n_embd": 768, "n_head": 12}, mlp="swiglu").mlp_width == 2048  # Llama's 8/3 * 768
    assert GPTConfig(**TINY, mlp="swiglu", mlp_hidden=40).mlp_width == 40
    wide = GPTConfig(**{**TINY, "n_embd": 128, "n_head": 4})
    swiglu = GPTConfig(**{**TINY, "n_embd": 128, "n_head": 4}, mlp="swiglu")
    assert abs(3 * swiglu.mlp_width - 2 * wide.mlp_width) / (2 * wide.mlp_width) < 0.04  # within 4% of GELU's


def test_relu2_is_squared_relu():
    """mlp='relu2': down_proj(relu(up_proj x)^2), GELU's 4 n_embd width."""
    mlp = tiny(mlp="relu2").blocks[0].mlp
    assert mlp.up_proj.out_features == 128 and not hasattr(mlp, "gate_proj")
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(mlp(x), mlp.down_proj(F.relu(mlp.up_proj(x)) ** 2))


def test_gqa_narrows_k_and_v_and_the_cache():
    """n_kv_head=1 of 2 heads: k_proj / v_proj have head_size outputs, the cache holds one head, and with the
    key/value heads copied out to n_head the model computes what multi-head attention with tied k/v heads does."""
    model = tiny(n_kv_head=1).eval()
    attn = model.blocks[0].attn
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (16, 32)
    cache = KVCache(model.config)
    model.decode(torch.zeros(3, 5, dtype=torch.long), cache)
    assert cache.keys[0].shape == (3, 1, 16, 16)
    mha = tiny()
    state = model.state_dict()
    for i in range(2):
        for name in ("k_proj", "v_proj"):
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.attn.{name}.{kind}"
                state[key] = torch.cat([state[key], state[key]])  # both query heads read the one kv head
    mha.load_state_dict(state)
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], mha.eval()(idx)[0])


def test_softcap_bounds_logits_in_forward_and_decode():
    """logit_softcap=c: every logit is c * tanh(raw / c), |logit| < c, from forward and from the cached decode."""
    capped, raw = tiny(logit_softcap=0.5).eval(), tiny().eval()
    idx = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits = capped(idx)[0]
        torch.testing.assert_close(logits, 0.5 * torch.tanh(raw(idx)[0] / 0.5))
        decoded = capped.decode(idx, KVCache(capped.config), capped.lm_head.weight.t().contiguous())
    assert logits.abs().max() < 0.5
    torch.testing.assert_close(decoded, logits[:, -1], atol=1e-6, rtol=1e-6)


def test_chunked_loss_applies_the_softcap_with_the_same_gradients():
    """linear_cross_entropy(cap=c) equals cross_entropy(softcap(x W^T + b, c)) in value and in every gradient."""
    g = torch.Generator().manual_seed(7)
    # x of std 4: logits large enough for the cap to matter
    x, w, b = ((torch.randn(*s, generator=g) * f).requires_grad_() for s, f in (((10, 8), 4), ((50, 8), 1), ((50,), 1)))
    t = torch.randint(0, 50, (10,), generator=g)
    ref = F.cross_entropy(softcap(F.linear(x, w, b), 2.0), t)
    ref_grads = torch.autograd.grad(ref, (x, w, b))
    got = linear_cross_entropy(x, w, b, t, rows=3, cap=2.0)
    got_grads = torch.autograd.grad(got, (x, w, b))
    torch.testing.assert_close(got, ref)
    for a, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(a, r)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(x, w, b, t, rows=3, cap=2.0), ref)
    assert not math.isclose(ref.item(), F.cross_entropy(F.linear(x, w, b), t).item(), rel_tol=1e-3)


def test_fused_head_loss_with_a_softcap_is_refused():
    """Liger's fused kernel is not given the cap: the model refuses the combination rather than ignore the cap."""
    with pytest.raises(ValueError, match="soft-cap"):
        GPT(GPTConfig(**TINY, logit_softcap=30.0), head_loss="fused")


def test_a_run_config_refuses_the_fused_loss_with_a_softcap():
    """model.logit_softcap with train.head_loss=fused is one line naming both (chunked and logits apply the cap)."""
    with pytest.raises(UserError, match="train.head_loss=fused has no logit soft-cap"):
        RunConfig.from_dict({"model": {"logit_softcap": 30.0}, "train": {"head_loss": "fused"}})
    assert RunConfig.from_dict({"model": {"logit_softcap": 30.0}, "train": {"head_loss": "chunked"}})


def test_flops_count_swiglus_three_matrices_and_gqas_narrower_kv():
    """6N + 12 L H Q T with N the Linear weights: SwiGLU adds its gate, GQA's k/v are n_kv_head heads wide;
    RoPE and the norms add no matmul."""
    base, rope = tiny(), tiny(position="rope", norm="rmsnorm", qk_norm=True)
    attention = 12 * 2 * 2 * 16 * 16
    head = 97 * 32
    assert base.flops_per_token() == 6 * (2 * (4 * 32 * 32 + 2 * 32 * 128) + head) + attention
    assert rope.flops_per_token() == base.flops_per_token()
    assert tiny(mlp="swiglu").flops_per_token() == 6 * (2 * (4 * 32 * 32 + 3 * 32 * 96) + head) + attention
    assert (
        tiny(n_kv_head=1).flops_per_token() == 6 * (2 * (2 * 32 * 32 + 2 * 32 * 16 + 2 * 32 * 128) + head) + attention
    )


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(position="alibi"), "model.position must be one of learned, rope"),
        (dict(norm="batchnorm"), "model.norm must be one of"),
        (dict(mlp="geglu"), "model.mlp must be one of gelu, swiglu, relu2"),
        (dict(n_kv_head=3), "does not divide model.n_head"),
        (dict(n_kv_head=-1), "model.n_kv_head must be an integer >= 0"),
        (dict(mlp_hidden=-4), "model.mlp_hidden must be an integer >= 0"),
        (dict(logit_softcap=-1.0), "model.logit_softcap must be a finite number >= 0"),
        (dict(logit_softcap=float("inf")), "model.logit_softcap must be a finite number >= 0"),
        (dict(rope_theta=500.0), "set model.position=rope"),
        (dict(position="rope", rope_theta=0.0), "model.rope_theta must be a finite number > 0"),
        (dict(position="rope", rope_theta=float("inf")), "model.rope_theta must be a finite number > 0"),
        (dict(position="rope", n_head=32), "head size .* is odd"),
    ],
)
def test_bad_choices_are_one_line_errors_naming_the_fix(bad, match):
    """GPTConfig refuses a bad value, or a choice without the one it needs, in one line."""
    with pytest.raises(UserError, match=match) as e:
        GPTConfig(**{**TINY, **bad})
    assert "\n" not in str(e.value)


def test_modern_cpu_config_is_the_char_shape_with_every_modern_choice():
    """configs/modern_cpu.toml: nanoGPT's CPU char shape (4 x 4 heads x 128, block 64, characters) with RoPE,
    RMSNorm, QK-norm, ReLU² and Muon; nothing else of the model differs from configs/shakespeare_char_cpu.toml
    but the GELU form, which ReLU² does not use."""
    modern, char = parse_config("configs/modern_cpu.toml", {}), parse_config("configs/shakespeare_char_cpu.toml", {})
    m = modern.model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size) == (4, 4, 128, 64) and modern.data.tokenizer == "char"
    assert (m.position, m.norm, m.qk_norm, m.mlp, modern.train.optimizer) == ("rope", "rmsnorm", True, "relu2", "muon")
    differ = {k for k, v in modern.to_dict()["model"].items() if char.to_dict()["model"][k] != v}
    assert differ == {"position", "norm", "qk_norm", "mlp", "gelu_approximate"}


def test_a_checkpoint_of_every_choice_round_trips_and_refuses_gpt2s_block(tmp_path):
    """Save then load all the choices together: bit-identical logits; into GPT-2's block (wpe, LayerNorm biases,
    GELU) it is a one-line UserError, not a traceback."""
    model = tiny(**MODEL_CHOICES["modern"]).eval()
    save_checkpoint(tmp_path / "c.pt", {"model": model.state_dict(), "tie_embeddings": True, "step": 0})
    fresh = tiny(**MODEL_CHOICES["modern"]).eval()
    with torch.no_grad():
        fresh.wte.weight.zero_()  # so a load that did nothing would show
    load_model_state(fresh, load_checkpoint(tmp_path / "c.pt"))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(8))
    assert torch.equal(model(idx)[0], fresh(idx)[0])
    with pytest.raises(UserError, match="does not fit"):
        load_model_state(tiny(), load_checkpoint(tmp_path / "c.pt"))


def test_compare_arms_take_the_new_keys():
    """compare.py --arm NAME:KEY=VALUE accepts every new setting, typed from its field."""
    name, settings = parse_arm("modern:model.position=rope,model.qk_norm=true,model.n_kv_head=2,train.optimizer=muon")
    assert name == "modern"
    assert settings == {
        "model.position": "rope",
        "model.qk_norm": True,
        "model.n_kv_head": 2,
        "train.optimizer": "muon",
    }
    assert parse_arm("cap:model.logit_softcap=30")[1] == {"model.logit_softcap": 30.0}
