"""The files of a run folder, each named once here, and :class:`RunFolder`, one run folder's files as a value.

Every reader and writer of a run folder uses these names; code that reads a run back takes a
:class:`RunFolder` rather than joining names to a path itself::

    run = RunFolder(Path("runs/default"))
    if run.finished:
        print(run.summary["best_val_loss"], run.config["model"]["n_embd"])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from core.files import read_json

CONFIG = "config.json"  # a run's resolved config, written before its first step
SUMMARY = "summary.json"  # a run's final numbers, written last: its presence means the run finished
METRICS = "metrics.jsonl"  # one JSON row per log interval, eval and resume, appended as the run goes
ENV = "env.json"  # the environment a run started in: git commit, library versions, hardware, command line
LAST_CKPT = "ckpt_last.pt"  # everything a resume needs, optimizer included
BEST_CKPT = "ckpt_best.pt"  # the weights at the best periodic val loss
DIVERGED = "diverged.json"  # a run that stopped on a non-finite loss or gradient; gone once it trains past it
IMPORTED = "imported.json"  # in a run folder `hf.py import` made from weights (no training): their source
# Beside run folders, not in one: the record of the compare.py experiment whose runs they are.
EXPERIMENT_FILE = "experiment.json"


@dataclass(frozen=True)
class RunFolder:
    """One run folder: its files' paths, whether it finished or can resume, and its config and summary, each
    read once (on first use) as the JSON object on disk.  Reading a missing or broken file raises
    :class:`core.errors.UserError` naming it (:func:`core.files.read_json`)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config_path(self) -> Path:
        """The run's ``config.json``."""
        return self.path / CONFIG

    @property
    def summary_path(self) -> Path:
        """The run's ``summary.json``."""
        return self.path / SUMMARY

    @property
    def metrics_path(self) -> Path:
        """The run's ``metrics.jsonl``."""
        return self.path / METRICS

    @property
    def env_path(self) -> Path:
        """The run's ``env.json``."""
        return self.path / ENV

    @property
    def last_ckpt(self) -> Path:
        """The run's ``ckpt_last.pt``."""
        return self.path / LAST_CKPT

    @property
    def best_ckpt(self) -> Path:
        """The run's ``ckpt_best.pt``."""
        return self.path / BEST_CKPT

    @property
    def finished(self) -> bool:
        """Whether the run finished: its summary, written after the last step, exists."""
        return self.summary_path.is_file()

    @property
    def diverged(self) -> bool:
        """Whether the run stopped on a non-finite loss and has not trained past that step (resumed, it
        would stop there again)."""
        return (self.path / DIVERGED).is_file()

    @property
    def resumable(self) -> bool:
        """Whether the run stopped before its end and can go on from its last checkpoint."""
        return not self.finished and self.last_ckpt.is_file()

    @functools.cached_property
    def config(self) -> dict:
        """The run's resolved config as written (``{"model": {...}, "data": {...}, ...}``)."""
        return read_json(self.config_path, "run config")

    @functools.cached_property
    def summary(self) -> dict:
        """The run's final numbers (final and best val loss, tokens/s, elapsed_s, ...)."""
        return read_json(self.summary_path, "run summary")


def runs_in(folder: Path, finished_only: bool = False) -> list[RunFolder]:
    """The run folders directly inside ``folder``, sorted by name: every run that started (it holds its
    config), or with ``finished_only`` every run that finished (it holds its summary).  [] for no folder.
    Hidden folders are none (an interrupted adoption's ``.adopting-<name>``, a branch being built)."""
    paths = sorted(Path(folder).glob(f"*/{SUMMARY if finished_only else CONFIG}"))
    return [RunFolder(p.parent) for p in paths if not p.parent.name.startswith(".")]
