"""A verdict over runs other than the ones its declaration drew is labelled not calibrated.

experiment.json's ``trained`` (:mod:`experiment.runs.ledger`) notes each run compare.py starts and the
digest of its summary.json once finished.  Runs copied in, trained twice, changed after they finished,
or a hand-picked subset of a folder's finished runs each turn the verdict "not calibrated", and
``--fail-on`` then refuses to gate; older folders (no note) read as before.
"""

from __future__ import annotations

import json
import shutil

import compare
import pytest
from fake_runs import fake_experiment
from helpers import tiny_compare_args

from experiment.runs import ledger
from experiment.runs.record import EXPERIMENT_FILE
from training.config import RunConfig
from training.runs import next_steps

FINALS = [(3.0, 2.9), (3.1, 3.0), (3.2, 3.1)]  # untied better on every seed: a clear "better"


def _experiment(tmp_path, noted=True):
    """A fake experiment folder of 3 seeds × tied/untied whose experiment.json notes every run as trained here."""
    folder = tmp_path / "exp"
    paths = fake_experiment(folder, FINALS)
    record = {"config": {}, "margin": 0.05, "reference": "tied"}
    if noted:
        record["trained"] = {p.name: {"summary": ledger.summary_digest(p)} for p in paths}
    (folder / EXPERIMENT_FILE).write_text(json.dumps(record))
    return folder, paths


def _verdict(folder):
    return json.loads((folder / "verdict.json").read_text())


def _noted(folder):
    return json.loads((folder / EXPERIMENT_FILE).read_text())["trained"]


def test_runs_the_folder_trained_and_read_whole_give_a_calibrated_verdict(tmp_path):
    """Every run noted, none changed, all read: the verdict is calibrated and --fail-on gates on it."""
    folder, _ = _experiment(tmp_path)
    assert compare.main([str(folder), "--fail-on", "not-better"]) == 0
    assert _verdict(folder)["calibrated"] is True


def test_a_run_the_folder_did_not_train_is_named_and_the_gate_refuses(tmp_path, capsys):
    """A finished run found in the folder that compare.py never started there (copied in) is named in
    not_calibrated, report.md says so, and --fail-on exits 3 (no gate) rather than gate on it."""
    folder, _ = _experiment(tmp_path)
    record = json.loads((folder / EXPERIMENT_FILE).read_text())
    del record["trained"]["untied-s2"]
    (folder / EXPERIMENT_FILE).write_text(json.dumps(record))
    assert compare.main([str(folder), "--fail-on", "worse"]) == 3
    (why,) = _verdict(folder)["not_calibrated"]
    assert why.startswith("1 run (untied-s2) not trained by this experiment")
    assert "**Not calibrated:** 1 run (untied-s2) not trained" in (folder / "report.md").read_text()
    assert "gates only on calibrated verdicts" in capsys.readouterr().err


def test_a_run_changed_after_it_finished_is_named(tmp_path):
    """A summary.json that is not the one noted when the run finished (edited, or replaced by another run)."""
    folder, _ = _experiment(tmp_path)
    summary = folder / "tied-s1" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "final_val_loss": 3.3}))
    assert compare.main([str(folder)]) == 0
    (why,) = _verdict(folder)["not_calibrated"]
    assert why.startswith("1 run (tied-s1) changed after it finished")


def test_a_fresh_start_of_a_finished_run_is_a_second_draw_and_a_resume_is_not(tmp_path):
    """note_start from scratch on a run noted finished marks it redrawn, which stays after it finishes again;
    a resume of an unfinished run only clears the digest until it finishes."""
    folder, paths = _experiment(tmp_path)
    ledger.note_start(folder, "untied-s0", fresh=False)  # (resumed: its next summary is its own)
    ledger.note_finished(folder, "untied-s0")
    ledger.note_start(folder, "tied-s0", fresh=True)
    ledger.note_finished(folder, "tied-s0")
    assert "redrawn" not in _noted(folder)["untied-s0"] and _noted(folder)["tied-s0"]["redrawn"] is True
    problems = ledger.problems(folder, paths, read_whole=True)
    assert len(problems) == 1 and problems[0].startswith("1 run (tied-s0) trained again from scratch")


def test_a_checkpoint_seen_while_a_run_trains_makes_a_later_fresh_start_a_second_draw(tmp_path):
    """compare.py notes a run's first checkpoint while its train.py runs, not only when it ends: killed with
    it (no end ever noted), the run deleted and started afresh still reads as trained again from scratch."""
    import sys

    from experiment.runs import launch

    folder, paths = _experiment(tmp_path)
    ledger.note_start(folder, "tied-s0", fresh=False)  # a resume, as if the run had been stopped
    (folder / "tied-s0" / "summary.json").unlink()
    child = "import time; time.sleep(1.5)"  # its folder holds ckpt_last.pt (the fake run's) while it runs
    (folder / "tied-s0" / "ckpt_last.pt").write_bytes(b"a checkpoint")
    watch = launch._CheckpointWatch(folder, "tied-s0")
    assert launch.run_forwarding_signals([sys.executable, "-c", child], watch=watch) == (0, None)
    assert _noted(folder)["tied-s0"] == {"summary": None, "checkpointed": True}
    shutil.rmtree(folder / "tied-s0")  # killed with its compare.py (no note of its end), then deleted
    ledger.note_start(folder, "tied-s0", fresh=True)
    assert _noted(folder)["tied-s0"]["redrawn"] is True


def test_run_folders_picked_from_an_experiment_folder_must_be_all_of_them(tmp_path):
    """Run folders given by hand that leave out finished runs of their experiment folder (here seed 2 of both
    arms, before any look) read not calibrated, naming them (given whole: the first test).  Such a report
    goes where --report-dir says: refused without it, before anything is written, the experiment's own
    report and record untouched; and its read is no look at the experiment."""
    folder, paths = _experiment(tmp_path)
    assert compare.main([str(folder)]) == 0
    before = {n: (folder / n).read_bytes() for n in ("report.md", "verdict.json", EXPERIMENT_FILE)}
    picked = [p for p in paths if not p.name.endswith("-s2")]
    assert compare.main([str(p) for p in picked]) == 2
    out = tmp_path / "picked"
    assert compare.main([str(p) for p in picked] + ["--report-dir", str(out)]) == 0
    (why,) = _verdict(out)["not_calibrated"]
    assert why.startswith("2 runs of the experiment finished but left out of the report (tied-s2, untied-s2)")
    assert {n: (folder / n).read_bytes() for n in before} == before


def test_an_older_folder_without_the_note_reads_as_before(tmp_path):
    """experiment.json without ``trained`` (made before the note existed): runs are not checked against it,
    and the report writes no note into it."""
    folder, _ = _experiment(tmp_path, noted=False)
    before = (folder / EXPERIMENT_FILE).read_text()
    assert compare.main([str(folder)]) == 0
    assert _verdict(folder)["calibrated"] is True
    assert "trained" not in json.loads((folder / EXPERIMENT_FILE).read_text())
    assert json.loads(before).items() <= json.loads((folder / EXPERIMENT_FILE).read_text()).items()


def test_a_run_started_and_never_seen_finishing_is_noted_by_the_report(tmp_path):
    """A kill between a run's end and its note leaves its digest unset: the report notes it as it is now."""
    folder, _ = _experiment(tmp_path)
    record = json.loads((folder / EXPERIMENT_FILE).read_text())
    record["trained"]["untied-s1"] = {"summary": None}
    (folder / EXPERIMENT_FILE).write_text(json.dumps(record))
    assert compare.main([str(folder)]) == 0
    assert _verdict(folder)["calibrated"] is True
    assert _noted(folder)["untied-s1"]["summary"] == ledger.summary_digest(folder / "untied-s1")


@pytest.mark.slow
def test_compare_notes_its_runs_and_labels_a_retrained_or_copied_one(tmp_path):
    """compare.py notes every run it trains; deleting one and running the command again retrains it, a second
    draw the verdict names; the runs copied into a new experiment folder are reused there, but not as its own."""
    argv = [*tiny_compare_args(tmp_path), "--seeds", "2", "--margin", "0.05"]
    assert compare.main(argv) == 0
    exp = tmp_path / "exp"
    assert sorted(_noted(exp)) == ["tied-s0", "tied-s1", "untied-s0", "untied-s1"]
    assert all(e["summary"] == ledger.summary_digest(exp / n) for n, e in _noted(exp).items())
    assert _verdict(exp)["calibrated"] is True
    copy = tmp_path / "exp2"
    copy.mkdir()
    for run in ("tied-s0", "tied-s1", "untied-s0", "untied-s1"):
        shutil.copytree(exp / run, copy / run)
    shutil.rmtree(exp / "untied-s1")
    assert compare.main(argv) == 0
    assert _verdict(exp)["not_calibrated"][0].startswith("1 run (untied-s1) trained again from scratch")
    assert compare.main([*argv[:-4], "--name", "exp2", *argv[-4:]]) == 0  # trains nothing: all four finished
    assert _verdict(copy)["not_calibrated"][0].startswith("4 runs (tied-s0, tied-s1, untied-s0, untied-s1) not")


def test_a_finished_run_deleted_from_the_folder_is_named(tmp_path):
    """Both runs of seed 2 deleted after they finished: the folder reads as 2 paired seeds, and the report names
    the runs gone (a seed that read badly, dropped)."""
    folder, _ = _experiment(tmp_path)
    for name in ("tied-s2", "untied-s2"):
        shutil.rmtree(folder / name)
    assert compare.main([str(folder)]) == 0
    (why,) = _verdict(folder)["not_calibrated"]
    assert why.startswith("2 runs (tied-s2, untied-s2) finished here and gone from the folder since")


def test_adopting_a_run_where_one_had_finished_is_a_second_draw(tmp_path):
    """A finished run deleted, and another run of the same arm and seed adopted in its place: the adoption keeps
    the note that a draw had finished there, so the verdict names it; adopting the same run again changes nothing."""
    folder, _ = _experiment(tmp_path)
    ledger.note_adopted(folder, "tied-s0")
    assert _noted(folder)["tied-s0"] == {
        "summary": ledger.summary_digest(folder / "tied-s0"),
        "adopted": True,
        "redrawn": True,
    }
    before = (folder / EXPERIMENT_FILE).read_text()
    ledger.note_adopted(folder, "tied-s0")
    assert (folder / EXPERIMENT_FILE).read_text() == before
    assert ledger.problems(folder, [folder / "tied-s0"], read_whole=False)[0].startswith(
        "1 run (tied-s0) trained again"
    )


def test_runs_gathered_from_several_folders_are_named(tmp_path):
    """Seeds 0-1 from one folder and seed 2 from another: which runs each folder left out, nothing records."""
    folder, paths = _experiment(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("tied-s2", "untied-s2"):
        shutil.move(str(folder / name), other / name)
    given = [p for p in paths if not p.name.endswith("-s2")] + [other / "tied-s2", other / "untied-s2"]
    assert compare.main([str(p) for p in given]) == 2  # not the experiment's runs alone: not its report to write
    assert compare.main([str(p) for p in given] + ["--report-dir", str(tmp_path / "mixed")]) == 0
    (why,) = _verdict(tmp_path / "mixed")["not_calibrated"]
    assert why.startswith("runs gathered from 2 folders (exp, other)")


def test_a_hidden_folder_beside_the_runs_is_not_a_run_left_out(tmp_path):
    """An interrupted adoption's staging folder (.adopting-<name>, with a summary.json) is no run of the folder."""
    folder, _ = _experiment(tmp_path)
    shutil.copytree(folder / "tied-s0", folder / ".adopting-tied-s3")
    assert compare.main([str(folder)]) == 0
    assert _verdict(folder)["calibrated"] is True


def test_a_run_restarted_after_it_saved_a_checkpoint_is_a_second_draw(tmp_path):
    """A run stopped with a checkpoint (its evals could be read), deleted and started from scratch is noted
    redrawn; one that ended before any checkpoint (train.py removes such a folder) starts again as its first draw."""
    folder, _ = _experiment(tmp_path)
    for name, checkpoint in (("tied-s3", True), ("untied-s3", False)):
        (folder / name).mkdir()
        ledger.note_start(folder, name, fresh=True)
        if checkpoint:
            (folder / name / "ckpt_last.pt").write_bytes(b"a checkpoint")
        ledger.note_finished(folder, name)  # the train.py ended, stopped
        shutil.rmtree(folder / name)
        ledger.note_start(folder, name, fresh=True)
    assert _noted(folder)["tied-s3"].get("redrawn") is True and "redrawn" not in _noted(folder)["untied-s3"]


def test_run_folders_linked_into_the_experiment_folder_are_named_where_linked(tmp_path):
    """A run folder that is a symbolic link (its files kept elsewhere) reads under its name in the folder."""
    folder, _ = _experiment(tmp_path)
    elsewhere = tmp_path / "store" / "untied-s1"
    elsewhere.parent.mkdir()
    shutil.move(str(folder / "untied-s1"), elsewhere)
    (folder / "untied-s1").symlink_to(elsewhere, target_is_directory=True)
    assert compare.main([str(folder)]) == 0
    assert _verdict(folder)["calibrated"] is True


def test_a_run_of_an_experiment_ends_pointing_at_the_report_not_at_training_it_on(tmp_path):
    """train.py's closing hints: a run of a compare.py experiment names the experiment's report instead of
    a command that trains it on by hand (which would make it another run than the one drawn)."""
    folder, paths = _experiment(tmp_path)
    hints = next_steps(paths[0], {"best_val_loss": 3.0}, RunConfig(), 1)
    assert f"python compare.py {folder}" in hints and "--resume" not in hints
    budget_run = next_steps(folder / "0.5M" / "tied-lr0.001-s0", {"best_val_loss": 3.0}, RunConfig(), 1)
    assert f"python compare.py {folder}" in budget_run  # a budget design's runs sit one folder further down
    plain = next_steps(tmp_path / "runs" / "a", {"best_val_loss": 3.0}, RunConfig(), 1)
    assert "--resume" in plain and "compare.py" not in plain
