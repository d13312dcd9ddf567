"""A comparison declared again in a second folder after the first folder's verdict was read is not calibrated.

compare.py refuses a rerun that changes a folder's declaration; a new ``--name`` does not.  The second
folder's report (:mod:`experiment.runs.tries`) names the first when it holds the same config and arms
and its verdict was read before the second was declared; the first folder's report is untouched.
"""

from __future__ import annotations

import dataclasses
import json

import compare
import pytest
from fake_runs import fake_experiment
from helpers import error_line, tiny_compare_args
from test_budget_report import _branch

from experiment.budget.markdown import write_budget_report
from experiment.runs import ledger, tries
from experiment.arms import PRESETS
from experiment.runs.plan import Plan
from experiment.runs.record import EXPERIMENT_FILE, ExperimentRecord, now_utc, planned_record
from training.config import RunConfig

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
    assert why.startswith("arms tied, untied were compared alike in the experiment folder 'first'")
    assert "(1 look at 3 seeds) was first read on" in why
    assert "report 'first' instead, or add seeds to it" in why
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


def _declared(root, name, *, created, looks=(), **record):
    """An experiment folder ``root/name`` holding only its experiment.json (tied against untied unless given)."""
    folder = root / name
    folder.mkdir(parents=True)
    data = {"config": {}, "reference": "tied", "compared": ["tied", "untied"], "created": created, **record}
    (folder / EXPERIMENT_FILE).write_text(json.dumps({**data, "looks": list(looks)}))
    return folder


T0, T1, T2 = "2026-01-01T00:00:00.000000+00:00", "2026-01-02T00:00:00.000000+00:00", "2026-01-03T00:00:00.000000+00:00"
LOOK = {"seeds": 3, "date": "2026-01-02", "at": T1}


def test_arms_named_otherwise_with_the_same_settings_are_the_same_comparison(tmp_path):
    """Arms defined by settings (``--arm shared:... --arm split:...``) that train what tied and untied train match."""
    own = {"shared": {"model.tie_embeddings": True}, "split": {"model.tie_embeddings": False}}
    _declared(tmp_path, "first", created=T0, looks=[LOOK], arms=own, compared=["shared", "split"], reference="shared")
    second = _declared(tmp_path, "second", created=T2)
    (why,) = tries.earlier_reads(second)
    assert why.startswith("arms tied, untied were compared alike in the experiment folder 'first'")


def test_an_arm_that_matches_only_through_the_config_is_another_arm(tmp_path):
    """Under a config that unties, ``base:`` (no settings of its own) trains untied runs, not tied ones."""
    untied = {"model.tie_embeddings": False}
    own = {"base": {}, "bias": {"model.lm_head_bias": True}}
    _declared(tmp_path, "first", created=T0, looks=[LOOK], arms=own, compared=["base", "bias"], config=untied)
    second = _declared(tmp_path, "second", created=T2, config=untied, compared=["tied", "tied-bias"])
    assert tries.earlier_reads(second) == []


def test_a_look_with_a_date_alone_predates_any_declaration_time(tmp_path):
    """A look from before looks recorded their time (``date`` only, in local time) counts as read before."""
    _declared(tmp_path, "first", created=None, looks=[{"seeds": 2, "date": "2099-01-01"}])
    assert len(tries.earlier_reads(_declared(tmp_path, "second", created=T0))) == 1


def test_an_arm_added_after_the_other_folder_was_read_is_labelled_alone(tmp_path):
    """A folder declared before the other's read, which adds an arm on a rerun after it, is labelled for that arm."""
    _declared(tmp_path, "first", created=T0, looks=[LOOK], compared=["tied", "untied", "untied-split"])
    second = _declared(tmp_path, "second", created=T0, compared=["tied", "untied-split", "untied"])
    assert tries.earlier_reads(second) == []
    record = json.loads((second / EXPERIMENT_FILE).read_text())
    (second / EXPERIMENT_FILE).write_text(json.dumps({**record, "compared_at": {"untied": T2}}))
    (why,) = tries.earlier_reads(second)
    assert why.startswith("arms tied, untied were compared alike")


def test_a_folder_not_yet_trained_is_judged_by_the_checkout_code(tmp_path):
    """Before its first run, a folder's code is the checkout's: a sibling whose runs trained from other
    uncommitted changes compared other code, so the plan line says nothing."""
    first = _experiment(tmp_path, "first")
    _read(first)
    for run in first.iterdir():
        if (run / "config.json").is_file():
            (run / "env.json").write_text(json.dumps({"git_commit": None, "training_code_diff": "not-this-checkout"}))
    second = _declared(tmp_path, "second", created=now_utc())
    assert tries.earlier_reads(second) == []


def test_siblings_that_cannot_be_read_are_passed_over(tmp_path):
    """A sibling whose experiment.json is not an object, or whose looks are not records, is skipped; the
    comparison read in another sibling is still found, once however many names lead to it."""
    _declared(tmp_path, "first", created=T0, looks=[LOOK])
    (tmp_path / "first-link").symlink_to(tmp_path / "first")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / EXPERIMENT_FILE).write_text("[]")
    _declared(tmp_path, "odd", created=T0, looks=["x", 3])
    _declared(tmp_path, "odder", created=7, looks=[LOOK])
    (why,) = tries.earlier_reads(_declared(tmp_path, "second", created=T2))
    assert "'first'" in why


def _budget_folder(root, name, margin):
    """A budget experiment ``root/name`` at 0.5M tokens: tied and untied at 3 rates on 3 seeds, declared now."""
    folder = root / name
    for s in range(3):
        for lr in (1e-3, 2e-3, 4e-3):
            _branch(folder, "0.5M", "tied", lr, 1337 + s, 3.0 + 0.01 * s)
            _branch(folder, "0.5M", "untied", lr, 1337 + s, 2.99 + 0.01 * s)
    record = {"budgets": [500_000], "margin": margin, "reference": "tied", "compared": ["tied", "untied"]}
    (folder / EXPERIMENT_FILE).write_text(json.dumps({**record, "config": {}, "created": now_utc()}))
    return folder


def test_a_budget_design_declared_again_after_its_report_was_read_is_named(tmp_path):
    """A budget report records its read; a second budget folder of the same design, declared after it, names
    the first at its top."""
    first = _budget_folder(tmp_path, "first", 0.01)
    write_budget_report(first, "tied", "python compare.py first")
    assert [look["seeds"] for look in json.loads((first / EXPERIMENT_FILE).read_text())["looks"]] == [3]
    second = _budget_folder(tmp_path, "second", 0.02)
    md = write_budget_report(second, "tied", "python compare.py second").read_text()
    assert "arms tied, untied were compared alike in the experiment folder 'first'" in md


def test_a_grid_declared_again_names_the_same_cell_of_the_first_grid(tmp_path):
    """A grid's cell is read against the same cell of a grid beside its own (a grid declared again under another
    name); another cell of that grid, with other axis values, is not the same comparison."""
    for grid in ("grid-a", "grid-b"):
        (tmp_path / grid).mkdir()
        (tmp_path / grid / "grid.json").write_text("{}")
    _declared(tmp_path / "grid-a", "n_embd-64", created=T0, looks=[LOOK], config={"model.n_embd": 64})
    _declared(tmp_path / "grid-a", "n_embd-128", created=T0, looks=[LOOK], config={"model.n_embd": 128})
    again = _declared(tmp_path / "grid-b", "n_embd-64", created=T2, config={"model.n_embd": 64})
    (why,) = tries.earlier_reads(again)
    assert "in the experiment folder 'grid-a/n_embd-64'" in why


@pytest.mark.slow
def test_a_gate_on_a_comparison_declared_again_is_refused_before_anything_trains(tmp_path, capsys):
    """compare.py --fail-on on a comparison another folder beside it has read: exit 2 in one line, before the
    folder is made or a run trains (its verdicts could not be gated on)."""
    args = tiny_compare_args(tmp_path)
    assert compare.main([*args, "--seeds", "1"]) == 0
    capsys.readouterr()
    again = [*args, "--seeds", "1", "--name", "again", "--margin", "0.05", "--fail-on", "worse"]
    assert compare.main(again) == 2
    assert "gates only on calibrated verdicts, and this experiment's will not be: arms tied, untied" in error_line(
        capsys
    )
    assert not (tmp_path / "again").exists()


def test_an_arm_a_rerun_would_add_is_checked_before_it_trains(tmp_path):
    """The record a rerun would write (record.planned_record) holds the arm it adds, joined now: a comparison
    read beside it before that arm joined is found before anything trains (what --fail-on refuses on)."""
    _declared(tmp_path, "first", created=T0, looks=[LOOK])
    second = _declared(tmp_path, "second", created=T0, compared=["tied", "untied-split"])
    arms = ["tied", "untied-split", "untied"]
    plan = Plan(config=None, overrides={}, arms=arms, seeds=3, reference="tied", arm_set=PRESETS.select(arms))
    planned = planned_record(second, RunConfig(), plan)
    assert planned.compared == arms and planned.compared_at["untied"] > T1
    assert tries.reads_before(ExperimentRecord.read(second)) == []
    (why,) = tries.reads_before(dataclasses.replace(planned, config={}))
    assert why.startswith("arms tied, untied were compared alike")
