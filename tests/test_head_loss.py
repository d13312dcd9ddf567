"""The chunked head loss (``model.head_loss``, ``train.head_loss='chunked'``): nn.CrossEntropyLoss's loss and gradients, a slice at a time.

Run: ``python -m pytest -q tests/test_head_loss.py``  (CPU, seconds).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import model.head_loss as head_loss
from core.errors import UserError
from model.config import GPTConfig
from model.gpt import GPT
from model.head_loss import linear_cross_entropy
from training.config import parse_config


def _inputs(n=37, c=8, v=29, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g, requires_grad=True)
    w = torch.randn(v, c, generator=g).requires_grad_()
    b = torch.randn(v, generator=g).requires_grad_() if bias else None
    return x, w, b, torch.randint(0, v, (n,), generator=g)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 37, 100])
def test_loss_and_gradients_are_cross_entropy_of_the_linear(bias, rows):
    """For any slice size (one row, an uneven last slice, one slice, more rows than N) the loss and the
    gradients of x, weight and bias are those of nn.CrossEntropyLoss on F.linear."""
    x, w, b, t = _inputs(bias=bias)
    expected = nn.CrossEntropyLoss()(F.linear(x, w, b), t)
    want = torch.autograd.grad(expected, [p for p in (x, w, b) if p is not None])
    got_loss = linear_cross_entropy(x, w, b, t, rows=rows)
    got = torch.autograd.grad(got_loss, [p for p in (x, w, b) if p is not None])
    assert got_loss.item() == pytest.approx(expected.item(), rel=1e-6)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def test_upstream_gradient_scales_the_result():
    """backward() of 3 * loss gives 3x the gradients (the chain rule through the saved gradients)."""
    x, w, b, t = _inputs()
    (3 * linear_cross_entropy(x, w, b, t, rows=4)).backward()
    gx = x.grad.clone()
    x.grad = None
    (3 * nn.CrossEntropyLoss()(F.linear(x, w, b), t)).backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-6)


def test_no_grad_gives_the_loss_only():
    """Under torch.no_grad (evaluation) the same loss comes back, with no graph attached."""
    x, w, b, t = _inputs()
    with torch.no_grad():
        loss = linear_cross_entropy(x, w, b, t, rows=6)
        expected = F.cross_entropy(F.linear(x, w, b), t)
    assert not loss.requires_grad
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_never_builds_more_than_one_slice_of_logits(monkeypatch):
    """The head's matmul only ever sees `rows` rows, with and without gradients: the memory bound."""
    seen = []
    real = head_loss._slice_logits
    monkeypatch.setattr(head_loss, "_slice_logits", lambda xs, *rest: seen.append(xs.size(0)) or real(xs, *rest))
    x, w, b, t = _inputs(n=37)
    linear_cross_entropy(x, w, b, t, rows=8).backward()
    with torch.no_grad():
        linear_cross_entropy(x, w, b, t, rows=8)
    assert seen == [8, 8, 8, 8, 5] * 2


def test_every_slice_reuses_the_same_logits_buffer(monkeypatch):
    """Float32 slices are written into one buffer per call, not allocated anew: the per-slice
    64 MB tensors fragmented the CPU heap (which is never trimmed) and a run's RSS crept upwards."""
    starts = []
    real = head_loss._slice_logits
    monkeypatch.setattr(head_loss, "_slice_logits", lambda *a: starts.append(real(*a).data_ptr()) or real(*a))
    x, w, b, t = _inputs(n=37)
    linear_cross_entropy(x, w, b, t, rows=8).backward()
    with torch.no_grad():
        linear_cross_entropy(x, w, b, t, rows=8)
    assert len(starts) == 10
    assert len(set(starts[:5])) == 1 and len(set(starts[5:])) == 1


def test_default_slice_is_a_fixed_number_of_logits():
    """Rows per slice shrink with the vocabulary (64 MB of float32 logits); a small vocabulary is one slice."""
    assert head_loss.slice_rows(50257) * 50257 <= head_loss.SLICE_ELEMENTS
    assert head_loss.slice_rows(65) >= 16 * 128
    assert head_loss.slice_rows(10**9) == 1


def test_bad_shapes_and_slice_sizes_are_an_error():
    """Mismatched shapes or a slice of fewer than 1 row are a ValueError, not a silent broadcast or a 0 loss."""
    x, w, b, t = _inputs()
    with pytest.raises(ValueError, match="linear_cross_entropy"):
        linear_cross_entropy(x, w, b, t[:-1])
    for rows in (0, -1):
        with pytest.raises(ValueError, match="rows per slice"):
            linear_cross_entropy(x, w, b, t, rows=rows)


def test_only_the_wanted_gradients_are_computed():
    """A frozen input or bias gets no gradient; the weight's is still exact (x.requires_grad False)."""
    x, w, b, t = _inputs()
    x, b = x.detach(), b.detach()
    linear_cross_entropy(x, w, b, t, rows=4).backward()
    want = torch.autograd.grad(F.cross_entropy(F.linear(x, w, b), t), w)[0]
    assert x.grad is None and b.grad is None
    torch.testing.assert_close(w.grad, want, rtol=1e-5, atol=1e-6)


def test_a_second_derivative_is_refused():
    """The gradients are computed in forward, so they are constants: differentiating them again raises."""
    x, w, b, t = _inputs()
    (g,) = torch.autograd.grad(linear_cross_entropy(x, w, b, t, rows=4), w, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice|does not require grad"):
        g.sum().backward()


def test_int32_targets_work_with_and_without_gradients():
    """Targets of any integer type index alike in both paths."""
    x, w, b, t = _inputs()
    expected = F.cross_entropy(F.linear(x, w, b), t).item()
    assert linear_cross_entropy(x, w, b, t.int(), rows=4).item() == pytest.approx(expected, rel=1e-6)
    with torch.no_grad():
        assert linear_cross_entropy(x, w, b, t.int(), rows=4).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("tie,bias", [(True, False), (False, False), (True, True)])
def test_model_chunked_loss_matches_the_logits_path(tie, bias):
    """GPT(idx, targets, return_logits=False) gives (None, the same loss) and the same gradient on every
    parameter as the logits path, tied (the shared matrix's two uses summed), untied and with a head bias."""
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=53, block_size=16, n_layer=2, n_head=2, n_embd=16, tie_embeddings=tie, lm_head_bias=bias)
    )
    idx = torch.randint(0, 53, (3, 16), generator=torch.Generator().manual_seed(1))
    x, y = idx[:, :-1], idx[:, 1:]
    grads = []
    for return_logits in (True, False):
        model.zero_grad()
        logits, loss = model(x, y, return_logits=return_logits)
        assert (logits is None) == (not return_logits)
        loss.backward()
        grads.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert grads[1][0] == pytest.approx(grads[0][0], rel=1e-6)
    for name, g in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_model_chunked_loss_needs_targets():
    """return_logits=False without targets is a ValueError: there would be nothing to return."""
    model = GPT(GPTConfig(vocab_size=53, block_size=16, n_layer=1, n_head=1, n_embd=8))
    with pytest.raises(ValueError, match="needs targets"):
        model(torch.zeros(1, 4, dtype=torch.long), return_logits=False)


def test_bf16_autocast_stays_close_to_the_logits_path():
    """Under CPU bf16 autocast the chunked loss agrees with the logits path to bf16 precision."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=211, block_size=16, n_layer=1, n_head=2, n_embd=32))
    idx = torch.randint(0, 211, (4, 16), generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = model(idx[:, :-1], idx[:, 1:])[1]
        b = model(idx[:, :-1], idx[:, 1:], return_logits=False)[1]
    b.backward()
    assert b.dtype == torch.float32 and b.item() == pytest.approx(a.item(), rel=2e-2)
    assert model.lm_head.weight.grad.dtype == torch.float32


def test_autocast_chunked_loss_equals_the_per_matmul_autocast_arithmetic():
    """Under bf16 autocast the chunked loss casts its operands once per call, not per matmul: the loss and
    gradients equal those of the same slices with autocast casting at every matmul (the arithmetic before)."""
    x, w, b, t = _inputs(n=40, c=16, v=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_cross_entropy(x, w, b, t, rows=10)
    grads = torch.autograd.grad(got, [x, w, b])
    total, want = 0.0, [torch.zeros_like(x), torch.zeros_like(w), torch.zeros_like(b)]
    for s in range(0, 40, 10):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = F.linear(x[s : s + 10], w, b).float()
        logp = torch.log_softmax(logits, 1)
        total -= logp.gather(1, t[s : s + 10, None]).sum()
        g = logp.exp().scatter_add(1, t[s : s + 10, None], torch.full((10, 1), -1.0))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want[0][s : s + 10] = g @ w
            want[1] += g.t() @ x[s : s + 10]
        want[2] += g.sum(0)
    assert got.item() == pytest.approx((total / 40).item(), rel=1e-6)
    for a, e in zip(grads, want):
        torch.testing.assert_close(a, e / 40, rtol=1e-5, atol=1e-7)


def test_head_loss_setting_is_checked():
    """train.head_loss takes auto, logits, chunked or fused; anything else is a one-line error naming them."""
    assert parse_config(None, {"train": {"head_loss": "chunked"}}).train.head_loss == "chunked"
    with pytest.raises(UserError, match="'auto', 'logits', 'chunked' or 'fused'"):
        parse_config(None, {"train": {"head_loss": "liger"}})


def test_a_new_run_records_which_loss_path_ran(tmp_path):
    """train.head_loss='auto' is resolved when a run starts, and config.json says which path ran; an explicit choice stays."""
    from training.step import resolve_head_loss

    cfg = resolve_head_loss(parse_config(None, {"train": {"device": "cpu"}}), torch.device("cpu"))
    assert cfg.train.head_loss == "chunked"
    cfg = resolve_head_loss(
        parse_config(None, {"train": {"device": "cpu", "head_loss": "logits"}}), torch.device("cpu")
    )
    assert cfg.train.head_loss == "logits"


def test_auto_chunks_only_logits_larger_than_one_slice():
    """'auto' on a CPU: chunked where a micro-batch's logits exceed one slice (GPT-2's vocabulary), logits where
    they fit in one (characters: chunking would save no memory and costs time); logits on CUDA either way."""
    from training.step import resolve_head_loss

    def resolved(vocab_size: int, device: str, batch_size: int = 8) -> str:
        cfg = parse_config(None, {"model": {"vocab_size": vocab_size}, "train": {"batch_size": batch_size}})
        return resolve_head_loss(cfg, torch.device(device)).train.head_loss

    assert resolved(50257, "cpu") == "chunked"
    assert resolved(65, "cpu") == "logits"
    rows = head_loss.SLICE_ELEMENTS // 65  # the most rows one slice of a 65-token head holds
    assert resolved(65, "cpu", batch_size=rows // 128) == "logits"
    assert resolved(65, "cpu", batch_size=rows // 128 + 1) == "chunked"
    assert resolved(50257, "cuda") == "logits"


def test_a_run_saved_before_head_loss_existed_resumes_on_the_logits_path(tmp_path):
    """An old config.json without train.head_loss reads as 'logits', the arithmetic that run began with."""
    import json

    from training.runs import load_run_config

    d = parse_config(None, {}).to_dict()
    del d["train"]["head_loss"], d["model"]["gelu_approximate"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg = load_run_config(tmp_path)
    assert cfg.train.head_loss == "logits" and cfg.model.gelu_approximate == "tanh"


def test_a_target_far_below_the_best_logit_gives_its_exact_finite_loss():
    """A target whose probability underflows float32 (200 nats below its row's best) still gets its exact
    cross-entropy and gradient, not an infinite loss: the softmax path falls back to logsumexp there."""
    x = torch.zeros(2, 1, requires_grad=True)
    w = torch.zeros(3, 1, requires_grad=True)
    b = torch.tensor([200.0, 0.0, 0.0], requires_grad=True)
    t = torch.tensor([1, 0])
    got = linear_cross_entropy(x, w, b, t, rows=2)
    want = F.cross_entropy(F.linear(x, w, b), t)
    assert torch.isfinite(got) and got.item() == pytest.approx(want.item(), rel=1e-6)
    (gb,) = torch.autograd.grad(got, b)
    torch.testing.assert_close(gb, torch.autograd.grad(want, b)[0])
