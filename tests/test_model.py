"""Model invariants: shapes, causality, tying, init, optimizer groups, checkpoints, sampling.

Run: ``python -m pytest -q tests/test_model.py``  (CPU, a few seconds).
"""

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from core.errors import UserError
from model.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from model.config import GPTConfig
from model.sdpa import MATH_KERNEL_MAX_T, causal_attention, uses_math_kernel
from model.gpt import GPT

TINY = dict(vocab_size=97, block_size=16, n_layer=2, n_head=2, n_embd=32)


def tiny(tie: bool = True, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, "tie_embeddings": tie, **kw}))


def test_forward_shapes():
    """(B, T) ids -> logits (B, T, vocab_size); loss is None without targets, a scalar with them."""
    model = tiny()
    idx = torch.randint(0, 97, (3, 11))
    logits, loss = model(idx)
    assert logits.shape == (3, 11, 97) and loss is None
    logits, loss = model(idx, idx)
    assert loss.shape == ()


def test_too_long_sequence_is_an_error():
    """T > block_size raises a UserError, it is not silently truncated."""
    with pytest.raises(UserError, match="block_size"):
        tiny()(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("tie", [True, False])
def test_causality(tie):
    """Changing token t never changes the logits at positions < t."""
    model = tiny(tie).eval()
    idx = torch.randint(0, 97, (2, 16))
    t = 9
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % 97
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.equal(a[:, :t], b[:, :t])
    assert not torch.allclose(a[:, t:], b[:, t:])


@pytest.mark.parametrize("tie", [True, False])
def test_loss_at_init_is_about_log_vocab(tie):
    """With N(0, 0.02) init the logits are near zero, so the loss starts near ln(vocab_size)."""
    model = GPT(GPTConfig(vocab_size=1000, block_size=32, n_layer=2, n_head=2, n_embd=64, tie_embeddings=tie))
    idx = torch.randint(0, 1000, (8, 32))
    targets = torch.randint(0, 1000, (8, 32))  # not idx: a tied model scores the input token itself higher
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(1000)) < 0.1


def test_tied_head_is_the_embedding():
    """Tied: lm_head.weight *is* wte.weight, one Parameter listed once by parameters()."""
    model = tiny(True)
    assert model.lm_head.weight is model.wte.weight
    ids = [id(p) for p in model.parameters()]
    assert len(ids) == len(set(ids))
    assert sum(p is model.wte.weight for p in model.parameters()) == 1


def test_untied_head_is_separate():
    """Untied: two distinct Parameters of the same shape (vocab_size, n_embd)."""
    model = tiny(False)
    assert model.lm_head.weight is not model.wte.weight
    assert model.lm_head.weight.shape == model.wte.weight.shape == (97, 32)


@pytest.mark.parametrize("tie", [True, False])
def test_flops_per_token_counts_matmul_weights_once_plus_attention(tie):
    """6N + 12LHQT with N = Linear weights only (per layer 12 d^2: q,k,v,out 4d^2 + MLP 8d^2; the head
    V*d once, tied or not), hand-computed for GPT-2 124M's shape: N = 84,934,656 + 38,597,376."""
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, tie_embeddings=tie)
    with torch.device("meta"):
        model = GPT(cfg)
    n_matmul = 12 * 12 * 768**2 + 50257 * 768
    assert model.flops_per_token() == 6 * n_matmul + 12 * 12 * 12 * 64 * 1024
    assert model.flops_per_token(256) == 6 * n_matmul + 12 * 12 * 12 * 64 * 256


def test_parameter_count_differs_by_vocab_times_embd():
    """untied - tied == vocab_size * n_embd exactly; the non-embedding count is the same."""
    tied, untied = tiny(True), tiny(False)
    assert untied.num_params() - tied.num_params() == 97 * 32
    assert untied.num_params(non_embedding=True) == tied.num_params(non_embedding=True)


@pytest.mark.parametrize("tie", [True, False])
def test_optimizer_holds_each_parameter_once(tie):
    """The AdamW groups cover every parameter exactly once; only dim >= 2 weights decay."""
    model = tiny(tie)
    groups = model.param_groups(weight_decay=0.1)
    seen = [p for g in groups for p in g["params"]]
    assert len(seen) == len({id(p) for p in seen}) == len(list(model.parameters()))
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and groups[0]["weight_decay"] == 0.1
    assert all(p.dim() < 2 for p in groups[1]["params"]) and groups[1]["weight_decay"] == 0.0
    opt = torch.optim.AdamW(groups, lr=1e-3)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_tied_gradient_is_the_sum_of_both_uses():
    """Tied: the shared matrix's gradient = embedding-path gradient + head-path gradient."""
    tied = tiny(True)
    untied = tiny(False)
    untied.load_state_dict(tied.state_dict())  # same values in both matrices
    idx = torch.randint(0, 97, (2, 8))
    tied(idx, idx)[1].backward()
    untied(idx, idx)[1].backward()
    expected = untied.wte.weight.grad + untied.lm_head.weight.grad
    torch.testing.assert_close(tied.wte.weight.grad, expected)


def test_residual_projections_use_scaled_init():
    """out_proj and down_proj have std ~ 0.02 / sqrt(2 n_layer); others ~ 0.02 (GPT-2 init)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, block_size=16, n_layer=8, n_head=4, n_embd=256))
    want = 0.02 / math.sqrt(16)
    assert abs(model.blocks[0].attn.out_proj.weight.std().item() - want) < 0.1 * want
    assert abs(model.blocks[0].mlp.down_proj.weight.std().item() - want) < 0.1 * want
    assert abs(model.blocks[0].attn.q_proj.weight.std().item() - 0.02) < 0.002
    assert abs(model.wte.weight.std().item() - 0.02) < 0.002


def test_tied_and_untied_at_one_seed_start_from_the_same_shared_weights():
    """The pairing by seed: every weight both arms have starts identical, the tied matrix starts as the untied
    lm_head does, and only the untied token embedding is a draw of its own."""
    models = {}
    for tie in (True, False):
        torch.manual_seed(1337)
        models[tie] = tiny(tie)
    tied, untied = models[True].state_dict(), models[False].state_dict()
    differ = [k for k in tied if not torch.equal(tied[k], untied[k])]
    assert differ == ["wte.weight"]
    assert torch.equal(models[True].wte.weight, models[False].lm_head.weight)


def test_linear_is_x_matmul_w_transpose_plus_b():
    """Every projection is nn.Linear: y = x @ W.T + b with W of shape (out_features, in_features)."""
    model = tiny()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 2 * 6 + 1  # q, k, v, out, up, down per block + lm_head
    x = torch.randn(4, 32)
    q = model.blocks[0].attn.q_proj
    torch.testing.assert_close(q(x), x @ q.weight.T + q.bias)
    up = model.blocks[0].mlp.up_proj
    assert up.weight.shape == (128, 32)
    torch.testing.assert_close(up(x), x @ up.weight.T + up.bias)
    torch.testing.assert_close(model.lm_head(x), x @ model.wte.weight.T)


def test_no_softmax_anywhere():
    """No softmax module in the model, and no softmax call in the model or sampling code.

    The one exception is the chunked cross-entropy (model/head_loss.py): a loss, like
    nn.CrossEntropyLoss, whose gradient is softmax - onehot.  Generation never calls it.
    """
    assert not any(isinstance(m, (nn.Softmax, nn.LogSoftmax)) for m in tiny().modules())
    root = Path(__file__).resolve().parent.parent
    for path in [*root.glob("model/*.py"), root / "sample.py"]:
        if path.name == "head_loss.py":
            continue
        assert not re.search(r"softmax\(|nn\.Softmax|nn\.LogSoftmax", path.read_text()), path


@pytest.mark.parametrize("tie", [True, False])
def test_overfits_one_batch(tie):
    """A tiny model drives the loss on one fixed batch far below ln(vocab_size)."""
    model = tiny(tie)
    idx = torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.param_groups(0.0), lr=3e-3)
    for _ in range(150):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2


def test_gelu_approximate_picks_the_mlp_activation():
    """'tanh' is GPT-2's approximation and 'none' the exact erf GELU (nanoGPT's nn.GELU); they differ slightly."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32)
    outs = {}
    for form in ("tanh", "none"):
        model = tiny(gelu_approximate=form)
        mlp = model.blocks[0].mlp
        outs[form] = mlp(x)
        torch.testing.assert_close(outs[form], mlp.down_proj(F.gelu(mlp.up_proj(x), approximate=form)))
    assert not torch.equal(outs["tanh"], outs["none"])
    with pytest.raises(UserError, match="gelu_approximate"):
        GPTConfig(**TINY, gelu_approximate="erf")


@pytest.mark.parametrize("return_logits", [True, False])
def test_golden_loss(return_logits):
    """Silent numeric drift guard: a fixed seed, model and batch give a known loss after 5 steps,
    through the logits path and the chunked head loss alike."""
    torch.manual_seed(1234)
    model = GPT(GPTConfig(**TINY))
    idx = torch.randint(0, 97, (4, 17), generator=torch.Generator().manual_seed(99))
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3)
    losses = []
    for _ in range(5):
        _, loss = model(idx[:, :-1], idx[:, 1:], return_logits=return_logits)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses == pytest.approx(GOLDEN_LOSSES, abs=1e-4)


# Measured once with torch 2.13.0 on CPU; a change here means the model's numerics changed.
GOLDEN_LOSSES = [4.5610, 4.4537, 4.3755, 4.3200, 4.2712]


def _save(model: GPT, path):
    save_checkpoint(path, {"model": model.state_dict(), "tie_embeddings": model.config.tie_embeddings, "step": 0})


@pytest.mark.parametrize("tie", [True, False])
def test_checkpoint_round_trip_gives_identical_logits(tmp_path, tie):
    """Save then load (weights_only) into a fresh model: logits are bit-identical; tied stays tied."""
    model = tiny(tie)
    _save(model, tmp_path / "c.pt")
    fresh = GPT(GPTConfig(**{**TINY, "tie_embeddings": tie}))
    load_model_state(fresh, load_checkpoint(tmp_path / "c.pt"))
    idx = torch.randint(0, 97, (2, 16))
    assert torch.equal(model.eval()(idx)[0], fresh.eval()(idx)[0])
    assert (fresh.lm_head.weight is fresh.wte.weight) == tie


def test_untied_checkpoint_into_tied_model_is_an_error(tmp_path):
    """PyTorch would silently keep one of the two matrices; we refuse the mismatch."""
    _save(tiny(False), tmp_path / "untied.pt")
    with pytest.raises(UserError, match="tie_embeddings"):
        load_model_state(tiny(True), load_checkpoint(tmp_path / "untied.pt"))


def test_tied_checkpoint_into_untied_model_is_an_error(tmp_path):
    """The reverse mismatch is refused too."""
    _save(tiny(True), tmp_path / "tied.pt")
    with pytest.raises(UserError, match="tie_embeddings"):
        load_model_state(tiny(False), load_checkpoint(tmp_path / "tied.pt"))


def test_checkpoint_labelled_tied_with_two_different_matrices_is_an_error(tmp_path):
    """A file that says tied but holds two different matrices (hand-made, another tool) is refused,
    naming the file; otherwise the head's matrix would silently win.  The label is not trusted."""
    untied = tiny(False)
    save_checkpoint(tmp_path / "liar.pt", {"model": untied.state_dict(), "tie_embeddings": True, "step": 0})
    with pytest.raises(
        UserError, match=r"liar\.pt says tie_embeddings=true but its wte.weight and lm_head.weight differ"
    ):
        load_model_state(tiny(True), load_checkpoint(tmp_path / "liar.pt"), source=str(tmp_path / "liar.pt"))
    state = untied.state_dict()
    state["lm_head.weight"] = state["wte.weight"].clone()  # equal values, two tensors: a faithful tied export
    save_checkpoint(tmp_path / "copy.pt", {"model": state, "tie_embeddings": True, "step": 0})
    fresh = tiny(True)
    load_model_state(fresh, load_checkpoint(tmp_path / "copy.pt"))
    assert fresh.lm_head.weight is fresh.wte.weight and torch.equal(fresh.wte.weight, state["wte.weight"])


def test_checkpoint_of_another_shape_is_an_error(tmp_path):
    """A checkpoint of another model shape gives a UserError, not a traceback."""
    _save(tiny(True), tmp_path / "c.pt")
    with pytest.raises(UserError, match="does not fit"):
        load_model_state(tiny(True, n_embd=64), load_checkpoint(tmp_path / "c.pt"))


def test_corrupt_and_missing_checkpoints_are_errors(tmp_path):
    """Missing, truncated and pickled-object files are refused with a UserError."""
    with pytest.raises(UserError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    _save(tiny(), tmp_path / "c.pt")
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="could not be loaded"):
        load_checkpoint(tmp_path / "trunc.pt")

    class Evil:
        def __reduce__(self):
            return (print, ("executed!",))

    torch.save({"format": "tinygpt-checkpoint-1", "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(UserError, match="could not be loaded"):
        load_checkpoint(tmp_path / "evil.pt")


def test_greedy_generation_is_argmax_and_deterministic():
    """Greedy picks argmax of the last logits at each step; two calls agree."""
    model = tiny().eval()
    idx = torch.randint(0, 97, (2, 5))
    out = model.generate(idx, 4, greedy=True)
    assert out.shape == (2, 9) and torch.equal(out[:, :5], idx)
    first = model(idx)[0][:, -1].argmax(-1)
    assert torch.equal(out[:, 5], first)
    assert torch.equal(out, model.generate(idx, 4, greedy=True))


def test_top_k_sampling_stays_in_top_k_and_is_seeded():
    """top-k draws only among the k largest logits; same generator seed -> same tokens."""
    model = tiny().eval()
    idx = torch.randint(0, 97, (1, 5))
    top3 = set(torch.topk(model(idx)[0][0, -1], 3).indices.tolist())
    draws = {int(model.generate(idx, 1, top_k=3, generator=torch.Generator().manual_seed(s))[0, -1]) for s in range(40)}
    assert draws <= top3 and len(draws) > 1
    a = model.generate(idx, 8, top_k=10, generator=torch.Generator().manual_seed(5))
    b = model.generate(idx, 8, top_k=10, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_sampling_matches_the_distribution_of_the_logits():
    """Top-k-free sampling draws token v with probability exp(l_v) / sum exp(l) (checked empirically)."""
    model = tiny().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40)  # sharpen the logits so the distribution is far from uniform
    idx = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(3))
    logits = model(idx)[0][0, -1]
    probs = torch.exp(logits - torch.logsumexp(logits, 0))
    n = 20000
    draws = model.generate(idx.expand(n, 5), 1, generator=torch.Generator().manual_seed(0))[:, -1]
    freq = torch.bincount(draws, minlength=97).float() / n
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
    assert probs.max() > 0.1  # the check above is not between two near-uniform vectors


def test_generation_crops_to_block_size():
    """Generating past block_size crops the context instead of failing."""
    model = tiny().eval()
    out = model.generate(torch.zeros(1, 10, dtype=torch.long), 20, greedy=True)
    assert out.shape == (1, 30)


def test_bad_sampling_arguments_are_errors():
    """temperature <= 0 and top_k < 1 are UserErrors."""
    model = tiny()
    idx = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(UserError, match="temperature"):
        model.generate(idx, 1, temperature=0.0)
    with pytest.raises(UserError, match="top_k"):
        model.generate(idx, 1, top_k=0)


@pytest.mark.parametrize("bad", [dict(n_head=3), dict(n_layer=0), dict(dropout=1.0), dict(block_size=True)])
def test_bad_model_config_is_an_error(bad):
    """GPTConfig validates itself in __post_init__."""
    with pytest.raises(UserError):
        GPTConfig(**{**TINY, **bad})


def kernels_run(fn) -> set[str]:
    """The names of the scaled-dot-product-attention aten ops that ``fn()`` runs (torch.profiler)."""
    with torch.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.events() if "scaled_dot_product" in e.name}


def test_cpu_bf16_training_attention_runs_the_math_kernel_and_computes_the_same_function():
    """model.sdpa: on a CPU in bf16 with T <= MATH_KERNEL_MAX_T and gradients on, PyTorch's math
    kernel runs (not flash, whose backward is slow there), and its output and gradients match
    PyTorch's own choice to bf16 rounding; float32, longer sequences and no-grad evaluation keep
    PyTorch's choice."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, MATH_KERNEL_MAX_T, 16, generator=g).bfloat16().requires_grad_() for _ in range(3))
    math, flash = "aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_flash_attention_for_cpu"
    ran = kernels_run(lambda: causal_attention(q, k, v))
    assert math in ran and flash not in ran
    with torch.no_grad():
        assert flash in kernels_run(lambda: causal_attention(q, k, v))
    longer = torch.zeros(1, 1, MATH_KERNEL_MAX_T + 1, 8).bfloat16().requires_grad_()
    assert not uses_math_kernel(q.float()) and not uses_math_kernel(longer)
    ours = causal_attention(q, k, v)
    ours_grads = torch.autograd.grad(ours.float().square().sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref_grads = torch.autograd.grad(ref.float().square().sum(), (q, k, v))
    torch.testing.assert_close(ours.float(), ref.float(), atol=2e-2, rtol=2e-2)
    for a, b in zip(ours_grads, ref_grads):
        torch.testing.assert_close(a.float(), b.float(), atol=5e-2, rtol=5e-2)
    # Causal: the first position's output is its own value vector, in either kernel.
    torch.testing.assert_close(ours[:, :, 0].float(), v[:, :, 0].float(), atol=1e-2, rtol=1e-2)


def test_a_checkpoint_of_another_parameter_set_names_what_does_not_fit():
    """A checkpoint from a 2-layer model loaded into a 1-layer one: one UserError line that names the parameters
    the model lacks (cut at 4) and sends the user to the config and the commit the run trained with."""
    small = GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=2, n_embd=8))
    big = GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=2, n_head=2, n_embd=8))
    ckpt = {"model": big.state_dict(), "tie_embeddings": True}
    with pytest.raises(UserError) as e:
        load_model_state(small, ckpt, source="ckpt_best.pt")
    text = str(e.value)
    assert "\n" not in text and text.startswith("ckpt_best.pt does not fit this model (not in this model: blocks.1.")
    assert " more)" in text and "the git_commit in its env.json" in text
