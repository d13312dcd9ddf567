"""A run folder read back as a value: :class:`training.run_files.RunFolder` and :func:`runs_in`.

Every reader of run folders (the reports, the plan line, the budget axis, resumes) asks a
``RunFolder`` whether the run finished or can resume and reads its config and summary through it.

Run: ``python -m pytest -q tests/test_run_folder.py``  (CPU, offline, seconds).
"""

import json

import pytest

from core.errors import UserError
from training.run_files import CONFIG, LAST_CKPT, SUMMARY, RunFolder, runs_in


def _run(folder, config=True, checkpoint=False, summary=None):
    """A run folder holding a config, a last checkpoint and a summary, as asked."""
    folder.mkdir(parents=True)
    if config:
        (folder / CONFIG).write_text(json.dumps({"train": {"seed": 1337}}))
    if checkpoint:
        (folder / LAST_CKPT).write_bytes(b"")
    if summary is not None:
        (folder / SUMMARY).write_text(json.dumps(summary))
    return folder


def test_a_run_is_finished_by_its_summary_and_resumable_by_its_checkpoint(tmp_path):
    """Finished: the summary exists (written after the last step).  Resumable: unfinished with a last
    checkpoint.  A run that finished is not resumable, whatever checkpoint it keeps."""
    started = RunFolder(_run(tmp_path / "a"))
    stopped = RunFolder(_run(tmp_path / "b", checkpoint=True))
    done = RunFolder(_run(tmp_path / "c", checkpoint=True, summary={"final_val_loss": 2.5}))
    assert [(r.finished, r.resumable) for r in (started, stopped, done)] == [
        (False, False),
        (False, True),
        (True, False),
    ]
    assert done.summary["final_val_loss"] == 2.5 and done.config["train"]["seed"] == 1337


def test_a_missing_or_broken_file_is_one_line_naming_it(tmp_path):
    """Reading the summary of an unfinished run, or a config that is not JSON, raises UserError naming the file."""
    run = _run(tmp_path / "a")
    with pytest.raises(UserError, match="summary.json"):
        _ = RunFolder(run).summary
    (run / CONFIG).write_text("{not json")
    with pytest.raises(UserError, match="config.json"):
        _ = RunFolder(run).config


def test_runs_in_lists_started_or_finished_runs_by_name(tmp_path):
    """runs_in: the folders holding a config (every run that started), or with finished_only a summary,
    sorted by name; a folder without either, or a missing parent, is no run."""
    _run(tmp_path / "b-s1", summary={})
    _run(tmp_path / "a-s0")
    (tmp_path / "notes").mkdir()
    assert [r.path.name for r in runs_in(tmp_path)] == ["a-s0", "b-s1"]
    assert [r.path.name for r in runs_in(tmp_path, finished_only=True)] == ["b-s1"]
    assert runs_in(tmp_path / "missing") == []
