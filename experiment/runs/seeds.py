"""Whether the runs of each seed trained alike, apart from their arms: one code, and for a timed outcome one machine.

A verdict pairs each arm with the reference seed by seed, so a pair is fair only when the two runs
differ in their arm alone.  Two things a run's config does not record can still differ inside a pair:

- the code (``env.json``'s commit and uncommitted changes), when a run was adopted from an older
  commit, or an experiment was continued after a commit that changed what ``train.py`` runs
  (:data:`experiment.arms.TRAINING_CODE`); arms from code of their own (``--arm name@commit``)
  differ in code by design and are left out;
- for a timed outcome (``tokens-per-s``, ``time-to:``), the machine and how it ran: the CPU or GPU,
  torch's thread count and version, and the settings that change speed but not the maths
  (``train.compile``, ``train.head_loss``, ``train.device``, ``train.pad_vocab_multiple``) unless an
  arm sets them.

Across seeds either may change (each pair stays fair).  :func:`seeds_apart` says, in words, where a
pair does not; a report then labels its verdicts not calibrated (:func:`experiment.ab.readout.not_calibrated`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError
from core.files import read_json
from experiment.arms import same_training_code
from experiment.runs.folders import Experiment, Run
from training.run_files import RunFolder

# Settings that change a run's speed but not its numbers (bookkeeping to the maths, not to a timed outcome).
SPEED_SETTINGS = ("train.compile", "train.head_loss", "train.device", "train.pad_vocab_multiple")


def seeds_apart(exp: Experiment) -> list[str]:
    """Why some seed's runs differ in more than their arm, in words (empty: none does)."""
    out = []
    code = _apart(exp, lambda r: _code(r.path), _code_differs, [a for a in exp.arms if not exp.arm_set.code(a)])
    if code:
        out.append(
            _reason(code, "trained from different code", lambda key, ids: f"at {_code_words(key)}")
            + "each such pair compares the code as well as the arms; train every arm of a seed from one commit "
            "(an arm from other code: --arm name@commit)"
        )
    timed = exp.outcome == "tokens-per-s" or exp.outcome.startswith("time-to:")
    machine = _apart(exp, _machine(exp), lambda keys: len(set(keys)) > 1, exp.arms) if timed else None
    if machine:
        out.append(
            _reason(machine, "timed on different machines or settings", lambda k, ids: f"with {_machine_words(k, ids)}")
            + "a timed outcome then compares those too; time every arm of a seed on one machine with one setting"
        )
    return out


def _reason(apart: tuple[list[int], dict[tuple, str]], what: str, words: Callable[[tuple, list], str]) -> str:
    """``"runs of 2 seeds <what> (seed 1337: tied <words>, untied <words>): "``, from :func:`_apart`'s answer."""
    seeds, ids = apart
    first = ", ".join(f"{arm} {words(key, list(ids))}" for key, arm in ids.items())
    return f"runs of {_seeds(seeds)} {what} (seed {seeds[0]}: {first}): "


def _apart(
    exp: Experiment, identity: Callable[[Run], tuple], differ: Callable[[list], bool], arms: list[str]
) -> tuple[list[int], dict[tuple, str]] | None:
    """``(seeds whose runs of arms ``arms`` differ by ``differ`` over their ``identity``, {identity: its first
    arm} on the first of them)``, or None when no seed's do."""
    by_seed: dict[int, dict[tuple, str]] = {}
    for arm in arms:
        for r in [*exp.runs[arm], *(r for runs in exp.swept.get(arm, {}).values() for r in runs)]:
            by_seed.setdefault(r.seed, {}).setdefault(identity(r), arm)
    seeds = sorted(seed for seed, ids in by_seed.items() if differ(list(ids)))
    if not seeds:
        return None
    return seeds, by_seed[seeds[0]]


def _env(run: Path) -> dict:
    """A run's ``env.json`` ({} where missing or unreadable)."""
    path = RunFolder(run).env_path
    try:
        record = read_json(path, "run environment") if path.is_file() else {}
    except UserError:
        return {}
    return record if isinstance(record, dict) else {}


def _code(run: Path) -> tuple:
    """``(git commit, uncommitted changes)`` a run trained from (None where not recorded)."""
    env = _env(run)
    return env.get("git_commit"), env.get("git_dirty")


def _code_differs(codes: list[tuple]) -> bool:
    """Whether two ``(commit, uncommitted changes)`` differ in what train.py runs: changes on one side only, or
    commits whose training code differs or cannot be compared (an unrecorded commit or flag matches any)."""
    for (c1, d1), (c2, d2) in itertools.combinations(codes, 2):
        if d1 is not None and d2 is not None and d1 != d2:
            return True
        if c1 and c2 and c1 != c2 and same_training_code(c1, c2) is not True:
            return True
    return False


def _machine(exp: Experiment) -> Callable[[Run], tuple]:
    """A run's machine and speed settings, as ``((name, value), ...)``; an arm's own settings left out."""
    own = {k for arm in exp.arms for k in exp.arm_set.settings.get(arm, {})}

    def identity(r: Run) -> tuple:
        env = _env(r.path)
        hardware = [
            ("device", env.get("device_name")),
            ("cpu", env.get("cpu_model")),
            ("threads", env.get("torch_threads")),
        ]
        hardware.append(("torch", (env.get("versions") or {}).get("torch")))
        settings = [(k, r.config[k.split(".")[0]].get(k.split(".")[1])) for k in SPEED_SETTINGS if k not in own]
        return tuple(hardware + settings)

    return identity


def _machine_words(key: tuple, keys: list[tuple]) -> str:
    """A machine ``((name, value), ...)`` in words, by the names whose values differ among ``keys``."""
    differ = {name for i, (name, _) in enumerate(key) if len({k[i][1] for k in keys}) > 1}
    return ", ".join(f"{name} {value}" for name, value in key if name in differ)


def _code_words(key: tuple) -> str:
    """A code ``(commit, uncommitted changes)`` in words."""
    commit, dirty = key
    return (commit[:7] if commit else "an unrecorded commit") + (" with uncommitted changes" if dirty else "")


def _seeds(seeds: list[int]) -> str:
    """``"1 seed"``, ``"3 seeds"``."""
    return f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
