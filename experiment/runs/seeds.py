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
from experiment.style import count
from training.run_files import RunFolder

# Settings that change a run's speed but not its numbers (bookkeeping to the maths, not to a timed outcome).
SPEED_SETTINGS = ("train.compile", "train.head_loss", "train.device", "train.pad_vocab_multiple")


def seeds_apart(exp: Experiment) -> list[str]:
    """Why some seed's runs differ in more than their arm, in words (empty: none does)."""
    out = []
    coded = [(r.seed, arm, r) for arm in exp.arms if not exp.arm_set.code(arm) for r in _runs_of(exp, arm)]
    code = _apart(coded, lambda r: run_codes(r.path), codes_differ)
    if code:
        out.append(_reason(code, "trained from different code", lambda key, ids: f"at {_code_words(key)}") + CODE_FIX)
    timed = exp.outcome == "tokens-per-s" or exp.outcome.startswith("time-to:")
    runs = [(r.seed, arm, r) for arm in exp.arms for r in _runs_of(exp, arm)]
    machine = _apart(runs, _machine(exp), lambda keys: len(set(keys)) > 1) if timed else None
    if machine:
        out.append(
            _reason(machine, "timed on different machines or settings", lambda k, ids: f"with {_machine_words(k, ids)}")
            + "a timed outcome then compares those too; time every arm of a seed on one machine with one setting"
        )
    return out


def branches_apart(branches: list[tuple[str, int, str, Path]]) -> list[str]:
    """:func:`seeds_apart`'s code check for a budget experiment's ``(budget label, seed, arm, branch folder)``:
    a budget's branches of one seed (every arm, every rate) trained from different code, in words."""
    code = _apart([((seed, lab), arm, path) for lab, seed, arm, path in branches], run_codes, codes_differ)
    if not code:
        return []
    return [_reason(code, "trained from different code", lambda key, ids: f"at {_code_words(key)}") + CODE_FIX]


CODE_FIX = (
    "each such pair compares the code as well as the arms; train every arm of a seed from one commit (an arm "
    "from other code: --arm name@commit)"
)


def _runs_of(exp: Experiment, arm: str) -> list[Run]:
    """Every run of ``arm`` the verdict reads: its reported runs, and with every rate on every seed each rate's."""
    return [*exp.runs[arm], *(r for runs in exp.swept.get(arm, {}).values() for r in runs)]


def _reason(apart: tuple[list, dict[tuple, str]], what: str, words: Callable[[tuple, list], str]) -> str:
    """``"runs of 2 seeds <what> (seed 1337: tied <words>, untied <words>): "``, from :func:`_apart`'s answer
    (a group ``(seed, budget)`` reads ``seed 1337 at 4M``)."""
    groups, ids = apart
    first = ", ".join(f"{arm} {words(key, list(ids))}" for key, arm in ids.items())
    where = f"seed {groups[0][0]} at {groups[0][1]}" if isinstance(groups[0], tuple) else f"seed {groups[0]}"
    return f"runs of {count(len(groups), 'seed')} {what} ({where}: {first}): "


def _apart(
    members: list[tuple], identity: Callable[[object], list[tuple]], differ: Callable[[list], bool]
) -> tuple[list, dict[tuple, str]] | None:
    """``(groups whose members differ by ``differ`` over their ``identity`` (one per segment: a resumed run may
    have gone on from other code or on another machine), {identity: its first arm} in the first of them)``, or
    None when no group's do.  ``members``: ``(group (a seed), arm, run)``."""
    by_group: dict = {}
    for group, arm, run in members:
        for key in identity(run):
            by_group.setdefault(group, {}).setdefault(key, arm)
    groups = sorted(g for g, ids in by_group.items() if differ(list(ids)))
    if not groups:
        return None
    return groups, by_group[groups[0]]


def segment_envs(run: Path) -> list[dict]:
    """A run's environment records: ``env.json`` (its first segment) and each resume's
    ``env-resume-step<N>.json`` (training.report); an unreadable one counts as {}."""
    paths = [RunFolder(run).env_path, *sorted(Path(run).glob("env-resume-step*.json"))]
    out = []
    for path in paths:
        try:
            record = read_json(path, "run environment") if path.is_file() else {}
        except UserError:
            record = {}
        out.append(record if isinstance(record, dict) else {})
    return out


def run_codes(run: Path) -> list[tuple]:
    """``(git commit, ("diff", digest) or ("dirty", flag))`` of each segment of a run: the digest of its
    uncommitted changes to the training code (None: none), or for runs recorded before that digest, whether
    the checkout had any uncommitted changes (None: not recorded)."""
    return [
        (
            env.get("git_commit"),
            ("diff", env["training_code_diff"]) if "training_code_diff" in env else ("dirty", env.get("git_dirty")),
        )
        for env in segment_envs(run)
    ]


def codes_differ(codes: list[tuple]) -> bool:
    """Whether two codes (:func:`run_codes`) differ in what train.py runs: other uncommitted changes (or changes
    on one side only), or commits whose training code git says differs.  What cannot be told (an unrecorded
    commit or flag, a commit git does not have here) is not counted as a difference."""
    for (c1, (k1, v1)), (c2, (k2, v2)) in itertools.combinations(codes, 2):
        if (k1 == k2 == "diff" and v1 != v2) or (k1 != k2 and None not in (v1, v2) and bool(v1) != bool(v2)):
            return True
        if k1 == k2 == "dirty" and None not in (v1, v2) and v1 != v2:
            return True
        if c1 and c2 and c1 != c2 and same_training_code(c1, c2) is False:
            return True
    return False


def _machine(exp: Experiment) -> Callable[[Run], tuple]:
    """A run's machine and speed settings, as ``((name, value), ...)``; an arm's own settings left out."""
    own = {k for arm in exp.arms for k in exp.arm_set.settings.get(arm, {})}

    def identity(r: Run) -> list[tuple]:
        settings = [(k, r.config[k.split(".")[0]].get(k.split(".")[1])) for k in SPEED_SETTINGS if k not in own]
        return [(*env_machine(env), *settings) for env in segment_envs(r.path)]

    return identity


def env_machine(env: dict) -> tuple:
    """The machine a run segment ran on, from its environment record: ``((name, value), ...)`` of the CPU or
    GPU, torch's thread count and torch's version."""
    return (
        ("device", env.get("device_name")),
        ("cpu", env.get("cpu_model")),
        ("threads", env.get("torch_threads")),
        ("torch", (env.get("versions") or {}).get("torch")),
    )


def _machine_words(key: tuple, keys: list[tuple]) -> str:
    """A machine ``((name, value), ...)`` in words, by the names whose values differ among ``keys``."""
    differ = {name for i, (name, _) in enumerate(key) if len({k[i][1] for k in keys}) > 1}
    return ", ".join(f"{name} {value}" for name, value in key if name in differ)


def _code_words(key: tuple) -> str:
    """A code (:func:`run_codes`) in words: ``"abc1234"``, ``"abc1234 with uncommitted changes (digest 9f2e…)"``."""
    commit, (kind, value) = key
    changes = "" if not value else " with uncommitted changes" + (f" (digest {value[:7]})" if kind == "diff" else "")
    return (commit[:7] if commit else "an unrecorded commit") + changes
