"""compare.py --grid: axes, cells, the scaling report (Δ in bits per byte, the model across cells, missing cells), end to end.

Run: ``python -m pytest -q tests/test_grid.py``  (CPU, offline, about a minute: one tiny real grid).
Hand-written run folders (``fake_runs``) give the report known answers.
"""

import json
import math
import re

import pytest
from fake_runs import arm_run

import compare
from experiment.runs.cli import SET_PER_RUN
from core.errors import UserError
from experiment.grid.run import cell_name, cells_of, gap_rows, in_recorded_order, load_grid, parse_axes
from experiment.grid.model import cross_cell_models
from experiment.ab.readout import not_calibrated

NOT_ALLOWED = SET_PER_RUN


def test_axes_are_typed_and_cells_are_their_product(tmp_path):
    """Values take the config field's type; cells run the first axis outermost, named by key and value."""
    axes = parse_axes(["model.n_embd=64,128", "data.tokenizer=char,bpe:4096"], NOT_ALLOWED)
    assert axes[0].values == (64, 128) and axes[1].values == ("char", "bpe:4096")
    names = [c.name for c in cells_of(axes, tmp_path)]
    assert names == [
        "n_embd-64_tokenizer-char",
        "n_embd-64_tokenizer-bpe4096",
        "n_embd-128_tokenizer-char",
        "n_embd-128_tokenizer-bpe4096",
    ]
    assert cell_name({"train.learning_rate": 0.001}) == "learning_rate-0.001"


@pytest.mark.parametrize(
    "text, match",
    [
        ("model.n_embd", "is not KEY=V1"),
        ("model.n_embdd=64", "unknown config key"),
        ("model.tie_embeddings=true,false", "set by the experiment itself"),
        ("train.seed=1,2", "set by the experiment itself"),
        ("model.n_embd=64,big", "not a valid int"),
        ("model.n_embd=64,64", "repeats a value"),
    ],
)
def test_bad_axes_are_one_line_errors(text, match):
    """A malformed, unknown, experiment-owned, mistyped or repeated axis is refused before anything runs."""
    with pytest.raises(UserError, match=match):
        parse_axes([text], NOT_ALLOWED)


def test_the_same_axes_in_another_order_find_the_same_cells(tmp_path):
    """A grid folder made with n_embd then tokenizer, given the axes the other way round, takes them in its
    recorded order: the same cell folders, not a second grid of renamed ones."""
    first = parse_axes(["model.n_embd=64,128", "data.tokenizer=char,bpe:4096"], NOT_ALLOWED)
    (tmp_path / "grid.json").write_text(json.dumps({"axes": {a.key: list(a.values) for a in first}}))
    swapped = parse_axes(["data.tokenizer=char,bpe:4096", "model.n_embd=64,128"], NOT_ALLOWED)
    ordered = in_recorded_order(swapped, tmp_path)
    assert [c.name for c in cells_of(ordered, tmp_path)] == [c.name for c in cells_of(first, tmp_path)]
    other = parse_axes(["model.n_layer=2,4"], NOT_ALLOWED)
    assert in_recorded_order(other, tmp_path) == other  # other keys: left for the settings check to refuse


def test_two_values_that_would_share_a_cell_folder_are_refused(tmp_path):
    """'a/b.txt' and 'a-b.txt' name the same folder: refused, naming both, before anything trains."""
    axes = parse_axes(["data.source=a/b.txt,a-b.txt"], NOT_ALLOWED)
    with pytest.raises(UserError, match="would share the folder source-a-b.txt"):
        cells_of(axes, tmp_path)


def test_an_infinite_margin_in_bits_per_byte_is_refused(capsys):
    """--margin-bpb inf would read every cell equivalent: one line, exit 2, before anything runs."""
    argv = ["grid", "--config", "configs/debug.toml", "--axis", "model.n_embd=32,64", "--margin-bpb", "inf"]
    assert compare.main(argv) == 2
    assert "--margin-bpb must be a finite number > 0 bits per byte, got inf" in capsys.readouterr().err


def test_an_axis_the_arms_set_is_refused_before_any_training(tmp_path, capsys):
    """An arm's own value wins over a cell's, so an axis over a key an arm sets would change nothing in that
    arm: refused in one line (exit 2) before anything is prepared or trained."""
    argv = ["grid", "--config", "configs/debug.toml", "--arm", "base:", "--arm", "drop:model.dropout=0.1"]
    code = compare.main([*argv, "--axis", "model.dropout=0.0,0.2", f"--train.out_dir={tmp_path}"])
    assert code == 2 and "--axis model.dropout: the arms set it themselves" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_invalid_cell_is_refused_before_any_training(tmp_path, capsys):
    """A value the config itself rejects (n_embd not a multiple of n_head) fails at once, naming the cell."""
    code = compare.main(
        [
            "grid",
            "--config",
            "configs/debug.toml",
            "--axis",
            "model.n_embd=32,33",
            f"--train.out_dir={tmp_path}",
            "--seeds",
            "2",
        ]
    )
    assert code == 2 and "grid cell n_embd-33" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _fake_cell(grid, name, n_embd, deltas, bpb_per_nat, non_emb):
    """Two arms × len(deltas) seeds in ``grid/name``: tied at 3.0 + s/100, untied at that + delta (nats)."""
    folder = grid / name
    folder.mkdir(parents=True)
    for s, d in enumerate(deltas):
        for arm, loss in (("tied", 3.0 + s / 100), ("untied", 3.0 + s / 100 + d)):
            summary = {
                "final_val_bpb": loss * bpb_per_nat,
                "non_embedding_parameters": non_emb,
                "parameters": non_emb * 2,
                "tokens": 1000,
                "train_tokens": 4000,
            }
            arm_run(folder, arm, s, loss, summary=summary, model__n_embd=n_embd)


def _fake_grid(tmp_path, cells):
    grid = tmp_path / "g"
    sizes = sorted({n for _, n, *_ in cells})
    for name, n_embd, deltas, scale, non_emb in cells:
        _fake_cell(grid, name, n_embd, deltas, scale, non_emb)
    (grid / "grid.json").write_text(
        json.dumps(
            {
                "axes": {"model.n_embd": sizes},
                "arms": ["tied", "untied"],
                "seeds": 3,
                "lr_grid": [],
                "margin": 0.01,
                "reference": "tied",
                "config": None,
            }
        )
    )
    return grid


def test_the_gap_in_bits_per_byte_is_the_paired_gap_in_nats_scaled(tmp_path):
    """Δ bpb = Δ nats × the cell's bits-per-byte-per-nat constant, with the CI scaled alike; epochs = tokens / train."""
    grid = _fake_grid(tmp_path, [("n_embd-64", 64, [-0.05, -0.04, -0.06], 0.5, 1000)])
    _, cells = load_grid(grid)
    (row,) = gap_rows(cells)
    assert row["delta"] == pytest.approx(-0.05) and row["delta_bpb"] == pytest.approx(-0.025)
    assert row["ci_bpb"][0] == pytest.approx(row["ci"][0] * 0.5) and row["verdict"] == "better"
    assert row["epochs"] == pytest.approx(0.25) and row["embedding_share"] == pytest.approx(0.5)


def test_the_model_across_cells_recovers_a_known_trend_and_missing_cells_are_listed(tmp_path):
    """Δ = -0.1 + 0.02 per decade of non-embedding parameters, 3 seeds a cell around each mean: the mixed model's
    size term is 0.02 and its intercept -0.1 (balanced cells: the REML fixed effects are the cell means' fit);
    a started cell without finished runs is 'missing', one without a folder is named apart as not started."""
    cells = [
        (f"n_embd-{n}", n, [d - 0.002, d, d + 0.002], 1.0, 10**k)
        for n, k, d in ((32, 3, -0.04), (64, 4, -0.02), (128, 5, 0.0), (256, 6, 0.02))
    ]
    grid = _fake_grid(tmp_path, cells)
    settings = json.loads((grid / "grid.json").read_text())
    settings["axes"]["model.n_embd"] += [512, 1024]  # 512 never planned; 1024 started, nothing finished
    (grid / "n_embd-1024" / "untied-s0").mkdir(parents=True)
    (grid / "grid.json").write_text(json.dumps(settings))
    _, loaded = load_grid(grid)
    (arm,) = cross_cell_models(gap_rows(loaded))
    (size,) = [m for m in arm.models if m.moderator == "log10(non-embedding params)"]
    assert size.terms[1].coef == pytest.approx(0.02, abs=1e-6) and size.terms[0].coef == pytest.approx(-0.1, abs=1e-6)
    assert compare.main([str(grid)]) == 0  # a grid folder on the command line: its report, no training
    md = (grid / "report.md").read_text()
    assert (
        "(4 of 5 cells; 1 more not started)" in md
        and "`n_embd-1024`: no finished runs" in md
        and "`n_embd-512`:" not in md
    )
    assert "the axes also cross to `n_embd-512`, which no command has started" in md
    assert compare.main([str(grid), "--slope-within", "model.n_embd=256,512"]) == 0  # a chosen cell not started
    assert "Chosen but not finished: `n_embd-512` (not started)" in (grid / "report.md").read_text()
    assert "| log10(non-embedding params) | per decade | +0.0200" in md and (grid / "gap_vs_size.png").is_file()
    assert "untied** against tied, over 4 cells" in md


def test_the_model_says_how_much_it_leans_on_single_cells(tmp_path):
    """Four cells on Δ = -0.1 + 0.02 per decade and one cell off the trend: the full fit is pulled away from
    0.02, and leaving the odd cell out recovers 0.02, the low end of the reported leave-one-out range."""
    cells = [
        (f"n_embd-{n}", n, [d - 0.002, d, d + 0.002], 1.0, 10**k)
        for n, k, d in ((32, 3, -0.04), (64, 4, -0.02), (128, 5, 0.0), (256, 6, 0.02))
    ]
    cells.append(("n_embd-512", 512, [0.099, 0.1, 0.101], 1.0, 10**7))  # the trend says 0.04
    grid = _fake_grid(tmp_path, cells)
    _, loaded = load_grid(grid)
    (arm,) = cross_cell_models(gap_rows(loaded))
    (size,) = [m for m in arm.models if m.moderator == "log10(non-embedding params)"]
    low, high = size.terms[1].loo_range
    assert size.terms[1].coef > 0.025 and size.loo_fits == 5
    assert low == pytest.approx(0.02, abs=1e-4) and high > 0.025
    assert compare.main([str(grid)]) == 0
    assert f"| {low:+.4f} to {high:+.4f}, supported in" in (grid / "report.md").read_text()


def test_the_report_says_how_many_seeds_each_cell_holds(tmp_path):
    """A cell grown with more --seeds: the header gives the range, not grid.json's one number, and each row its count."""
    grid = _fake_grid(
        tmp_path,
        [
            ("n_embd-64", 64, [-0.05, -0.04, -0.06], 1.0, 1000),
            ("n_embd-128", 128, [-0.05, -0.04, -0.06, -0.05, -0.05], 1.0, 4000),
        ],
    )
    assert compare.main([str(grid)]) == 0
    md = (grid / "report.md").read_text()
    assert "3–5 paired seeds per cell" in md and "3 seeds," not in md
    rows = {line.split(" | ")[0]: line.split(" | ")[10] for line in md.splitlines() if line.startswith("| [n_embd")}
    assert rows == {"| [n_embd-64](n_embd-64/report.md)": "3", "| [n_embd-128](n_embd-128/report.md)": "5"}


@pytest.mark.slow
def test_a_grid_runs_end_to_end_and_reuses_its_runs(tmp_path):
    """1 size × 2 tokenizers (char, bpe:N) × 2 seeds × 2 arms: every cell a full tied-vs-untied experiment
    (paired seeds, its report with verdict, samples and command), the grid's report with val bpb for every
    cell, and a second invocation that trains nothing and overwrites nothing.  (Two axes keep the cell names
    of more than one key; a one-value axis keeps this test at 8 tiny runs.)"""
    corpus = tmp_path / "c.txt"
    corpus.write_text("ROMEO:\nWhat light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n\n" * 200)
    argv = [
        "grid",
        "--config",
        "configs/debug.toml",
        "--name",
        "g",
        f"--data.source={corpus}",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
        "--train.max_iters=4",
        "--train.eval_interval=4",
        "--train.sample_tokens=0",
        "--train.final_eval_tokens=512",
        "--seeds",
        "2",
        "--axis",
        "model.n_embd=24",
        "--axis",
        "data.tokenizer=char,bpe:300",
        "--prompt",
        "RO",
    ]
    assert compare.main(argv) == 0
    grid = tmp_path / "g"
    for cell, tokenizer in (("n_embd-24_tokenizer-char", "char"), ("n_embd-24_tokenizer-bpe300", "bpe:300")):
        runs = sorted(p.name for p in (grid / cell).iterdir() if p.is_dir() and not p.name.startswith("."))
        assert runs == ["tied-s0", "tied-s1", "untied-s0", "untied-s1"] and (grid / cell / "report.md").is_file()
        cfg = json.loads((grid / cell / "tied-s0" / "config.json").read_text())
        assert cfg["model"]["n_embd"] == 24 and cfg["data"]["tokenizer"] == tokenizer
        summary = json.loads((grid / cell / "untied-s1" / "summary.json").read_text())
        assert math.isfinite(summary["final_val_bpb"]) and summary["final_val_bpb"] > 0
        seeds = {
            json.loads((grid / cell / n / "config.json").read_text())["train"]["seed"] for n in ("tied-s1", "untied-s1")
        }
        assert seeds == {1338}  # paired: both arms of seed index 1 train with train.seed + 1
        md = (grid / cell / "report.md").read_text()
        assert re.search(
            r"untied vs tied \(reference\): \*\*(better|worse|equivalent within ±0.01 nats|inconclusive)\*\*", md
        )
        assert "| tied | untied |" in md and "RO" in md  # side-by-side samples from the prompt
        assert "python compare.py grid --config configs/debug.toml" in md  # the command that made it
    md = (grid / "report.md").read_text()
    assert "2 of 2 cells" in md and md.count("| untied |") == 2 and (grid / "loss_vs_params.png").is_file()
    stamp = (grid / "n_embd-24_tokenizer-char" / "tied-s0" / "ckpt_best.pt").stat().st_mtime_ns
    assert compare.main(argv) == 0
    assert (grid / "n_embd-24_tokenizer-char" / "tied-s0" / "ckpt_best.pt").stat().st_mtime_ns == stamp


def test_a_grid_folder_takes_a_wider_learning_rate_grid_and_refuses_a_narrower_one(tmp_path):
    """grid.json: the lr grid and --lr-widen may grow (recorded whole), like the axes; losing a point or
    lowering --lr-widen is refused."""
    from experiment.grid.run import Axis, _remember_grid
    from experiment.runs.plan import Plan

    axes = [Axis("model.n_embd", (64,))]

    def remember(lr_grid: list[float], lr_widen: int = 0) -> None:
        plan = Plan(
            config="configs/debug.toml",
            overrides={},
            arms=["tied", "untied"],
            seeds=3,
            lr_grid=lr_grid,
            lr_widen=lr_widen,
        )
        _remember_grid(tmp_path, plan, axes)

    remember([2e-3, 4e-3, 8e-3])
    remember([2e-3, 4e-3, 8e-3, 1.6e-2])
    assert json.loads((tmp_path / "grid.json").read_text())["lr_grid"] == [2e-3, 4e-3, 8e-3, 1.6e-2]
    with pytest.raises(UserError, match="must keep 0.002"):
        remember([4e-3, 8e-3, 1.6e-2])
    wide = [2e-3, 4e-3, 8e-3, 1.6e-2]
    remember(wide, lr_widen=2)
    assert json.loads((tmp_path / "grid.json").read_text())["lr_widen"] == 2  # recorded, may rise, never fall
    with pytest.raises(UserError, match="lr_widen"):
        remember(wide, lr_widen=1)


def test_a_grid_folder_compares_its_resolved_base_config_not_the_files_name(tmp_path):
    """grid.json compares the resolved base config: a copy of the config under another name continues
    the grid; the same file with a changed value is refused before any cell trains."""
    from experiment.grid.run import Axis, _remember_grid
    from experiment.runs.plan import Plan

    axes = [Axis("model.n_embd", (64,))]
    (tmp_path / "a.toml").write_text("[train]\nmax_iters = 500\n")
    (tmp_path / "b.toml").write_text("[train]\nmax_iters = 500\n")
    grid = tmp_path / "g"
    _remember_grid(
        grid,
        Plan(config=str(tmp_path / "a.toml"), overrides={}, arms=["tied", "untied"], seeds=3, lr_grid=[2e-3]),
        axes,
    )
    _remember_grid(
        grid,
        Plan(
            config=str(tmp_path / "b.toml"),
            overrides={"model": {"n_embd": 256}},
            arms=["tied", "untied"],
            seeds=3,
            lr_grid=[2e-3],
        ),
        axes,
    )
    assert json.loads((grid / "grid.json").read_text())["config"] == str(tmp_path / "b.toml")
    (tmp_path / "a.toml").write_text("[train]\nmax_iters = 2000\n")
    with pytest.raises(UserError, match=r"other settings \(train.max_iters\)"):
        _remember_grid(
            grid,
            Plan(config=str(tmp_path / "a.toml"), overrides={}, arms=["tied", "untied"], seeds=3, lr_grid=[2e-3]),
            axes,
        )


def test_a_cell_still_on_its_learning_rate_grid_is_reported_in_progress(tmp_path):
    """A cell whose only finished runs are tune-* runs is missing from the grid report as 'in progress',
    not as a misleading 'no tied runs' error."""
    grid = _fake_grid(tmp_path, [("n_embd-64", 64, [-0.05, -0.04, -0.06], 0.5, 1000)])
    settings = json.loads((grid / "grid.json").read_text())
    settings["axes"]["model.n_embd"].append(128)
    (grid / "grid.json").write_text(json.dumps(settings))
    arm_run(grid / "n_embd-128", "tied", 2337, 3.0, name="tune-tied-lr0.002", model__n_embd=128)
    _, loaded = load_grid(grid)
    missing = {c.cell.name: c.cell.error for c in loaded if c.exp is None}
    assert missing == {"n_embd-128": "in progress: only learning-rate grid runs have finished (1)"}


def test_the_grid_reads_each_arms_runs_at_its_best_tuned_rate(tmp_path):
    """After a wider tuning moved an arm's best rate, its seeds at the old rate stay in the folder; the
    grid keeps only those at the best rate (lowest tuning score), and an arm without tuning keeps all."""
    from experiment.runs import folders
    from experiment.grid.run import at_best_rates

    tune = [
        arm_run(tmp_path, "tied", 2337, loss, name=f"tune-tied-lr{lr:g}", train__learning_rate=lr)
        for lr, loss in ((0.002, 3.0), (0.004, 2.9))
    ]
    old = arm_run(tmp_path, "tied", 0, 3.0, name="tied-lr0.002-s0", train__learning_rate=0.002)
    new = arm_run(tmp_path, "tied", 0, 2.9, name="tied-lr0.004-s0", train__learning_rate=0.004)
    untuned = arm_run(tmp_path, "untied", 0, 2.8)
    kept = at_best_rates(folders.load_runs([old, new, untuned]), folders.load_runs(tune))
    assert sorted(r.path.name for r in kept) == ["tied-lr0.004-s0", "untied-s0"]


def test_gap_figure_dodges_tokenizers_that_share_a_size():
    """In gap_vs_size.png two tokenizers at the same non-embedding size are drawn at distinct x, each
    within 10% of the true size, so one interval does not hide the other."""
    from experiment.grid.markdown import gap_figure

    rows = [
        {
            "arm": "untied",
            "reference": "tied",
            "tokenizer": tok,
            "vocab_size": v,
            "non_embedding_parameters": n,
            "delta_bpb": d,
            "ci_bpb": (d - 0.1, d + 0.1),
            "margin": 0.01,
            "bpb_per_nat": 0.5,
        }
        for tok, v, d in (("char", 71, 0.1), ("gpt2", 50257, -0.1))
        for n in (10_000, 100_000)
    ]
    (ax,) = gap_figure(rows).axes
    lines = [line for line in ax.get_lines() if line.get_marker() == "o"]  # the two tokenizers (not the hlines)
    assert len(lines) == 2
    (char_x, gpt2_x) = (list(line.get_xdata()) for line in lines)
    for a, b, n in zip(char_x, gpt2_x, (10_000, 100_000)):
        assert a != b and abs(a / n - 1) < 0.1 and abs(b / n - 1) < 0.1


def test_a_cell_read_again_at_more_seeds_is_a_look_as_in_its_own_report(tmp_path):
    """The grid report notes each cell's read in its experiment.json; a cell read before at fewer seeds is tested
    at 0.05 over its looks (Bonferroni) and labelled, as ``compare.py <cell>`` labels it."""
    grid = _fake_grid(tmp_path, [("n_embd-64", 64, [-0.05, -0.04, -0.06], 0.5, 1000)])
    record = grid / "n_embd-64" / "experiment.json"
    record.write_text(json.dumps({"margin": 0.01, "looks": [{"seeds": 2, "date": "2026-01-01"}]}))
    _, (cell,) = load_grid(grid)
    assert cell.exp.alpha == pytest.approx(0.025) and not_calibrated(cell.exp)
    assert compare.main([str(grid)]) == 0
    assert [look["seeds"] for look in json.loads(record.read_text())["looks"]] == [2, 3]
