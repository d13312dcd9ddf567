"""A comparison declared again in a second folder after the first folder's verdict was read is not calibrated.

compare.py refuses a rerun that changes a folder's declaration; a new ``--name`` does not.  The second
folder's report (:mod:`experiment.runs.tries`) names the first when it holds the same config and arms
and its verdict was read before the second was declared; the first folder's report is untouched.
"""

from __future__ import annotations

import json

import compare
from fake_runs import fake_experiment

from experiment.runs import ledger
from experiment.runs.record import EXPERIMENT_FILE, now_utc

FINALS = [(3.0, 2.9), (3.1, 3.0), (3.2, 3.1)]  # untied better on every seed


def _experiment(root, name, *, margin=0.05, created=None, finals=FINALS, **config):
    """A fake experiment folder ``root/name`` (tied, untied × 3 seeds), every run noted as trained there,
    declared at ``created`` (now by default; None in the record: an older folder)."""
    folder = root / name
    paths = fake_experiment(folder, finals)
    record = {
        "config": config,
        "margin": margin,
        "reference": "tied",
        "compared": ["tied", "untied"],
        "trained": {p.name: {"summary": ledger.summary_digest(p)} for p in paths},
        "created": created if created is not None else now_utc(),
    }
    (folder / EXPERIMENT_FILE).write_text(json.dumps(record))
    return folder


def _why(folder):
    return json.loads((folder / "verdict.json").read_text())["not_calibrated"]


def _read(folder, *args):
    assert compare.main([str(folder), *args]) == 0


def test_a_comparison_read_then_declared_again_elsewhere_is_named_in_the_second(tmp_path):
    """The second folder (another margin, the same config and arms) names the first, whose verdict it followed;
    the first stays calibrated."""
    first = _experiment(tmp_path, "first")
    _read(first)
    second = _experiment(tmp_path, "second", margin=0.02)
    _read(second)
    (why,) = _why(second)
    assert why.startswith("the comparison untied against tied was read before in the experiment folder first")
    assert "add seeds to it" in why
    assert "**Not calibrated:**" in (second / "report.md").read_text()
    _read(first)
    assert _why(first) == []


def test_a_folder_declared_before_the_other_was_read_is_not_a_second_try(tmp_path):
    """Two folders declared before either verdict was read (two designs run side by side) label nothing."""
    first = _experiment(tmp_path, "first")
    second = _experiment(tmp_path, "second", created="2000-01-01T00:00:00+00:00")
    _read(first)
    _read(second)
    assert _why(second) == []


def test_other_config_or_other_arms_are_another_comparison(tmp_path):
    """A sibling whose config differs, or that compares other arms, is not the same comparison."""
    first = _experiment(tmp_path, "first", **{"model.n_embd": 64})
    _read(first)
    other = _experiment(tmp_path, "other", **{"model.n_embd": 128})
    _read(other)
    assert _why(other) == []
    record = json.loads((first / EXPERIMENT_FILE).read_text())
    (first / EXPERIMENT_FILE).write_text(json.dumps({**record, "compared": ["tied", "tied-bias"]}))
    again = _experiment(tmp_path, "again", **{"model.n_embd": 64})
    _read(again)
    assert _why(again) == []


def test_runs_from_other_code_are_another_comparison(tmp_path):
    """A sibling whose runs trained from other uncommitted changes (env.json's training_code_diff) compared other
    code: not a second try of this folder's comparison."""
    first = _experiment(tmp_path, "first")
    _read(first)
    second = _experiment(tmp_path, "second")
    for folder, digest in ((first, "aaaa"), (second, "bbbb")):
        for run in folder.iterdir():
            if (run / "config.json").is_file():
                (run / "env.json").write_text(json.dumps({"git_commit": None, "training_code_diff": digest}))
    _read(second)
    assert _why(second) == []


def test_an_older_folder_without_a_declaration_time_is_not_checked(tmp_path):
    """A folder made before experiment.json recorded ``created`` reads as before."""
    first = _experiment(tmp_path, "first")
    _read(first)
    second = _experiment(tmp_path, "second")
    record = json.loads((second / EXPERIMENT_FILE).read_text())
    del record["created"]
    (second / EXPERIMENT_FILE).write_text(json.dumps(record))
    _read(second)
    assert _why(second) == []
