"""Run records keep paths as the user gave them: a relative out_dir or cache_dir stays relative.

Committed run folders (under ``results/``) must not carry the paths of the machine they ran on,
and a run must still resume from a relative ``train.out_dir``.

Run: ``python -m pytest -q tests/test_run_paths.py``  (CPU, offline, seconds).
"""

import json

from helpers import tiny_args

import train


def _relative_args(tmp_path, corpus, *extra):
    """tiny_args with the run and cache folders given relative to the working folder."""
    args = tiny_args(tmp_path, corpus, *extra)
    return [a.replace(f"={tmp_path / 'runs'}", "=runs").replace(f"={tmp_path / 'cache'}", "=cache") for a in args]


def test_relative_folders_are_recorded_relative_and_a_run_resumes_from_them(tmp_path, corpus, monkeypatch):
    """config.json records train.out_dir and data.cache_dir exactly as given (relative here), before and
    after a --resume that names the run folder by the same relative out_dir."""
    monkeypatch.chdir(tmp_path)
    assert train.main(_relative_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")) == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert (config["train"]["out_dir"], config["data"]["cache_dir"]) == ("runs", "cache")

    assert train.main(["--resume", "--run-name", "r", "--train.out_dir=runs", "--train.max_iters=6"]) == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    assert (config["train"]["out_dir"], config["data"]["cache_dir"]) == ("runs", "cache")
    assert summary["step"] == 6
