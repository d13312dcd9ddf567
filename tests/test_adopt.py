"""``compare.py --adopt``: runs you trained stand in for the experiment's own only when they are exactly those runs.

Run: ``python -m pytest -q tests/test_adopt.py``  (CPU, offline; the end-to-end test is marked slow).
Fake run folders test the checks and the copy; one tiny real experiment adopts two real runs.
"""

import json
from pathlib import Path

import pytest
from fake_runs import arm_run
from helpers import error_line

import compare
import train
from core.errors import UserError
from experiment.runs import adopt
from experiment.runs import folders
from training.schedule import get_lr
from training.setup import resolve_new

SHA = "0" * 64  # the corpus hash the fake runs and the experiment share


def _candidate(tmp_path, name="default", arm="tied", seed=1337, **changes):
    """A fake finished run whose config is exactly ``resolve_new(None, arm settings)`` (then ``changes``,
    flat keys), with lr rows on that config's schedule; returns (candidate, the config it matches)."""
    expected = resolve_new(None, {"model": {"tie_embeddings": arm == "tied"}, "train": {"seed": seed}})
    path = arm_run(tmp_path, arm, seed - 1337, 3.0, name=name, summary={"data_sha256": SHA})
    cfg = expected.to_dict()
    for key, value in changes.items():
        section, k = key.split(".")
        cfg[section][k] = value
    (path / "config.json").write_text(json.dumps(cfg))
    tc = expected.train
    rows = [{"kind": "train", "step": s, "lr": get_lr(s - 1, tc)} for s in (10, 1000, 2000)]
    rows += [
        {"kind": "eval", "step": s, "tokens": s, "train_loss": 3.0, "val_loss": 3.0, "lr": get_lr(s, tc)}
        for s in (0, 2000)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return adopt.identify([path], 1337, ["tied", "untied"], 5)[0], expected


def test_a_run_identical_to_the_experiments_is_accepted(tmp_path):
    """Same config (bookkeeping aside), seed, corpus and logged schedule: the check passes."""
    c, expected = _candidate(tmp_path, **{"train.out_dir": "elsewhere", "wandb.group": ""})
    adopt.check(c, expected, SHA)


def test_a_differing_key_is_refused_by_name(tmp_path):
    """One setting apart (here the weight decay) is refused, naming the key with both values."""
    c, expected = _candidate(tmp_path, **{"train.weight_decay": 0.0})
    with pytest.raises(UserError, match=r"differs in train.weight_decay \(0.0, the experiment's 0.1\): drop it"):
        adopt.check(c, expected, SHA)


def test_another_corpus_or_a_moved_schedule_is_refused(tmp_path):
    """Equal configs are not enough: another corpus hash, or a resume that moved the cosine's horizon, is refused."""
    c, expected = _candidate(tmp_path / "a")
    with pytest.raises(UserError, match="other corpus contents"):
        adopt.check(c, expected, "1" * 64)
    c, expected = _candidate(tmp_path / "b")
    with open(c.source / "metrics.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "resume",
                    "step": 1000,
                    "overrides": {"train.lr_decay_iters": 2000},
                    "lr_horizon": [1000, 2000],
                }
            )
            + "\n"
        )
    c = adopt.identify([c.source], 1337, ["tied", "untied"], 2)[0]
    with pytest.raises(UserError, match="resumed at step 1000 with train.lr_decay_iters=2000"):
        adopt.check(c, expected, SHA)


def test_a_run_of_an_arm_or_seed_the_experiment_lacks_is_refused(tmp_path):
    """An arm not in --arms, a seed past --seeds, or two folders for one arm and seed: one line each."""
    c, _ = _candidate(tmp_path, "late", seed=1339)
    with pytest.raises(UserError, match=r"train.seed 1339 is none of the experiment's seeds \(1337..1338\)"):
        adopt.identify([c.source], 1337, ["tied", "untied"], 2)
    with pytest.raises(UserError, match="a tied run, an arm this experiment does not compare"):
        adopt.identify([c.source], 1339, ["untied", "tied-bias"], 1)
    twin, _ = _candidate(tmp_path, "twin")
    first, _ = _candidate(tmp_path, "first")
    with pytest.raises(UserError, match="are both the tied run on seed 1337"):
        adopt.identify([first.source, twin.source], 1337, ["tied", "untied"], 1)


def test_adoption_copies_the_text_files_and_records_the_source(tmp_path):
    """The copy holds the run's text files and adopted.json (where from), no checkpoint; the source is
    untouched; the same adoption again is settled, and a folder of the experiment's own is refused."""
    c, _ = _candidate(tmp_path / "src")
    (c.source / "ckpt_best.pt").write_bytes(b"weights")
    (c.source / ".lock").write_text("")
    before = {p.name: p.read_bytes() for p in c.source.iterdir()}
    out = tmp_path / "exp"
    assert not adopt.settled(c, out, "tied-s0")
    target = adopt.copy_in(c, out, "tied-s0")
    names = {p.name for p in target.iterdir()}
    assert names == {"config.json", "metrics.jsonl", "summary.json", "adopted.json"}
    assert json.loads((target / "adopted.json").read_text())["adopted_from"] == c.source.resolve().as_posix()
    assert {p.name: p.read_bytes() for p in c.source.iterdir()} == before
    assert adopt.settled(c, out, "tied-s0")
    (out / "untied-s0").mkdir()
    with pytest.raises(UserError, match="exists already"):
        adopt.settled(c, out, "untied-s0")


def test_the_record_names_the_source_relative_to_where_compare_runs(tmp_path, monkeypatch):
    """A source under the current directory is recorded relative to it, however it was typed (absolute,
    ``./``, a trailing ``/``), so the record holds no machine's path; each spelling is the same adoption."""
    monkeypatch.chdir(tmp_path)
    c, _ = _candidate(tmp_path / "runs")
    out = tmp_path / "exp"
    target = adopt.copy_in(c, out, "tied-s0")
    assert json.loads((target / "adopted.json").read_text())["adopted_from"] == "runs/default"
    for typed in ("runs/default", "./runs/default/", str(tmp_path / "runs" / "default")):
        typed_c = adopt.identify([Path(typed)], 1337, ["tied", "untied"], 5)[0]
        assert adopt.settled(typed_c, out, "tied-s0"), typed


def _flags(tmp_path, corpus):
    """The config and overrides of a tiny experiment, as train.py and compare.py both take them."""
    return [
        "--config",
        "configs/debug.toml",
        f"--data.source={corpus}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path / 'runs'}",
        "--train.max_iters=6",
        "--train.eval_interval=3",
        "--train.sample_tokens=0",
        "--train.final_eval_tokens=2048",
    ]


@pytest.mark.slow
def test_compare_adopts_the_runs_you_trained_and_refuses_one_that_differs(tmp_path, corpus, capsys, monkeypatch):
    """The README's path: train a tied and an untied run with train.py, then compare.py --adopt both as seed 0 of
    a one-seed experiment: it trains nothing, copies their text files in and reports.  A run trained for
    another number of steps is refused in one line naming train.max_iters, and nothing is copied."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})
    flags = _flags(tmp_path, corpus)
    assert train.main([*flags, "--run-name", "default"]) == 0
    assert train.main([*flags, "--model.tie_embeddings=false", "--run-name", "untied"]) == 0
    capsys.readouterr()
    runs = tmp_path / "runs"
    argv = [*flags, "--seeds", "1", "--name", "exp", "--adopt", f"{runs / 'default'},{runs / 'untied'}"]
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert "[compare] plan: 2 runs (2 arms x 1 seed): 0 finished, 2 adopted, 0 to resume, 0 to train" in out
    for name, source in (("tied-s0", "default"), ("untied-s0", "untied")):
        recorded = json.loads((runs / "exp" / name / "adopted.json").read_text())["adopted_from"]
        assert recorded == (runs / source).resolve().as_posix()
    assert not list((runs / "exp").rglob("*.pt")) and (runs / "exp" / "report.md").is_file()
    assert train.main([*flags, "--train.max_iters=9", "--run-name", "longer"]) == 0
    capsys.readouterr()
    assert compare.main([*flags, "--seeds", "1", "--name", "exp2", "--adopt", str(runs / "longer")]) == 2
    line = error_line(capsys)
    assert f"--adopt {runs / 'longer'}: not the experiment's tied run on seed 1337" in line
    assert "train.max_iters (9, the experiment's 6)" in line
    assert not (runs / "exp2" / "tied-s0").exists()
