"""The experiment's arms as model and training settings: output bias, init policies, zero head,
separate learning rates, tie-then-untie (and its resume), the final score, and arm names.

Run: ``python -m pytest -q tests/test_arms.py``  (CPU, about half a minute).
"""

import json
import math
import re

import pytest
import torch
from helpers import tiny_args, train_rows

import sample
import train
from core.errors import UserError
from experiment.arms import (
    ARMS,
    arm_argv,
    arm_of,
    arms_from_differences,
    define_arms,
    load_arms_file,
    parse_arm,
    parse_arms,
)
from experiment.runs.record import flatten
from model.checkpoint import load_checkpoint
from model.config import GPTConfig
from model.gpt import GPT
from model.hf import config_to_hf
from training.config import RunConfig
from training.runs import read_metrics

TINY = dict(vocab_size=97, block_size=16, n_layer=2, n_head=2, n_embd=32)


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, **kw}))


def test_lm_head_bias_adds_vocab_size_parameters_starting_at_zero():
    """tied-bias: the head gains a (vocab_size,) bias, zero at init, outside the non-embedding count."""
    plain, biased = tiny(), tiny(lm_head_bias=True)
    assert biased.num_params() - plain.num_params() == TINY["vocab_size"]
    assert biased.num_params(non_embedding=True) == plain.num_params(non_embedding=True)
    assert torch.equal(biased.lm_head.bias, torch.zeros(TINY["vocab_size"])) and biased.tied


def test_cached_decode_adds_the_head_bias():
    """The KV-cache path's transposed-head shortcut gives the same logits as lm_head, bias included."""
    model = tiny(lm_head_bias=True).eval()
    with torch.no_grad():
        model.lm_head.bias.normal_()
        x = model.ln_f(model.hidden(torch.randint(0, 97, (2, 5)))[:, -1])
        head_t = model.lm_head.weight.t().contiguous()
        assert torch.allclose(model.lm_head(x), x @ head_t + model.lm_head.bias, atol=1e-6)
    from model.kv_cache import KVCache

    cache = KVCache(model.config)
    idx = torch.randint(0, 97, (2, 5))
    assert torch.allclose(model.decode(idx, cache, head_t), model(idx)[0][:, -1], atol=1e-5)


def test_pytorch_init_uses_the_layer_defaults_and_gpt2_init_its_own():
    """init='pytorch': embedding N(0, 1), Linear U(+-1/sqrt(in)); 'gpt2': N(0, 0.02) everywhere."""
    torch.manual_seed(0)
    big = dict(TINY, vocab_size=4000, n_embd=64, n_head=2)
    pt = GPT(GPTConfig(**big, tie_embeddings=False, init="pytorch"))
    gpt2 = GPT(GPTConfig(**big, tie_embeddings=False))
    assert abs(pt.wte.weight.std().item() - 1.0) < 0.02
    bound = 1 / math.sqrt(64)
    assert pt.lm_head.weight.abs().max().item() <= bound and pt.lm_head.weight.std().item() > 0.5 * bound
    assert abs(gpt2.wte.weight.std().item() - 0.02) < 0.001 and abs(gpt2.lm_head.weight.std().item() - 0.02) < 0.001
    tied_pt = GPT(GPTConfig(**big, init="pytorch"))
    assert tied_pt.lm_head.weight is tied_pt.wte.weight and abs(tied_pt.wte.weight.std().item() - 1.0) < 0.02


def test_zero_init_head_zeroes_an_untied_head_and_is_refused_when_tied():
    """untied-split starts its head at zero; zeroing a tied head would zero the embedding, so it is refused."""
    model = tiny(tie_embeddings=False, zero_init_head=True)
    assert torch.count_nonzero(model.lm_head.weight) == 0 and torch.count_nonzero(model.wte.weight) > 0
    with pytest.raises(UserError, match="zero_init_head"):
        GPTConfig(**TINY, zero_init_head=True)


def test_untie_keeps_the_logits_then_the_matrices_train_apart():
    """untie(): same logits at once, two Parameters after, and one optimizer step moves them differently."""
    model = tiny()
    idx = torch.randint(0, 97, (2, 8))
    before = model(idx)[0]
    head = model.untie()
    assert not model.tied and head is model.lm_head.weight and not model.config.tie_embeddings
    assert torch.equal(model(idx)[0], before)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(idx, idx)[1].backward()
    opt.step()
    assert not torch.equal(model.wte.weight, model.lm_head.weight)
    with pytest.raises(UserError, match="needs a tied model"):
        model.untie()


@pytest.mark.parametrize("tie", [True, False])
def test_learning_rate_scales_make_their_own_groups_each_parameter_once(tie):
    """With embedding/head scales the matrices get their own groups (lr_scale); every Parameter sits in one group."""
    model = tiny(tie_embeddings=tie)
    plain = model.param_groups(0.1)
    assert len(plain) == 2 and all(g["lr_scale"] == 1.0 for g in plain)
    groups = model.param_groups(0.1, True, 10.0, 0.2 if not tie else 1.0)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    assert scale[id(model.wte.weight)] == 10.0
    assert scale[id(model.lm_head.weight)] == (10.0 if tie else 0.2)


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"model": {"tie_embeddings": False}, "train": {"untie_at": 0.5}}, "untie_at unties a tied model"),
        ({"train": {"head_lr_scale": 0.2}}, "head_lr_scale needs an lm_head of its own"),
        ({"train": {"untie_at": 1.0}}, "must be in"),
        ({"model": {"init": "xavier"}}, "model.init must be one of"),
    ],
)
def test_arm_settings_that_contradict_each_other_are_refused(settings, match):
    """Settings that cannot hold together are a one-line UserError naming the fix."""
    with pytest.raises(UserError, match=match):
        RunConfig.from_dict(settings)


def test_lm_head_bias_has_no_gpt2_export():
    """GPT2LMHeadModel's head has no bias: exporting a tied-bias model is refused, not silently dropped."""
    with pytest.raises(UserError, match="lm_head_bias"):
        config_to_hf(GPTConfig(**TINY, lm_head_bias=True))


def test_tie_then_untie_resumes_across_the_switch_bit_exactly(tmp_path, corpus):
    """Untie at step 2 of 8; stopping at 4 and resuming gives the uninterrupted run's losses and weights."""
    common = tiny_args(tmp_path, corpus, "--train.untie_at=0.25", "--train.lr_decay_iters=8")
    assert train.main([*common, "--train.max_iters=8", "--run-name", "straight"]) == 0
    assert train.main([*common, "--train.max_iters=4", "--run-name", "split"]) == 0
    assert load_checkpoint(tmp_path / "runs" / "split" / "ckpt_last.pt")["tie_embeddings"] is False
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "split", "--train.max_iters=8"])
        == 0
    )
    straight, split = (tmp_path / "runs" / n for n in ("straight", "split"))
    assert [r["train_loss"] for r in train_rows(split)] == [r["train_loss"] for r in train_rows(straight)]
    a, b = (load_checkpoint(p / "ckpt_last.pt")["model"] for p in (straight, split))
    assert all(torch.equal(a[k], b[k]) for k in a) and not torch.equal(a["wte.weight"], a["lm_head.weight"])
    assert [r["step"] for r in read_metrics(straight / "metrics.jsonl") if r["kind"] == "untie"] == [2]
    assert sample.main(["--run", str(straight), "--max-new-tokens", "5", "--greedy"]) == 0


def test_every_arm_trains_and_reads_back_as_itself(tmp_path, corpus):
    """Each arm's train.py flags train a run whose config.json arm_of() names as that arm, with a final score
    (tie-untie-cooldown on the WSD schedule it needs)."""
    for arm in ARMS:
        wsd = ["--train.lr_schedule=wsd"] if "train.untie_at_cooldown" in ARMS[arm] else []
        argv = tiny_args(tmp_path, corpus, "--train.max_iters=4", *wsd, *arm_argv(arm), "--run-name", arm)
        assert train.main(argv) == 0
        run = tmp_path / "runs" / arm
        cfg = RunConfig.from_dict(json.loads((run / "config.json").read_text()))
        assert arm_of(flatten(cfg.to_dict())) == arm
        final = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "final_eval"]
        assert len(final) == 1 and math.isfinite(final[0]["val_loss"])


def test_arm_names_are_checked():
    """--arms takes known names once each; a typo names the valid arms."""
    assert define_arms(parse_arms("tied, untied-split"), {}).names == ["tied", "untied-split"]
    with pytest.raises(UserError, match="choose from"):
        define_arms(parse_arms("tied,untyed"), {})
    with pytest.raises(UserError, match="twice"):
        define_arms(parse_arms("tied,tied"), {})
    with pytest.raises(UserError, match="none of the arms"):
        arm_of({"model.tie_embeddings": False, "train.untie_at": 0.5})


def test_an_arm_from_settings_is_typed_and_reads_back_as_itself():
    """--arm NAME:KEY=VALUE,...: values typed by the config's fields; the arm set names a run by those values."""
    name, settings = parse_arm("reg:model.dropout=0.1,train.weight_decay=0")
    assert (name, settings) == ("reg", {"model.dropout": 0.1, "train.weight_decay": 0.0})
    arms = define_arms(None, {"base": {}, "reg": settings})
    assert arms.names == ["base", "reg"] and arms.argv("reg") == ["--model.dropout=0.1", "--train.weight_decay=0.0"]
    assert arms.of({"model.dropout": 0.1, "train.weight_decay": 0.0}) == "reg"
    assert arms.of({}) == "base"  # the defaults: dropout 0.0, weight decay 0.1


def test_a_derived_key_left_unset_reads_back_as_its_arm():
    """A run records train.lr_decay_iters as derived from max_iters: the arm that left it unset still
    claims that run, and an arm that sets the key claims the runs with its value."""
    arms = define_arms(None, {"base": {}, "short": {"train.max_iters": 1500, "train.lr_decay_iters": 1500}})
    assert arms.of({"train.max_iters": 2000, "train.lr_decay_iters": 2000}) == "base"
    assert arms.of({"train.max_iters": 1500, "train.lr_decay_iters": 1500}) == "short"
    decay = define_arms(None, {"base": {}, "long-decay": {"train.lr_decay_iters": 3000}})
    assert decay.of({"train.max_iters": 2000, "train.lr_decay_iters": 3000}) == "long-decay"
    assert decay.of({"train.max_iters": 2000, "train.lr_decay_iters": 2000}) == "base"


@pytest.mark.parametrize(
    "text, words",
    [
        ("d:model.dropot=0.1", "did you mean model.dropout?"),
        ("d:train.seed=3", "compare.py pairs the arms by seed"),
        ("d:data.val_fraction=0.2", "same validation split"),
        ("d:train.eval_iters=5", "eval windows"),
        ("d:train.out_dir=x", "bookkeeping"),
        ("d:model.vocab_size=10", "set by the tokenizer"),
        ("d:model.dropout=lots", "is not a float"),
        ("d model.dropout=0.1", "NAME:KEY=VALUE"),
        ("d/x:model.dropout=0.1", "letters, digits"),
    ],
)
def test_a_bad_arm_definition_is_one_line_naming_the_fix(text, words):
    """A typo gets the nearest key; the seed, the data, the eval windows and bookkeeping are refused."""
    with pytest.raises(UserError, match=re.escape(words)):
        parse_arm(text)


def test_arms_from_a_toml_file_flat_or_nested(tmp_path):
    """One table per arm, keys dotted or in sub-tables; in file order."""
    path = tmp_path / "arms.toml"
    path.write_text('[base]\n[wd0]\n"train.weight_decay" = 0\n[deep.model]\nn_layer = 6\n')
    assert load_arms_file(path) == {"base": {}, "wd0": {"train.weight_decay": 0.0}, "deep": {"model.n_layer": 6}}


def test_arm_sets_refuse_a_preset_name_a_duplicate_and_a_single_arm():
    """A defined arm may not take a preset's name; two arms may not share settings; one arm is no comparison."""
    with pytest.raises(UserError, match="is a preset"):
        define_arms(None, {"tied": {"model.dropout": 0.1}})
    with pytest.raises(UserError, match="same settings"):
        define_arms(None, {"a": {"model.dropout": 0.1}, "b": {"model.dropout": 0.1}})
    with pytest.raises(UserError, match="one arm"):
        define_arms(None, {"a": {"model.dropout": 0.1}})


def test_runs_that_differ_in_settings_are_named_by_the_keys_they_differ_in():
    """Two groups of runs differing in dropout (and seeds): the arms are the dropout values, in run order."""
    runs = [{"model.dropout": d, "train.seed": s, "train.out_dir": f"o{s}"} for d in (0.0, 0.1) for s in (1, 2)]
    arms, names = arms_from_differences(runs)
    assert names == ["model.dropout=0.0"] * 2 + ["model.dropout=0.1"] * 2
    assert arms.settings == {"model.dropout=0.0": {"model.dropout": 0.0}, "model.dropout=0.1": {"model.dropout": 0.1}}


def test_an_untie_step_the_run_never_reaches_is_refused(tmp_path, corpus, capsys):
    """train.untie_at whose switch step is not before max_iters would never untie: refused before any run folder."""
    argv = tiny_args(
        tmp_path, corpus, "--train.max_iters=4", "--train.lr_decay_iters=8", "--train.untie_at=0.5", "--run-name", "r"
    )
    assert train.main(argv) == 2
    assert "would never untie" in capsys.readouterr().err and not (tmp_path / "runs" / "r").exists()


def test_a_resume_that_would_end_before_the_untie_is_refused(tmp_path, corpus, capsys):
    """A tie-then-untie run stopped at step 8, still tied, resumed to end at step 10 before its switch at
    step 12: refused (it would end tied), and its checkpoint is left as it was."""
    import shutil

    args = ["--train.max_iters=16", "--train.untie_at=0.75", "--train.save_at=8", "--run-name", "r"]
    assert train.main(tiny_args(tmp_path, corpus, *args)) == 0
    run = tmp_path / "runs" / "r"
    shutil.copy(run / "ckpt_step8.pt", run / "ckpt_last.pt")  # as a run stopped at step 8 leaves it
    (run / "summary.json").unlink()
    code = train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=10"])
    assert code == 2 and "is step 12, not before train.max_iters=10" in capsys.readouterr().err
    assert load_checkpoint(run / "ckpt_last.pt")["step"] == 8


def test_a_resume_may_not_move_the_untie_step(tmp_path, corpus, capsys):
    """--resume with another lr_decay_iters would move a tie-then-untie switch: refused, naming the key."""
    assert (
        train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--train.untie_at=0.25", "--run-name", "r")) == 0
    )
    code = train.main(
        [
            f"--train.out_dir={tmp_path / 'runs'}",
            "--resume",
            "--run-name",
            "r",
            "--train.max_iters=8",
            "--train.lr_decay_iters=8",
        ]
    )
    assert code == 2 and "lr_decay_iters cannot change on --resume of a tie-then-untie run" in capsys.readouterr().err


def test_a_resume_may_not_move_the_untie_at_the_cooldown(tmp_path, corpus, capsys):
    """An untie at the cooldown's first step moves with lr_decay_iters as an untie at a fraction does: a resume
    that changes it is refused, naming the cooldown."""
    wsd = ["--train.lr_schedule=wsd", "--train.cooldown_frac=0.25", "--train.untie_at_cooldown=true"]
    args = tiny_args(tmp_path, corpus, "--train.max_iters=8", *wsd, "--run-name", "r")
    assert train.main([*args, "--model.tie_embeddings=true"]) == 0
    resume = [f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=12"]
    assert train.main([*resume, "--train.lr_decay_iters=12"]) == 2
    assert "its switch step (the cooldown's first step) would move" in capsys.readouterr().err


def test_extending_a_finished_run_keeps_one_final_score(tmp_path, corpus):
    """A finished run extended with --resume scores once more at its new end; the old final_eval row is dropped."""
    assert (
        train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--train.lr_decay_iters=8", "--run-name", "r"))
        == 0
    )
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r", "--train.max_iters=8"]) == 0
    )
    final = [r for r in read_metrics(tmp_path / "runs" / "r" / "metrics.jsonl") if r["kind"] == "final_eval"]
    assert [r["step"] for r in final] == [8]


def test_a_final_score_on_fewer_tokens_than_a_window_scores_one_window(tmp_path, corpus):
    """train.final_eval_tokens below block_size still scores one whole window, and says so."""
    assert (
        train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--train.final_eval_tokens=5", "--run-name", "r"))
        == 0
    )
    (final,) = [r for r in read_metrics(tmp_path / "runs" / "r" / "metrics.jsonl") if r["kind"] == "final_eval"]
    assert final["tokens_scored"] == 32 and math.isfinite(final["val_loss"])
