"""compare.py as a user meets it: its --help, a folder that is not a run folder, and Ctrl-C under pytest.

Run: ``python -m pytest -q tests/test_compare_cli.py``  (CPU, offline; seconds, but for one slow
test that trains two tiny runs through compare.py in-process).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import os
import signal
import sys
import threading
import time

import pytest
from helpers import VERSE, error_line

from fake_runs import fake_run

import compare
from experiment.runs import launch
from experiment.runs import commands
from experiment.runs.plan import Plan


def test_help_keeps_the_examples_line_continuations(capsys):
    """compare.py --help shows the module docstring's examples as written: a long command goes on, after a
    backslash, on the next line (not joined into one line with a run of spaces)."""
    with pytest.raises(SystemExit):
        compare.main(["grid", "--help"])
    out = capsys.readouterr().out
    assert "--axis model.n_embd=64,128,256 \\\n        --axis data.tokenizer=char,bpe:4096" in out
    assert not [line for line in out.splitlines() if "         --" in line.strip()]


def test_an_experiment_folder_among_run_folders_is_named_as_such(tmp_path, capsys):
    """compare.py <an experiment folder> <a run folder>: exit 2, one line saying it is an experiment folder, not
    a run folder, and that alone it writes its report again."""
    exp = tmp_path / "exp"
    (exp / "tied-s0").mkdir(parents=True)
    (exp / "tied-s0" / "config.json").write_text("{}")
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp), str(exp / "tied-s0")]) == 2
    line = error_line(capsys)
    assert "is an experiment folder (it holds experiment.json), not a run folder" in line
    assert f"give it alone to write its report again (python compare.py {exp})" in line


def test_an_experiment_folder_given_alone_is_reported_again_with_its_declared_readout(tmp_path, capsys):
    """compare.py <experiment folder>: every run folder in it is read (tune-* as the grid), with the margin and
    the reference its experiment.json declared, into the folder's own report.md and verdict.json."""
    exp = tmp_path / "exp"
    for s, (t, u) in enumerate([(3.00, 3.05), (3.01, 3.06), (3.02, 3.07)]):
        fake_run(exp, f"tied-s{s}", True, 1337 + s, t)
        fake_run(exp, f"untied-s{s}", False, 1337 + s, u)
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.02, "reference": "untied"}))
    assert compare.main([str(exp)]) == 0
    record = json.loads((exp / "verdict.json").read_text())
    assert record["reference"] == "untied" and record["margin"] == 0.02 and record["seeds"] == [1337, 1338, 1339]
    assert (exp / "report.md").read_text().startswith("# Should the embedding be tied? exp (reference: untied)")
    capsys.readouterr()
    assert compare.main([str(exp), "--reference", "tied"]) == 2
    assert "declared --reference untied before the runs" in error_line(capsys)


def test_a_report_that_fails_leaves_no_earlier_verdict_standing(tmp_path, capsys):
    """A folder re-rendered after a run was added that breaks the pairing: exit 2, and the earlier report.md and
    verdict.json are gone rather than left for a script to read as the current verdict."""
    exp = tmp_path / "exp"
    for s in range(2):
        fake_run(exp, f"tied-s{s}", True, 1337 + s, 3.0 + s / 100)
        fake_run(exp, f"untied-s{s}", False, 1337 + s, 3.1 + s / 100)
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp)]) == 0 and (exp / "verdict.json").is_file()
    fake_run(exp, "tied-s2", True, 1339, 3.0)  # no untied run of seed 1339: unpaired
    capsys.readouterr()
    assert compare.main([str(exp)]) == 2
    assert "seeds are not paired" in error_line(capsys)
    assert not (exp / "report.md").exists() and not (exp / "verdict.json").exists()


def test_a_ctrl_c_while_the_same_runs_are_reported_again_keeps_their_report(tmp_path, capsys, monkeypatch):
    """A Ctrl-C while a finished folder's report is drawn again (the same runs) leaves report.md and
    verdict.json as they were: they are this report, whole, not a stale one."""
    from experiment.ab import figures

    exp = tmp_path / "exp"
    for s in range(2):
        fake_run(exp, f"tied-s{s}", True, 1337 + s, 3.0 + s / 100)
        fake_run(exp, f"untied-s{s}", False, 1337 + s, 3.1 + s / 100)
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp)]) == 0
    before = {name: (exp / name).read_bytes() for name in ("report.md", "verdict.json")}

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(figures, "plot_all", interrupted)
    assert compare.main([str(exp)]) == 130
    assert {name: (exp / name).read_bytes() for name in before} == before


CHILD = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))
Path(sys.argv[1]).write_text("ready")
time.sleep(60)
"""


def test_a_ctrl_c_passed_to_a_child_run_stops_the_test_run(tmp_path, ctrl_c_stops_the_suite):
    """A Ctrl-C that compare's signal forwarding passes to its child (and would turn into exit 130) is raised
    again as KeyboardInterrupt after the test, so pytest stops instead of running on (conftest.py)."""
    ready = tmp_path / "ready"

    def interrupt_when_ready():
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C reaches the pytest process

    threading.Thread(target=interrupt_when_ready, daemon=True).start()
    status, forwarded = launch.run_forwarding_signals([sys.executable, "-c", CHILD, str(ready)])
    assert (status, forwarded) == (128 + signal.SIGINT, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):  # what the fixture does after the test (and then not again)
        ctrl_c_stops_the_suite.raise_if_received()


@pytest.mark.slow
def test_compare_in_process_leaves_the_signal_handlers_as_they_were(tmp_path):
    """After compare.py's main has trained its runs in-process (passing signals on to each child), SIGINT,
    SIGTERM and SIGHUP have the handlers they had before."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    corpus = tmp_path / "verse.txt"
    corpus.write_text(VERSE * 100)
    argv = [
        "--config",
        "configs/debug.toml",
        "--name",
        "exp",
        f"--data.source={corpus}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
        "--train.max_iters=2",
        "--train.eval_interval=2",
        "--train.sample_tokens=0",
        "--train.final_eval_tokens=256",
        "--seeds",
        "1",
        "--prompt",
        "RO",
    ]
    assert compare.main(argv) == 0
    assert {sig: signal.getsignal(sig) for sig in before} == before


def _grown_folder(exp, seeds: range) -> None:
    """Tied and untied fake runs of an experiment folder on ``seeds`` (untied 0.05 higher, some noise)."""
    for s in seeds:
        if not (exp / f"tied-s{s}").exists():
            fake_run(exp, f"tied-s{s}", True, 1337 + s, 3.0 + s / 100)
            fake_run(exp, f"untied-s{s}", False, 1337 + s, 3.05 + s / 100 + (0.01 if s % 2 else -0.01))


def test_seeds_added_after_a_verdict_count_as_a_look_and_are_not_calibrated(tmp_path, capsys):
    """A folder reported at 3 seeds, then grown to 5: the first report tests at 0.05 and records its look; the
    second is look 2, tested at 0.025, labelled not calibrated (the first look spent the 5%), with its looks in
    verdict.json, and --fail-on refuses to gate on it (exit 3, one line)."""
    exp = tmp_path / "exp"
    _grown_folder(exp, range(3))
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp)]) == 0
    first = json.loads((exp / "verdict.json").read_text())
    assert first["alpha"] == 0.05 and first["calibrated"] is True and first["sequential"] is None
    assert [look["seeds"] for look in json.loads((exp / "experiment.json").read_text())["looks"]] == [3]
    _grown_folder(exp, range(5))
    capsys.readouterr()
    assert compare.main([str(exp), "--fail-on", "worse"]) == 3
    assert "--fail-on worse gates only on calibrated verdicts" in error_line(capsys)
    second = json.loads((exp / "verdict.json").read_text())
    assert second["alpha"] == 0.025 and second["calibrated"] is False
    assert second["sequential"] == {
        "looks": [3, 5],
        "seeds_read": 5,
        "alpha_per_look": 0.025,
        "rule": "bonferroni",
        "declared": False,
    }
    md = (exp / "report.md").read_text()
    assert "**Not calibrated:** seeds added after a verdict was read at 3 seeds" in md
    assert "this report at 5 seeds is look 2, tested at α = 0.025" in md
    assert [look["seeds"] for look in json.loads((exp / "experiment.json").read_text())["looks"]] == [3, 5]


def test_a_subset_read_after_the_whole_is_a_look_too(tmp_path):
    """Reported at 5 seeds, then at 3 (two seeds' runs moved out): the second report is look 2 as well, tested
    at 0.025 and not calibrated, since a subset chosen after the whole was read is one more look."""
    exp = tmp_path / "exp"
    _grown_folder(exp, range(5))
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp)]) == 0
    for s in (3, 4):
        for arm in ("tied", "untied"):
            shutil.move(exp / f"{arm}-s{s}", tmp_path / f"{arm}-s{s}")
    assert compare.main([str(exp)]) == 0
    second = json.loads((exp / "verdict.json").read_text())
    assert second["alpha"] == 0.025 and second["calibrated"] is False
    assert second["not_calibrated"][0].startswith("a verdict was read before at 5 seeds")


def test_a_sequential_folder_read_between_its_looks_is_not_calibrated(tmp_path):
    """A --seeds auto folder (max_seeds 8: looks at 3, 5, 7, 8) reported at 4 seeds reads an extra look its
    level does not cover: not calibrated, saying so; at 5 seeds, a declared look, it is calibrated."""
    exp = tmp_path / "exp"
    _grown_folder(exp, range(4))
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01, "max_seeds": 8}))
    assert compare.main([str(exp)]) == 0
    record = json.loads((exp / "verdict.json").read_text())
    assert record["alpha"] == 0.0125 and record["calibrated"] is False
    assert record["not_calibrated"] == [
        "read at 4 seeds, none of the looks declared before the runs (3, 5, 7, 8): an extra look, which the level "
        "per look does not cover; report when a declared look's seeds have all finished"
    ]
    _grown_folder(exp, range(5))
    assert compare.main([str(exp)]) == 0
    assert json.loads((exp / "verdict.json").read_text())["calibrated"] is True
    # Each read is recorded with its time (a folder declared again elsewhere is ordered against them).
    assert [look["seeds"] for look in json.loads((exp / "experiment.json").read_text())["looks"]] == [4, 5]


def test_a_one_seed_tuned_folder_without_its_tuning_runs_is_refused(tmp_path, capsys):
    """A folder whose rates were picked on one tuning seed, reported with its tune-* runs removed, would lose its
    not-calibrated label: refused in one line instead."""
    exp = tmp_path / "exp"
    _grown_folder(exp, range(3))
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01, "lr_grid": [1e-3, 2e-3], "lr_tuning": "one-seed"}))
    assert compare.main([str(exp)]) == 2
    assert "picked each arm's rate on one tuning seed" in error_line(capsys)
    assert not (exp / "verdict.json").exists()


def test_compare_speaks_of_arms_in_general(capsys):
    """The help opens on the A/B question and its default prompt is a newline; a new experiment of the user's
    own arms is named by them (<config>-base-vs-drop), while the tying presets keep <config>-tied-vs-untied."""
    from experiment.arms import define_arms

    with pytest.raises(SystemExit):
        compare.main(["ab", "--help"])
    out = capsys.readouterr().out
    assert "default: a newline)" in out and "ROMEO" not in out.split("--prompt")[1]
    own = define_arms(None, {"base": {}, "drop": {"model.dropout": 0.1}})
    plan = Plan(config="configs/debug.toml", overrides={}, arms=own.names, seeds=2, reference="base", arm_set=own)
    assert commands._arms_name(plan) == "base-vs-drop"
    assert commands._arms_name(Plan(config=None, overrides={}, arms=["tied", "untied"], seeds=2)) == "tied-vs-untied"


def test_the_door_names_each_mode_and_its_help(capsys):
    """compare.py --help lists the four modes (ab, grid, budgets, report) and how to see each one's options."""
    assert compare.main(["--help"]) == 0
    out = capsys.readouterr().out
    for mode in ("ab", "grid", "budgets", "report"):
        assert f"\n  {mode} " in out, mode
    assert "python compare.py MODE --help" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["budgets", "--budgets", "1M", "--lr-tuning", "one-seed"], "unknown option --lr-tuning"),
        (["budgets", "--budgets", "1M", "--fail-on", "worse"], "unknown option --fail-on"),
        (["grid", "--axis", "model.n_embd=16,32", "--outcome", "tokens-per-s"], "unknown option --outcome"),
        (["grid", "--axis", "model.n_embd=16,32", "--adopt", "runs/a"], "unknown option --adopt"),
        (["grid", "--axis", "model.n_embd=16,32", "--seeds", "auto"], "--seeds must be a count, got 'auto'"),
        (["--grid", "model.n_embd=16,32"], "python compare.py grid --axis KEY=V1,V2"),
        (["report", "runs/x", "--config", "configs/debug.toml"], "unrecognized arguments: --config"),
        (["ab", "--contrast", "a,b"], "unknown option --contrast"),
    ],
)
def test_each_mode_offers_only_the_options_it_can_use(capsys, tmp_path, argv, words):
    """An option of another mode is not there to be given: one error line naming it, exit 2, nothing written."""
    assert compare.main([*argv, f"--train.out_dir={tmp_path}"] if argv[0] != "report" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and words in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("mode", ["ab", "grid", "budgets", "report"])
def test_each_modes_help_is_short(capsys, mode):
    """A mode's --help lists its own options (the --section.key overrides aside) in a screen or two."""
    with pytest.raises(SystemExit):
        compare.main([mode, "--help"])
    own = capsys.readouterr().out.split("--model.")[0]
    assert len(own.splitlines()) < 110, len(own.splitlines())


@pytest.mark.parametrize("argv", [["--help"], ["ab", "--help"], ["grid", "--help"], ["budgets", "--help"]])
def test_help_reads_as_plain_text(argv, capsys):
    """compare.py's help texts come from docstrings: their reST markup (``x``, :func:`x`) is dropped for the terminal."""
    with contextlib.suppress(SystemExit):
        compare.main(argv)
    out = capsys.readouterr().out
    assert "compare.py" in out and "``" not in out and ":func:" not in out
