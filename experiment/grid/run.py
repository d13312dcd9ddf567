"""``compare.py grid``: one tuned A/B experiment per cell of a product of config values,
and the scaling view's rows read back from every cell, one row per (cell, arm).

    axes = parse_axes(["model.n_embd=64,128", "data.tokenizer=char,bpe:4096"])
    cells = run_grid(plan, axes)          # trains every cell (reusing finished runs), writes each cell's report
    settings, cells = load_grid(Path("runs/shakespeare-grid"))   # reads grid.json and every cell's runs
    rows = gap_rows(cells, cells_vocab_use(cells))               # Δ val bpb with its CI per cell and arm

Each cell is a full experiment (:func:`experiment.ab.run.run_experiment`: every arm tuned on
the learning-rate grid, then every seed) in its own folder ``<grid>/<cell name>/``, with the
cell's values added to the command line's overrides.  Cells run in the order of the product,
the first axis outermost.  A cell whose runs fail is recorded as missing with the reason; the
other cells go on.  A stop signal ends the whole grid (rerun the same command to continue).

The model across cells, the contrasts and slopes a user asks for and each cell's vocabulary use are
:mod:`experiment.grid.model`; the report is :mod:`experiment.grid.markdown`.

Within one cell every run scores the same val tokens, so its bits per byte are its loss times
one constant (tokens / (bytes · ln 2)); the cell's paired statistics in nats
(:func:`experiment.ab.readout.comparisons`) therefore carry over to bits per byte exactly, and
bits per byte make cells with different tokenizers comparable.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError
from core.files import read_json, write_json
from core.settings import field_types, merge, parse_cli_value
from experiment import stats
from experiment.ab import readout
from experiment.runs import folders, ledger, tries
from experiment.arms import with_recorded
from experiment.best import EDGE
from experiment.grid.model import cell_vocab_use
from experiment.runs.plan import best_lr, score as tuning_score
from experiment.runs.folders import Experiment
from experiment.runs.record import (
    GRID_FILE,
    ONE_SEED,
    ExperimentRecord,
    compared_config,
    config_changes,
    counted_looks,
    lr_grid_refusals,
)
from experiment.runs.plan import Plan
from experiment.runs.seeds import seeds_apart
from experiment.ab.run import run_experiment, write_report
from training.config import SCHEMA, parse_config
from training.run_files import runs_in


@dataclass(frozen=True)
class Axis:
    """One ``--axis`` option: a config key and the values the grid takes it through."""

    key: str  # "section.name", e.g. "model.n_embd"
    values: tuple  # typed as the config field, in the order given


@dataclass
class Cell:
    """One point of the grid: its values, its folder, and what came of it."""

    values: dict  # key -> value
    folder: Path
    error: str | None = None  # why the cell has no report (None when it has one)

    @property
    def name(self) -> str:
        """The cell's folder name: ``n_embd-64_tokenizer-bpe4096`` (the keys' last parts, ':' dropped)."""
        return cell_name(self.values)


def cell_name(values: dict) -> str:
    """``{"model.n_embd": 64, "data.tokenizer": "bpe:4096"}`` -> ``"n_embd-64_tokenizer-bpe4096"``."""
    return "_".join(
        f"{key.split('.')[-1]}-{str(value).replace(':', '').replace('/', '-')}" for key, value in values.items()
    )


def parse_axes(texts: list[str], not_allowed: tuple[str, ...], option: str = "--axis") -> list[Axis]:
    """``["model.n_embd=64,128", ...]`` -> typed axes.

    Raises UserError (one line) for a malformed option, an unknown key, a key the arms or
    seeds set (``not_allowed``), a value of the wrong type or rejected by the config's own
    checks, a repeated value, or the same key on two axes; each names ``option``, the command's flag
    (``bench.py``'s is ``--grid``).
    """
    axes: list[Axis] = []
    for text in texts:
        key, sep, rest = text.partition("=")
        section, _, name = key.partition(".")
        if not sep or not rest.strip() or not name:
            raise UserError(f"{option} {text!r} is not KEY=V1,V2,...: e.g. {option} model.n_embd=64,128,256")
        if key in not_allowed:
            raise UserError(
                f"{option} {key} is set by the experiment itself (arms, seeds, learning-rate grid): grid over another key"
            )
        if section not in SCHEMA.sections or name not in SCHEMA.settable_keys(section):
            raise UserError(
                f"{option} {key}: unknown config key; use section.key as in train.py's --help, "
                "e.g. model.n_embd or data.tokenizer"
            )
        typ = field_types(SCHEMA.sections[section])[name]
        try:
            values = tuple(parse_cli_value(v.strip(), typ) for v in rest.split(",") if v.strip())
        except ValueError:
            raise UserError(f"{option} {text!r}: a value is not a valid {typ.__name__}") from None
        if len(set(values)) != len(values):
            raise UserError(f"{option} {text!r} repeats a value: give each once")
        if any(a.key == key for a in axes):
            raise UserError(f"{option} {key} is given twice: put all its values in one option")
        axes.append(Axis(key, values))
    return axes


def cells_of(axes: list[Axis], grid_dir: Path) -> list[Cell]:
    """Every combination of the axes' values, the first axis outermost.

    Raises :class:`UserError` when two cells would share a folder (``a/b`` and ``a-b`` name alike).
    """
    combos = itertools.product(*(a.values for a in axes))
    cells = [
        Cell(values, grid_dir / cell_name(values))
        for values in ({a.key: v for a, v in zip(axes, combo)} for combo in combos)
    ]
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.name in seen:
            raise UserError(
                f"grid cells {seen[cell.name].values} and {cell.values} would share the folder {cell.name}: "
                "give values that differ in more than '/' against '-' or ':'"
            )
        seen[cell.name] = cell
    return cells


def in_recorded_order(axes: list[Axis], grid_dir: Path) -> list[Axis]:
    """``axes`` in the key order the grid folder's ``grid.json`` recorded, when it names the same keys: a
    cell's folder name follows the order, so the same axes typed in another order find the same cells."""
    path = grid_dir / GRID_FILE
    if not path.is_file():
        return axes
    order = list(read_json(path, "grid settings").get("axes", {}))
    if sorted(order) != sorted(a.key for a in axes):
        return axes  # other keys: _remember_grid refuses them
    return sorted(axes, key=lambda a: order.index(a.key))


def cell_overrides(overrides: dict, values: dict) -> dict:
    """The command line's overrides with a cell's values on top (nested ``{section: {key: value}}``)."""
    cell: dict = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        cell.setdefault(section, {})[name] = value
    return merge(overrides, cell)


def grid_dir_of(plan: Plan) -> Path:
    """The grid's folder: ``<train.out_dir>/<--name or <config stem>-grid>``."""
    cfg = parse_config(plan.config, plan.overrides)
    stem = Path(plan.config).stem if plan.config else "default"
    return Path(cfg.train.out_dir) / (plan.name or f"{stem}-grid")


def _check_cells(plan: Plan, cells: list[Cell]) -> None:
    """Every cell's config must be valid before the first run trains (a bad value fails now, not hours in)."""
    for cell in cells:
        try:
            parse_config(plan.config, cell_overrides(plan.overrides, cell.values))
        except UserError as e:
            raise UserError(f"grid cell {cell.name}: {e}") from None


def run_grid(plan: Plan, axes: list[Axis], prompts: list[str], command: str) -> tuple[Path, list[Cell]]:
    """Train and report every cell of the grid; returns ``(grid folder, cells)``.

    ``plan.name`` names the grid folder; each cell's experiment is ``<grid>/<cell name>``.
    ``grid.json`` records the axes, arms, seeds, learning-rate grid and margin (axes may gain
    values on a later run; nothing else may change).  A :class:`UserError` inside a cell marks
    that cell missing and the grid goes on; :class:`core.errors.Interrupted` stops it.
    """
    grid_dir = grid_dir_of(plan)
    axes = in_recorded_order(axes, grid_dir)
    cells = cells_of(axes, grid_dir)
    _check_cells(plan, cells)
    _remember_grid(grid_dir, plan, axes)
    for i, cell in enumerate(cells, 1):
        print(f"[compare] grid cell {i}/{len(cells)}: {cell.name}", flush=True)
        cell_plan = dataclasses.replace(
            plan, overrides=cell_overrides(plan.overrides, cell.values), name=str(Path(grid_dir.name) / cell.name)
        )
        try:
            reported, tuning, out_dir = run_experiment(cell_plan)
            write_report(
                paths=reported,
                tuning=tuning,
                out_dir=out_dir,
                prompts=prompts,
                title=f"Should the embedding be tied? {cell.name}",
                reference=plan.reference,
                margin=plan.margin,
                command=command,
                arm_set=plan.arm_set,
            )
        except UserError as e:
            cell.error = str(e)
            print(f"[compare] grid cell {cell.name} is missing from the report: {e}", file=sys.stderr, flush=True)
    return grid_dir, cells


def _base_config(plan: Plan, axes: list[Axis]) -> dict:
    """The resolved config every cell of the grid shares, flattened: all but the axes' keys, the keys
    the arms and seeds set per run, bookkeeping, and ``model.vocab_size`` (it follows the tokenizer)."""
    per_cell = {a.key for a in axes} | set(plan.arm_set.keys) | {"model.vocab_size"}  # train.seed is bookkeeping
    return {k: v for k, v in compared_config(parse_config(plan.config, plan.overrides)).items() if k not in per_cell}


def lr_tuning(settings: dict) -> str | None:
    """How a grid's cells read their learning-rate grid (grid.json's ``lr_tuning``): :data:`EVERY_SEED`,
    :data:`ONE_SEED`, or None without a grid.  A grid.json from before the field was recorded picked on one seed."""
    if not settings.get("lr_grid"):
        return None
    return settings.get("lr_tuning", ONE_SEED)


def _remember_grid(grid_dir: Path, plan: Plan, axes: list[Axis]) -> None:
    """Write grid.json, or refuse a folder made with another base config, margin, reference or axis keys.

    Axis values, arms, seeds and the learning-rate grid may grow (:func:`lr_grid_refusals`).  The
    base config is compared resolved (:func:`_base_config`), not by file name: a pinned copy of a
    config under another name continues the grid; a file that kept its name but changed a value is
    refused before any cell, old or new, trains, and so is another ``--lr-tuning`` (:func:`lr_tuning`).
    ``config`` records the latest file name.  A grid.json from before ``base_config`` was recorded
    adopts the current one.
    """
    settings = {
        "axes": {a.key: list(a.values) for a in axes},
        "arms": plan.arms,
        "seeds": plan.seeds,
        "lr_grid": plan.lr_grid,
        "lr_widen": plan.lr_widen,
        "lr_tuning": plan.lr_tuning if plan.lr_grid else None,
        "margin": plan.margin,
        "reference": plan.reference,
        "config": plan.config,
        "base_config": _base_config(plan, axes),
    }
    path = grid_dir / GRID_FILE
    if path.is_file():
        before = read_json(path, "grid settings")
        changed = [k for k in ("margin", "reference") if before.get(k) != settings[k]]
        if before.get("lr_grid") and plan.lr_grid and lr_tuning(before) != plan.lr_tuning:
            changed.append(f"--lr-tuning {lr_tuning(before)}")
        changed += config_changes(before.get("base_config", settings["base_config"]), settings["base_config"])
        changed += lr_grid_refusals(before.get("lr_grid", []), plan.lr_grid, before.get("lr_widen", 0), plan.lr_widen)
        if set(before.get("axes", {})) != set(settings["axes"]):
            changed.append("axes (keys)")
        if changed:
            raise UserError(
                f"grid folder {grid_dir} was made with other settings ({', '.join(changed)}): pick another --name"
            )
        # Values, arms and seeds may grow: keep the union so the report covers every cell made so far.
        for key, values in before["axes"].items():
            settings["axes"][key] = [*values, *(v for v in settings["axes"][key] if v not in values)]
        settings["arms"] = [*before.get("arms", []), *(a for a in plan.arms if a not in before.get("arms", []))]
        settings["seeds"] = max(plan.seeds, before.get("seeds", 0))
    grid_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, settings)


# ----------------------------------------------------------------------------- the scaling view's rows

NOT_STARTED = "not started"  # ``Cell.error`` of a cell without a folder: the report names it apart


@dataclass
class GridCell:
    """A cell and, when its runs are all there and fair, its experiment."""

    cell: Cell
    exp: Experiment | None  # None: missing (``cell.error`` says why)


def at_best_rates(runs: list[folders.Run], tuning: list[folders.Run]) -> list[folders.Run]:
    """The reported runs of each arm at its best tuned rate; an arm without tuning runs keeps all.

    A cell tuned again with a wider grid (a larger ``--lr-widen``) whose best rate moved trains the
    reported seeds at the new rate and leaves the old ones in the folder; the cell's report uses the
    new ones, and so must the grid's (the same seed twice in an arm is otherwise refused).
    """
    best: dict[str, float] = {}
    for arm in {r.arm for r in tuning}:
        scores = {r.config["train"]["learning_rate"]: tuning_score(r.path) for r in tuning if r.arm == arm}
        best[arm] = best_lr(arm, scores)
    return [
        r
        for r in runs
        if r.arm not in best or math.isclose(r.config["train"]["learning_rate"], best[r.arm], rel_tol=1e-9)
    ]


def load_cell(cell: Cell, reference: str, margin: float) -> GridCell:
    """The cell's experiment from its folder (``tune-*`` runs are its learning-rate grid), or missing with the reason."""
    if cell.error:
        return GridCell(cell, None)
    if not cell.folder.is_dir():  # the axes cross to it, but no command has started it (yet)
        cell.error = NOT_STARTED
        return GridCell(cell, None)
    finished = [run.path for run in runs_in(cell.folder, finished_only=True)]
    if not finished:
        cell.error = "no finished runs"
        return GridCell(cell, None)
    tuning = [p for p in finished if p.name.startswith("tune-")]
    if len(tuning) == len(finished):  # still on its learning-rate grid: no reported run has finished
        cell.error = f"in progress: only learning-rate grid runs have finished ({len(tuning)})"
        return GridCell(cell, None)
    record = ExperimentRecord.read(cell.folder)
    arm_set = with_recorded(record.arms if record else None)
    try:
        tuned = folders.load_runs(tuning, arm_set)
        runs = at_best_rates(folders.load_runs([p for p in finished if p not in tuning], arm_set), tuned)
        waiting = sorted({r.arm for r in tuned} - {r.arm for r in runs})
        if waiting:  # tuned, but its reported seeds have not trained yet
            cell.error = f"in progress: no reported run of {', '.join(waiting)} at its tuned rate yet"
            return GridCell(cell, None)
        exp = folders.check_experiment(runs, reference, margin, tuned, arm_set)
    except UserError as e:
        cell.error = str(e)
        return GridCell(cell, None)
    if exp.swept and len(exp.seeds) < 2:  # best against best's interval leaves a seed out: it needs two
        cell.error = f"in progress: {len(exp.seeds)} seed has every rate of every arm; best against best reads 2"
        return GridCell(cell, None)
    # The cell reads every finished run it holds, so only runs it did not draw as declared can be wrong here.
    exp.provenance = ledger.problems(cell.folder, finished, read_whole=False) + seeds_apart(exp)
    exp.provenance += tries.earlier_reads(cell.folder)
    looked = counted_looks(cell.folder, len(exp.seeds))  # seeds added after the grid report read the cell
    if looked:
        exp.alpha, exp.sequential, exp.looks = looked
    return GridCell(cell, exp)


def load_grid(grid_dir: Path, errors: dict[str, str] | None = None) -> tuple[dict, list[GridCell]]:
    """``(grid.json settings, every cell)`` of a grid folder; ``errors``: cell name -> why it failed this time."""
    settings = read_json(grid_dir / GRID_FILE, "grid settings")
    axes = [Axis(k, tuple(v)) for k, v in settings["axes"].items()]
    cells = cells_of(axes, grid_dir)
    for cell in cells:
        cell.error = (errors or {}).get(cell.name)
    return settings, [load_cell(c, settings["reference"], settings["margin"]) for c in cells]


def _bpb_per_nat(exp: Experiment) -> float | None:
    """The cell's bits per byte per nat/token (one constant: every run scores the same tokens), or None."""
    ratios = [r.bpb / r.score for members in exp.runs.values() for r in members if r.bpb is not None and r.score > 0]
    return statistics.fmean(ratios) if ratios else None


def _arm_lr(exp: Experiment, arm: str) -> float:
    """The learning rate an arm's reported runs used (its tuned one when the cell has a grid)."""
    return exp.runs[arm][0].learning_rate


def _bpb_verdict(exp: Experiment, arm: str, margin_bpb: float) -> tuple[str, stats.SeedsFigure | None]:
    """An arm's verdict from the paired final val bpb with an equivalence margin in bpb (``--margin-bpb``).

    :func:`experiment.ab.readout.bpb_comparison`'s verdict, with the seeds figure (:func:`stats.seeds_figure`) when
    inconclusive; "no bpb" when a run has no bits per byte.
    """
    c = readout.bpb_comparison(exp, arm, margin_bpb)
    return ("no bpb", None) if c is None else (c.verdict, c.seeds_needed)


def gap_rows(
    cells: list[GridCell], vocab_use: dict[str, dict] | None = None, margin_bpb: float | None = None
) -> list[dict]:
    """One row per (finished cell, non-reference arm): sizes, data, tuned learning rates, Δ (nats and bpb), verdict.

    Δ = arm − reference, final val loss.  A cell tuned on one seed, or not tuned, pairs it by seed at each
    arm's rate: ``ci`` the 95% paired t interval, ``diffs`` (nats) and ``diffs_bpb`` the per-seed Δ.  An
    every-seed cell (every rate on every seed) reads it best against best: Δ of the fitted bests, ``ci``
    the leave-one-seed-out jackknife's, ``diffs`` its pseudo-values (their standard error is the
    jackknife's), ``lr_*`` the fitted best rates; ``readout`` says which.  Cells whose runs carry no bits
    per byte (older runs) have ``delta_bpb`` None.
    ``vocab_use``: cell name -> :func:`experiment.grid.model.cell_vocab_use` (None: unknown).  Verdicts are
    the cell's own (nats, its declared margin, Holm over its arms), or with ``margin_bpb`` (bits per
    byte) the rule of :func:`_bpb_verdict`; ``band_bpb`` is the equivalence band in bpb either way.
    """
    rows = []
    for gc in cells:
        if gc.exp is None:
            continue
        exp, scale = gc.exp, _bpb_per_nat(gc.exp)
        cell = _cell_columns(gc, (vocab_use or {}).get(gc.cell.name))
        for gap in _swept_gaps(exp, margin_bpb) if exp.swept else _paired_gaps(exp, margin_bpb):
            rows.append(
                {
                    **cell,
                    **gap,
                    "margin_bpb": margin_bpb,
                    "bpb_per_nat": scale,
                    "band_bpb": margin_bpb if margin_bpb is not None else _scaled(gap["margin"], scale),
                    "delta_bpb": _scaled(gap["delta"], scale),
                    "ci_bpb": None if scale is None else (gap["ci"][0] * scale, gap["ci"][1] * scale),
                    "diffs_bpb": None if scale is None else [d * scale for d in gap["diffs"]],
                }
            )
    return rows


def _scaled(nats: float, scale: float | None) -> float | None:
    """``nats`` in bits per byte (``scale``: the cell's bpb per nat), or None where the cell has no bpb."""
    return None if scale is None else nats * scale


def _cell_columns(gc: GridCell, vocab_use: dict | None) -> dict:
    """A row's columns that describe the cell: sizes, data, tokens seen (its reference arm's first run)."""
    ref = gc.exp.runs[gc.exp.reference][0]
    params, non_emb = ref.summary["parameters"], ref.summary["non_embedding_parameters"]
    train_tokens = ref.summary.get("train_tokens")
    return {
        "cell": gc.cell.name,
        "reference": gc.exp.reference,
        "vocab_size": ref.config["model"]["vocab_size"],
        "tokenizer": ref.config["data"]["tokenizer"],
        "n_embd": ref.config["model"]["n_embd"],
        "n_layer": ref.config["model"]["n_layer"],
        "parameters": params,
        "non_embedding_parameters": non_emb,
        "embedding_share": 1 - non_emb / params,  # (wte + wpe) / all parameters of the reference model
        "vocab_use": vocab_use,
        "tokens": ref.summary["tokens"],
        "epochs": ref.summary["tokens"] / train_tokens if train_tokens else None,
    }


def _paired_gaps(exp: Experiment, margin_bpb: float | None) -> list[dict]:
    """Each arm's paired Δ at its one rate (nats; ``diffs`` per seed) and its verdict (module docstring)."""
    gaps = []
    for c in readout.comparisons(exp):
        verdict, needed = (c.verdict, c.seeds_needed) if margin_bpb is None else _bpb_verdict(exp, c.arm, margin_bpb)
        gaps.append(
            {
                "arm": c.arm,
                "readout": "paired at the tuned rates" if exp.tuning else "paired",
                "lr_reference": _arm_lr(exp, exp.reference),
                "lr_arm": _arm_lr(exp, c.arm),
                "delta": c.mean,
                "ci": c.ci,
                "diffs": list(c.diffs),
                "verdict": verdict,
                "seeds": len(c.diffs),
                "seeds_needed": needed,
                "margin": c.margin,
            }
        )
    return gaps


def _swept_gaps(exp: Experiment, margin_bpb: float | None) -> list[dict]:
    """An every-seed cell's Δ of fitted bests per arm (nats), its jackknife interval and verdict
    (:func:`experiment.ab.readout.best_comparisons`); ``diffs``: the jackknife's pseudo-values centred on Δ
    (their mean is the bias-corrected Δ, which no table shows; centred, their standard error is still the
    jackknife's), the seed-level Δ the model across cells reads.  ``edge``: a best at the grid's edge, whose
    Δ is not read, so the model across cells leaves the cell out.  With ``margin_bpb`` the verdicts are read
    in bits per byte."""
    in_nats = readout.best_comparisons(exp)
    verdicts = {b.arm: b.verdict for b in readout.best_comparisons(exp, margin_bpb)} if margin_bpb else {}
    return [
        {
            "arm": b.arm,
            "readout": "best against best",
            "lr_reference": b.best_lr[exp.reference],
            "lr_arm": b.best_lr[b.arm],
            "delta": b.delta,
            "ci": b.ci,
            "diffs": [p - statistics.fmean(b.pseudo) + b.delta for p in b.pseudo],
            "edge": b.verdict == EDGE,
            "verdict": verdicts.get(b.arm, "no bpb") if margin_bpb else b.verdict,
            "seeds": b.seeds,
            "seeds_needed": None,
            "margin": exp.margin,
        }
        for b in in_nats
    ]


def cells_vocab_use(cells: list[GridCell]) -> dict[str, dict]:
    """Cell name -> its vocabulary use (:func:`experiment.grid.model.cell_vocab_use`; each data folder counted
    once), for the finished cells whose use is known; writes ``vocab_use.json`` where the data cache is here."""
    memo: dict = {}
    found = {
        gc.cell.name: cell_vocab_use(gc.cell.folder, gc.exp.runs[gc.exp.reference][0], memo)
        for gc in cells
        if gc.exp is not None
    }
    return {name: use for name, use in found.items() if use is not None}


@dataclass
class LrPick:
    """How firmly one arm's tuning seed chose its rate: the chosen rate's lead over the runner-up, in nats/token."""

    cell: str
    arm: str
    rate: float  # the chosen (lowest-loss) rate
    runner_up: float  # the rate with the next-lowest final val loss
    lead: float  # runner-up's final val loss − the chosen rate's, on the tuning seed (>= 0)
    seed_sd: float  # sample sd of the arm's final val loss over its reported seeds

    @property
    def within_noise(self) -> bool:
        """True when the lead is smaller than one seed's spread: another tuning seed may well pick the runner-up."""
        return self.lead < self.seed_sd


def lr_picks(cells: list[GridCell]) -> list[LrPick]:
    """Every tuned arm of every finished cell with at least two finite grid scores and two finite reported seeds.

    Ties rank the smaller rate first, as :func:`experiment.runs.plan.best_lr` does (a lead of 0).
    """
    picks = []
    for gc in cells:
        if gc.exp is None:
            continue
        for arm, tuned in gc.exp.tuning.items():
            # the same scores and rule the tuning chose by: best_lr, then best_lr of the rest for the runner-up
            grid = {r.learning_rate: tuning_score(r.path) for r in tuned}
            seeds = [r.score for r in gc.exp.runs.get(arm, [])]
            if sum(math.isfinite(v) for v in grid.values()) < 2 or len(seeds) < 2 or not all(map(math.isfinite, seeds)):
                continue
            rate = best_lr(arm, grid)
            runner_up = best_lr(arm, {lr: v for lr, v in grid.items() if lr != rate})
            lead = grid[runner_up] - grid[rate]
            picks.append(LrPick(gc.cell.name, arm, rate, runner_up, lead, statistics.stdev(seeds)))
    return picks
