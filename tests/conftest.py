"""pytest setup: fix Hypothesis's profile; make a Ctrl-C stop the whole run (``ctrl_c_stops_the_suite``);
and the small prepared corpora the data tests share (``corpus_file``, ``token_data``, ``sharded``)
and the training tests share (``corpus``).

The repository root is on ``sys.path`` (``pythonpath`` in pyproject.toml), so tests import the
packages as the commands do. Run all tests from the repo root with ``python -m pytest -q``; the
quick loop, without the end-to-end tests marked ``slow``, is ``python -m pytest -q -m "not slow"``.
They run on a pytest-xdist worker per core (pyproject.toml's addopts), one thread each.
"""

import os
import signal
import tempfile
from pathlib import Path

import pytest
import torch
from data_helpers import STORIES, lines_text, write_jsonl
from helpers import write_corpus
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from data.loader import TokenData
from data.prepare import prepare_data
from experiment.runs import launch
from core.signals import StopSignals

# Hypothesis also caches Unicode tables in its home folder (./.hypothesis by default): keep the
# repository clean by pointing it at the system temp folder.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "tinygpt-hypothesis")

# Property tests: the same examples on every machine (CI never flakes on a new random draw),
# no .hypothesis/ example database written into the repository, no per-example time limit
# (shared CI machines are noisy).
settings.register_profile(
    "tinygpt",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("tinygpt")

# pytest-xdist runs a worker per core: one thread each, and for the train.py processes they start
# (which inherit the variable), so the workers share the cores instead of each spinning threads on all.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


class ForwardedCtrlC:
    """``experiment.runs.launch.run_forwarding_signals`` that remembers a SIGINT it passed on to its child."""

    def __init__(self, real) -> None:
        self.real, self.received = real, False

    def __call__(self, cmd: list[str], watch=None) -> tuple[int, int | None]:
        status, signum = self.real(cmd, watch)
        self.received = self.received or signum == signal.SIGINT
        return status, signum

    def raise_if_received(self) -> None:
        """Raise KeyboardInterrupt (once) if a Ctrl-C went to a child since the last call."""
        if self.received:
            self.received = False
            raise KeyboardInterrupt("Ctrl-C reached a child run of compare.py: the test run stops")


@pytest.fixture(autouse=True)
def ctrl_c_stops_the_suite(monkeypatch):
    """Every test leaves SIGINT / SIGTERM / SIGHUP's handlers as it found them, and a Ctrl-C stops the run.

    compare.py passes a Ctrl-C on to its child train.py and then exits 130, so a test calling its
    main in-process would turn the Ctrl-C meant for pytest into one failed test while the rest of
    the suite ran on.  Such a Ctrl-C is raised again as KeyboardInterrupt after the test, which
    ends the run the way pytest ends it on Ctrl-C.

    A suite started in the background by a script (``pytest &``, nohup) inherits SIGINT ignored,
    and a run keeps an ignored SIGINT ignored (as it should for a user): the tests that send
    themselves a Ctrl-C would then see it do nothing.  So each test starts with Python's default
    SIGINT handler, whatever the suite inherited, and the inherited one comes back after it.
    """
    before = {sig: signal.getsignal(sig) for sig in StopSignals.SIGNALS}
    if before[signal.SIGINT] is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    guard = ForwardedCtrlC(launch.run_forwarding_signals)
    monkeypatch.setattr(launch, "run_forwarding_signals", guard)
    yield guard
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    guard.raise_if_received()


@pytest.fixture
def corpus_file(tmp_path):
    """A 200-line UTF-8 text file (~3 KB)."""
    p = tmp_path / "corpus.txt"
    p.write_text(lines_text("alpha beta", 200), encoding="utf-8")
    return p


@pytest.fixture
def token_data(tmp_path, corpus_file):
    """TokenData over the char-prepared corpus_file (~5.5 K train tokens, ~600 val)."""
    return TokenData(prepare_data(str(corpus_file), "char", tmp_path / "cache"))


@pytest.fixture
def sharded(tmp_path):
    """TokenData over a char-tokenized jsonl corpus in several train and val shards."""
    src = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    return TokenData(prepare_data(str(src), "char", tmp_path / "cache", shard_tokens=250, num_proc=1))


@pytest.fixture
def corpus(tmp_path):
    """A small local text corpus (~30 KB) that the char tokenizer trains on in seconds."""
    return write_corpus(tmp_path)
