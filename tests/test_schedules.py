"""Runs compared only on the learning-rate schedule they followed: resume rows, the logged lr, the refusal.

Run: ``python -m pytest -q tests/test_schedules.py``  (CPU, offline; the end-to-end tests are marked slow).
A run's final config.json does not say what learning rate its early steps had (a resume may move
the cosine's horizon), so train.py records each resume in metrics.jsonl and compare.py compares
the rates the runs logged.
"""

import json

import pytest
from fake_runs import arm_run
from helpers import error_line, tiny_args

import compare
import train
import training.loop
from core.errors import UserError
from experiment.runs import folders
from training.runs import read_metrics


def _resumes(run_dir):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "resume"]


def test_each_resume_is_recorded_and_kept_when_a_later_resume_cuts_the_log(tmp_path, corpus):
    """A resume writes a ``resume`` row (its step, each setting it changed, the cosine's horizon before and
    after); a later resume, which cuts the log back to its checkpoint, keeps the earlier one's row."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=2", "--run-name", "r")) == 0
    base = [f"--train.out_dir={tmp_path / 'runs'}", "--resume", "--run-name", "r"]
    assert train.main([*base, "--train.max_iters=4", "--train.lr_decay_iters=4"]) == 0
    assert train.main([*base, "--train.max_iters=6"]) == 0
    first, second = _resumes(tmp_path / "runs" / "r")
    assert first["step"] == 2 and first["lr_horizon"] == [2, 4]
    assert first["overrides"] == {"train.lr_decay_iters": 4, "train.max_iters": 4}
    assert first["previous"] == {"train.lr_decay_iters": 2, "train.max_iters": 2}
    assert second["step"] == 4 and second["overrides"] == {"train.max_iters": 6} and second["lr_horizon"] == [4, 4]


def _fake_pair(tmp_path, tied_rows=(), untied_rows=(), **untied_changes):
    """A tied and an untied fake run (seed 0) with extra metrics rows appended to each."""
    paths = [arm_run(tmp_path, "tied", 0, 3.0), arm_run(tmp_path, "untied", 0, 3.1, **untied_changes)]
    for path, extra in zip(paths, (tied_rows, untied_rows)):
        with open(path / "metrics.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in extra)
    return paths


def _resume(step, horizon):
    return {
        "kind": "resume",
        "step": step,
        "overrides": {"train.lr_decay_iters": horizon[1]},
        "previous": {"train.lr_decay_iters": horizon[0]},
        "lr_horizon": list(horizon),
    }


def test_a_resume_that_moved_the_schedule_is_refused_even_where_no_lr_was_logged(tmp_path):
    """Resume history is compared too: a run whose resume moved the cosine's horizon is refused against one
    that trained in one go, naming that run and the step, though no row logged a learning rate to compare."""
    paths = _fake_pair(tmp_path, tied_rows=[_resume(10, (10, 20))])
    with pytest.raises(
        UserError,
        match=r"^\S*tied-s0 and \S*untied-s0 moved .* from step 10 \(\S*tied-s0 was resumed "
        r"at step 10 with train.lr_decay_iters=20\)",
    ):
        folders.check_experiment(folders.load_runs(paths))


def test_a_resume_that_kept_the_schedule_is_no_difference(tmp_path):
    """A resume after an interruption (no override) or one that kept the horizon leaves the runs comparable,
    and runs whose identical resumes moved the horizon alike are comparable too."""
    still = {"kind": "resume", "step": 10, "overrides": {}, "previous": {}, "lr_horizon": [20, 20]}
    folders.check_experiment(folders.load_runs(_fake_pair(tmp_path / "a", tied_rows=[still])))
    moved = _resume(10, (10, 20))
    folders.check_experiment(folders.load_runs(_fake_pair(tmp_path / "b", [moved], [moved])))


def test_logged_rates_are_compared_relative_to_each_runs_peak(tmp_path):
    """Tuned arms differ in peak learning rate by design: the same shape at twice the peak is accepted,
    another shape is refused at the first logged step where lr / peak differs."""

    def rows(peak, shape):
        return [{"kind": "train", "step": s, "lr": peak * f} for s, f in zip((5, 10, 15), shape)]

    tuned = {"train__learning_rate": 4e-3, "train__min_lr": 4e-4}  # the default config's rates, doubled
    folders.check_experiment(
        folders.load_runs(_fake_pair(tmp_path / "a", rows(2e-3, (1, 0.5, 0.1)), rows(4e-3, (1, 0.5, 0.1)), **tuned))
    )
    paths = _fake_pair(tmp_path / "b", rows(2e-3, (1, 0.5, 0.1)), rows(2e-3, (1, 0.7, 0.1)))
    with pytest.raises(
        UserError,
        match=r"untied-s0 followed another learning-rate schedule than \S*tied-s0: they "
        r"part at step 10 \(lr / peak learning rate 0.7 vs 0.5\)",
    ):
        folders.check_experiment(folders.load_runs(paths))


@pytest.mark.slow
def test_compare_refuses_a_run_extended_onto_a_longer_schedule(tmp_path, corpus, capsys, monkeypatch):
    """The scenario of a run trained to 10 steps and extended to 20 with --train.lr_decay_iters=20, against an
    untied run trained to 20 in one go: their final configs match, but compare.py refuses them (exit 2) in
    one line naming the extended run and the step where the schedules part."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})
    args = tiny_args(tmp_path, corpus, "--train.log_interval=5", "--train.eval_interval=10")
    assert train.main([*args, "--train.max_iters=10", "--run-name", "ft"]) == 0
    assert (
        train.main(
            [
                f"--train.out_dir={tmp_path / 'runs'}",
                "--run-name",
                "ft",
                "--resume",
                "--train.max_iters=20",
                "--train.lr_decay_iters=20",
            ]
        )
        == 0
    )
    assert train.main([*args, "--model.tie_embeddings=false", "--train.max_iters=20", "--run-name", "fu"]) == 0
    capsys.readouterr()
    assert compare.main([str(tmp_path / "runs" / "ft"), str(tmp_path / "runs" / "fu")]) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {tmp_path / 'runs' / 'ft'} followed another learning-rate schedule than")
    assert "they part at step 5 " in line and "resumed at step 10 with train.lr_decay_iters=20" in line


@pytest.mark.slow
def test_compare_accepts_a_run_interrupted_and_resumed_on_its_schedule(tmp_path, corpus, capsys, monkeypatch):
    """A run stopped by Ctrl-C and resumed with no override followed the same schedule as one trained in
    one go: compare.py reports on the pair (exit 0)."""
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})
    args = tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.log_interval=3")
    real_step, calls = training.loop.train_step, {"n": 0}

    def step_then_interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt  # as a second Ctrl-C does: stop now, the step-4 checkpoint kept
        return real_step(*a, **kw)

    monkeypatch.setattr(training.loop, "train_step", step_then_interrupt)
    assert train.main([*args, "--run-name", "t"]) == 130
    monkeypatch.undo()
    monkeypatch.setattr(folders, "samples", lambda exp, prompts: {})
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "t", "--resume"]) == 0
    assert [r["overrides"] for r in _resumes(tmp_path / "runs" / "t")] == [{}]
    assert train.main([*args, "--model.tie_embeddings=false", "--run-name", "u"]) == 0
    assert compare.main([str(tmp_path / "runs" / "t"), str(tmp_path / "runs" / "u")]) == 0
