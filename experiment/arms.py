"""The arms of an experiment: each one a handful of ``train.py`` settings.

Every arm is a plain training config too: ``python train.py`` with the arm's
``--section.key=value`` flags (:meth:`ArmSet.argv`) trains it alone.  A run folder's arm is read
back from its ``config.json`` (:meth:`ArmSet.of`), so a report needs nothing but the folders.

The tying arms are presets (:data:`ARMS`, :data:`PRESETS`); any other arm is defined the same
way, from settings (``compare.py --arm dropout:model.dropout=0.1``, or a TOML file of tables,
:func:`define_arms`), or read off run folders that differ in some settings
(:func:`arms_from_differences`).  Keys that would make a comparison meaningless -- the seed,
the data and its validation split, the eval windows -- are refused (:data:`REFUSED`).

Sources for the presets: GPT-2 / nanoGPT tie the head to the embedding; Press & Wolf 2017
("Using the Output Embedding to Improve Language Models") argue for it; nanochat and
modded-nanogpt untie, start the head at zero and train the embedding and the head at very
different learning rates.  ``untied-split`` takes nanochat's earlier ratios (embedding 0.2,
unembedding 0.004 against a 0.02 Muon matrix rate: 10x and 0.2x) to this project's AdamW; nanochat
today uses 0.3 / 0.008 scaled by (d/768)^-0.5, initialises its head N(0, 0.001) and normalises the
embedding's output, which this arm does not.  modded-nanogpt's record of 2024-11-03 unties at 2/3
of the run; ``tie-untie-cooldown`` unties where a warmup-stable-decay run starts its cooldown
(``train.untie_at_cooldown``), so on the budget axis it branches from the tied arm's trunk.

An arm may also come from code: ``compare.py --arm before@HEAD~1`` trains that arm with the project
as it was at a revision (:func:`resolve`, :func:`worktree`).  "Is my code change real?" is then one
command: the checkout's arms train with its own ``train.py``, an arm ``NAME@REV`` with the
``train.py`` of a git worktree of ``REV`` (``git worktree add --detach``, kept in
``.worktrees/<commit>`` at the repository's root and reused).  Every run records the commit it
trained from (``env.json``'s ``git_commit``), which is how a report tells such arms apart: their
configs may be identical.  The checkout must be clean (no uncommitted changes outside
``results/``), or its runs would record a commit that is not the code they ran.
"""

from __future__ import annotations

import difflib
import math
import re
import shutil
import functools
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from core.files import REPO_ROOT, file_lock
from core.hardware import TRAINING_CODE
from core.settings import field_types, load_toml, overrides_to_argv, parse_cli_value
from training.config import BOOKKEEPING, DERIVED, RESOLVED_AT_START, SECTIONS, RunConfig

ARMS: dict[str, dict[str, object]] = {
    "tied": {"model.tie_embeddings": True},
    "untied": {"model.tie_embeddings": False},
    "tied-bias": {"model.tie_embeddings": True, "model.lm_head_bias": True},
    "untied-split": {
        "model.tie_embeddings": False,
        "model.zero_init_head": True,
        "train.embedding_lr_scale": 10.0,
        "train.head_lr_scale": 0.2,
    },
    "tie-then-untie": {"model.tie_embeddings": True, "train.untie_at": 2 / 3},
    "tie-untie-cooldown": {"model.tie_embeddings": True, "train.untie_at_cooldown": True},
}
DESCRIPTIONS = {
    "tied": "one matrix for the embedding and lm_head (W = E), GPT-2's choice",
    "untied": "two matrices, trained alike",
    "tied-bias": "tied, plus a learned lm_head bias (a free unigram offset, vocab_size parameters)",
    "untied-split": "untied, lm_head initialised to zero, embedding at 10x and lm_head at 0.2x the learning rate "
    "(nanochat's ratios)",
    "tie-then-untie": "tied for the first 2/3 of the steps, then lm_head becomes its own copy of the matrix "
    "with a copy of its AdamW state (modded-nanogpt's schedule)",
    "tie-untie-cooldown": "tied until the WSD cooldown starts, then lm_head becomes its own copy of the matrix with a "
    "copy of its AdamW state (a cooldown branch of the tied trunk)",
}
DEFAULT_ARMS = ("tied", "untied")
# Every key some preset sets: a run's values of these name its preset arm.
ARM_KEYS = sorted({key for settings in ARMS.values() for key in settings})
# Keys an arm may not set: every arm of a comparison must be scored on the same tokens with the same seeds.
REFUSED = {
    "train.seed": "compare.py pairs the arms by seed (--seeds)",
    "train.final_eval_tokens": "it sets the tokens every arm is scored on",
    "train.eval_iters": "it sets the eval windows of the curves every arm is read on",
    "data.source": "every arm must be scored on the same validation split",
    "data.subset": "every arm must be scored on the same validation split",
    "data.split": "every arm must be scored on the same validation split",
    "data.val_split": "every arm must be scored on the same validation split",
    "data.val_fraction": "every arm must be scored on the same validation split",
    "data.text_field": "every arm must be scored on the same validation split",
    "data.tokenizer": "losses over other tokens are not comparable; compare tokenizers on a compare.py grid axis "
    "data.tokenizer=A,B (read in bits per byte)",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# The pseudo-setting of an arm from code (--arm NAME@REV): the commit its train.py comes from, matched
# against a run's env.json git_commit (the arms from code, below).
CODE = "code"


def _float_same(a, b) -> bool:
    """Equal, floats within 1e-3 relative (0.6667 on a command line is tie-then-untie's 2/3)."""
    floats = isinstance(a, float) and isinstance(b, float)
    return math.isclose(a, b, rel_tol=1e-3) if floats else a == b


@dataclass(frozen=True)
class ArmSet:
    """Named arms, each a dict of flat settings (``{"model.dropout": 0.1}``), in the experiment's order."""

    settings: dict[str, dict[str, object]]
    descriptions: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The arms, in order."""
        return list(self.settings)

    @property
    def keys(self) -> list[str]:
        """Every key some arm sets: a run's values of these name its arm."""
        return sorted({k for s in self.settings.values() for k in s})

    def describe(self, arm: str) -> str:
        """A line saying what ``arm`` is: its description, else its settings (and the commit of its code)."""
        s = self.settings[arm]
        own = ", ".join(f"{k}={v!r}" for k, v in s.items() if k != CODE) or "the config as given"
        own += f", trained with the code of commit {s[CODE][:12]}" if CODE in s else ""
        return self.descriptions.get(arm, own)

    def code(self, arm: str) -> str | None:
        """The commit ``arm`` trains from (an arm from code), or None: the checkout's own."""
        return self.settings[arm].get(CODE)

    def argv(self, arm: str) -> list[str]:
        """The ``train.py`` flags of ``arm``, e.g. ``["--model.tie_embeddings=false"]``."""
        nested: dict = {}
        for key, value in self.settings[arm].items():
            if key == CODE:
                continue
            section, name = key.split(".")
            nested.setdefault(section, {})[name] = value
        return overrides_to_argv(nested)

    def with_shared(self, shared: dict[str, object]) -> ArmSet:
        """Each arm with ``shared``'s value of every key it does not set itself (the experiment's config
        sets them for every arm), its own settings first."""
        return ArmSet(
            {a: {**s, **{k: v for k, v in shared.items() if k not in s}} for a, s in self.settings.items()},
            self.descriptions,
        )

    def select(self, names: list[str]) -> ArmSet:
        """These arms alone, in this order (names checked by the caller)."""
        return ArmSet({n: self.settings[n] for n in names}, {n: d for n, d in self.descriptions.items() if n in names})

    def of(self, flat_config: dict, where: str = "run") -> str:
        """The arm whose settings ``flat_config`` (``{"model.tie_embeddings": ...}``) has.

        Keys of :attr:`keys` an arm does not set must be at their defaults (a missing key, from
        a run older than the key, counts as its default), except a key whose default means "derive
        it" (:data:`~training.config.RESOLVED_AT_START`, e.g. ``train.lr_decay_iters``): ``config.json``
        holds the value derived, so an arm that leaves it unset takes any value, and an arm that
        sets it to the run's value is preferred.  Among arms whose settings match, an arm from code
        claims the runs of its commit (``flat_config["code"]``, from ``env.json``), the others the
        rest.  Raises :class:`UserError` when no arm matches, naming the settings.
        """
        defaults = _defaults()
        keys = [k for k in self.keys if k != CODE]
        have = {k: flat_config.get(k, defaults[k]) for k in keys}

        def matches(s: dict, k: str) -> bool:
            return (k not in s and k in RESOLVED_AT_START) or _float_same(have[k], s.get(k, defaults[k]))

        fits = [a for a, s in self.settings.items() if all(matches(s, k) for k in keys)]
        # An arm that names a derived key's value outranks one that merely leaves it free.
        fits.sort(key=lambda a: sum(k not in self.settings[a] for k in keys if k in RESOLVED_AT_START))
        commit = flat_config.get(CODE)
        ranked = [a for a in fits if commit and self.code(a) == commit] + [a for a in fits if self.code(a) is None]
        if ranked:
            return ranked[0]
        detail = ", ".join(f"{k}={have[k]!r}" for k in keys if have[k] != defaults[k]) or "the defaults"
        raise UserError(
            f"{where} has {detail}, which is none of the arms ({', '.join(self.settings)}): "
            "compare runs trained by compare.py or with one arm's settings"
        )


PRESETS = ArmSet(ARMS, DESCRIPTIONS)


def _defaults() -> dict:
    """``{"section.key": default}`` of every config key."""
    return {f"{s}.{k}": v for s, values in RunConfig().to_dict().items() for k, v in values.items()}


def same_settings(a: dict, b: dict) -> bool:
    """Whether two arms' settings train the same runs: every key either sets, a missing one at its default
    (``base:`` is ``tied``), and the commit of an arm from code (``code``) alike."""
    defaults = {**_defaults(), CODE: None}
    return all(_float_same(a.get(k, defaults.get(k)), b.get(k, defaults.get(k))) for k in set(a) | set(b))


def arm_argv(arm: str) -> list[str]:
    """The ``train.py`` flags of the preset ``arm``."""
    return PRESETS.argv(arm)


def arm_of(flat_config: dict, where: str = "run") -> str:
    """The preset arm ``flat_config`` has (:meth:`ArmSet.of` on :data:`PRESETS`)."""
    return PRESETS.of(flat_config, where)


def check_setting(key: str, value, where: str) -> object:
    """``value`` (a string from a command line, or a TOML value) typed for the config key ``key``.

    Raises :class:`UserError` for an unknown key (naming the nearest valid one), a key an arm
    may not set (:data:`REFUSED`, bookkeeping, derived keys) or a value of the wrong type.
    """
    section, _, name = key.partition(".")
    types = field_types(SECTIONS[section]) if section in SECTIONS else {}
    if name not in types:
        valid = [f"{s}.{k}" for s, cls in SECTIONS.items() for k in field_types(cls)]
        near = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {near[0]}?" if near else "keys are section.key, e.g. model.dropout"
        raise UserError(f"{where}: unknown key {key!r}: {hint}")
    why = REFUSED.get(key) or DERIVED.get(key)
    if why is None and key in BOOKKEEPING:
        why = "it is bookkeeping: it changes neither what a run trains nor what it measures"
    if why:
        raise UserError(f"{where}: an arm cannot set {key} ({why})")
    typ = types[name]
    if isinstance(value, str) and typ is not str:
        try:
            value = parse_cli_value(value, typ)
        except ValueError:
            raise UserError(f"{where}: {key}={value!r} is not a {typ.__name__}") from None
    if isinstance(value, int) and not isinstance(value, bool) and typ is float:
        value = float(value)
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise UserError(f"{where}: {key} must be a {typ.__name__}, got {value!r}")
    return value


def _check_name(name: str, where: str) -> str:
    """An arm name usable in a folder name; UserError otherwise."""
    if not _NAME.fullmatch(name):
        raise UserError(f"{where}: arm name {name!r} must be letters, digits, '.', '_' or '-' (it names run folders)")
    return name


def parse_arm(text: str) -> tuple[str, dict[str, object]]:
    """``"dropout:model.dropout=0.1,train.weight_decay=0"`` -> ``("dropout", {"model.dropout": 0.1, ...})``.

    ``"base:"`` is an arm with no settings of its own (the config as given); ``"before@HEAD~1"`` an
    arm trained with the code of that revision (``{"code": <commit>}``, :func:`resolve`),
    which may take settings too (``"before@HEAD~1:model.dropout=0.1"``).  Raises
    :class:`UserError` for another shape, an unknown or refused key, or a badly typed value.
    """
    head, sep, rest = text.partition(":")
    name, at, rev = head.partition("@")
    where = f"--arm {text!r}"
    if not sep and not at:
        raise UserError(
            f"{where} is not NAME:KEY=VALUE[,KEY=VALUE...] or NAME@REVISION: e.g. --arm dropout:model.dropout=0.1"
        )
    settings: dict[str, object] = {CODE: resolve(rev.strip())} if at else {}
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        if not eq:
            raise UserError(f"{where}: {part!r} is not KEY=VALUE (list values go in an --arms-file)")
        settings[key.strip()] = check_setting(key.strip(), value.strip(), where)
    return _check_name(name.strip(), where), settings


def load_arms_file(path: Path) -> dict[str, dict[str, object]]:
    """Arms from a TOML file, one table per arm (``[dropout]`` then ``"model.dropout" = 0.1``, or nested
    ``[dropout.model]`` tables); in file order.  Raises :class:`UserError` as :func:`parse_arm` does."""
    out = {}
    for name, table in load_toml(path).items():
        where = f"{path} [{name}]"
        if not isinstance(table, dict):
            raise UserError(f'{where} must be a table of settings, e.g. [{name}] then "model.dropout" = 0.1')
        flat = {}
        for key, value in table.items():
            for k, v in value.items() if isinstance(value, dict) else [(None, value)]:
                full = key if k is None else f"{key}.{k}"
                flat[full] = check_setting(full, v, where)
        out[_check_name(name, where)] = flat
    return out


def define_arms(names: list[str] | None, defined: dict[str, dict[str, object]]) -> ArmSet:
    """The experiment's arms: ``names`` (``--arms``) from the presets and ``defined`` (``--arm``,
    ``--arms-file``); without ``names``, every defined arm in order, or the default presets.

    Raises :class:`UserError` for an unknown or repeated name, a defined arm named like a preset,
    two arms with the same settings, or fewer than two arms.
    """
    clash = sorted(set(defined) & set(ARMS))
    if clash:
        raise UserError(f"arm {clash[0]} is a preset (its settings are fixed): give your arm another name")
    pool = ArmSet({**ARMS, **defined}, DESCRIPTIONS)
    chosen = names if names is not None else (list(defined) or list(DEFAULT_ARMS))
    unknown = [n for n in chosen if n not in pool.settings]
    if unknown:
        raise UserError(
            f"unknown arm {unknown[0]}: choose from {', '.join(ARMS)}, or define it, e.g. "
            f"--arm {unknown[0]}:model.dropout=0.1"
        )
    if len(set(chosen)) != len(chosen):
        raise UserError(f"--arms names an arm twice ({','.join(chosen)}): give each once")
    arms = pool.select(chosen)
    if any(arms.code(n) for n in chosen):
        check_clean()
    if len(chosen) < 2:
        raise UserError(f"{','.join(chosen)} is one arm: a comparison needs two, e.g. --arms tied,untied")
    seen: dict[tuple, str] = {}
    defaults = {**_defaults(), CODE: None}
    for n in chosen:  # compared with the defaults filled in: "base:" is "tied"
        full = tuple(sorted((k, repr(arms.settings[n].get(k, defaults[k]))) for k in arms.keys))
        if full in seen:
            raise UserError(f"arms {seen[full]} and {n} have the same settings: they would train the same runs")
        seen[full] = n
    return arms


def with_recorded(recorded: dict | None) -> ArmSet:
    """The arms an experiment folder recorded (``experiment.json``'s ``arms``), then the presets:
    a run that fits both (``base:`` and ``tied``) is named by the experiment's own arm."""
    return ArmSet({**(recorded or {}), **{k: v for k, v in ARMS.items() if k not in (recorded or {})}}, DESCRIPTIONS)


def parse_arms(text: str) -> list[str]:
    """``"tied,untied-split"`` -> ``["tied", "untied-split"]`` (names only; :func:`define_arms` checks them)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError(f"--arms {text!r} names no arm: e.g. --arms tied,untied")
    return names


def arms_from_differences(flat_configs: list[dict]) -> tuple[ArmSet, list[str]]:
    """Arms read off runs that differ in some settings: ``(arms, each run's arm)``, in the runs' order.

    The keys that differ across the runs, bar bookkeeping and the seed (and ``train.min_lr`` when
    the learning rate differs too: it follows the rate), define the arms; each arm is named by
    its values, e.g. ``model.dropout=0.1``.  Raises :class:`UserError` when nothing differs.
    """
    skip = BOOKKEEPING | {"train.seed"}
    keys = sorted(
        k for k in set().union(*flat_configs) if k not in skip and len({repr(c.get(k)) for c in flat_configs}) > 1
    )
    if "train.learning_rate" in keys and "train.min_lr" in keys:
        keys.remove("train.min_lr")
    if not keys:
        raise UserError("the runs differ in nothing but their seeds: a comparison needs two arms")
    settings: dict[str, dict[str, object]] = {}
    names = []
    for c in flat_configs:
        values = {k: c.get(k) for k in keys}
        name = ",".join(f"{k}={v}" for k, v in values.items())
        settings.setdefault(name, values)
        names.append(name)
    return ArmSet(settings), names


# ----------------------------------------------------------------------------- arms from code

WORKTREES = REPO_ROOT / ".worktrees"


def _git(*args: str) -> subprocess.CompletedProcess:
    """``git <args>`` in the repository; UserError when git is missing or this is no repository."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"arms from code need git, which failed ({type(e).__name__}): install git") from None
    return done


def resolve(rev: str) -> str:
    """The full commit hash of ``rev`` (a branch, tag, hash or ``HEAD~1``).

    Raises :class:`UserError` for a revision git does not know, or the checkout's own commit.
    """
    done = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise UserError(
            f"unknown revision {rev!r}: give a commit, branch or tag of this repository (git log --oneline)"
        )
    sha = done.stdout.strip()
    if sha == head():
        raise UserError(f"{rev} is the checkout's own commit: the checkout's arms train it already; compare another")
    return sha


def head() -> str:
    """The checkout's own commit (the code its arms train with)."""
    return _git("rev-parse", "HEAD").stdout.strip()


def diff_stat(before: str, after: str) -> str | None:
    """``git diff --shortstat before after`` in words, e.g. ``"2 files changed, 9 insertions(+), 3 deletions(-)"``;
    None when git cannot tell (no repository, a commit it does not have)."""
    done = _git("diff", "--shortstat", before, after)
    return done.stdout.strip() or None if done.returncode == 0 else None


def changed_files(before: str, after: str) -> list[str] | None:
    """The files ``git diff --name-only before after`` lists, or None when git cannot tell."""
    done = _git("diff", "--name-only", before, after)
    return done.stdout.split() if done.returncode == 0 else None


@functools.lru_cache(maxsize=256)  # a report asks for the same pair of commits once per seed and section
def same_training_code(before: str, after: str) -> bool | None:
    """Whether two commits hold the same :data:`TRAINING_CODE` (``git diff --quiet``); None when git cannot tell."""
    try:
        done = _git("diff", "--quiet", before, after, "--", *TRAINING_CODE)
    except UserError:  # no git here: nothing can be told
        return None
    return {0: True, 1: False}.get(done.returncode)


def check_clean() -> None:
    """Refuse a checkout with uncommitted changes or untracked files (``results/`` and what ``.gitignore``
    keeps out aside): a run records only the commit it trained from."""
    status = _git("status", "--porcelain", "--untracked-files=normal", "--", ".", ":!results").stdout.strip()
    if status:
        changed = ", ".join(line[3:] for line in status.splitlines()[:3])
        raise UserError(
            f"the checkout has uncommitted changes ({changed}): commit them first, so that every run "
            "records the code it ran (its git commit)"
        )


def worktree(sha: str) -> Path:
    """The worktree of commit ``sha`` (``.worktrees/<sha[:12]>``), added on first use and checked on reuse
    (at ``sha``, unchanged); its ``train.py``'s folder.  Under a lock, so two compare.py add it once; a
    half-made one (an add cut short) is removed and added again.  Raises :class:`UserError` when git fails."""
    path = WORKTREES / sha[:12]
    WORKTREES.mkdir(parents=True, exist_ok=True)
    with file_lock(WORKTREES / ".lock"):
        if (path / "train.py").is_file() and _is_clean_at(path, sha):
            return path
        if path.exists():
            _git("worktree", "remove", "--force", str(path))
            shutil.rmtree(path, ignore_errors=True)
            _git("worktree", "prune")
        done = _git("worktree", "add", "--detach", "--force", str(path), sha)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise UserError(f"git worktree add {path} {sha[:12]} failed: {why}")
    return path


def remove_worktree(sha: str) -> None:
    """Remove the worktree of commit ``sha`` (``.worktrees/<sha[:12]>``) if there is one, under the lock
    :func:`worktree` takes; git's own record of it goes too.  Raises nothing: a worktree that cannot be
    removed stays, and ``git worktree prune`` clears its record later."""
    path = WORKTREES / sha[:12]
    if not path.exists():
        return
    with file_lock(WORKTREES / ".lock"):
        _git("worktree", "remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)
        _git("worktree", "prune")


# Folders whose code decides what a checkpoint loads into and how it samples: a run trained from a commit
# that differs from the checkout here is sampled with its own code.
MODEL_CODE = ("model/", "data/", "training/", "sample.py")


def needs_own_code(sha: str | None) -> bool:
    """Whether a run trained from commit ``sha`` must be loaded with that commit's code: its model, data or
    training code differs from the checkout's (:data:`MODEL_CODE`), or git cannot tell.  False for the
    checkout's own commit and for a run that recorded none (nothing better to load it with)."""
    if sha is None or sha == head():
        return False
    files = changed_files(sha, "HEAD")
    return files is None or any(f.startswith(MODEL_CODE) for f in files)


def sample_with_code(sha: str, run: Path, prompt: str, max_new_tokens: int, seed: int) -> str:
    """One sample from ``run``'s ``ckpt_best.pt`` by commit ``sha``'s own ``sample.py`` (top-k 50, temperature
    0.8), in a worktree of that commit, added for this and removed after unless it was there already.

    Returns the prompt and the text after it, as sample.py prints them.  Raises :class:`UserError` with git's or sample.py's last
    line when the worktree cannot be made or the sample fails.
    """
    existed = (WORKTREES / sha[:12] / "sample.py").is_file()
    path = worktree(sha)
    argv = [sys.executable, "sample.py", "--run", str(Path(run).resolve()), "--prompt", prompt]
    argv += ["--max-new-tokens", str(max_new_tokens), "--top-k", "50", "--temperature", "0.8", "--seed", str(seed)]
    try:
        done = subprocess.run(argv, cwd=path, capture_output=True, text=True, timeout=600)
    finally:
        if not existed:
            remove_worktree(sha)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise UserError(f"sample.py of commit {sha[:12]} failed: {why}")
    return done.stdout.removesuffix("\n")  # sample.py prints the prompt, the sample and a newline


def _is_clean_at(path: Path, sha: str) -> bool:
    """Whether the worktree at ``path`` is at commit ``sha`` with no changes."""
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    status = subprocess.run(["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip() == sha and not status.stdout.strip()
