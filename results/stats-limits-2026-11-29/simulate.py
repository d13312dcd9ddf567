"""Simulated experiments through the project's own statistics, where a verdict rule's limits show.

    python results/stats-limits-2026-11-29/simulate.py --n 2000 > results/stats-limits-2026-11-29/simulate.log

Normal noise: a seed effect (sd 0.03) shared by the arms of one seed, a rate-by-seed effect (sd 0.005)
and a run's own noise (sd 0.01), on final losses near 1.5; the arms' curves against the rate are given
per case.  Each case prints the share of experiments per outcome.  numpy's generator is seeded per case.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: experiment/

from experiment import best  # noqa: E402
from experiment.grid import model  # noqa: E402

RATES = [1e-3, 2e-3, 4e-3]
SEED_SD, RATE_SD, RUN_SD, MARGIN = 0.03, 0.005, 0.01, 0.01
SHARP = {1e-3: 0.03, 2e-3: 0.0, 4e-3: 0.03}  # +0.03 at the grid's ends
FLAT = {1e-3: 0.002, 2e-3: 0.0, 4e-3: 0.002}
CURVE = {1e-3: 0.02, 2e-3: 0.0, 4e-3: 0.015}  # tests/test_aa.py's


def table(rng, curves: dict, seeds: int) -> dict:
    """{arm: {rate: {seed: final loss}}} for arms with the given curves (rate -> offset)."""
    base = 1.5 + rng.normal(0, SEED_SD, seeds)
    by_rate = {r: rng.normal(0, RATE_SD, seeds) for r in RATES}
    return {
        arm: {
            r: {s: float(base[s] + curve[r] + by_rate[r][s] + rng.normal(0, RUN_SD)) for s in range(seeds)}
            for r in RATES
        }
        for arm, curve in curves.items()
    }


def readings(t: dict, arms: list[str], seeds: int, family: int | None = None) -> list:
    """Best against best of each arm against 'ref', the edge rule and Holm over ``family`` readings."""
    m = {a: best.means(t, a, list(range(seeds))) for a in t}
    out = [best.best_vs_best(t, a, "ref", MARGIN) for a in arms]
    return best.verdicts(out, [best.at_edge(m, [a, "ref"], RATES) for a in arms], family)


def curvature(n: int, seeds: int = 10) -> None:
    """Same best loss, the arm flat in the rate and the reference sharp: where do false verdicts fall?"""
    rng = np.random.default_rng(1)
    got = [readings(table(rng, {"ref": SHARP, "arm": FLAT}, seeds), ["arm"], seeds)[0] for _ in range(n)]
    v = [g.verdict for g in got]
    print(
        f"curvature: flat arm vs sharp reference, {seeds} seeds, n={n}: better {v.count('better') / n:.3f}, "
        f"worse {v.count('worse') / n:.3f}, not read {v.count(best.EDGE) / n:.2f}, "
        f"mean delta {np.mean([g.delta for g in got]):+.4f}"
    )


def budgets_family(n: int, seeds: int = 6, budgets: int = 3) -> None:
    """A/A, two arms against the reference at 3 budgets, Holm over one arm's budgets (the budget report)."""
    rng = np.random.default_rng(2)
    per_arm, either = np.zeros(2), 0
    for _ in range(n):
        by_arm = {"a": [], "b": []}
        for _ in range(budgets):
            t = table(rng, {"ref": CURVE, "a": CURVE, "b": CURVE}, seeds)
            m = {a: best.means(t, a, list(range(seeds))) for a in t}
            for a in by_arm:
                by_arm[a].append((best.best_vs_best(t, a, "ref", MARGIN), best.at_edge(m, [a, "ref"], RATES)))
        hits = []
        for i, a in enumerate(by_arm):
            rs = best.verdicts([x[0] for x in by_arm[a]], [x[1] for x in by_arm[a]], budgets)
            hits.append(any(r.verdict in ("better", "worse") for r in rs))
            per_arm[i] += hits[-1]
        either += any(hits)
    print(
        f"budgets: 2 arms x {budgets} budgets, {seeds} seeds, n={n}: false better/worse per arm "
        f"{per_arm[0] / n:.3f} / {per_arm[1] / n:.3f}, either arm {either / n:.3f}"
    )


def equivalence_family(n: int, arms: int = 5, seeds: int = 10) -> None:
    """Every arm's true difference exactly at +margin (one rate, paired t): a false 'equivalent' anywhere?"""
    rng = np.random.default_rng(3)
    each = anyone = 0
    for _ in range(n):
        d = MARGIN + rng.normal(0, RUN_SD * math.sqrt(2), (arms, seeds))
        lo, hi = scipy_stats.t.interval(0.90, seeds - 1, loc=d.mean(1), scale=d.std(1, ddof=1) / math.sqrt(seeds))
        eq = (lo > -MARGIN) & (hi < MARGIN)
        each += eq.sum()
        anyone += eq.any()
    print(
        f"equivalence: {arms} arms at +margin, {seeds} seeds, n={n}: each {each / (n * arms):.3f}, any {anyone / n:.3f}"
    )


def cell_rows(rng, cells: int, seeds: int, tau: float) -> list[dict]:
    """Grid rows of one arm: Δ bpb per seed with a cell effect of sd tau, no slope on the share."""
    rows = []
    for c in range(cells):
        d = rng.normal(0, tau) + rng.normal(0, RUN_SD, seeds)
        half = scipy_stats.t.ppf(0.975, seeds - 1) * d.std(ddof=1) / math.sqrt(seeds)
        rows.append(
            dict(
                cell=f"c{c}",
                arm="arm",
                diffs_bpb=list(d),
                delta_bpb=float(d.mean()),
                seeds=seeds,
                ci_bpb=(d.mean() - half, d.mean() + half),
                embedding_share=0.02 * (c + 1),
            )
        )
    return rows


def grid_limits(n: int) -> None:
    """Cochran's Q p-value and the --slope-within interval when the cells truly agree (tau 0)."""
    rng = np.random.default_rng(4)
    for cells, seeds in ((9, 3), (9, 5), (12, 6), (4, 3), (5, 3), (4, 5)):
        small = covered = 0
        for _ in range(n):
            rows = cell_rows(rng, cells, seeds, 0.0)
            small += model.cochran_q(rows, np.zeros((cells, 0)))[2] < 0.05
            s = model.slope(rows, [r["cell"] for r in rows])[0]
            covered += s.ci[0] <= 0 <= s.ci[1]
        print(
            f"grid: {cells} cells x {seeds} seeds, n={n}: Q p < 0.05 in {small / n:.3f}; slope 95% interval covers 0 in {covered / n:.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="experiments per case")
    n = parser.parse_args().n
    for case in (curvature, budgets_family, equivalence_family, grid_limits):
        case(n)
