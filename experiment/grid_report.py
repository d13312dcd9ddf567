"""The scaling view: read every cell of a ``compare.py --grid`` experiment, one row per (cell, arm).

    settings, cells = load_grid(Path("runs/shakespeare-grid"))   # reads grid.json and every cell's runs
    rows = gap_rows(cells, cells_vocab_use(cells))               # Δ val bpb with its CI per cell and arm

The model across cells is :mod:`experiment.grid_model`, the contrasts and slopes a user asks for
:mod:`experiment.grid_readout`.

Within one cell every run scores the same val tokens, so its bits per byte are its loss times
one constant (tokens / (bytes · ln 2)); the cell's paired statistics in nats
(:func:`experiment.report.comparisons`) therefore carry over to bits per byte exactly, and
bits per byte make cells with different tokenizers comparable.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError
from core.files import read_json
from experiment import report
from experiment.arms import with_recorded
from experiment.grid import GRID_FILE, Axis, Cell, cells_of
from experiment.report import Experiment
from experiment.plan import best_lr, score as tuning_score
from experiment.vocab_use import cell_vocab_use


NOT_STARTED = "not started"  # ``Cell.error`` of a cell without a folder: the report names it apart


@dataclass
class GridCell:
    """A cell and, when its runs are all there and fair, its experiment."""

    cell: Cell
    exp: Experiment | None  # None: missing (``cell.error`` says why)


def at_best_rates(runs: list[report.Run], tuning: list[report.Run]) -> list[report.Run]:
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
    folders = sorted(p for p in cell.folder.glob("*") if (p / "summary.json").is_file())
    if not folders:
        cell.error = "no finished runs"
        return GridCell(cell, None)
    tuning = [p for p in folders if p.name.startswith("tune-")]
    if len(tuning) == len(folders):  # still on its learning-rate grid: no reported run has finished
        cell.error = f"in progress: only learning-rate grid runs have finished ({len(tuning)})"
        return GridCell(cell, None)
    saved = cell.folder / "experiment.json"
    arm_set = with_recorded(read_json(saved, "experiment settings").get("arms") if saved.is_file() else None)
    try:
        tuned = report.load_runs(tuning, arm_set)
        runs = at_best_rates(report.load_runs([p for p in folders if p not in tuning], arm_set), tuned)
        waiting = sorted({r.arm for r in tuned} - {r.arm for r in runs})
        if waiting:  # tuned, but its reported seeds have not trained yet
            cell.error = f"in progress: no reported run of {', '.join(waiting)} at its tuned rate yet"
            return GridCell(cell, None)
        exp = report.check_experiment(runs, reference, margin, tuned, arm_set)
    except UserError as e:
        cell.error = str(e)
        return GridCell(cell, None)
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


def _bpb_verdict(exp: Experiment, arm: str, margin_bpb: float) -> tuple[str, int | None]:
    """An arm's verdict from the paired final val bpb with an equivalence margin in bpb (``--margin-bpb``).

    :func:`experiment.report.bpb_comparison`'s verdict, with a rough seeds-needed figure when
    inconclusive; "no bpb" when a run has no bits per byte.
    """
    c = report.bpb_comparison(exp, arm, margin_bpb)
    return ("no bpb", None) if c is None else (c.verdict, c.seeds_needed)


def gap_rows(
    cells: list[GridCell], vocab_use: dict[str, dict] | None = None, margin_bpb: float | None = None
) -> list[dict]:
    """One row per (finished cell, non-reference arm): sizes, data, tuned learning rates, Δ (nats and bpb), verdict.

    Δ = arm − reference, final val loss, paired by seed; ``ci`` the 95% paired t interval; ``diffs_bpb``
    the per-seed Δ in bpb.  Cells whose runs carry no bits per byte (older runs) have ``delta_bpb`` None.
    ``vocab_use``: cell name -> :func:`experiment.vocab_use.cell_vocab_use` (None: unknown).  Verdicts are
    the cell's own (nats, its declared margin, Holm over its arms), or with ``margin_bpb`` (bits per
    byte) the rule of :func:`_bpb_verdict`; ``band_bpb`` is the equivalence band in bpb either way.
    """
    rows = []
    for gc in cells:
        if gc.exp is None:
            continue
        exp = gc.exp
        ref = exp.runs[exp.reference][0]
        params, non_emb = ref.summary["parameters"], ref.summary["non_embedding_parameters"]
        train_tokens = ref.summary.get("train_tokens")
        scale = _bpb_per_nat(exp)
        for c in report.comparisons(exp):
            verdict, needed = (
                (c.verdict, c.seeds_needed) if margin_bpb is None else _bpb_verdict(exp, c.arm, margin_bpb)
            )
            rows.append(
                {
                    "cell": gc.cell.name,
                    "arm": c.arm,
                    "reference": exp.reference,
                    "vocab_size": ref.config["model"]["vocab_size"],
                    "tokenizer": ref.config["data"]["tokenizer"],
                    "n_embd": ref.config["model"]["n_embd"],
                    "n_layer": ref.config["model"]["n_layer"],
                    "parameters": params,
                    "non_embedding_parameters": non_emb,
                    "embedding_share": 1 - non_emb / params,  # (wte + wpe) / all parameters of the reference model
                    "vocab_use": (vocab_use or {}).get(gc.cell.name),
                    "tokens": ref.summary["tokens"],
                    "epochs": ref.summary["tokens"] / train_tokens if train_tokens else None,
                    "lr_reference": _arm_lr(exp, exp.reference),
                    "lr_arm": _arm_lr(exp, c.arm),
                    "delta": c.mean,
                    "ci": c.ci,
                    "verdict": verdict,
                    "seeds": len(c.diffs),
                    "seeds_needed": needed,
                    "margin": c.margin,
                    "margin_bpb": margin_bpb,
                    "bpb_per_nat": scale,
                    "band_bpb": margin_bpb if margin_bpb is not None else (None if scale is None else c.margin * scale),
                    "delta_bpb": None if scale is None else c.mean * scale,
                    "ci_bpb": None if scale is None else (c.ci[0] * scale, c.ci[1] * scale),
                    "diffs_bpb": None if scale is None else [d * scale for d in c.diffs],
                }
            )
    return rows


def cells_vocab_use(cells: list[GridCell]) -> dict[str, dict]:
    """Cell name -> its vocabulary use (:func:`experiment.vocab_use.cell_vocab_use`; each data folder counted
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

    Ties rank the smaller rate first, as :func:`experiment.plan.best_lr` does (a lead of 0).
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
