"""The scaling view's statistics across cells: the random-effects model, the bpb margin, contrasts and slopes.

Run: ``python -m pytest -q tests/test_grid_model.py``  (CPU, offline, seconds).
Rows are written by hand with known answers: balanced cells (the same seeds in each), so the mixed
model's fixed effects are the least-squares fit of the cell means and its τ² the one-way ANOVA's.
"""

import json
import math

import numpy as np
import pytest
from fake_runs import arm_run
from scipy import stats

import compare
from core.errors import UserError
from experiment.grid.run import Axis, GridCell, cells_of
from experiment.grid.model import Readout, check_readout, contrasts, cross_cell_models, parse_slope_within, slope

NOISE = (-0.01, -0.004, 0.003, 0.011)  # a cell's seeds around its mean (sum 0, so the cell mean is exact)


def _row(cell, mean, share=0.5, tokenizer="bpe:4096", never=None, noise=NOISE):
    """A gap row (experiment.grid.run.gap_rows) of arm untied with Δ bpb = mean + noise per seed."""
    d = mean + np.array(noise)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return {
        "cell": cell,
        "arm": "untied",
        "reference": "tied",
        "delta_bpb": float(d.mean()),
        "seeds": len(d),
        "ci_bpb": (d.mean() - half, d.mean() + half),
        "diffs_bpb": list(d),
        "embedding_share": share,
        "tokenizer": tokenizer,
        "non_embedding_parameters": 1000,
        "vocab_use": None if never is None else {"rows_never_seen": never, "vocab_size": 100},
    }


def _model(rows, moderator):
    (arm,) = cross_cell_models(rows)
    return next(m for m in arm.models if m.moderator == moderator)


def test_tau_is_the_between_cell_sd_of_the_one_way_anova():
    """With no moderator and balanced cells, REML τ² = (MSB − MSW) / n and σ² = MSW (one-way ANOVA), and the
    intercept is the mean of the cell means."""
    means = [-0.08, -0.02, 0.01, 0.05, 0.12]
    rows = [_row(f"c{i}", m, noise=np.roll(NOISE, i)) for i, m in enumerate(means)]
    m = _model(rows, "none")
    n = len(NOISE)
    msb, msw = n * np.var(means, ddof=1), np.var(NOISE, ddof=1)
    assert m.tau**2 == pytest.approx((msb - msw) / n, rel=1e-3) and m.sigma**2 == pytest.approx(msw, rel=1e-3)
    assert m.terms[0].coef == pytest.approx(np.mean(means), abs=1e-9)


def test_cochrans_q_is_the_weighted_spread_of_the_cell_means():
    """Q = Σ w (Δ − weighted mean)², w = 1/SE², on cells − 1 df, p from χ²: Cochran's Q with no moderator."""
    rows = [_row("a", -0.05), _row("b", 0.0, noise=[2 * x for x in NOISE]), _row("c", 0.04)]
    m = _model(rows, "none")
    y = np.array([r["delta_bpb"] for r in rows])
    w = np.array([len(r["diffs_bpb"]) / np.var(r["diffs_bpb"], ddof=1) for r in rows])
    q = float(np.sum(w * (y - np.sum(w * y) / np.sum(w)) ** 2))
    assert (m.q, m.q_df) == (pytest.approx(q, rel=1e-9), 2) and m.q_p == pytest.approx(stats.chi2.sf(q, 2))


def test_the_share_moderator_is_per_10_percentage_points():
    """Cell means exactly 0.05 − 0.01 per 10 percentage points of embedding share: the share term is −0.01, the
    intercept 0.05, and nothing is left between cells (τ ≈ 0)."""
    rows = [_row(f"c{i}", 0.05 - 0.01 * 10 * s, share=s) for i, s in enumerate((0.1, 0.3, 0.5, 0.8, 0.9))]
    m = _model(rows, "embedding share")
    assert m.terms[1].coef == pytest.approx(-0.01, abs=1e-9) and m.terms[0].coef == pytest.approx(0.05, abs=1e-9)
    assert m.terms[1].name == "per 10 percentage points" and m.tau < 1e-3


def test_the_family_factor_gives_differences_of_family_means():
    """Tokenizer family as a factor (char the baseline): its terms are each family's mean Δ minus char's."""
    cells = {"char": (0.10, 0.14), "bpe:1024": (-0.02,), "bpe:4096": (0.0,), "gpt2": (-0.07, -0.05)}
    rows = [_row(f"{tok}-{i}", mean, tokenizer=tok) for tok, ms in cells.items() for i, mean in enumerate(ms)]
    m = _model(rows, "tokenizer family")
    assert [t.name for t in m.terms] == ["intercept", "bpe − char", "gpt2 − char"]
    assert [t.coef for t in m.terms] == pytest.approx([0.12, -0.01 - 0.12, -0.06 - 0.12], abs=1e-9)


def test_aic_prefers_the_moderator_the_cells_follow():
    """Cell means on a line in the never-seen fraction, unrelated to share: the never-seen model has the lowest
    AIC (maximum-likelihood refits), below the model without a moderator."""
    never = (0, 10, 30, 60, 64)
    shares = (0.5, 0.9, 0.2, 0.6, 0.3)
    rows = [_row(f"c{i}", 0.04 - 0.02 * v / 10, share=s, never=v) for i, (v, s) in enumerate(zip(never, shares))]
    (arm,) = cross_cell_models(rows)
    aic = {m.moderator: m.aic for m in arm.models}
    assert min(aic, key=aic.get) == "never-seen fraction" and aic["never-seen fraction"] < aic["none"] - 2


def test_the_never_seen_model_is_not_fitted_when_a_cells_use_is_unknown():
    """A cell without vocabulary use (no cache, no vocab_use.json) leaves the never-seen model out, with the reason."""
    rows = [_row("a", 0.0, never=0), _row("b", 0.01, share=0.6, never=40), _row("c", 0.03, share=0.7)]
    (arm,) = cross_cell_models(rows)
    assert "unknown" in arm.not_fitted["never-seen fraction"]
    assert "never-seen fraction" not in {m.moderator for m in arm.models}


def test_a_cell_with_one_paired_seed_is_left_out_of_the_models():
    """A cell still at one paired seed (no SE) is listed as left out; the models use the others."""
    one = _row("young", 0.3, noise=(0.0,))
    (arm,) = cross_cell_models([_row("a", 0.0), _row("b", 0.02), _row("c", -0.01), one])
    assert arm.left_out == {"young": "1 paired seed(s)"} and arm.cells == ["a", "b", "c"]


def test_a_cell_whose_best_sits_at_its_grids_edge_enters_no_comparison_across_cells():
    """A cell's Δ that its own report does not read (best at the grid's edge) stays out of the models, the
    contrasts and the slope, each saying why."""
    edge = {**_row("edge", 0.3, share=0.9), "edge": True}
    rows = [_row("a", 0.0, share=0.2), _row("b", 0.02, share=0.5), _row("c", -0.01, share=0.7), edge]
    (arm,) = cross_cell_models(rows)
    assert arm.left_out == {"edge": "best at its grid's edge (not read)"} and arm.cells == ["a", "b", "c"]
    (c,) = contrasts(rows, "a", "edge")
    assert c.missing == "edge: best at its grid's edge (not read)"
    (s,) = slope(rows, ["a", "b", "c", "edge"])
    assert [u[0] for u in s.cells] == ["a", "b", "c"]


def test_a_contrast_is_the_welch_difference_of_two_cells():
    """C = Δ(A) − Δ(B) with Welch's interval: mean difference ± t_{0.975, ν} × √(s_A²/n_A + s_B²/n_B), ν the
    Welch–Satterthwaite df (unequal seeds and spreads)."""
    a = _row("A", -0.07, noise=(-0.02, 0.0, 0.01, 0.01, 0.0, -0.01, 0.02, -0.01))
    b = _row("B", 0.01, noise=(-0.05, 0.05, 0.0))
    (c,) = contrasts([a, b], "A", "B")
    va, vb = np.var(a["diffs_bpb"], ddof=1) / 8, np.var(b["diffs_bpb"], ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 7 + vb**2 / 2)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert c.c == pytest.approx(-0.08) and c.df == pytest.approx(df)
    assert c.ci == pytest.approx((-0.08 - half, -0.08 + half)) and (c.n_a, c.n_b) == (8, 3)


def test_the_slope_within_cells_is_per_10_percentage_points():
    """Δ exactly 0.02 − 0.015 per 10 percentage points of share over four cells: the slope is −0.015, and a
    cell outside the subset does not enter it."""
    rows = [_row(f"bpe{i}", 0.02 - 0.015 * 10 * s, share=s) for i, s in enumerate((0.2, 0.45, 0.7, 0.84))]
    rows.append(_row("char", 0.5, share=0.03))
    (s,) = slope(rows, ["bpe0", "bpe1", "bpe2", "bpe3"])
    assert (
        s.slope == pytest.approx(-0.015, abs=1e-9)
        and s.df == 2
        and [c[0] for c in s.cells] == ["bpe0", "bpe1", "bpe2", "bpe3"]
    )


def test_a_cell_whose_seeds_agree_by_chance_does_not_outweigh_the_others_in_the_slope():
    """Cells of equal seed counts weigh alike whatever their spread: the slope is the unweighted least-squares
    slope of the cell means, so one cell with a tiny SE (seeds that agreed by chance) cannot decide it."""
    shares, means = (0.2, 0.45, 0.7, 0.84), (0.01, -0.02, 0.03, 0.0)
    noises = ([0.0, 0.01, -0.01], [0.0, 1e-5, -1e-5], [0.0, 0.02, -0.02], [0.0, 0.01, -0.01])
    rows = [_row(f"bpe{i}", m, share=sh, noise=n) for i, (sh, m, n) in enumerate(zip(shares, means, noises))]
    (s,) = slope(rows, [r["cell"] for r in rows])
    want = stats.linregress([10 * sh for sh in shares], means)
    assert s.slope == pytest.approx(want.slope, rel=1e-9)
    half = stats.t.ppf(0.975, 2) * want.stderr
    assert s.ci == pytest.approx((want.slope - half, want.slope + half), rel=1e-9)


def test_the_slope_interval_covers_a_zero_slope_95_percent_of_the_time_at_3_seeds_a_cell():
    """9 cells of 3 seeds each, no slope and no cell effect: the 95% interval covers 0 in about 95% of 400
    simulated grids (weights 1/SE², from 3 seeds, covered about 82%: results/stats-limits-2026-11-29)."""
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(400):
        rows = [_row(f"c{c}", 0.0, share=0.02 * (c + 1), noise=list(rng.normal(0, 0.01, 3))) for c in range(9)]
        (s,) = slope(rows, [r["cell"] for r in rows])
        covered += s.ci[0] <= 0 <= s.ci[1]
    assert 0.91 <= covered / 400 <= 0.99


def _cells(tmp_path):
    axes = [Axis("model.n_embd", (64, 128)), Axis("data.tokenizer", ("bpe:1024", "gpt2"))]
    return [GridCell(c, None) for c in cells_of(axes, tmp_path)]


def test_a_slope_subset_that_varies_in_another_axis_is_refused(tmp_path):
    """--slope-within over tokenizers at two n_embd would mix body sizes into the slope: refused, naming the fix."""
    readout = Readout(slope_within=parse_slope_within(["data.tokenizer=bpe:1024,gpt2"]))
    with pytest.raises(UserError, match="differ in model.n_embd too .*--slope-within model.n_embd=64"):
        check_readout(readout, _cells(tmp_path))
    check_readout(
        Readout(slope_within=parse_slope_within(["data.tokenizer=bpe:1024,gpt2", "model.n_embd=128"])), _cells(tmp_path)
    )


def test_a_contrast_naming_a_cell_the_grid_lacks_is_refused(tmp_path):
    """--contrast with a cell name not in grid.json's product is a one-line error listing the cells."""
    with pytest.raises(UserError, match="no cell 'n_embd-128_tokenizer-bpe32768'.*n_embd-64_tokenizer-bpe1024"):
        check_readout(
            Readout(contrasts=[("n_embd-64_tokenizer-gpt2", "n_embd-128_tokenizer-bpe32768")]), _cells(tmp_path)
        )


def _grid(tmp_path, deltas):
    """A grid folder of one gpt2 cell at n_embd 128: tied and untied, Δ nats per seed ``deltas``, 0.5 bpb/nat."""
    cell = tmp_path / "g" / "n_embd-128_tokenizer-gpt2"
    for s, d in enumerate(deltas):
        for arm, loss in (("tied", 3.0 + s / 100), ("untied", 3.0 + s / 100 + d)):
            arm_run(
                cell,
                arm,
                s,
                loss,
                summary={
                    "final_val_bpb": loss * 0.5,
                    "non_embedding_parameters": 1000,
                    "parameters": 4000,
                    "tokens": 1000,
                    "train_tokens": 4000,
                },
                model__n_embd=128,
            )
    (tmp_path / "g" / "grid.json").write_text(
        json.dumps(
            {
                "axes": {"model.n_embd": [128], "data.tokenizer": ["gpt2"]},
                "arms": ["tied", "untied"],
                "seeds": 5,
                "lr_grid": [],
                "margin": 0.01,
                "reference": "tied",
                "config": None,
            }
        )
    )
    return tmp_path / "g"


def test_a_margin_in_bits_per_byte_sets_the_verdicts_and_is_stated(tmp_path):
    """Δ centred on 0 whose 90% interval is ±0.015 nats (±0.0075 bpb): inconclusive at the cell's ±0.01 nats,
    equivalent at --margin-bpb 0.02, and the header states the margin and the rule."""
    grid = _grid(tmp_path, [-0.02, 0.0, 0.02, -0.01, 0.01])
    assert compare.main([str(grid)]) == 0
    assert "| untied | 5 |" in (grid / "report.md").read_text() and "inconclusive" in (grid / "report.md").read_text()
    assert compare.main([str(grid), "--margin-bpb", "0.02"]) == 0
    md = (grid / "report.md").read_text()
    assert "untied** against tied, over 1 cells: equivalent in 1" in md
    assert "±0.02 bpb (`--margin-bpb 0.02`)" in md and "90% interval lies inside ±0.02 bpb" in md


def test_the_report_states_what_the_embedding_share_counts(tmp_path):
    """The grid report says the embedding share counts the token and the position embedding (wte and wpe)."""
    grid = _grid(tmp_path, [-0.02, 0.0, 0.02])
    assert compare.main([str(grid)]) == 0
    assert "Embedding share: the token and position embeddings (wte" in (grid / "report.md").read_text()


def test_the_readouts_asked_for_are_a_section_of_the_report(tmp_path):
    """--contrast names two cells: the report gains its section (here one cell is unfinished: said so)."""
    grid = _grid(tmp_path, [-0.02, 0.0, 0.02])
    settings = json.loads((grid / "grid.json").read_text())
    settings["axes"]["data.tokenizer"].append("bpe:32768")
    (grid / "grid.json").write_text(json.dumps(settings))
    argv = [str(grid), "--contrast", "n_embd-128_tokenizer-gpt2,n_embd-128_tokenizer-bpe32768"]
    assert compare.main(argv) == 0
    md = (grid / "report.md").read_text()
    assert "### Contrast C = Δ(`n_embd-128_tokenizer-gpt2`) − Δ(`n_embd-128_tokenizer-bpe32768`)" in md
    assert "not available (n_embd-128_tokenizer-bpe32768: not finished" in md


@pytest.mark.parametrize(
    "argv, match",
    [
        (["runs/x/tied-s0", "--contrast", "a,b"], "--contrast cannot apply to A/B run folders"),
        (
            ["grid", "--config", "c.toml", "--axis", "model.n_embd=64,128", "--slope-within", "model.n_embd=64,128"],
            "unknown option --slope-within",
        ),
        (["g", "--margin-bpb", "0"], "--margin-bpb must be a finite number > 0"),
        (["g", "--contrast", "a"], "is not two different cell names"),
        (["g", "--slope-within", "model.n_embd"], "is not KEY=V1,V2"),
    ],
)
def test_bad_report_options_are_one_line_errors(argv, match, capsys):
    """Readouts outside a grid folder's report (on run folders, or while training), a margin <= 0, a contrast of one cell, a malformed slope clause:
    exit 2 with one line."""
    assert compare.main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_an_interval_that_is_not_a_number_is_said_to_be_missing_not_to_cover_0():
    """A fit whose standard errors came out NaN has no interval: the line says so, never 'covers 0'."""
    from experiment.grid import markdown
    from experiment.grid.model import Contrast

    line = markdown._contrast_line(Contrast("untied", "a", "b", c=0.1, ci=(math.nan, math.nan), df=math.nan), "tied")
    assert "no interval: its standard error could not be computed" in line and "covers 0" not in line
    line = markdown._contrast_line(Contrast("untied", "a", "b", c=0.1, ci=(-0.1, 0.3), df=4.0), "tied")
    assert "covers 0" in line
