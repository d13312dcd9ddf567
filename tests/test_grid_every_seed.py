"""--grid cells tuned alike: with --lr-grid each cell trains every rate on every seed and reads each arm's fitted
best against the reference's, and the model across cells reads the jackknife's pseudo-values as seed-level Δ.

Run: ``python -m pytest -q tests/test_grid_every_seed.py``  (CPU; the end-to-end test is ``slow``).
"""

import json
import statistics

import numpy as np
import pytest
from fake_runs import arm_run
from helpers import error_line, tiny_compare_args

import compare
from core.errors import UserError
from experiment import best
from experiment.ab import readout
from experiment.grid.run import Axis, _remember_grid, gap_rows, load_grid, lr_tuning
from experiment.grid.model import cross_cell_models
from experiment.runs.record import EVERY_SEED, ONE_SEED
from experiment.runs.plan import Plan
from experiment.runs import seeds

RATES = (1e-3, 2e-3, 4e-3)
SEEDS = 4


def _swept_cell(grid, name, n_embd, delta, bpb_per_nat, non_emb):
    """Every arm at every rate on every seed: tied's loss a bowl in log rate around 2e-3, untied's ``delta`` lower
    at every rate, plus one noise draw per (arm, seed)."""
    noise = np.random.default_rng(n_embd).normal(0, 0.004, size=(2, SEEDS))
    for a, arm in enumerate(("tied", "untied")):
        for lr in RATES:
            for s in range(SEEDS):
                loss = 3.0 + 0.5 * (np.log10(lr) - np.log10(2e-3)) ** 2 + (delta if a else 0.0) + noise[a, s]
                summary = {
                    "final_val_bpb": float(loss) * bpb_per_nat,
                    "non_embedding_parameters": non_emb,
                    "parameters": non_emb * 2,
                    "tokens": 1000,
                    "train_tokens": 4000,
                }
                arm_run(
                    grid / name,
                    arm,
                    s,
                    float(loss),
                    summary=summary,
                    name=f"{arm}-lr{lr:g}-s{s}",
                    model__n_embd=n_embd,
                    train__learning_rate=lr,
                )


def _swept_grid(tmp_path, cells):
    grid = tmp_path / "g"
    for name, n_embd, delta, scale, non_emb in cells:
        _swept_cell(grid, name, n_embd, delta, scale, non_emb)
    settings = {
        "axes": {"model.n_embd": sorted(n for _, n, *_ in cells)},
        "arms": ["tied", "untied"],
        "seeds": SEEDS,
        "lr_grid": list(RATES),
        "lr_tuning": EVERY_SEED,
        "margin": 0.01,
        "reference": "tied",
        "config": None,
    }
    (grid / "grid.json").write_text(json.dumps(settings))
    return grid


def test_an_every_seed_cell_reads_best_against_best_in_nats_and_bits_per_byte(tmp_path):
    """A swept cell's row is its own best-against-best comparison: Δ, interval, verdict and the fitted best rates,
    in bits per byte the same numbers times the cell's constant."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 0.5, 1000)])
    _, (cell,) = load_grid(grid)
    assert cell.exp.swept and not cell.exp.tuning
    (row,) = gap_rows([cell])
    (b,) = readout.best_comparisons(cell.exp)
    assert row["readout"] == "best against best" and row["verdict"] == b.verdict == "better"
    assert row["delta"] == pytest.approx(b.delta) and row["delta_bpb"] == pytest.approx(b.delta * 0.5)
    assert row["ci_bpb"] == pytest.approx((b.ci[0] * 0.5, b.ci[1] * 0.5)) and row["seeds"] == SEEDS
    assert row["lr_arm"] == pytest.approx(b.best_lr["untied"]) and 1e-3 < row["lr_reference"] < 4e-3


def test_the_pseudo_values_carry_the_jackknifes_standard_error(tmp_path):
    """The seed-level Δ a swept cell hands the model across cells are the jackknife's pseudo-values centred on
    the table's Δ: their standard error is the interval's exactly, and their mean is Δ itself (the pseudo-
    values' own mean is Δ's bias-corrected jackknife estimate, which no table shows)."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 1.0, 1000)])
    _, (cell,) = load_grid(grid)
    (b,) = readout.best_comparisons(cell.exp)
    (row,) = gap_rows([cell])
    assert statistics.fmean(row["diffs_bpb"]) == pytest.approx(b.delta) == pytest.approx(row["delta_bpb"])
    assert statistics.stdev(row["diffs_bpb"]) == pytest.approx(statistics.stdev(b.pseudo)) and len(b.pseudo) == SEEDS
    assert statistics.stdev(b.pseudo) / SEEDS**0.5 == pytest.approx(b.se, rel=1e-9)
    table = readout.best_table(cell.exp)
    leave_out = [
        best.best_of(table, "untied", [t for t in range(SEEDS) if t != s])[0]
        - best.best_of(table, "tied", [t for t in range(SEEDS) if t != s])[0]
        for s in range(SEEDS)
    ]
    corrected = SEEDS * b.delta - (SEEDS - 1) * statistics.fmean(leave_out)
    assert statistics.fmean(b.pseudo) == pytest.approx(corrected, abs=1e-12)


def test_a_swept_cell_with_one_seed_at_every_rate_is_in_progress(tmp_path):
    """Best against best needs 2 seeds at every rate: a cell whose other seeds have not finished every rate is
    reported in progress, and the report of the grid is still written."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 1.0, 1000)])
    for run in grid.glob("n_embd-64/*-s[123]"):
        (run / "summary.json").unlink()
    _, (cell,) = load_grid(grid)
    assert cell.exp is None and cell.cell.error.startswith("in progress: 1 seed has every rate of every arm")


def test_the_model_across_swept_cells_recovers_a_known_trend(tmp_path):
    """Δ = −0.1 + 0.02 per decade of non-embedding parameters, every cell swept: the size term comes back near 0.02
    and the grid report says how its cells were read, with no not-calibrated label."""
    cells = [(f"n_embd-{n}", n, -0.1 + 0.02 * k, 1.0, 10**k) for n, k in ((32, 3), (64, 4), (128, 5), (256, 6))]
    grid = _swept_grid(tmp_path, cells)
    _, loaded = load_grid(grid)
    (arm,) = cross_cell_models(gap_rows(loaded))
    (size,) = [m for m in arm.models if m.moderator == "log10(non-embedding params)"]
    assert size.terms[1].coef == pytest.approx(0.02, abs=0.01)
    assert compare.main([str(grid)]) == 0
    md = (grid / "report.md").read_text()
    assert "every rate of 0.001, 0.002, 0.004 trained by every arm on every seed" in md
    assert "jackknife's pseudo-values" in md and "Not calibrated" not in md


def test_a_grid_keeps_the_design_it_was_made_with(tmp_path):
    """grid.json records --lr-tuning; a later command with the other design is refused, and a grid.json from
    before the field existed, with rates, is a one-seed grid."""
    axes = [Axis("model.n_embd", (64,))]
    _remember_grid(
        tmp_path,
        Plan(config="configs/debug.toml", overrides={}, arms=["tied", "untied"], seeds=3, lr_grid=[2e-3, 4e-3]),
        axes,
    )
    assert lr_tuning(json.loads((tmp_path / "grid.json").read_text())) == EVERY_SEED
    with pytest.raises(UserError, match="--lr-tuning every-seed"):
        plan = Plan(
            config="configs/debug.toml",
            overrides={},
            arms=["tied", "untied"],
            seeds=3,
            lr_grid=[2e-3, 4e-3],
            lr_tuning=ONE_SEED,
        )
        _remember_grid(tmp_path, plan, axes)
    assert lr_tuning({"lr_grid": [2e-3]}) == ONE_SEED and lr_tuning({"lr_grid": []}) is None


def test_a_grid_with_rates_takes_the_every_seed_design_and_its_refusals(tmp_path, capsys):
    """--grid with --lr-grid plans the every-seed design by default; --lr-widen is refused with it before any
    training, as in an ordinary experiment."""
    argv = [
        "grid",
        *tiny_compare_args(tmp_path),
        "--axis",
        "model.n_embd=16",
        "--lr-grid",
        "1e-3,2e-3",
        "--lr-widen",
        "1",
    ]
    assert compare.main(argv) == 2
    assert "--lr-widen does not go with --lr-grid's every-seed design" in error_line(capsys)
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_a_grid_trains_every_rate_on_every_seed_in_each_cell(tmp_path):
    """--axis model.n_embd=16 --lr-grid 1e-3,4e-3 --seeds 2: the cell holds <arm>-lr<lr>-s<i> for every arm,
    rate and seed and no tuning seed; the cell's report and the grid's read best against best.  (One cell keeps
    this test at 8 tiny runs; tests/test_grid.py trains a grid of two.)"""
    argv = ["grid", *tiny_compare_args(tmp_path), "--seeds", "2", "--axis", "model.n_embd=16", "--lr-grid", "1e-3,4e-3"]
    assert compare.main(argv) == 0
    grid = tmp_path / "exp"
    assert json.loads((grid / "grid.json").read_text())["lr_tuning"] == EVERY_SEED
    for cell in ("n_embd-16",):
        folders = {p.name for p in (grid / cell).iterdir() if p.is_dir() and p.name != ".claims"}
        assert folders == {f"{a}-lr{lr}-s{i}" for a in ("tied", "untied") for lr in ("0.001", "0.004") for i in (0, 1)}
        assert json.loads((grid / cell / "verdict.json").read_text())["lr_tuning"] == EVERY_SEED
    md = (grid / "report.md").read_text()
    assert "1 of 1 cells" in md and "trained by every arm on every seed" in md and "Not calibrated" not in md


def test_a_margin_in_bits_per_byte_reads_swept_cells_best_against_best(tmp_path):
    """--margin-bpb on a swept grid: each row's verdict is best against best in bits per byte (Holm over the
    arms), and the header names the jackknife interval, not a paired t one."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 0.5, 1000)])
    _, (cell,) = load_grid(grid)
    (row,) = gap_rows([cell], margin_bpb=0.02)
    (b,) = readout.best_comparisons(cell.exp, 0.02)
    assert row["verdict"] == b.verdict == "better" and row["band_bpb"] == 0.02
    assert compare.main([str(grid), "--margin-bpb", "0.02"]) == 0
    md = (grid / "report.md").read_text()
    assert "the 95% jackknife interval of the bests' Δ bpb excludes 0 (Holm-adjusted across arms)" in md


def test_a_cell_holding_runs_it_did_not_train_is_labelled_in_the_grids_report(tmp_path):
    """A cell whose experiment.json notes the runs it trained (experiment.runs.ledger) and holds others (copied
    in): the grid's report says which cell's verdict is not calibrated, and why."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 0.5, 1000)])
    (grid / "n_embd-64" / "experiment.json").write_text(json.dumps({"config": {}, "margin": 0.01, "trained": {}}))
    _, (cell,) = load_grid(grid)
    (why,) = cell.exp.provenance
    assert why.startswith(f"{SEEDS * len(RATES) * 2} runs (") and "not trained by this experiment" in why
    assert compare.main([str(grid)]) == 0
    assert "**Not calibrated:** cell n_embd-64: " in (grid / "report.md").read_text()


def test_a_cell_whose_pairs_trained_from_other_code_is_labelled_in_the_grids_report(tmp_path, monkeypatch):
    """A cell's seed 0 runs of untied at another commit whose training code differs (experiment.runs.seeds):
    the grid's report names the cell."""
    grid = _swept_grid(tmp_path, [("n_embd-64", 64, -0.05, 0.5, 1000)])
    for run in (grid / "n_embd-64").iterdir():
        commit = ("b" if run.name.startswith("untied") and run.name.endswith("-s0") else "a") * 40
        (run / "env.json").write_text(json.dumps({"git_commit": commit, "training_code_diff": None}))
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: False)
    assert compare.main([str(grid)]) == 0
    assert (
        "**Not calibrated:** cell n_embd-64: runs of 1 seed trained from different code"
        in (grid / "report.md").read_text()
    )
