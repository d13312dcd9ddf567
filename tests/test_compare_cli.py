"""compare.py as a user meets it: its --help, a folder that is not a run folder, and Ctrl-C under pytest.

Run: ``python -m pytest -q tests/test_compare_cli.py``  (CPU, offline; seconds, but for one slow
test that trains two tiny runs through compare.py in-process).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from helpers import VERSE, error_line

import compare
from experiment import launch


def test_help_keeps_the_examples_line_continuations(capsys):
    """compare.py --help shows the module docstring's examples as written: a long command goes on, after a
    backslash, on the next line (not joined into one line with a run of spaces)."""
    with pytest.raises(SystemExit):
        compare.main(["--help"])
    out = capsys.readouterr().out
    assert "tie-then-untie \\\n        --lr-grid 1e-3,2e-3,4e-3,8e-3 --seeds 5" in out
    assert "model.n_embd=64,128,256 \\\n        --grid data.tokenizer=char" in out
    assert not [line for line in out.splitlines() if "         --" in line.strip()]


def test_an_experiment_folder_is_named_as_such_with_what_to_give_instead(tmp_path, capsys):
    """compare.py <a folder holding experiment.json>: exit 2, one line saying it is an experiment folder, not a
    run folder, and how to report on its runs (their folders, <folder>/*/) or make it again."""
    exp = tmp_path / "exp"
    (exp / "tied-s0").mkdir(parents=True)
    (exp / "tied-s0" / "config.json").write_text("{}")
    (exp / "experiment.json").write_text(json.dumps({"margin": 0.01}))
    assert compare.main([str(exp)]) == 2
    line = error_line(capsys)
    assert "is an experiment folder (it holds experiment.json), not a run folder" in line
    assert f"python compare.py {exp}/*/" in line and "is this a tinygpt run folder" not in line


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
