"""``compare.py --grid``: one tuned tied-vs-untied experiment per cell of a product of config values.

    axes = parse_axes(["model.n_embd=64,128", "data.tokenizer=char,bpe:4096"])
    cells = run_grid(plan, axes)          # trains every cell (reusing finished runs), writes each cell's report

Each cell is a full experiment (:func:`experiment.runner.run_experiment`: every arm tuned on
the learning-rate grid, then every seed) in its own folder ``<grid>/<cell name>/``, with the
cell's values added to the command line's overrides.  Cells run in the order of the product,
the first axis outermost.  A cell whose runs fail is recorded as missing with the reason; the
other cells go on.  A stop signal ends the whole grid (rerun the same command to continue).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError
from core.files import read_json, write_json
from core.settings import field_types, merge, parse_cli_value
from experiment import report
from experiment.runner import Plan, run_experiment, write_report
from experiment.plan import lr_grid_refusals
from training.config import SCHEMA, parse_config

GRID_FILE = "grid.json"


@dataclass(frozen=True)
class Axis:
    """One ``--grid`` option: a config key and the values the grid takes it through."""

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


def parse_axes(texts: list[str], not_allowed: tuple[str, ...]) -> list[Axis]:
    """``["model.n_embd=64,128", ...]`` -> typed axes.

    Raises UserError (one line) for a malformed option, an unknown key, a key the arms or
    seeds set (``not_allowed``), a value of the wrong type or rejected by the config's own
    checks, a repeated value, or the same key on two axes.
    """
    axes: list[Axis] = []
    for text in texts:
        key, sep, rest = text.partition("=")
        section, _, name = key.partition(".")
        if not sep or not rest.strip() or not name:
            raise UserError(f"--grid {text!r} is not KEY=V1,V2,...: e.g. --grid model.n_embd=64,128,256")
        if key in not_allowed:
            raise UserError(
                f"--grid {key} is set by the experiment itself (arms, seeds, learning-rate grid): grid over another key"
            )
        if section not in SCHEMA.sections or name not in SCHEMA.settable_keys(section):
            raise UserError(
                f"--grid {key}: unknown config key; use section.key as in train.py's --help, "
                "e.g. model.n_embd or data.tokenizer"
            )
        typ = field_types(SCHEMA.sections[section])[name]
        try:
            values = tuple(parse_cli_value(v.strip(), typ) for v in rest.split(",") if v.strip())
        except ValueError:
            raise UserError(f"--grid {text!r}: a value is not a valid {typ.__name__}") from None
        if len(set(values)) != len(values):
            raise UserError(f"--grid {text!r} repeats a value: give each once")
        if any(a.key == key for a in axes):
            raise UserError(f"--grid {key} is given twice: put all its values in one option")
        axes.append(Axis(key, values))
    return axes


def cells_of(axes: list[Axis], grid_dir: Path) -> list[Cell]:
    """Every combination of the axes' values, the first axis outermost."""
    combos = itertools.product(*(a.values for a in axes))
    return [
        Cell(values, grid_dir / cell_name(values))
        for values in ({a.key: v for a, v in zip(axes, combo)} for combo in combos)
    ]


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
                reported,
                tuning,
                out_dir,
                prompts,
                f"Should the embedding be tied? {cell.name}",
                plan.reference,
                plan.margin,
                command,
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
    return {
        k: v for k, v in report.compared_config(parse_config(plan.config, plan.overrides)).items() if k not in per_cell
    }


def _remember_grid(grid_dir: Path, plan: Plan, axes: list[Axis]) -> None:
    """Write grid.json, or refuse a folder made with another base config, margin, reference or axis keys.

    Axis values, arms, seeds and the learning-rate grid may grow (:func:`lr_grid_refusals`).  The
    base config is compared resolved (:func:`_base_config`), not by file name: a pinned copy of a
    config under another name continues the grid; a file that kept its name but changed a value is
    refused before any cell, old or new, trains.  ``config`` records the latest file name.  A
    grid.json from before ``base_config`` was recorded adopts the current one.
    """
    settings = {
        "axes": {a.key: list(a.values) for a in axes},
        "arms": plan.arms,
        "seeds": plan.seeds,
        "lr_grid": plan.lr_grid,
        "lr_widen": plan.lr_widen,
        "margin": plan.margin,
        "reference": plan.reference,
        "config": plan.config,
        "base_config": _base_config(plan, axes),
    }
    path = grid_dir / GRID_FILE
    if path.is_file():
        before = read_json(path, "grid settings")
        changed = [k for k in ("margin", "reference") if before.get(k) != settings[k]]
        changed += report.config_changes(before.get("base_config", settings["base_config"]), settings["base_config"])
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
