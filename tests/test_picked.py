"""Run folders given by hand that leave out finished runs of the same comparison beside them are not calibrated.

A plain folder of ``train.py`` runs records nothing of what was drawn; a report still sees the runs beside
the given ones (:mod:`experiment.runs.picked`): one of the compared arms, the same config but for the seed,
from the same code, not given, is named, and the verdict is labelled not calibrated.
"""

from __future__ import annotations

import json

import compare
from fake_runs import fake_experiment, fake_run

FINALS = [(3.0, 2.9), (3.1, 3.0), (3.2, 3.1)]  # untied better on every seed


def _report(runs, *names):
    assert compare.main([str(runs / n) for n in names]) == 0
    return json.loads((runs / "verdict.json").read_text())


def test_every_run_of_the_folder_given_is_calibrated(tmp_path):
    """All six runs of a plain folder, and a run of another config beside them: calibrated."""
    runs = tmp_path / "runs"
    fake_experiment(runs, FINALS)
    fake_run(runs, "deep", True, 0, 3.0, model__n_layer=12)
    verdict = _report(runs, *(f"{arm}-s{s}" for arm in ("tied", "untied") for s in range(3)))
    assert verdict["calibrated"] is True and verdict["margin_declared"] is False
    assert "±0.01 nats was given with this report, not declared before the runs" in (runs / "report.md").read_text()


def test_a_seed_left_out_of_a_plain_folder_is_named(tmp_path):
    """Seeds 0 and 1 given, seed 2 of both arms left in the folder: named, and the verdict not calibrated."""
    runs = tmp_path / "runs"
    fake_experiment(runs, FINALS)
    verdict = _report(runs, "tied-s0", "tied-s1", "untied-s0", "untied-s1")
    (why,) = verdict["not_calibrated"]
    assert why.startswith("2 finished runs of these arms beside the given runs, with their config and code, left out")
    assert "(tied-s2, untied-s2)" in why


def test_a_run_from_other_code_beside_them_is_another_comparison(tmp_path):
    """A run beside the given ones trained from other uncommitted changes (env.json) is not theirs to include."""
    runs = tmp_path / "runs"
    fake_experiment(runs, FINALS)
    for run in runs.iterdir():
        other = run.name.endswith("-s2")
        (run / "env.json").write_text(json.dumps({"git_commit": None, "training_code_diff": "b" if other else "a"}))
    verdict = _report(runs, "tied-s0", "tied-s1", "untied-s0", "untied-s1")
    assert verdict["calibrated"] is True


def test_a_failed_report_on_a_plain_folder_leaves_the_earlier_report_of_other_runs(tmp_path, capsys):
    """`compare.py runs/tied-s0` alone (one arm) fails in one line with the fix, and the folder's report of the
    comparison before it stays: a plain folder's report is of whichever runs were given."""
    runs = tmp_path / "runs"
    fake_experiment(runs, FINALS)
    _report(runs, *(f"{arm}-s{s}" for arm in ("tied", "untied") for s in range(3)))
    before = (runs / "verdict.json").read_bytes()
    capsys.readouterr()
    assert compare.main([str(runs / "tied-s0")]) == 2
    assert "give run folders of two arms, e.g. compare.py runs/default runs/untied" in capsys.readouterr().err
    assert (runs / "verdict.json").read_bytes() == before and (runs / "report.md").is_file()


def test_a_failed_report_of_the_same_runs_removes_the_earlier_verdict(tmp_path, capsys):
    """The same runs reported again after one was left unfinished: exit 2, and the folder's earlier verdict of
    those runs (verdict.json's ``runs`` names them) goes rather than stand for runs that changed; a failed
    report of other runs (one of them alone) leaves it (the test before)."""
    runs = tmp_path / "runs"
    fake_experiment(runs, FINALS)
    names = [f"{arm}-s{s}" for arm in ("tied", "untied") for s in range(3)]
    assert set(_report(runs, *names)["runs"]) == set(names)
    (runs / "untied-s2" / "summary.json").unlink()
    assert compare.main([str(runs / n) for n in names]) == 2
    assert not (runs / "verdict.json").exists() and not (runs / "report.md").exists()
