"""The experiment's figures (experiment/ab/figures.py): PNGs written, log-x step axes, nothing clipped.

Run: ``python -m pytest -q tests/test_figures.py``  (CPU, offline, seconds).  The experiment is
three arms x three seeds of hand-written run folders (``fake_runs.py``) with a two-point
learning-rate grid on a fourth seed.
"""

import math
from unittest import mock

import pytest
from fake_runs import UNIGRAM, fake_experiment, fake_tuning
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from experiment.ab import figures
from experiment.runs import folders
from experiment.grid.markdown import gap_figure

PNG = b"\x89PNG\r\n\x1a\n"
ARMS = ("tied", "untied", "tied-bias")
FINALS = [(3.0, 2.85, 3.005), (3.1, 2.97, 3.1), (3.2, 3.04, 3.19)]  # per seed, one per arm
STEPS = (0, 5, 10, 20)


def _experiment(root, tuning=True):
    """The 3-arm, 3-seed fake experiment (unigram baseline recorded), with or without its LR grid."""
    paths = fake_experiment(root, FINALS, [(UNIGRAM,) * 3] * 3, arms=ARMS, steps=STEPS)
    grid = (
        (
            fake_tuning(root, "tied", 99, [(1e-3, 3.3), (2e-3, 3.2)])
            + fake_tuning(root, "untied", 99, [(1e-3, 3.1), (2e-3, 3.25)])
        )
        if tuning
        else []
    )
    return folders.check_experiment(
        folders.load_runs(paths), reference="tied", margin=0.01, tuning=folders.load_runs(grid)
    )


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    """The experiment with its tuning grid, built once for the module."""
    return _experiment(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize(
    "plot, name",
    [
        (figures.plot_val_loss, "val_loss_vs_step.png"),
        (figures.plot_paired_difference, "paired_difference_vs_step.png"),
        (figures.plot_loss_vs_lr, "loss_vs_lr.png"),
    ],
)
def test_each_plot_writes_a_png_and_returns_its_name(exp, tmp_path, plot, name):
    """Each plot function writes a PNG file in the folder and returns its bare file name."""
    assert plot(exp, tmp_path) == name
    assert (tmp_path / name).read_bytes()[:8] == PNG


def test_plot_all_draws_every_figure_in_report_order(exp, tmp_path):
    """plot_all returns the three names in order, each written; every one has a report caption."""
    names = figures.plot_all(exp, tmp_path)
    assert names == ["val_loss_vs_step.png", "paired_difference_vs_step.png", "loss_vs_lr.png"]
    assert all((tmp_path / n).is_file() and n in figures.CAPTIONS for n in names)


def test_loss_vs_lr_is_skipped_without_tuning_runs(tmp_path):
    """No tuning runs: no LR figure (None, no file), and plot_all leaves it out."""
    exp = _experiment(tmp_path / "runs", tuning=False)
    assert figures.plot_loss_vs_lr(exp, tmp_path) is None and not (tmp_path / "loss_vs_lr.png").exists()
    assert figures.plot_all(exp, tmp_path) == ["val_loss_vs_step.png", "paired_difference_vs_step.png"]


def test_val_loss_plot_is_log_x_and_its_y_limits_hold_every_plotted_value(exp):
    """Log-x from the first eval after step 0 (the label says step 0 is ln V); no plotted value clipped,
    the unigram baseline included."""
    ax = figures.val_loss_figure(exp).axes[0]
    assert ax.get_xscale() == "log"
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    xs = [x for line in ax.get_lines() if len(line.get_xdata()) > 2 for x in line.get_xdata()]
    low, high = ax.get_ylim()
    assert low < min(ys) and max(ys) < high and UNIGRAM["unigram_val_loss"] in ys
    assert min(xs) == STEPS[1] and f"{math.log(50257):.2f}" in ax.get_xlabel()


def test_val_loss_plot_has_a_thin_line_per_seed_and_a_thick_mean_per_arm(exp):
    """Per arm: one thin line per seed and one thick mean line labelled with the arm; the legend says
    what the thin lines are and how many seeds the mean is of."""
    ax = figures.val_loss_figure(exp).axes[0]
    curves = [line for line in ax.get_lines() if len(line.get_xdata()) == len(STEPS) - 1]
    thick = [line for line in curves if line.get_linewidth() > 2]
    assert len(curves) == len(ARMS) * 4 and sorted(line.get_label() for line in thick) == sorted(ARMS)
    legend = ax.get_legend()
    assert "mean of 3 seeds" in legend.get_title().get_text()
    assert "thin lines: single seeds" in [t.get_text() for t in legend.get_texts()]


def test_paired_difference_has_one_panel_per_arm_with_mean_band_zero_and_margin(exp):
    """One log-x panel per non-reference arm titled 'arm − tied'; its thick line is the mean per-seed
    difference; a 95% t band, a zero line and the ±margin band are drawn and labelled."""
    fig = figures.paired_difference_figure(exp)
    assert [ax.get_title() for ax in fig.axes] == ["untied − tied", "tied-bias − tied"]
    ax = fig.axes[0]  # untied − tied
    assert ax.get_xscale() == "log"
    mean = next(line for line in ax.get_lines() if line.get_label() == "mean of 3 seeds")
    final = sum(u - t for t, u, _ in FINALS) / 3
    assert mean.get_ydata()[-1] == pytest.approx(final)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "95% t interval of the mean (n − 1 df)" in labels
    assert "equivalence margin ±δ (δ = 0.01 nats)" in labels
    assert any(list(line.get_ydata()) == [0.0, 0.0] for line in ax.get_lines())


def test_paired_band_is_the_t_interval_not_the_range():
    """The band half-width is t_{0.975, n-1} · sd / sqrt(n), wider than min–max for 3 seeds; none for one seed."""
    low, high = figures._t_band([(-0.15, -0.13, -0.16)])
    assert (high[0] - low[0]) / 2 == pytest.approx(4.302653 * 0.0152753 / math.sqrt(3), rel=1e-4)
    assert figures._t_band([(-0.15,)]) is None


def test_loss_vs_lr_marks_each_arms_chosen_point(exp):
    """One line per tuned arm on a log-x axis; the highlighted point is each arm's lowest-loss learning rate;
    the title says these are the tuning-seed runs."""
    ax = figures.loss_vs_lr_figure(exp).axes[0]
    stars = [
        (line.get_xdata()[0], line.get_ydata()[0])
        for line in ax.get_lines()
        if line.get_marker() == "*" and len(line.get_xdata())
    ]
    assert ax.get_xscale() == "log" and sorted(stars) == [(1e-3, 3.1), (2e-3, 3.2)]
    assert "tuning-seed" in ax.get_title()


def _clipped_texts(fig) -> list[str]:
    """The texts of ``fig`` that, drawn as saved (dpi 120, its layout engine), reach outside the canvas.

    Every Text artist matplotlib actually draws is recorded with its window extent (tick labels
    outside the axis limits are not drawn, so not counted).
    """
    drawn = []
    real_draw = Text.draw

    def draw_and_record(text, renderer):
        real_draw(text, renderer)
        if text.get_visible() and text.get_text().strip():
            drawn.append((text.get_text(), text.get_window_extent(renderer)))

    fig.set_dpi(120)
    with mock.patch.object(Text, "draw", draw_and_record):
        FigureCanvasAgg(fig).draw()
    width, height = fig.bbox.width, fig.bbox.height
    assert drawn  # the recording works
    return [t for t, box in drawn if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > width + 0.5 or box.y1 > height + 0.5]


GRID_ARMS = ("untied", "tied-bias", "untied-split")


def _grid_rows(arms) -> list[dict]:
    """gap_rows-like rows: two tokenizers at two sizes, per arm."""
    return [
        {
            "arm": arm,
            "reference": "tied",
            "tokenizer": tok,
            "vocab_size": v,
            "non_embedding_parameters": n,
            "delta_bpb": d,
            "ci_bpb": (d - 0.1, d + 0.1),
            "margin": 0.01,
            "bpb_per_nat": 0.5,
        }
        for arm in arms
        for tok, v, d in (("char", 71, 0.1), ("gpt2", 50257, -0.1))
        for n in (10_000, 100_000)
    ]


@pytest.mark.parametrize(
    "arms",
    [("tied", "untied"), ARMS, ("tied", "untied", "tied-bias", "untied-split")],
    ids=["1-panel", "2-panels", "3-panels"],
)
@pytest.mark.parametrize("build", ["val_loss", "paired", "gap"])
def test_no_text_is_clipped_at_any_panel_count(tmp_path, arms, build):
    """Every title, label, tick label and legend text of each figure lies inside the saved canvas, for one
    comparison panel (the default tied-vs-untied report) and for several."""
    if build == "gap":
        fig = gap_figure(_grid_rows(GRID_ARMS[: len(arms) - 1]))
    else:
        paths = fake_experiment(
            tmp_path,
            [(3.0 + 0.01 * i,) * len(arms) for i in range(3)],
            [(UNIGRAM,) * len(arms)] * 3,
            arms=arms,
            steps=STEPS,
        )
        exp = folders.check_experiment(folders.load_runs(paths), reference="tied", margin=0.01)
        fig = (figures.val_loss_figure if build == "val_loss" else figures.paired_difference_figure)(exp)
    assert fig.get_layout_engine() is not None  # constrained layout: matplotlib makes room for the labels
    assert _clipped_texts(fig) == []
