"""train.optimizer: AdamW alone, or Muon on the blocks' 2-D matrices and AdamW (today's groups) on the rest.

Run: ``python -m pytest -q tests/test_optim.py``  (CPU, a few seconds).
"""

import copy

import pytest
import torch

from core.errors import UserError
from model.gpt import GPT
from training.config import RunConfig
from training.optim import Muon, MuonAdamW, build_optimizer, muon_matrices, orthogonalise, orthogonalise_all

CPU = torch.device("cpu")
MODEL = {"vocab_size": 97, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}


def setup(optimizer: str = "muon", **model) -> tuple[GPT, object, RunConfig]:
    cfg = RunConfig.from_dict({"model": {**MODEL, **model}, "train": {"optimizer": optimizer}})
    torch.manual_seed(0)
    gpt = GPT(cfg.model)
    return gpt, build_optimizer(gpt, cfg.train, CPU), cfg


def ids(groups) -> set[int]:
    return {id(p) for g in groups for p in g["params"]}


def muon_steps(make, steps: int = 3) -> list[torch.Tensor]:
    """The weights of two matrices (one wide, one tall) after ``steps`` updates by ``make(params)``."""
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(8, 24)), torch.nn.Parameter(torch.randn(24, 8))]
    opt = make(weights)
    for _ in range(steps):
        for w in weights:
            w.grad = torch.randn_like(w)
        opt.step()
    return [w.detach() for w in weights]


def test_muon_in_bf16_is_torchs_muon():
    """With ns_dtype=bfloat16, Muon's updates are torch.optim.Muon's, bit for bit (same rule, same rounding)."""
    kw = {"lr": 0.02, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True}
    ours = muon_steps(lambda ps: Muon(ps, ns_dtype=torch.bfloat16, **kw))
    torchs = muon_steps(lambda ps: torch.optim.Muon(ps, **kw))
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs, strict=True))


def test_float32_orthogonalisation_is_close_to_bf16s_and_near_orthogonal():
    """In float32 the iteration gives the same update as bf16 up to bf16's rounding, with singular values in
    (0.5, 1.5) as the quintic's coefficients promise (Jordan et al. 2024), for wide and tall matrices."""
    coeffs = torch.optim.Muon([torch.nn.Parameter(torch.ones(2, 2))]).defaults["ns_coefficients"]
    for shape in ((16, 48), (48, 16)):
        g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
        o32 = orthogonalise(g, coeffs, 5, 1e-7, torch.float32)
        o16 = orthogonalise(g, coeffs, 5, 1e-7, torch.bfloat16).float()
        assert o32.dtype is torch.float32 and o32.shape == shape
        assert (o32 - o16).norm() < 0.05 * o32.norm()
        s = torch.linalg.svdvals(o32)
        assert s.min() > 0.5 and s.max() < 1.5


def test_orthogonalising_in_batches_is_orthogonalising_each_matrix():
    """Muon stacks a group's matrices of one shape (tall ones turned wide) into one batch: each update, in the
    list's order and shape, is the one its matrix gets alone (to float32 rounding)."""
    coeffs = torch.optim.Muon([torch.nn.Parameter(torch.ones(2, 2))]).defaults["ns_coefficients"]
    gen = torch.Generator().manual_seed(2)
    shapes = [(16, 16), (48, 16), (16, 48), (16, 16), (8, 24), (48, 16)]
    grads = [torch.randn(shape, generator=gen) for shape in shapes]
    together = orthogonalise_all(grads, coeffs, 5, 1e-7, torch.float32)
    for g, t in zip(grads, together, strict=True):
        alone = orthogonalise(g, coeffs, 5, 1e-7, torch.float32)
        assert t.shape == g.shape and torch.allclose(t, alone, atol=1e-5)


@pytest.mark.parametrize(("amp", "want"), [(None, torch.float32), (torch.bfloat16, torch.bfloat16)])
def test_muon_orthogonalises_in_the_runs_compute_dtype(amp, want):
    """A float32 run (no autocast) orthogonalises in float32 (bf16 is emulated, 16x slower, on CPUs without bf16
    instructions); a bf16 autocast run in bf16, as torch.optim.Muon does."""
    cfg = RunConfig.from_dict({"model": MODEL, "train": {"optimizer": "muon"}})
    opt = build_optimizer(GPT(cfg.model), cfg.train, CPU, amp)
    assert opt.muon.ns_dtype is want


@pytest.mark.parametrize("tie", [True, False])
def test_muon_trains_the_block_matrices_and_adamw_everything_else(tie):
    """Muon holds exactly the 2-D weights inside the blocks; AdamW holds the rest, each parameter once, in the
    groups the adamw arm has less those matrices: the tied matrix (an embedding) and an untied lm_head are AdamW's."""
    model, opt, _ = setup(tie_embeddings=tie, qk_norm=True, mlp="swiglu")
    assert isinstance(opt, MuonAdamW)
    muon, adamw = ids(opt.muon.param_groups), ids(opt.adamw.param_groups)
    assert muon == {id(p) for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2}
    assert len(muon) == 2 * 7  # q, k, v, out, gate, up, down per block
    assert not muon & adamw and muon | adamw == {id(p) for p in model.parameters()}
    assert id(model.wte.weight) in adamw and id(model.lm_head.weight) in adamw
    assert all(p.dim() == 1 for n, p in model.named_parameters() if "norm" in n and id(p) in adamw)
    plain = build_optimizer(model, setup("adamw", tie_embeddings=tie)[2].train, CPU)
    assert isinstance(plain, torch.optim.AdamW)
    want = [[id(p) for p in g["params"] if id(p) not in muon] for g in plain.param_groups]
    assert [[id(p) for p in g["params"]] for g in opt.adamw.param_groups] == want


def test_muons_learning_rate_follows_the_schedule():
    """train_step sets each group's lr to the schedule's lr times lr_scale: Muon's is muon_learning_rate times the
    same factor (lr / learning_rate) as AdamW's."""
    _, opt, cfg = setup()
    tc = cfg.train
    (muon_group,) = opt.muon.param_groups
    assert muon_group["lr_scale"] * tc.learning_rate == pytest.approx(tc.muon_learning_rate)
    assert muon_group["momentum"] == tc.muon_momentum and muon_group["nesterov"]
    assert len(opt.param_groups) == len(opt.adamw.param_groups) + 1
    for group in opt.param_groups:  # as training.step.train_step does
        group["lr"] = tc.learning_rate * 0.25 * group["lr_scale"]
    assert opt.muon.param_groups[0]["lr"] == pytest.approx(tc.muon_learning_rate * 0.25)
    assert opt.adamw.param_groups[0]["lr"] == pytest.approx(tc.learning_rate * 0.25)


def _train(model: GPT, opt, steps: int) -> None:
    idx = torch.randint(0, 97, (4, 17), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        model(idx[:, :-1], idx[:, 1:])[1].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def test_state_dict_round_trip_continues_bit_for_bit():
    """Two steps, save both optimizers' states, load them into a fresh copy: the next steps give the same weights."""
    model, opt, _ = setup()
    _train(model, opt, 2)
    state = copy.deepcopy(opt.state_dict())  # as a checkpoint holds it: no tensor shared with the live optimizer
    assert set(state) == {"adamw", "muon"} and len(state["muon"]["state"]) == len(muon_matrices(model))
    twin, twin_opt, _ = setup()
    twin.load_state_dict(model.state_dict())
    twin_opt.load_state_dict(state)
    _train(model, opt, 2)
    _train(twin, twin_opt, 2)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
    with pytest.raises(KeyError):
        twin_opt.load_state_dict(state["adamw"])  # an AdamW-only state (an adamw run's) is not this optimizer's


def test_a_new_group_and_its_state_go_to_adamw():
    """Untying under Muon: the new lm_head joins AdamW (add_param_group), and a state written through .state is AdamW's."""
    model, opt, _ = setup()
    _train(model, opt, 1)
    tied = model.wte.weight
    assert tied in opt.state and muon_matrices(model)[0] in opt.state
    head = model.untie()
    opt.add_param_group({"params": [head], "weight_decay": 0.1, "lr_scale": 1.0})
    opt.state[head] = {k: v.clone() for k, v in opt.state[tied].items()}
    assert head in opt.adamw.state and id(head) in ids(opt.adamw.param_groups)
    _train(model, opt, 1)
    assert not torch.equal(model.lm_head.weight, model.wte.weight)


@pytest.mark.parametrize(
    "train, match",
    [
        ({"optimizer": "sgd"}, "train.optimizer must be 'adamw' or 'muon'"),
        ({"optimizer": "muon", "muon_momentum": 1.0}, "train.muon_momentum in"),
        ({"optimizer": "muon", "muon_learning_rate": 0.0}, "train.muon_learning_rate > 0"),
        ({"muon_learning_rate": 0.05}, "train.muon_learning_rate needs train.optimizer=muon"),
    ],
)
def test_bad_optimizer_settings_are_one_line_errors(train, match):
    """A bad optimizer value, or a Muon setting without Muon, names the problem and the fix."""
    with pytest.raises(UserError, match=match):
        RunConfig.from_dict({"train": train})
