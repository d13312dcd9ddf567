"""keep.py: finished run folders thinned for git, every row a report reads kept.

Run: ``python -m pytest -q tests/test_keep.py`` (CPU, offline, a second).
"""

from __future__ import annotations

import json

import pytest
from helpers import error_line

import keep
from training.runs import read_metrics, thin_metrics


def _rows(last: int, interval: int = 10) -> list[dict]:
    """Train rows every ``interval`` steps to ``last``, an eval row every 50, a resume at 30 and a final row."""
    rows = []
    for step in range(interval, last + 1, interval):
        rows.append({"kind": "train", "step": step, "train_loss": 5.0 - step / 1e3})
        if step % 50 == 0:
            rows.append({"kind": "eval", "step": step, "val_loss": 5.0 - step / 1e3})
        if step == 30:
            rows.append({"kind": "resume", "step": 30})
    return rows + [{"kind": "final_eval", "step": last, "val_loss": 4.0}]


def test_thinning_keeps_every_other_row_and_at_most_n_train_rows_with_the_last():
    """Evals, resumes and the final row all stay; train rows drop to <= N, ending at the last step."""
    rows = _rows(1000)
    kept = thin_metrics(rows, 12)
    assert [r for r in kept if r["kind"] != "train"] == [r for r in rows if r["kind"] != "train"]
    train = [r["step"] for r in kept if r["kind"] == "train"]
    assert 2 <= len(train) <= 12 and train[-1] == 1000
    assert [r for r in kept if r in rows] == kept  # in order, unchanged


def test_thinning_keeps_the_training_clock():
    """Each kept train row's tokens/s becomes its merged window's, so the training seconds read from the rows
    (--outcome time-to, evaluation left out) are the same at every kept row before and after thinning."""
    from experiment.runs.folders import train_clock

    rows = [
        {**r, "tokens": r["step"] * 100, "tokens_per_s": 1000.0 + 37 * (r["step"] % 7)} if r["kind"] == "train" else r
        for r in _rows(1000)
    ]
    before, after = dict(train_clock(rows)), train_clock(thin_metrics(rows, 12))
    assert len(after) <= 13 and all(seconds == pytest.approx(before[tokens]) for tokens, seconds in after)


def test_runs_thinned_alike_keep_the_same_steps_where_they_overlap():
    """A short and a long run of one experiment keep train rows on one stride grid, so their
    logged learning rates can still be compared step by step."""
    short = {r["step"] for r in thin_metrics(_rows(400), 10) if r["kind"] == "train"} - {400}
    long = {r["step"] for r in thin_metrics(_rows(1600), 10) if r["kind"] == "train"} - {1600}
    assert short and long and (long & set(range(401))) <= short


def test_a_run_with_few_train_rows_is_left_as_it_is():
    """Nothing to thin: the rows come back unchanged."""
    rows = _rows(50)
    assert thin_metrics(rows, 40) == rows


def _run(folder, rows, summary=True):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary:
        (folder / "summary.json").write_text("{}")


def test_keep_thins_finished_runs_at_any_depth_and_leaves_unfinished_ones(tmp_path, capsys):
    """An experiment's finished branch two levels down is thinned; an unfinished run is not touched."""
    _run(tmp_path / "exp" / "1M" / "tied-s0", _rows(1000))
    _run(tmp_path / "exp" / "trunks" / "tied-s0", _rows(1000), summary=False)
    assert keep.main([str(tmp_path / "exp"), "--train-rows", "10"]) == 0
    assert len([r for r in read_metrics(tmp_path / "exp/1M/tied-s0/metrics.jsonl") if r["kind"] == "train"]) <= 10
    assert len(read_metrics(tmp_path / "exp/trunks/tied-s0/metrics.jsonl")) == len(_rows(1000))
    assert "1 finished run(s); saved" in capsys.readouterr().out


def test_a_dry_run_writes_nothing(tmp_path, capsys):
    """--dry-run prints what it would save and leaves the file byte for byte."""
    _run(tmp_path / "r", _rows(1000))
    before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    assert keep.main([str(tmp_path / "r"), "--dry-run", "--train-rows", "5"]) == 0
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before
    assert "would save" in capsys.readouterr().out


def test_bad_input_is_one_error_line(tmp_path, capsys):
    """A missing folder, a file and a train-row count below 2 each exit 2 with one line naming the fix."""
    assert keep.main([str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'} does not exist: give run folders" in error_line(capsys)
    (tmp_path / "f.txt").write_text("x")
    assert keep.main([str(tmp_path / "f.txt")]) == 2
    assert "f.txt is a file, not a folder" in error_line(capsys)
    assert keep.main([str(tmp_path), "--train-rows", "1"]) == 2
    assert "--train-rows must be >= 2" in error_line(capsys)


def test_a_trunk_that_may_train_on_is_left_alone(tmp_path, capsys):
    """A WSD trunk with its checkpoints, stopped short of its horizon, grows at its next stage: not thinned."""
    _run(tmp_path / "trunk", _rows(1000))
    (tmp_path / "trunk" / "config.json").write_text(
        json.dumps({"train": {"save_at": [500, 1000], "max_iters": 1000, "lr_decay_iters": 1250}})
    )
    (tmp_path / "trunk" / "ckpt_last.pt").write_bytes(b"")
    assert keep.main([str(tmp_path), "--train-rows", "5"]) == 0
    assert len(read_metrics(tmp_path / "trunk" / "metrics.jsonl")) == len(_rows(1000))
