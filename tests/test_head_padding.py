"""The padded head (``train.pad_vocab_multiple``): a faster matmul shape, and still a vocab_size model everywhere.

The head's rows are padded to a multiple (50,257 -> 50,304 at 64) for the matmul alone; these
tests hold what a user relies on: the same loss and gradients as the unpadded model for the
same weights, logits of vocab_size columns (so no padded id can be scored or drawn), and
parameters, state dicts and FLOP counts that do not change.

Run: ``python -m pytest -q tests/test_head_padding.py``  (CPU, seconds).
"""

import pytest
import torch

from core.errors import UserError
from model.config import GPTConfig
from model.gpt import GPT
from model.head_loss import padded_head
from training.config import parse_config
from training.setup import new_model
from training.step import resolve_head_loss

VOCAB = 61  # a prime: every multiple above 1 pads it


def _model(tie: bool, bias: bool = False, pad: int = 1, head_loss: str = "chunked", cap: float = 0.0) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=VOCAB,
        block_size=16,
        n_layer=1,
        n_head=2,
        n_embd=16,
        tie_embeddings=tie,
        lm_head_bias=bias,
        logit_softcap=cap,
    )
    return GPT(cfg, pad_vocab_multiple=pad, head_loss=head_loss)


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (3, 16), generator=g), torch.randint(0, VOCAB, (3, 16), generator=g)


def _loss_and_grads(model: GPT, return_logits: bool):
    idx, targets = _batch()
    _, loss = model(idx, targets, return_logits=return_logits)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return loss, grads


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("return_logits", [True, False])
@pytest.mark.parametrize("cap", [0.0, 2.0])
def test_padded_head_gives_the_unpadded_loss_and_gradients(tie, bias, return_logits, cap):
    """Padding to 64 changes neither the loss nor any parameter's gradient, tied or untied, with or
    without a head bias, through the logits path (cut) and the chunked loss (masked), with or without
    a logit soft-cap (which must keep a masked column at -inf, not move it to -cap)."""
    plain = _loss_and_grads(_model(tie, bias, pad=1, cap=cap), return_logits)
    padded = _loss_and_grads(_model(tie, bias, pad=64, cap=cap), return_logits)
    torch.testing.assert_close(padded[0], plain[0], rtol=1e-6, atol=1e-6)
    for got, want in zip(padded[1], plain[1]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tie", [True, False])
def test_padded_logits_have_vocab_size_columns(tie):
    """The logits a caller gets (and sampling draws from) have exactly vocab_size columns, equal to the
    unpadded model's: no padded id exists outside the head's matmul."""
    idx, _ = _batch()
    logits, _ = _model(tie, pad=64)(idx)
    plain, _ = _model(tie, pad=1)(idx)
    assert logits.shape == (3, 16, VOCAB)
    torch.testing.assert_close(logits, plain, rtol=1e-6, atol=1e-6)


def test_padded_model_generates_only_real_ids():
    """Greedy and sampled generation from a padded model draw ids below vocab_size, the unpadded model's ids."""
    idx, _ = _batch()
    padded, plain = _model(True, pad=64).eval(), _model(True, pad=1).eval()
    for kwargs in ({"greedy": True}, {"top_k": 5, "generator": torch.Generator().manual_seed(3)}):
        out = padded.generate(idx[:1, :4], 12, **kwargs)
        assert int(out.max()) < VOCAB
        if "generator" in kwargs:
            kwargs["generator"] = torch.Generator().manual_seed(3)
        assert torch.equal(out, plain.generate(idx[:1, :4], 12, **kwargs))


@pytest.mark.parametrize("tie", [True, False])
def test_padding_leaves_parameters_state_dict_and_flops_alone(tie):
    """Parameter count, state dict shapes and FLOPs per token are the vocab_size model's: padding is not stored."""
    plain, padded = _model(tie, pad=1), _model(tie, pad=64)
    assert padded.num_params() == plain.num_params()
    assert {k: v.shape for k, v in padded.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}
    assert padded.lm_head.weight.shape == (VOCAB, 16)
    assert padded.flops_per_token() == plain.flops_per_token()


def test_padded_head_masks_rows_for_losses_that_see_whole_rows():
    """With mask=True the padded rows get a -inf bias (softmax weight 0); without, a zero bias; none when unpadded."""
    w, b = torch.randn(VOCAB, 4), torch.randn(VOCAB)
    pw, pb = padded_head(w, None, 64, mask=True)
    assert pw.shape == (64, 4) and torch.equal(pw[VOCAB:], torch.zeros(64 - VOCAB, 4))
    assert torch.equal(pb[:VOCAB], torch.zeros(VOCAB)) and torch.isneginf(pb[VOCAB:]).all()
    assert torch.equal(padded_head(w, b, 64)[1][VOCAB:], torch.zeros(64 - VOCAB))
    assert padded_head(w, b, VOCAB)[0] is w


def test_auto_padding_is_64_on_cuda_and_none_on_cpu():
    """train.pad_vocab_multiple=0 resolves to 64 for CUDA and 1 for a CPU, and is recorded resolved."""
    for device, want in (("cuda", 64), ("cpu", 1)):
        cfg = resolve_head_loss(parse_config(None, {}), torch.device(device))
        assert cfg.train.pad_vocab_multiple == want
    cfg = resolve_head_loss(parse_config(None, {"train": {"pad_vocab_multiple": 128}}), torch.device("cpu"))
    cfg = cfg.with_values(model={"vocab_size": VOCAB})
    assert new_model(cfg).pad_vocab_multiple == 128


def test_bad_padding_and_fused_off_cuda_are_refused():
    """A negative multiple is a config error; the fused head loss on a CPU is refused with the fix named."""
    with pytest.raises(UserError, match="pad_vocab_multiple"):
        parse_config(None, {"train": {"pad_vocab_multiple": -1}})
    cfg = parse_config(None, {"train": {"head_loss": "fused"}})
    with pytest.raises(UserError, match="CUDA only"):
        resolve_head_loss(cfg, torch.device("cpu"))


def test_the_fused_loss_runs_outside_the_compiled_graph(monkeypatch):
    """Under torch.compile the fused kernel is called eagerly (Dynamo fails inside Liger-Kernel), and the
    compiled model's loss is the chunked loss. A stand-in for Liger's function checks where it runs."""
    import core.optional
    from model.head_loss import linear_cross_entropy

    calls = []

    def stand_in(x, weight, targets, bias):
        calls.append(torch.compiler.is_compiling())
        return linear_cross_entropy(x, weight, bias, targets)

    monkeypatch.setattr(core.optional, "liger_fused_linear_cross_entropy", lambda: stand_in)
    fused, chunked = _model(tie=True, pad=8, head_loss="fused"), _model(tie=True, pad=8)
    idx = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    _, loss = torch.compile(fused, backend="eager")(idx, idx, return_logits=False)
    assert calls == [False]
    torch.testing.assert_close(loss, chunked(idx, idx, return_logits=False)[1])


def test_only_the_fused_loss_imports_dynamo():
    """Keeping the fused kernel out of torch.compile needs Dynamo, whose import costs every process about
    a second: training without head_loss='fused' must not import it (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = "import sys, training.loop, training.setup, model.gpt; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
