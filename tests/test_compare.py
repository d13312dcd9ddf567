"""The tied-vs-untied experiment's invariants: equal-parameter sizing, fairness between the arms, statistics.

Run: ``python -m pytest -q tests/test_compare.py``  (CPU, offline, under a minute).
Real tiny models check that both arms of a seed start from the same body and read the same batches;
synthetic run folders (hand-written config.json / metrics.jsonl / summary.json) test the report's
statistics and its refusals of unfair or unfinished runs with known answers. compare.py as a command
(its flags, the experiment folder, end to end) is in ``tests/test_compare_command.py``.
"""

import json

import pytest
import torch
from fake_runs import fake_experiment, fake_run

import train
from core.errors import UserError
from experiment.runs import plan
from experiment.ab import readout
from experiment.runs import folders
from experiment.ab import markdown
from experiment.ab import run as ab_run
from model.config import GPTConfig
from model.gpt import GPT
from training import setup
from training.config import parse_config

# ----------------------------------------------------------------------------- sizing


@pytest.mark.parametrize("tie", [True, False])
def test_count_params_matches_a_real_model(tie):
    """The meta-device count equals a real model's num_params()."""
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=2, n_embd=32, tie_embeddings=tie)
    assert plan.count_params(cfg) == GPT(cfg).num_params()


def test_equal_params_by_width_is_within_2_percent():
    """The default model's tied arm grows in n_embd until it is within 2% of the untied arm."""
    base = GPTConfig(vocab_size=50257, block_size=128, n_layer=4, n_head=4, n_embd=128, tie_embeddings=False)
    tied, n_tied, n_untied = plan.equal_params_config(base, "width")
    assert tied.tie_embeddings and tied.n_embd > 128 and tied.n_embd % tied.n_head == 0
    assert n_untied == plan.count_params(base)
    assert abs(n_tied - n_untied) <= 0.02 * n_untied


def test_equal_params_by_depth_is_within_2_percent():
    """With a small vocabulary, extra layers can make up the untied head's parameters."""
    base = GPTConfig(vocab_size=1562, block_size=32, n_layer=2, n_head=2, n_embd=64, tie_embeddings=False)
    tied, n_tied, n_untied = plan.equal_params_config(base, "depth")
    assert tied.n_layer > 2 and abs(n_tied - n_untied) <= 0.02 * n_untied


def test_equal_params_impossible_is_an_error():
    """When no depth gets within 2%, the error says so and suggests the other way."""
    base = GPTConfig(vocab_size=50257, block_size=16, n_layer=1, n_head=1, n_embd=8, tie_embeddings=False)
    with pytest.raises(UserError, match="try --equal-params width"):
        plan.equal_params_config(base, "depth")


# ----------------------------------------------------------------------------- fairness


def _build(tmp_path, tie: bool, seed: int):
    path = tmp_path / "c.txt"
    if not path.exists():
        path.write_text("Now is the winter of our discontent\nMade glorious summer by this sun of York;\n" * 200)
    overrides = {
        "data": {"source": str(path), "tokenizer": "char", "cache_dir": str(tmp_path / "cache")},
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "tie_embeddings": tie},
        "train": {"seed": seed, "batch_size": 4, "eval_iters": 3},
    }
    s = setup.build(parse_config(None, overrides))
    return s.cfg, s


def test_both_arms_of_a_seed_see_the_same_data_order_and_eval_batches(tmp_path, monkeypatch):
    """Real train.py runs of both arms read exactly the same training batches and eval windows."""
    from data.loader import TokenData

    seen = {}
    real_get, real_at = TokenData.get_batch, TokenData.batch_at

    def get_batch(self, split, *a, **k):
        x, y = real_get(self, split, *a, **k)
        seen[current].append(("batch", split, x.clone()))
        return x, y

    def batch_at(self, split, offsets, *a, **k):
        seen[current].append(("eval", split, offsets.clone()))
        return real_at(self, split, offsets, *a, **k)

    monkeypatch.setattr(TokenData, "get_batch", get_batch)
    monkeypatch.setattr(TokenData, "batch_at", batch_at)
    path = tmp_path / "c.txt"
    path.write_text("Now is the winter of our discontent\nMade glorious summer by this sun of York;\n" * 200)
    for current in ("true", "false"):
        seen[current] = []
        argv = [
            f"--data.source={path}",
            "--data.tokenizer=char",
            f"--data.cache_dir={tmp_path / 'cache'}",
            f"--train.out_dir={tmp_path / 'runs'}",
            "--model.n_layer=1",
            "--model.n_head=2",
            "--model.n_embd=16",
            "--model.block_size=16",
            "--train.batch_size=2",
            "--train.max_iters=4",
            "--train.eval_interval=2",
            "--train.eval_iters=2",
            "--train.sample_tokens=0",
            f"--model.tie_embeddings={current}",
            "--run-name",
            current,
        ]
        assert train.main(argv) == 0
    tied, untied = seen["true"], seen["false"]
    assert len(tied) == len(untied) > 0 and any(kind == "eval" for kind, _, _ in tied)
    for (ka, sa, ta), (kb, sb, tb) in zip(tied, untied):
        assert (ka, sa) == (kb, sb) and torch.equal(ta, tb)


def test_both_arms_of_a_seed_start_from_the_same_body(tmp_path):
    """Same seed: every non-embedding weight is bit-identical at init; the tied matrix = the untied head."""
    (_, tied), (_, untied) = _build(tmp_path, True, 3), _build(tmp_path, False, 3)
    t, u = tied.model.state_dict(), untied.model.state_dict()
    for key in t:
        if key not in ("wte.weight", "lm_head.weight"):
            assert torch.equal(t[key], u[key]), key
    assert torch.equal(t["wte.weight"], u["lm_head.weight"])


def test_different_seeds_see_different_data(tmp_path):
    """The seed does change the data order (so seeds are real replicates)."""
    (_, a), (_, b) = _build(tmp_path, True, 1), _build(tmp_path, True, 2)
    assert not torch.equal(
        a.data.get_batch("train", 4, 16, a.data_gen)[0], b.data.get_batch("train", 4, 16, b.data_gen)[0]
    )


def test_embedding_decay_policy_applies_to_both_arms():
    """embedding_weight_decay=false keeps wte, wpe and lm_head (tied or not) out of weight decay."""
    for tie in (True, False):
        model = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=1, n_embd=8, tie_embeddings=tie))
        decayed = {id(p) for p in model.param_groups(0.1, embedding_weight_decay=False)[0]["params"]}
        for p in (model.wte.weight, model.wpe.weight, model.lm_head.weight):
            assert id(p) not in decayed
        assert id(model.blocks[0].attn.q_proj.weight) in decayed
        everything = {id(p) for p in model.param_groups(0.1)[0]["params"]}
        assert id(model.wte.weight) in everything and id(model.lm_head.weight) in everything


# ----------------------------------------------------------------------------- statistics


def test_report_on_fake_runs_has_the_known_difference(tmp_path):
    """write_report: the per-seed differences, a 'worse' verdict for untied, the config difference, the figures."""
    paths = fake_experiment(tmp_path, [(3.0, 3.1), (3.1, 3.22), (3.2, 3.28)])
    out, meaningful = ab_run.write_report(paths, [], tmp_path, prompts=[], title="t")
    md = out.read_text()
    assert meaningful  # no unigram baseline recorded: nothing to warn about
    assert "untied vs tied (reference): **worse**" in md and "+0.1000" in md
    assert "model.tie_embeddings" in md
    for png in ("val_loss_vs_step.png", "paired_difference_vs_step.png"):
        assert (tmp_path / png).stat().st_size > 1000 and f"]({png})" in md
    assert "val_loss_vs_tokens" not in md and "loss_vs_lr.png" not in md  # no grid: no LR figure


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "t1", True, 1, 3.1)], "a second arm"),
        (lambda r: [fake_run(r, "u0", False, 0, 3.0), fake_run(r, "u1", False, 1, 3.1)], "no tied runs"),
        (
            lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u0", False, 0, 3.1, train__weight_decay=0.5)],
            "more than its arm's settings: train.weight_decay",
        ),
        (lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u1", False, 1, 3.1)], "seeds are not paired"),
        (
            lambda r: [fake_run(r, "t0", True, 0, 3.0), fake_run(r, "u0", False, 0, 3.1, model__n_embd=64)],
            "not within 2%",
        ),
    ],
)
def test_report_refuses_unfair_sets_of_runs(tmp_path, make, match):
    """A single arm, no reference arm, a difference beyond the arms' settings, unpaired seeds, or unequal sizes: refused."""
    with pytest.raises(UserError, match=match):
        folders.check_experiment(folders.load_runs(make(tmp_path)))


def test_pairing_is_by_seed_not_by_argument_order(tmp_path):
    """Paths given in any order are paired by seed: the per-seed differences come out right."""
    runs = [
        fake_run(tmp_path, "u2", False, 2, 3.5),
        fake_run(tmp_path, "t0", True, 0, 3.0),
        fake_run(tmp_path, "u0", False, 0, 3.1),
        fake_run(tmp_path, "t2", True, 2, 3.2),
    ]
    exp = folders.check_experiment(folders.load_runs(runs))
    (comparison,) = readout.comparisons(exp)
    assert exp.seeds == [0, 2] and comparison.diffs == pytest.approx([0.1, 0.3])


def test_equal_parameter_runs_are_accepted_and_the_size_difference_stated(tmp_path):
    """A tied arm that is wider but within 2% in parameters is fair; the report names n_embd."""
    paths = [fake_run(tmp_path, "t0", True, 0, 3.0, model__n_embd=160), fake_run(tmp_path, "u0", False, 0, 3.1)]
    (paths[0] / "summary.json").write_text(
        json.dumps(
            {"parameters": 1490, "non_embedding_parameters": 700, "tokens_per_s_median": 90.0, "final_val_loss": 3.0}
        )
    )
    exp = folders.check_experiment(folders.load_runs(paths))
    assert exp.differences["untied"]["model.n_embd"] == (160, 128)
    md = markdown.render_markdown(exp, [], {}, "t")
    assert "model.n_embd" in md and "equal parameters" in md


def test_report_refuses_empty_metrics_and_unfinished_runs(tmp_path):
    """Empty metrics.jsonl, a run that stopped early or one that diverged is named, with how to fix it."""
    empty = fake_run(tmp_path, "e", True, 0, 3.0)
    (empty / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="missing or empty"):
        folders.load_run(empty)
    short = fake_run(tmp_path, "s", True, 0, 3.0, train__max_iters=40)
    with pytest.raises(UserError, match="unfinished .*--resume"):
        folders.load_run(short)
    diverged = fake_run(tmp_path, "d", True, 0, 3.0, train__max_iters=40)  # resumed, it would diverge again
    (diverged / "summary.json").unlink(missing_ok=True)
    (diverged / "diverged.json").write_text("{}")
    with pytest.raises(UserError, match="diverged .*compare at a lower rate"):
        folders.load_run(diverged)


def test_runs_with_and_without_a_final_score_are_not_compared(tmp_path):
    """Runs scored on the shared val windows and older runs scored on their periodic evals: refused."""
    paths = fake_experiment(tmp_path, [(3.0, 3.1), (3.1, 3.2)])
    summary = json.loads((paths[0] / "summary.json").read_text())
    del summary["final_val_loss"]
    (paths[0] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match="final_val_loss"):
        folders.check_experiment(folders.load_runs(paths))
