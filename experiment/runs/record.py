"""An experiment folder's record, ``experiment.json``: what it declared before its runs, read once into a value.

``compare.py`` writes the record when an experiment starts (:func:`remember_settings`) and checks
it on every rerun: a rerun into the same folder continues the experiment (more seeds or arms,
another device or wandb mode) but never mixes settings.  The resolved config (bookkeeping aside),
``--equal-params``, the learning-rate grid and how it is read, ``--lr-widen``, the margin, the
reference, the outcome and a sequential design's most seeds must match what the folder was made
with (the grid, ``--lr-widen``, the arms and a budget design's seeds may grow).

Everything that reads a folder's declarations goes through :class:`ExperimentRecord`; a report
on the folder's runs reads what it declared (:func:`declared_settings`, :func:`declared_reference`)
and counts the looks taken at its verdicts (:func:`counted_looks`, :func:`record_look`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from core.files import file_lock, read_json, write_json
from experiment import arms, stats
from experiment.arms import ARMS
from training import config
from training.run_files import EXPERIMENT_FILE

GRID_FILE = "grid.json"  # a grid folder's record (experiment.grid): its axes, arms and seeds; its cells are experiments
DEFAULT_MARGIN = 0.01  # nats/token (a fraction for the ratio outcomes), when none was declared or given
# --lr-tuning: how a learning-rate grid is read.  Every rate on every seed, each arm's fitted best against the
# reference's (experiment.best, calibrated); or each arm's rate picked on one tuning seed (exploratory).
EVERY_SEED, ONE_SEED = "every-seed", "one-seed"
# Keys that may differ between runs of one experiment without making it unfair: bookkeeping,
# and the seed (which pairs runs across arms).  Anything else must match or be reported.
BOOKKEEPING = config.BOOKKEEPING | {"train.seed"}


def flatten(nested: dict) -> dict:
    """``{"model": {"n_layer": 4}}`` -> ``{"model.n_layer": 4}``."""
    return {f"{s}.{k}": v for s, values in nested.items() for k, v in values.items()}


def compared_config(cfg: config.RunConfig) -> dict:
    """A run config as experiment and grid folders record and compare it: flat, bookkeeping keys left out."""
    return {k: v for k, v in flatten(cfg.to_dict()).items() if k not in BOOKKEEPING}


def config_changes(recorded: dict, now: dict) -> list[str]:
    """The keys, sorted, whose values differ between a flat config recorded in a folder and ``now``'s.

    Bookkeeping keys are not compared.  A key ``now`` has and the record lacks ran at its default
    there (a setting added to tinygpt after the folder was made); values are compared as they read
    back from JSON (tuples as lists).
    """
    now = json.loads(json.dumps({k: v for k, v in now.items() if k not in BOOKKEEPING}))
    defaults = flatten(config.RunConfig().to_dict())
    before = {k: v for k, v in {**defaults, **recorded}.items() if k in now or (k in recorded and k not in BOOKKEEPING)}
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


@dataclass(frozen=True, kw_only=True)
class ExperimentRecord:
    """One experiment folder's ``experiment.json``, typed; fields an older folder lacks take what they meant then."""

    folder: Path  # the experiment folder holding the file
    config: dict = field(default_factory=dict)  # the resolved config, flat, bookkeeping left out
    reference: str | None = None  # the arm every verdict reads against (None: older folders declared none)
    margin: float | None = None  # nats/token, or a fraction for ratio outcomes (None: declared none)
    outcome: str = "loss"  # what the verdict reads (experiment.ab.readout.OUTCOMES)
    lr_grid: list[float] = field(default_factory=list)
    lr_widen: int = 0
    lr_tuning: str | None = None  # EVERY_SEED or ONE_SEED with a grid outside a budget design, else None
    equal_params: str | None = None
    max_seeds: int | None = None  # --seeds auto: the most seeds its looks may reach
    budgets: list[int] = field(default_factory=list)  # token budgets of a budget design
    seeds: int | None = None  # a budget design's declared seeds
    arms: dict = field(default_factory=dict)  # arms defined by settings: {name: {key: value}}
    checkout: str | None = None  # the commit the arms without code of their own trained with
    looks: list[dict] = field(default_factory=list)  # the seed counts verdicts were read at, and when
    compared: list[str] = field(default_factory=list)  # every arm the folder trains, reference included ([]: older)
    trained: dict | None = None  # the runs compare.py trained here (experiment.runs.ledger; None: older folders)
    created: str | None = None  # when the folder was declared, ISO 8601 in UTC (None: older folders)
    compared_at: dict = field(default_factory=dict)  # when each arm added by a rerun joined (the others: created)

    @property
    def path(self) -> Path:
        """The file itself."""
        return self.folder / EXPERIMENT_FILE

    @property
    def declared(self) -> ExperimentRecord:
        """The record less what its runs add as they train (``trained``): what a rerun may not change."""
        return dataclasses.replace(self, trained=None)

    @property
    def kind(self) -> str:
        """``"budget"`` for a ``--budgets`` experiment (trunks and cooldown branches), else ``"ab"``."""
        return "budget" if self.budgets else "ab"

    @classmethod
    def read(cls, folder: Path) -> ExperimentRecord | None:
        """The record of ``folder``, or None when it holds none (a folder of runs, not an experiment).

        Raises :class:`UserError` when the file is unreadable."""
        path = Path(folder) / EXPERIMENT_FILE
        return cls.from_json(Path(folder), read_json(path, "experiment settings")) if path.is_file() else None

    @classmethod
    def from_json(cls, folder: Path, data: dict) -> ExperimentRecord:
        """The record ``data`` (experiment.json's object) of ``folder``; unknown keys are ignored."""
        known = {f.name for f in dataclasses.fields(cls)} - {"folder"}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        if "lr_tuning" not in data and data.get("lr_grid") and not data.get("budgets"):
            values["lr_tuning"] = ONE_SEED  # folders from before the field picked each rate on one seed
        return cls(folder=Path(folder), **values)


def remember_settings(out_dir: Path, cfg: config.RunConfig, plan) -> ExperimentRecord:
    """Write experiment.json and return what it holds, or refuse a folder made with other settings.

    Arms, seeds, the lr grid and ``lr_widen`` may grow.  The check and the write happen under a
    lock, so two ``compare.py`` starting at once cannot both pass it with different settings.
    """
    with record_lock(out_dir):
        return ExperimentRecord.from_json(out_dir, _check_and_write_settings(out_dir, cfg, plan))


def planned_record(out_dir: Path, cfg: config.RunConfig, plan) -> ExperimentRecord:
    """The folder's record as :func:`remember_settings` would leave it, nothing written (UserError as it)."""
    return ExperimentRecord.from_json(out_dir, json.loads(json.dumps(_settings_after(out_dir, cfg, plan))))


def record_lock(out_dir: Path):
    """The lock every read-modify-write of ``out_dir``'s experiment.json holds (a file lock in ``.claims/``)."""
    (out_dir / ".claims").mkdir(parents=True, exist_ok=True)
    return file_lock(out_dir / ".claims" / f"{EXPERIMENT_FILE}.lock")


def _settings(cfg: config.RunConfig, plan) -> dict:
    """experiment.json's object for an experiment started now with ``plan``."""
    settings = {
        "config": compared_config(cfg),
        "equal_params": plan.equal_params,
        "lr_grid": plan.lr_grid,
        "lr_widen": plan.lr_widen,
        "margin": plan.margin,
        "reference": plan.reference,  # the arm every verdict reads against, declared before the runs
        "compared": list(plan.arms),  # its Holm family: a re-run may add arms, never drop one
    }
    if plan.lr_grid and not plan.budgets:  # how the grid is read, declared before the runs
        settings["lr_tuning"] = plan.lr_tuning
    if plan.max_seeds:  # --seeds auto: the looks, fixed before the runs
        settings["max_seeds"] = plan.max_seeds
    if plan.outcome != "loss":  # what the verdict reads, declared before the runs
        settings["outcome"] = plan.outcome
    if plan.budgets:  # the budget axis (its trunks may grow to a larger last budget; no budget may go)
        settings["budgets"] = plan.budgets
        settings["seeds"] = plan.seeds  # declared: its report is interim until they finish (may grow)
    defined = {n: s for n, s in plan.arm_set.settings.items() if n not in ARMS}
    if defined:  # arms defined by settings (--arm): a report reads the run folders' arms from these
        settings["arms"] = defined
    if any(plan.arm_set.code(n) for n in plan.arms):  # the other arms train with the checkout's code: pin it
        settings["checkout"] = arms.head()
    return settings


def _check_and_write_settings(out_dir: Path, cfg: config.RunConfig, plan) -> dict:
    """:func:`remember_settings`'s body, run under its lock: the object written."""
    settings = _settings_after(out_dir, cfg, plan)
    write_json(out_dir / EXPERIMENT_FILE, settings)
    return json.loads(json.dumps(settings))  # as read back from the file (lists, not tuples)


def _settings_after(out_dir: Path, cfg: config.RunConfig, plan) -> dict:
    """The experiment.json object a run of ``plan`` leaves in ``out_dir``: a new folder's declaration, or the
    folder's record continued (more seeds, arms or rates); UserError for a change a rerun may not make."""
    # The folder remembers the resolved config it was made with (bookkeeping aside), so a re-run
    # continues it -- with more seeds or arms, another device or wandb mode -- but never mixes settings.
    settings = _settings(cfg, plan)
    saved = out_dir / EXPERIMENT_FILE
    settings["trained"] = {}  # a new folder notes every run it trains from its first (experiment.runs.ledger)
    settings["created"] = now_utc()  # its declaration's time, against which other folders' reads are ordered
    if saved.is_file():
        settings.pop("trained")
        settings.pop("created")
        before = read_json(saved, "experiment settings")
        now = json.loads(json.dumps(settings))
        changed = config_changes(before.get("config", {}), settings["config"])
        # Older folders recorded no grid (none was run) and no margin (any may be declared now).
        was = {
            "equal_params": before.get("equal_params"),
            "margin": before.get("margin", now["margin"]),
            "checkout": before.get("checkout", now.get("checkout")),
            "outcome": before.get("outcome"),
            "max_seeds": before.get("max_seeds"),
            "reference": before.get("reference", now["reference"]),  # older folders recorded none
            "lr_tuning": ExperimentRecord.from_json(out_dir, before).lr_tuning,
        }
        changed += [k for k, v in was.items() if v != now.get(k)]
        gone = sorted(set(before.get("budgets", [])) - set(plan.budgets))
        changed += [f"budgets (without {', '.join(map(str, gone))} tokens)"] if gone else []
        had = before.get("arms", {})
        changed += [f"the settings of arm {n}" for n, s in now.get("arms", {}).items() if had.get(n, s) != s]
        dropped = [a for a in before.get("compared", []) if a not in plan.arms]
        changed += (
            [f"arms (without {', '.join(dropped)}: fewer arms would ease the others' Holm adjustment)"]
            if dropped
            else []
        )
        added = [a for a in plan.arms if a not in before.get("compared", [])]
        settings["compared"] = [*before.get("compared", []), *added]
        if "created" in before and (added or "compared_at" in before):  # (experiment.runs.tries orders reads by it)
            settings["compared_at"] = {**before.get("compared_at", {}), **dict.fromkeys(added, now_utc())}
        if "seeds" in settings:
            settings["seeds"] = max(settings["seeds"], before.get("seeds", 0))
        if had or "arms" in settings:  # arms may be added, never redefined
            settings["arms"] = {**had, **now.get("arms", {})}
        if before.get("looks"):  # the verdicts read so far (record_look): kept, so that added seeds count as looks
            settings["looks"] = before["looks"]
        if "trained" in before:  # the runs trained here (experiment.runs.ledger); older folders have no note
            settings["trained"] = before["trained"]
        if "created" in before:
            settings["created"] = before["created"]
        changed += lr_grid_refusals(before.get("lr_grid", []), plan.lr_grid, before.get("lr_widen", 0), plan.lr_widen)
        if changed:
            raise UserError(
                f"experiment folder {out_dir} was made with other settings ({', '.join(changed)}): pick another --name"
            )
    return settings


def lr_grid_refusals(before: list[float], now: list[float], widen_before: int = 0, widen_now: int = 0) -> list[str]:
    """``[]`` if the learning-rate grid ``now`` may continue a folder made with ``before``; else ``[why not]``.

    A grid may grow -- widening it when a best learning rate sat on its edge -- as long as it
    keeps every point it had: the runs already made stay part of it, every arm trains at the new
    points alike, and an arm whose best rate moves trains its reported seeds at the new rate.
    A folder made without a grid (every arm at the config's rate) cannot gain one.  Likewise
    ``--lr-widen`` may rise (``widen_now``) but not fall below ``widen_before``.
    """
    out = []
    old, new = {f"{lr:g}" for lr in before}, {f"{lr:g}" for lr in now}
    if old != new and not (old and old <= new):
        out.append(
            "lr_grid (a folder made with a grid needs one, and one made without cannot gain one)"
            if not old or not new
            else f"lr_grid (it may grow but must keep {', '.join(sorted(old - new, key=float))})"
        )
    if widen_now < widen_before:
        out.append(f"lr_widen (it may rise but not fall below {widen_before})")
    return out


def declared_settings(out_dir: Path, margin: float | None, outcome: str | None) -> tuple[float, bool, str, tuple]:
    """What a report on run folders in ``out_dir`` reads with: ``(margin, margin declared before the runs,
    outcome, (alpha, the sequential design in words))``, from the folder's experiment.json where it
    declared them (``--margin`` / ``--outcome`` given then must agree), else from the options given.
    Raises :class:`UserError` when a given option contradicts the declaration."""
    record = ExperimentRecord.read(out_dir)
    return (*_declared_margin(record, margin), _declared_outcome(record, outcome), _declared_sequential(record))


def _declared_margin(record: ExperimentRecord | None, given: float | None) -> tuple[float, bool]:
    """``(margin, declared)``: the experiment folder's declared margin, checked against ``--margin`` if
    given, else ``--margin`` or the default, not declared before the runs."""
    declared = record.margin if record else None
    if declared is not None and given is not None and given != declared:
        raise UserError(f"{record.path} declared --margin {declared:g} before the runs: report with it (drop --margin)")
    if declared is not None:
        return declared, True
    return (given if given is not None else DEFAULT_MARGIN), False


def declared_reference(out_dir: Path, given: str | None) -> str | None:
    """The reference arm the experiment folder declared (experiment.json), checked against ``--reference`` if
    given; else ``given`` (None: the report's own rule picks one).  Raises :class:`UserError` on a clash."""
    record = ExperimentRecord.read(out_dir)
    declared = record.reference if record else None
    if declared is not None and given is not None and given != declared:
        raise UserError(
            f"{record.path} declared --reference {declared} before the runs: report with it (drop --reference)"
        )
    return declared or given


def _declared_outcome(record: ExperimentRecord | None, given: str | None) -> str:
    """The outcome the experiment folder declared, checked against ``--outcome`` if given."""
    declared = record.outcome if record else None
    if declared is not None and given is not None and given != declared:
        raise UserError(f"{record.path} declared --outcome {declared} before the runs: report with it (drop --outcome)")
    return declared or given or "loss"


def _declared_sequential(record: ExperimentRecord | None) -> tuple[float, str, dict | None]:
    """``(alpha, words, looks as data)`` for runs of a sequential experiment folder (its max_seeds), else
    ``(0.05, "", None)``: a report on its runs tests at the looks' level, as its verdict did."""
    max_seeds = record.max_seeds if record else None
    if not max_seeds:
        return 0.05, "", None
    looks = stats.sequential_looks(max_seeds)
    alpha = stats.look_alpha(looks)
    words = (
        f"from a sequential experiment of up to {max_seeds} seeds in looks of {', '.join(map(str, looks))}; "
        f"every look tests at α = {alpha:.4g} (0.05 over {len(looks)} looks, Bonferroni)"
    )
    return alpha, words, looks_record(looks, None, alpha)


def counted_looks(out_dir: Path, seeds: int) -> tuple[float, str, dict | None] | None:
    """For a report at ``seeds`` seeds on a fixed-seed experiment folder that gave verdicts at other seed counts
    before (experiment.json's ``looks``): ``(alpha, words, looks as data)``, this look tested at 0.05 over the
    looks so far (Bonferroni, as ``--seeds auto`` does) and marked undeclared; None for a first look (or the
    same seed count again), a sequential folder (its looks were declared) or no experiment folder.  Fewer
    seeds than a look before count too: a subset read after the whole is another look."""
    record = ExperimentRecord.read(out_dir)
    if record is None or record.max_seeds:
        return None
    earlier = sorted({look["seeds"] for look in record.looks if look.get("seeds", seeds) != seeds})
    if not earlier:
        return None
    k = len(earlier) + 1
    alpha = 0.05 / k
    again = any(look.get("seeds") == seeds for look in record.looks)  # this count was read before the others
    what = "seeds added after verdicts were read" if max(earlier) < seeds and not again else "verdicts were read"
    words = (
        f"{what} at {', '.join(map(str, earlier))} seeds: this report at {seeds} "
        f"seeds is look {k}, tested at α = {alpha:.4g} (0.05 over {k} looks, Bonferroni, as --seeds auto does)"
    )
    return alpha, words, {**looks_record([*earlier, seeds], seeds, alpha), "declared": False}


def now_utc() -> str:
    """The time now in UTC, ISO 8601 to the microsecond (``2026-11-29T06:10:42.123456+00:00``): sorts as it happened."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


def record_look(out_dir: Path, seeds: int) -> None:
    """Add a report read at ``seeds`` seeds to the experiment folder's looks (experiment.json's ``looks``: each
    seed count a verdict was read at, its date, and its time in UTC as ``at``), once per seed count; nothing
    without an experiment.json."""
    saved = out_dir / EXPERIMENT_FILE
    if not saved.is_file():
        return
    with record_lock(out_dir):
        # Read and written as raw JSON under the lock: keys this version does not know are kept.
        data = read_json(saved, "experiment settings")
        looks = data.get("looks", [])
        if all(look.get("seeds") != seeds for look in looks):
            data["looks"] = [*looks, {"seeds": seeds, "date": datetime.date.today().isoformat(), "at": now_utc()}]
            write_json(saved, data)


def looks_record(looks: list[int], seeds: int | None, alpha: float) -> dict:
    """verdict.json's ``sequential``: the seed counts of the looks declared before the runs, the seeds this
    verdict read (None: not known here), the level every look tests at, and the rule that set it."""
    return {"looks": looks, "seeds_read": seeds, "alpha_per_look": alpha, "rule": "bonferroni", "declared": True}
