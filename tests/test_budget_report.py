"""The budget axis read: the fitted and the sensitivity readouts, best against best, Holm across budgets,
diverged runs, and the report with its tables, figures and the record drawn beside it.

Fake branch folders stand in for trained runs; planning and training are in ``tests/test_budgets.py``.
Run: ``python -m pytest -q tests/test_budget_report.py`` (CPU, offline).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fake_runs import arm_run

import compare
from core.errors import UserError
from experiment import best as best_readout
from experiment import stats
from experiment.arms import define_arms, with_recorded
from experiment.budget import markdown as budget_markdown
from experiment.budget import readout as budget_readout
from experiment.budget import run as budget_run
from experiment.best import EDGE
from experiment.budget.readout import Score
from experiment.runs import ledger, record, seeds
from training.config import RunConfig


def test_the_fitted_best_is_the_vertex_of_the_quadratic_in_log_rate():
    """Through (1e-3, 2e-3, 4e-3) on a parabola with its vertex at 2e-3 * sqrt(2): that rate and value."""
    rates = [1e-3, 2e-3, 4e-3]
    vertex = math.log10(2e-3) + 0.5 * math.log10(2)
    means = [3.0 + 5 * (math.log10(r) - vertex) ** 2 for r in rates]
    best, lr = best_readout.fitted_best(rates, means)
    assert best == pytest.approx(3.0) and lr == pytest.approx(10**vertex)


def test_a_fit_past_the_grid_or_opening_downwards_is_clamped_to_the_rates_tried():
    """A minimum beyond 4e-3 reads at 4e-3; a concave fit reads at its lower end; two rates give the lower mean."""
    rates = [1e-3, 2e-3, 4e-3]
    assert best_readout.fitted_best(rates, [3.0, 2.9, 2.85])[1] == pytest.approx(4e-3)
    assert best_readout.fitted_best(rates, [3.0, 3.2, 3.1]) == (pytest.approx(3.0), pytest.approx(1e-3))
    assert best_readout.fitted_best([1e-3, 2e-3], [3.1, 3.0]) == (3.0, 2e-3)


def _pair(lr: float, seed: int, tied: float, untied: float) -> list[Score]:
    """A tied and an untied score at 1M tokens for one rate and seed (untied has the larger parameter count)."""
    common = {"budget": "1M", "tokens": 1_000_000, "lr": lr, "seed": seed, "train_tokens": 10_000}
    return [Score(arm="tied", bpb=tied, params=1000, **common), Score(arm="untied", bpb=untied, params=1500, **common)]


def _scores(deltas: list[float], noise: list[float]) -> list[Score]:
    """Tied and untied at 3 rates on len(deltas) seeds: untied = tied + deltas[seed], a seed-wide shift noise[seed]."""
    out = []
    for i, (d, e) in enumerate(zip(deltas, noise)):
        for r, base in ((1e-3, 3.1), (2e-3, 3.0), (4e-3, 3.2)):
            out += _pair(r, 1337 + i, base + e, base + e + d)
    return out


def test_with_a_fourth_rate_the_fit_is_local_to_the_lowest_mean():
    """Four rates: the quadratic through the lowest mean and its neighbours (its vertex), not a least-squares
    fit through all four; a lowest mean at the end fits the three nearest that end."""
    rates = [5e-4, 1e-3, 2e-3, 4e-3]
    vertex = math.log10(1e-3) + 0.25 * math.log10(2)
    means = [3.0 + 5 * (math.log10(r) - vertex) ** 2 for r in rates[:3]] + [3.5]  # 4e-3 off the parabola
    best, lr = best_readout.fitted_best(rates, means)
    assert best == pytest.approx(3.0) and lr == pytest.approx(10**vertex)
    edge = best_readout.fitted_best(rates, [3.0, 3.1, 3.3, 3.9])  # lowest at 5e-4: fit 5e-4..2e-3, clamped
    assert edge == (pytest.approx(3.0), pytest.approx(5e-4))


def test_the_sensitivity_readout_takes_the_lowest_grid_mean_and_can_differ_from_the_fit():
    """A sharp tied curve whose vertex lies between grid rates and a flat untied one: the fitted Δ is nearer 0
    than the lowest-mean Δ, which is the plain difference of the two lowest means."""
    out = []
    for i, e in enumerate([0.0, 0.01, -0.01]):
        for r, tied, untied in ((1e-3, 3.2, 3.05), (2e-3, 3.0, 3.0), (4e-3, 3.1, 3.02)):
            out += _pair(r, 1337 + i, tied + e, untied + e - 0.01)
    grid = budget_readout.best_vs_best(out, "untied", "tied", 0.01, fit=False)
    fitted = budget_readout.best_vs_best(out, "untied", "tied", 0.01)
    assert grid.delta == pytest.approx(-0.01) and grid.best_lr == {"tied": 2e-3, "untied": 2e-3}
    assert abs(fitted.delta) < abs(grid.delta)


def test_two_copies_of_one_run_are_refused_naming_both(tmp_path):
    """The same arm, rate, seed and budget in two folders would count a seed twice: UserError naming both."""
    _branch(tmp_path, "0.5M", "tied", 1e-3, 1337, 3.0)
    shutil.copytree(tmp_path / "0.5M" / "tied-lr0.001-s0", tmp_path / "0.5M" / "tied-lr0.001-s0-copy")
    with pytest.raises(UserError, match=r"tied-lr0.001-s0-copy and .*tied-lr0.001-s0 are the same run"):
        budget_readout.load_scores(tmp_path, [500_000], with_recorded(None))


def test_best_vs_best_with_a_constant_shift_is_that_shift_and_the_jackknife_by_hand():
    """Untied = tied + d on every seed at every rate: Δ is mean(d); the jackknife se matches the formula."""
    deltas = [-0.02, -0.03, -0.01, -0.025]
    b = budget_readout.best_vs_best(_scores(deltas, [0.0, 0.05, -0.04, 0.01]), "untied", "tied", 0.01)
    assert b.delta == pytest.approx(np.mean(deltas))
    leave = np.array([np.mean([d for j, d in enumerate(deltas) if j != i]) for i in range(4)])
    assert b.se == pytest.approx(math.sqrt(3 / 4 * np.sum((leave - leave.mean()) ** 2)))
    assert b.ci[1] < 0 and b.best_lr["tied"] == pytest.approx(b.best_lr["untied"])


def test_holm_across_budgets_decides_better_equivalent_and_inconclusive():
    """A clear gain is better, a tiny tight one equivalent, a noisy one inconclusive, with Holm p >= raw p."""
    clear = budget_readout.best_vs_best(
        _scores([-0.05, -0.051, -0.049, -0.05], [0, 0.1, 0.2, 0.3]), "untied", "tied", 0.01
    )
    tiny = budget_readout.best_vs_best(_scores([0.001, -0.001, 0.0005, 0.0], [0] * 4), "untied", "tied", 0.01)
    noisy = budget_readout.best_vs_best(_scores([0.1, -0.1, 0.05, -0.06], [0] * 4), "untied", "tied", 0.01)
    out = best_readout.holm_verdicts([clear, tiny, noisy])
    assert [r.verdict for r in out] == ["better", "equivalent", "inconclusive"]
    assert all(r.p_holm >= r.p for r in out)


ENV = {"torch_threads": 1, "cpu_model": "AMD EPYC (family 26, model 2)", "git_commit": "cc7de3a" + "0" * 33}


def _branch(root: Path, budget: str, arm: str, lr: float, seed: int, bpb: float) -> None:
    """A finished branch folder under ``root/budget`` with a final bpb (fake_runs, the arm's settings), its
    branch record (cooldown from 80% of its steps) and environment; 10 s of run time past the branch point."""
    steps = {"0.5M": 244, "1M": 488}[budget]
    summary = {"final_val_bpb": bpb, "train_tokens": 1_388_182, "tokens": steps * 2048, "elapsed_s": 110.0}
    run = arm_run(
        root / budget,
        arm,
        seed,
        bpb,
        summary=summary,
        name=f"{arm}-lr{lr:g}-s{seed - 1337}",
        train__learning_rate=lr,
        train__max_iters=steps,
        train__batch_size=16,
        model__block_size=128,
    )
    branch = {"branch_step": round(0.8 * steps), "budget_steps": steps, "budget_tokens": steps * 2048}
    (run / "branch.json").write_text(json.dumps({**branch, "trunk_elapsed_s": 100.0}))
    (run / "env.json").write_text(json.dumps(ENV))


def test_the_report_reads_each_budget_on_its_complete_seeds_and_says_where_readouts_disagree(tmp_path):
    """0.5M has 3 complete seeds (read); 1M none (untied missing). Best against best finds a gain inside the
    margin that the shared rates 1e-3 and 2e-3 call equivalent: named first, as verdicts that differ but both
    put the difference inside the margin, and the verdict row says the whole interval lies inside it."""
    rates = (1e-3, 2e-3, 4e-3)
    for s in range(3):
        for lr, base in zip(rates, (3.10, 3.00, 3.05)):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, base + 0.01 * s)
            gain = 0.04 + 0.001 * s if lr == 4e-3 else 0.0003 * (s - 1)
            _branch(tmp_path, "0.5M", "untied", lr, 1337 + s, base + 0.01 * s - gain)
    for lr in rates:
        _branch(tmp_path, "1M", "tied", lr, 1337, 2.9)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000, 1_000_000], "margin": 0.01}))
    path = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp")
    md = path.read_text()
    assert md.index("Verdicts that differ but agree that the difference lies inside the margin") < md.index(
        "## Verdicts"
    )
    assert "The two readouts disagree" not in md
    assert (
        "- 0.5M: untied is better best against best (by less than the margin), but equivalent at lr 0.001, "
        "equivalent at lr 0.002"
    ) in md
    assert "Not read yet: 1M (seeds with the arm and tied at every rate: untied 0; 2 needed)" in md
    assert "](delta_vs_tokens.png)" in md and (tmp_path / "delta_vs_tokens.png").is_file()
    # each seed's Δ at 4e-3: untied − tied = −(0.04 + 0.001 s)
    assert "| 0.5M | untied | 1337, 1338, 1339 | " in md and "| −0.0400, −0.0410, −0.0420 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| 0.5M | 500 | 0.36 | 3 | untied |"))
    assert row.endswith("| [−0.0087, −0.0062] | [−0.0083, −0.0066] | 0.00311 | **better**, by less than the margin |")
    # Holm over both declared budgets, the unread 1M counted as p = 1: twice the raw p here
    ro = budget_readout.readout(tmp_path, [500_000, 1_000_000], "tied", 0.01, with_recorded(None))
    assert ro.rows[0].best["untied"].p_holm == pytest.approx(min(1.0, 2 * ro.rows[0].best["untied"].p))


def _diverged_trunk(root: Path, arm: str, lr: float, seed: int, step: int) -> None:
    """A trunk that stopped on a non-finite loss at ``step``: 2,048 tokens a step, so 0.5M and 1M branch at
    steps 195 and 390."""
    run = arm_run(
        root / "trunks",
        arm,
        seed,
        3.0,
        name=f"{arm}-lr{lr:g}-s{seed - 1337}",
        train__learning_rate=lr,
        train__batch_size=16,
        train__lr_schedule="wsd",
        train__warmup_iters=30,
        model__block_size=128,
    )
    (run / "summary.json").unlink()
    (run / "diverged.json").write_text(json.dumps({"step": step, "reason": "non-finite training loss (nan)"}))


@pytest.mark.parametrize("step, out", [(390, ["1M"]), (391, []), (195, ["0.5M", "1M"])])
def test_a_trunk_that_diverged_at_a_branch_point_never_wrote_it(tmp_path, step, out):
    """The checkpoint at a branch point is written after that step: a trunk that diverged at step 390 (1M's
    branch point) takes 1M out, one that diverged at 391 had written it and takes nothing out."""
    _diverged_trunk(tmp_path, "untied", 4e-3, 1337, step)
    got = budget_readout.load_diverged(tmp_path, [500_000, 1_000_000], ["untied"], with_recorded(None))
    assert [d.budget for d in got] == out


def test_a_diverged_trunk_takes_its_rate_out_of_each_arm_it_serves_at_the_budgets_it_never_reached(tmp_path):
    """A tied trunk that diverged at step 300 passed 0.5M's branch point (195) but not 1M's (390): at 1M
    both tied and tie-untie-cooldown (its branch) lose that rate and seed. A branch's own record counts
    at its budget unless the branch finished after all."""
    _diverged_trunk(tmp_path, "tied", 4e-3, 1338, 300)
    arms = ["tied", "tie-untie-cooldown", "untied"]
    got = budget_readout.load_diverged(tmp_path, [500_000, 1_000_000], arms, with_recorded(None))
    assert [(d.budget, d.arm, d.lr, d.seed, d.step) for d in got] == [
        ("1M", "tied", 4e-3, 1338, 300),
        ("1M", "tie-untie-cooldown", 4e-3, 1338, 300),
    ]
    assert {d.run for d in got} == {"trunks/tied-lr0.004-s1"}
    _branch(tmp_path, "0.5M", "untied", 4e-3, 1339, 3.0)
    branch = tmp_path / "0.5M" / "untied-lr0.004-s2"
    (branch / "diverged.json").write_text(json.dumps({"step": 230, "reason": "non-finite gradient norm (inf)"}))
    got = budget_readout.load_diverged(tmp_path, [500_000, 1_000_000], arms, with_recorded(None))
    assert "0.5M/untied-lr0.004-s2" not in {d.run for d in got}  # it finished after all: a result
    (branch / "summary.json").unlink()
    got = budget_readout.load_diverged(tmp_path, [500_000, 1_000_000], arms, with_recorded(None))
    assert [(d.budget, d.arm, d.step) for d in got if d.run == "0.5M/untied-lr0.004-s2"] == [("0.5M", "untied", 230)]


def test_a_rate_that_diverged_leaves_the_arms_grid_on_every_seed_and_the_report_names_the_run(tmp_path):
    """Untied diverged at 4e-3 on seed 1338 (its trunk, before 1M's branch point): at 1M untied is read on
    all 3 seeds over 1e-3 and 2e-3 alone (not on the 2 seeds that finished 4e-3), its mean at 4e-3 is
    left out, and the report says which run diverged and what it took out; 0.5M keeps all three rates."""
    for s in range(3):
        for lr, tied, untied in ((1e-3, 3.0, 2.95), (2e-3, 2.9, 2.88), (4e-3, 2.95, 2.7)):
            for budget in ("0.5M", "1M"):
                _branch(tmp_path, budget, "tied", lr, 1337 + s, tied + s / 100)
                if not (budget == "1M" and lr == 4e-3 and s == 1):
                    _branch(tmp_path, budget, "untied", lr, 1337 + s, untied + s / 100)
    _diverged_trunk(tmp_path, "untied", 4e-3, 1338, 300)
    ro = budget_readout.readout(tmp_path, [500_000, 1_000_000], "tied", 0.01, with_recorded(None))
    half, one = ro.rows
    assert one.seeds["untied"] == [1337, 1338, 1339] and one.best["untied"].best_lr["untied"] <= 2e-3
    assert sorted(one.means["untied"]) == [1e-3, 2e-3] and sorted(half.means["untied"]) == [1e-3, 2e-3, 4e-3]
    assert 4e-3 not in one.shared["untied"] and 4e-3 in half.shared["untied"]
    # Two rates left cannot be fitted, so neither best is: tied's too is its lowest mean, at 1M alone.
    assert one.unfitted == ["untied"] and half.unfitted == []
    assert one.best["untied"].delta == pytest.approx(one.grid["untied"].delta) == pytest.approx(2.89 - 2.91)
    assert half.best["untied"].delta != pytest.approx(half.grid["untied"].delta)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000, 1_000_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "- `trunks/untied-lr0.004-s1` (untied; lr 0.004, seed 1338) at step 300: 1M" in md
    assert "| 1M | 3 | untied | 2.9600 | **2.8900** | — |" in md
    assert "Fewer than 3 rates were left to fit for untied at 1M: there both bests" in md


def test_an_arm_that_diverged_at_every_rate_is_a_result_not_a_budget_waiting(tmp_path):
    """Untied's trunks diverged at both rates before 1M: 1M is not 'not read yet' (no seed could change
    that), the report says nothing is left to read there, and 0.5M is read as usual."""
    for s in range(2):
        for lr in (1e-3, 2e-3):
            for budget in ("0.5M", "1M"):
                _branch(tmp_path, budget, "tied", lr, 1337 + s, 3.0 + s / 100)
            _branch(tmp_path, "0.5M", "untied", lr, 1337 + s, 2.9 + s / 100)
    for lr in (1e-3, 2e-3):
        _diverged_trunk(tmp_path, "untied", lr, 1337, 300)
    ro = budget_readout.readout(tmp_path, [500_000, 1_000_000], "tied", 0.01, with_recorded(None))
    assert [row.budget for row in ro.rows] == ["0.5M"] and ro.waiting == {} and ro.no_rate == {"1M": ["untied"]}
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000, 1_000_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "Every rate diverged, so there is nothing to read, for untied at 1M." in md and "Not read yet" not in md


def test_the_means_table_averages_every_arm_over_the_same_seeds(tmp_path):
    """tied finished a third seed (1 bpb worse) that untied has not: the table's tied means leave it out, as the
    verdict does, and the row says 2 seeds."""
    for s, extra in ((0, 0.0), (1, 0.0), (2, 1.0)):
        for lr in (1e-3, 2e-3, 4e-3):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, 3.0 + extra + s / 100)
            if s < 2:
                _branch(tmp_path, "0.5M", "untied", lr, 1337 + s, 2.9 + s / 100)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "| 0.5M | 2 | tied | **3.0050** | 3.0050 | 3.0050 |" in md


def test_an_equivalent_fit_beside_an_inconclusive_rate_is_a_clash_listed_first():
    """Best against best equivalent, the shared rate inconclusive (a wide interval): the readouts disagree,
    and the report's first lines say so, after the seed count."""
    best = budget_readout.BestVsBest(
        arm="untied",
        budget="1M",
        delta=-0.001,
        se=0.001,
        ci=(-0.004, 0.002),
        ci90=(-0.003, 0.001),
        p=0.5,
        p_tost=0.01,
        best_lr={"tied": 2e-3, "untied": 2e-3},
    )
    best.verdict = "equivalent"
    wide = stats.compare_paired("untied", "tied", [3.0, 3.2, 2.9], [3.1, 3.0, 3.0], 0.01)
    row = budget_readout.BudgetRow("1M", 10**6, {"untied": [1337, 1338, 1339]}, {}, [], {"untied": best})
    row.shared["untied"] = {2e-3: wide}
    ro = budget_readout.BudgetReadout(
        reference="tied",
        arms=["untied"],
        rates=[2e-3],
        margin=0.01,
        rows=[row],
        waiting={},
        params={"tied": 1000},
        train_tokens=10**6,
    )
    assert wide.verdict == "inconclusive"
    assert budget_markdown.disagreements(ro) == (
        ["1M: untied is equivalent best against best, but inconclusive at lr 0.002"],
        [],
    )
    md = budget_markdown.render(
        ro,
        "t",
        "cmd",
        None,
        budget_run.Compute(
            trunks=0,
            branches=0,
            trunk_tokens=0,
            branch_tokens=0,
            trunk_s=0.0,
            branch_s=0.0,
            threads=[1],
            cpus=[],
            commits=[],
        ),
        6,
    )
    lines = [line for line in md.splitlines() if line]
    narrower = 4.303 / 2.571 * math.sqrt(6 / 3)  # t(0.975; 2 df) / t(0.975; 5 df) x sqrt(N / n) = 2.37
    assert lines[1] == (
        f"**Interim: 3 of the 6 declared seeds read (at 6, the same seed-to-seed spread would give intervals "
        f"about {narrower:.1f}× narrower); these verdicts are not the answer.**"
    )
    assert lines[2].startswith("Read on 3 paired seeds a budget (jackknife and t with 2 degrees of freedom).")
    assert lines[3] == (
        "**The two readouts disagree** (best against best is the verdict; the shared-rate ones are descriptive, "
        "not adjusted across rates):"
    )


def test_arms_read_on_seeds_they_do_not_share_get_no_means_row(tmp_path):
    """untied finished seeds 0-1 and tie-untie-cooldown seeds 2-3 (tied all four): both are read, but no seed
    has every arm, so the means table shows no row for that budget and says why, instead of nan."""
    for s in range(4):
        for lr in (1e-3, 2e-3, 4e-3):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, 3.0 + s / 100)
            _branch(tmp_path, "0.5M", "untied" if s < 2 else "tie-untie-cooldown", lr, 1337 + s, 2.9 + s / 100)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "nan" not in md and "| 0.5M | 0 |" not in md
    assert "Not shown: 0.5M (no seed has finished every arm at every rate there)." in md


def test_the_edge_rule_reads_each_arm_on_the_seeds_it_is_read_on(tmp_path):
    """The data above with tied's lowest mean at 4e-3: no seed has every arm (no means row), yet each arm's
    best against tied is 'not read', decided on that arm's own seeds; and no such budget is listed as a
    disagreement with the shared-rate lines."""
    for s in range(4):
        for lr, tied in ((1e-3, 3.2), (2e-3, 3.1), (4e-3, 3.0)):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, tied + s / 100)
            _branch(tmp_path, "0.5M", "untied" if s < 2 else "tie-untie-cooldown", lr, 1337 + s, 2.9 + s / 100)
    ro = budget_readout.readout(tmp_path, [500_000], "tied", 0.01, with_recorded(None))
    (row,) = ro.rows
    assert row.means == {} and row.edge == {"tie-untie-cooldown": True, "untied": True}
    assert {a: b.verdict for a, b in row.best.items()} == {"tie-untie-cooldown": EDGE, "untied": EDGE}
    assert all(math.isnan(b.p_holm) for b in row.best.values())
    assert budget_markdown.disagreements(ro) == ([], [])


def test_a_reading_not_read_counts_as_p_1_in_the_others_holm_family():
    """The edge rule comes before Holm: of 6 budgets, one at the edge with p = 0.001 and one with p = 0.009,
    the second's Holm p is 6 x 0.009 = 0.054 (inconclusive), not 5 x 0.009 = 0.045 (better)."""

    def reading(p: float) -> best_readout.BestVsBest:
        return best_readout.BestVsBest("untied", "", -0.02, 0.005, (-0.03, -0.01), (-0.028, -0.012), p, 0.9, {})

    edge, other = reading(0.001), reading(0.009)
    best_readout.verdicts([edge, other], [True, False], family=6)
    assert edge.verdict == EDGE and math.isnan(edge.p_holm)
    assert other.p_holm == pytest.approx(0.054) and other.verdict == "inconclusive"


def test_a_branch_of_another_length_in_a_budget_folder_is_refused(tmp_path):
    """A run that trained another number of steps than its budget's would be read as that budget: refused,
    naming the run, its steps and the budget's."""
    _branch(tmp_path, "0.5M", "tied", 1e-3, 1337, 3.0)
    config = tmp_path / "0.5M" / "tied-lr0.001-s0" / "config.json"
    config.write_text(config.read_text().replace('"max_iters": 244', '"max_iters": 488'))
    with pytest.raises(UserError, match=r"tied-lr0.001-s0 trained 488 steps, but the budget 0.5M is 244 steps"):
        budget_readout.load_scores(tmp_path, [500_000], with_recorded(None))


def test_trunk_rows_without_the_numbers_a_curve_needs_are_left_out(tmp_path):
    """An eval row with no train_loss (an older run) and a non-finite val_bpb are skipped; a trunk with no
    usable row draws no curve."""
    _trunk(tmp_path, "tied-lr0.001-s0", "tied", [(0, 8.0, 8.0), (100, 5.0, 4.9)])
    rows = [{"kind": "eval", "step": 100, "tokens": 1, "val_loss": 5.0, "val_bpb": 2.5}]  # no train_loss
    _trunk(tmp_path, "untied-lr0.001-s0", "untied", [(0, 8.0, 8.1)])
    (tmp_path / "trunks" / "untied-lr0.001-s0" / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    bad = {"kind": "eval", "step": 200, "tokens": 2, "val_loss": 5.0, "train_loss": 4.0, "val_bpb": float("nan")}
    with (tmp_path / "trunks" / "tied-lr0.001-s0" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(bad) + "\n")
    (curve,) = budget_readout.trunk_curves(tmp_path, with_recorded(None))
    assert (curve.arm, curve.tokens) == ("tied", [0, 204_800])


def test_a_better_verdict_says_how_its_interval_lies_against_the_margin():
    """Wholly inside ±margin: "by less than the margin"; only the end nearest 0 inside: "possibly ...";
    wholly beyond it, or no difference found: nothing added. Worse mirrors better."""
    size = stats.size_against_margin
    assert size("better", (-0.008, -0.002), 0.01) == "by less than the margin"
    assert size("better", (-0.03, -0.002), 0.01) == "possibly by less than the margin"
    assert size("better", (-0.05, -0.02), 0.01) == ""
    assert size("worse", (0.002, 0.03), 0.01) == "possibly by less than the margin"
    assert size("equivalent", (-0.008, 0.002), 0.01) == ""


def test_the_compute_table_counts_trunks_whole_and_branches_from_their_branch_point(tmp_path):
    """Two trunks (1000 s, 2.048M tokens each) and four branches (10 s and their cooldown steps each): the
    report's compute table sums them apart and together, with the runs' threads, CPU and commit."""
    for name in ("tied-lr0.001-s0", "untied-lr0.001-s0"):
        trunk = tmp_path / "trunks" / name
        trunk.mkdir(parents=True)
        (trunk / "summary.json").write_text(json.dumps({"tokens": 2_048_000, "elapsed_s": 1000.0}))
        (trunk / "env.json").write_text(json.dumps(ENV))
    for arm in ("tied", "untied"):
        for s in range(2):
            _branch(tmp_path, "0.5M", arm, 1e-3, 1337 + s, 3.0 + s / 100)
    c = budget_run.compute_used(tmp_path, ["0.5M", "1M"])
    cooldown = (244 - round(0.8 * 244)) * 2048
    assert (c.trunks, c.branches, c.trunk_tokens, c.branch_tokens) == (2, 4, 4_096_000, 4 * cooldown)
    assert (c.trunk_s, c.branch_s) == (2000.0, 40.0)
    assert (c.threads, c.cpus, c.commits) == ([1], ["AMD EPYC (family 26, model 2)"], ["cc7de3a"])
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000, 1_000_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "| all | 6 | 4.5M | 0.6 h |" in md and "Commit: `cc7de3a`." in md


def test_the_time_estimate_uses_the_finished_runs_of_this_machine_and_thread_count(tmp_path):
    """The plan's seconds a token are the finished runs' summed elapsed time over their tokens, evaluations
    and all; none when nothing finished, or the runs trained on another thread count or machine."""
    here = ENV["cpu_model"]
    assert budget_run.measured_seconds_per_token(tmp_path, ["0.5M"], 1, here) is None
    trunk = tmp_path / "trunks" / "tied-lr0.001-s0"
    trunk.mkdir(parents=True)
    (trunk / "summary.json").write_text(json.dumps({"tokens": 2_048_000, "elapsed_s": 1000.0}))
    (trunk / "env.json").write_text(json.dumps(ENV))
    _branch(tmp_path, "0.5M", "tied", 1e-3, 1337, 3.0)
    cooldown = (244 - round(0.8 * 244)) * 2048
    per_token = budget_run.measured_seconds_per_token(tmp_path, ["0.5M"], 1, here)
    assert per_token == pytest.approx(1010.0 / (2_048_000 + cooldown))
    assert budget_run.measured_seconds_per_token(tmp_path, ["0.5M"], 2, here) is None
    assert budget_run.measured_seconds_per_token(tmp_path, ["0.5M"], 1, "another CPU") is None


def _trunk(root: Path, name: str, arm: str, evals: list[tuple[int, float, float]]) -> None:
    """A trunk folder: the arm's config at lr 1e-3 and eval rows ``(step, val_loss, train_loss)``, bpb = loss / 2."""
    run = arm_run(root / "trunks", arm, 1337, evals[-1][1], name=name, train__learning_rate=1e-3)
    rows = [
        {"kind": "eval", "step": s, "tokens": s * 2048, "val_loss": v, "train_loss": t, "val_bpb": v / 2}
        for s, v, t in evals
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_trunk_curves_average_seeds_at_the_steps_all_reached_with_the_val_train_gap(tmp_path):
    """Two tied trunks, one still at step 100: the curve stops at 100, averages both seeds, and its gap is
    val − train loss; the untied trunk is a curve of its own."""
    _trunk(tmp_path, "tied-lr0.001-s0", "tied", [(0, 8.0, 8.0), (100, 5.0, 4.9), (200, 4.0, 3.8)])
    _trunk(tmp_path, "tied-lr0.001-s1", "tied", [(0, 8.2, 8.2), (100, 5.2, 5.0)])
    _trunk(tmp_path, "untied-lr0.001-s0", "untied", [(0, 8.0, 8.1), (100, 4.8, 4.6)])
    tied, untied = budget_readout.trunk_curves(tmp_path, with_recorded(None))
    assert (tied.arm, tied.lr, tied.seeds, tied.tokens) == ("tied", 1e-3, 2, [0, 204_800])
    assert tied.val_bpb == pytest.approx([4.05, 2.55]) and tied.gap == pytest.approx([0.0, 0.15])
    assert (untied.arm, untied.seeds) == ("untied", 1) and untied.gap == pytest.approx([-0.1, 0.2])
    fig = budget_markdown.trunk_figure([tied, untied], 1_388_182, "tied")
    assert [len(ax.get_lines()) for ax in fig.axes[:2]] == [2, 2]


def test_a_budget_experiment_declares_its_seeds_and_keeps_the_most_asked_for(tmp_path):
    """experiment.json records --seeds with --budgets; a rerun asking fewer keeps the larger count, and a
    folder made before the key existed takes the count asked for now (nothing is refused)."""
    arm_set = define_arms(["tied", "untied"], {})
    fields = dict(
        equal_params=None, lr_grid=[1e-3], lr_widen=0, margin=0.01, max_seeds=0, outcome="loss", reference="tied"
    )

    def plan(seeds: int) -> SimpleNamespace:
        return SimpleNamespace(**fields, budgets=[500_000], seeds=seeds, arm_set=arm_set, arms=arm_set.names)

    assert record.remember_settings(tmp_path, RunConfig(), plan(3)).seeds == 3
    assert record.remember_settings(tmp_path, RunConfig(), plan(2)).seeds == 3
    saved = json.loads((tmp_path / "experiment.json").read_text())
    (tmp_path / "experiment.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "seeds"}))
    assert record.remember_settings(tmp_path, RunConfig(), plan(6)).seeds == 6


def test_before_any_budget_is_read_the_report_shows_only_what_finished(tmp_path):
    """One seed per arm: no budget is read, so the report has no verdict, figure or means, and counts the
    finished seeds per budget, arm and rate instead."""
    for lr in (1e-3, 2e-3):
        _branch(tmp_path, "0.5M", "tied", lr, 1337, 3.0)
        _branch(tmp_path, "0.5M", "untied", lr, 1337, 2.9)
    _branch(tmp_path, "0.5M", "tied", 1e-3, 1338, 3.01)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000, 1_000_000], "margin": 0.01}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    assert "## Verdicts" not in md and "## Mean final val bpb" not in md and "delta_vs_tokens.png" not in md
    assert "| 0.5M | tied | 2 | 1 |" in md and "| 0.5M | untied | 1 | 1 |" in md and "| 1M |" not in md


def test_compare_on_a_budget_folder_writes_its_report(tmp_path, capsys):
    """``compare.py <budget experiment>`` renders the budget report (not the per-run one)."""
    for s in range(2):
        for lr in (1e-3, 2e-3):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, 3.0 + s / 100)
            _branch(tmp_path, "0.5M", "untied", lr, 1337 + s, 2.9 + s / 100)
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000], "margin": 0.01}))
    assert compare.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "# Does the answer change with the training budget?" in out and "budget report:" in out


def _small_record(root: Path, gain: float) -> None:
    """A budgets experiment at 0.5M, 2 seeds and 2 rates, where untied beats tied by about ``gain`` bpb."""
    for s in range(2):
        for lr in (1e-3, 2e-3):
            _branch(root, "0.5M", "tied", lr, 1337 + s, 3.0 + s / 100)
            _branch(root, "0.5M", "untied", lr, 1337 + s, 3.0 + s / 100 - gain + 0.002 * s)
    (root / "experiment.json").write_text(json.dumps({"budgets": [500_000], "margin": 0.01}))


def test_a_budget_report_draws_another_record_beside_its_own(tmp_path, capsys):
    """``compare.py report A --beside B``: A's report gains a section naming B and one figure with both records'
    Δ at each budget, one series a record; B's own report is not written."""
    _small_record(tmp_path / "muon", gain=0.02)
    _small_record(tmp_path / "adamw", gain=-0.03)
    assert compare.main([str(tmp_path / "muon"), "--beside", str(tmp_path / "adamw")]) == 0
    md = (tmp_path / "muon" / "report.md").read_text()
    assert "## Beside adamw" in md and "](delta_vs_tokens_beside.png)" in md
    assert (tmp_path / "muon" / "delta_vs_tokens_beside.png").is_file() and not (
        tmp_path / "adamw" / "report.md"
    ).exists()
    muon = budget_readout.readout(tmp_path / "muon", [500_000], "tied", 0.01, with_recorded(None))
    adamw = budget_readout.readout(tmp_path / "adamw", [500_000], "tied", 0.01, with_recorded(None))
    fig = budget_markdown.beside_figure([("muon", muon), ("adamw", adamw)])
    (ax,) = fig.axes
    assert len(ax.containers) == 2 and ax.get_title() == "untied − tied"
    assert [round(float(c.lines[0].get_ydata()[0]), 3) for c in ax.containers] == [-0.019, 0.031]


def test_a_beside_folder_that_is_no_budgets_experiment_is_refused_before_the_report_is_written(tmp_path, capsys):
    """A ``--beside`` folder without a budgets experiment exits 2 naming it, and leaves A's earlier report as it was."""
    _small_record(tmp_path / "muon", gain=0.02)
    assert compare.main([str(tmp_path / "muon")]) == 0
    before = (tmp_path / "muon" / "report.md").read_text()
    (tmp_path / "empty").mkdir()
    assert compare.main([str(tmp_path / "muon"), "--beside", str(tmp_path / "empty")]) == 2
    assert "--beside" in capsys.readouterr().err and (tmp_path / "muon" / "report.md").read_text() == before


def test_a_best_at_the_grids_edge_is_not_read():
    """The edge rule in code: with 3 or more rates, an arm's or the reference's lowest mean on the first or last
    rate means its best may lie past the grid, so the budget's best-against-best verdict is 'not read'."""
    from experiment.best import at_edge

    rates = [1e-3, 2e-3, 4e-3]
    interior = {"tied": {1e-3: 1.6, 2e-3: 1.5, 4e-3: 1.55}, "untied": {1e-3: 1.62, 2e-3: 1.49, 4e-3: 1.6}}
    assert not at_edge(interior, ["untied", "tied"], rates)
    edge = {**interior, "untied": {1e-3: 1.62, 2e-3: 1.55, 4e-3: 1.5}}
    assert at_edge(edge, ["untied", "tied"], rates) and not at_edge(edge, ["untied", "tied"], rates[:2])


def test_a_redrawn_branch_and_a_seed_of_other_code_label_the_report_and_a_gone_trunk_does_not(tmp_path, monkeypatch):
    """experiment.json notes the runs compare.py trained (experiment.runs.ledger): a branch noted as a second
    draw is named at the top of the report, a trunk deleted after its branches finished is not; and seed
    1338's untied branch at 2e-3 from a commit whose training code differs names that seed and budget
    (experiment.runs.seeds.branches_apart)."""
    for lr in (1e-3, 2e-3, 4e-3):
        for s in range(2):
            _branch(tmp_path, "0.5M", "tied", lr, 1337 + s, 3.0 + s / 100)
            _branch(tmp_path, "0.5M", "untied", lr, 1337 + s, 2.9 + s / 100)
    for run in (tmp_path / "0.5M").iterdir():
        commit = ("b" if run.name == "untied-lr0.002-s1" else "a") * 40
        (run / "env.json").write_text(json.dumps({**ENV, "git_commit": commit, "training_code_diff": None}))
    monkeypatch.setattr(seeds, "same_training_code", lambda x, y: False)
    trained = {f"0.5M/{p.name}": {"summary": ledger.summary_digest(p)} for p in (tmp_path / "0.5M").iterdir()}
    trained["0.5M/untied-lr0.001-s0"]["redrawn"] = True
    trained["trunks/tied-lr0.001-s0"] = {"summary": "0123456789abcdef"}  # gone since: no report reads a trunk
    (tmp_path / "experiment.json").write_text(json.dumps({"budgets": [500_000], "margin": 0.01, "trained": trained}))
    md = budget_markdown.write_budget_report(tmp_path, "tied", "python compare.py exp").read_text()
    redrawn, code = [line for line in md.splitlines() if line.startswith("**Not calibrated:**")]
    assert redrawn.startswith("**Not calibrated:** 1 run (0.5M/untied-lr0.001-s0) trained again from scratch")
    assert code.startswith("**Not calibrated:** runs of 1 seed trained from different code (seed 1338 at 0.5M: ")
    assert md.index(code) < md.index("## Verdicts")
