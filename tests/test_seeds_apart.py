"""The runs of one seed differ in their arm alone: one code, and for a timed outcome one machine.

A pair read across two commits that differ in what train.py runs compares the code too; a timed pair
across two machines or thread counts compares those too.  Either labels the verdict not calibrated
(experiment.runs.seeds); a change across seeds, or outside the training code, does not.
"""

from __future__ import annotations

import json
import subprocess

import compare
import pytest
from fake_runs import fake_experiment

from core.files import REPO_ROOT
from experiment.arms import same_training_code
from experiment.runs import seeds

FINALS = [(3.0, 2.9), (3.1, 3.0), (3.2, 3.1)]


def _with_env(paths, env_of):
    """Write each run's env.json from ``env_of(run folder name)``."""
    base = {"device_name": "x86_64", "cpu_model": "AMD EPYC", "torch_threads": 1, "versions": {"torch": "2.13.0"}}
    for p in paths:
        (p / "env.json").write_text(json.dumps({**base, **env_of(p.name)}))


def _not_calibrated(tmp_path, *extra):
    """Report the run folders under ``tmp_path/runs`` (options ``extra``); verdict.json's reasons, if any."""
    assert compare.main([*(str(p) for p in sorted((tmp_path / "runs").iterdir()) if p.is_dir()), *extra]) == 0
    return json.loads((tmp_path / "runs" / "verdict.json").read_text())["not_calibrated"]


def test_a_seed_whose_arms_trained_from_different_training_code_is_named(tmp_path, monkeypatch):
    """Seed 1338's untied run at another commit whose training code differs: one reason, naming the seed and
    both commits; the same commits with the same training code (a docs change) give none."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": "b" * 40 if name == "untied-s1" else "a" * 40, "git_dirty": False})
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: False)
    (why,) = _not_calibrated(tmp_path)
    assert why.startswith("runs of 1 seed trained from different code (seed 1: tied at aaaaaaa, untied at bbbbbbb)")
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: True)
    assert _not_calibrated(tmp_path) == []


def test_uncommitted_changes_on_one_side_of_a_pair_are_other_code(tmp_path):
    """One commit, but the untied run of seed 0 trained with uncommitted changes: its code is not the tied run's."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": "a" * 40, "git_dirty": name == "untied-s0"})
    (why,) = _not_calibrated(tmp_path)
    assert "(seed 0: tied at aaaaaaa, untied at aaaaaaa with uncommitted changes)" in why


def test_code_that_changes_between_seeds_keeps_each_pair_fair(tmp_path, monkeypatch):
    """Every run of seed 2 at a later commit with other training code: each pair shares its code, no label."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": ("b" if name.endswith("-s2") else "a") * 40, "git_dirty": False})
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: False)
    assert _not_calibrated(tmp_path) == []


@pytest.mark.parametrize("outcome, labelled", [(["--outcome", "tokens-per-s", "--margin", "0.02"], True), ([], False)])
def test_a_timed_pair_on_two_thread_counts_is_named_and_a_loss_pair_is_not(tmp_path, outcome, labelled):
    """Seed 0's untied run timed on 2 threads, its tied run on 1: a tokens/s verdict names the seed and the
    thread counts; a loss verdict does not care where a run trained."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"torch_threads": 2 if name == "untied-s0" else 1})
    reasons = _not_calibrated(tmp_path, *outcome)
    if labelled:
        (why,) = reasons
        assert why.startswith("runs of 1 seed timed on different machines or settings (seed 0: tied with threads 1, ")
    else:
        assert reasons == []


def test_same_training_code_reads_git():
    """HEAD against itself is the same code; a commit git does not have cannot be told (None)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert same_training_code(head, head) is True
    assert same_training_code(head, "0" * 40) is None


def test_a_run_resumed_from_other_training_code_is_named(tmp_path, monkeypatch):
    """untied-s0 started at the tied run's commit and was resumed at another whose training code differs
    (env-resume-step<N>.json): its pair compares code."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": "a" * 40, "training_code_diff": None})
    resumed = tmp_path / "runs" / "untied-s0" / "env-resume-step10.json"
    resumed.write_text(json.dumps({"git_commit": "b" * 40, "training_code_diff": None}))
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: False)
    (why,) = _not_calibrated(tmp_path)
    assert "(seed 0: tied at aaaaaaa, untied at bbbbbbb)" in why


def test_uncommitted_changes_count_only_in_the_training_code(tmp_path):
    """At one commit: two runs whose uncommitted training-code changes differ (their digests) are named;
    runs whose checkout was dirty elsewhere (docs, tests: no training-code digest) are not."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": "a" * 40, "git_dirty": True, "training_code_diff": None})
    assert _not_calibrated(tmp_path) == []
    _with_env(
        paths, lambda name: {"git_commit": "a" * 40, "training_code_diff": "d2" * 8 if name == "tied-s1" else "d1" * 8}
    )
    (why,) = _not_calibrated(tmp_path)
    assert "(seed 1: tied at aaaaaaa with uncommitted changes (digest d2d2d2d)" in why


def test_commits_git_cannot_compare_here_are_not_named(tmp_path, monkeypatch):
    """Commits this clone does not have (a shallow clone, a fork): nothing can be told, so nothing is said."""
    paths = fake_experiment(tmp_path / "runs", FINALS)
    _with_env(paths, lambda name: {"git_commit": ("b" if name == "untied-s1" else "a") * 40, "git_dirty": False})
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: None)
    assert _not_calibrated(tmp_path) == []
