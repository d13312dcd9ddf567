"""The grid report's learning-rate picks: how firmly each arm's tuning seed chose its rate.

The scaling view reads each arm at the best rate of its grid on one tuning seed. When the best rate beat the
runner-up by less than the arm's seed-to-seed spread, another tuning seed could have picked the runner-up; the
report says so for every such pick.
"""

from fake_runs import arm_run, fake_tuning

from experiment.grid.run import Cell, load_cell, lr_picks
from experiment.grid.markdown import lr_pick_section


def _cell(tmp_path, untied_at_4e3=3.01):
    """tied: 2e-3 beats 4e-3 by 0.10 nats, seeds sd 0.02; untied: 2e-3 beats 4e-3 by 0.01, seeds sd 0.03."""
    folder = tmp_path / "n_embd-64"
    fake_tuning(folder, "tied", 1000, [(2e-3, 3.00), (4e-3, 3.10), (1e-3, 3.20)])
    fake_tuning(folder, "untied", 1000, [(2e-3, 3.00), (4e-3, untied_at_4e3), (1e-3, 3.20)])
    for seed, (tied, untied) in enumerate([(3.00, 2.90), (3.02, 2.93), (2.98, 2.87)]):
        for arm, final in (("tied", tied), ("untied", untied)):
            arm_run(
                folder, arm, seed, final, name=f"{arm}-lr0.002-s{seed}", train__learning_rate=2e-3, train__min_lr=2e-4
            )
    return load_cell(Cell({"model.n_embd": 64}, folder), "tied", 0.01)


def test_a_pick_whose_lead_is_under_one_seeds_spread_is_within_noise(tmp_path):
    """The lead is the runner-up's tuning loss minus the best's; within noise when it is below the arm's seed sd."""
    gc = _cell(tmp_path)
    assert gc.exp is not None, gc.cell.error
    picks = {p.arm: p for p in lr_picks([gc])}
    assert picks["tied"].rate == 2e-3 and picks["tied"].runner_up == 4e-3
    assert abs(picks["tied"].lead - 0.10) < 1e-9 and abs(picks["tied"].seed_sd - 0.02) < 1e-9
    assert not picks["tied"].within_noise
    assert abs(picks["untied"].lead - 0.01) < 1e-9 and picks["untied"].within_noise


def test_the_report_counts_the_close_picks_and_lists_only_them(tmp_path):
    """The section says '1 of 2 picks' and has a table row for the untied arm alone."""
    lines = lr_pick_section(lr_picks([_cell(tmp_path)]))
    text = "\n".join(lines)
    assert "In 1 of 2 picks" in text
    rows = [line for line in lines if line.startswith("| n_embd-64")]
    assert rows == ["| n_embd-64 | untied | 0.002 | 0.004 | 0.0100 | 0.0300 |"]


def test_a_tie_picks_the_smaller_rate_with_no_lead(tmp_path):
    """Two rates with the same tuning loss: the smaller is the chosen one, as the tuning chose it, and its lead is 0."""
    picks = {p.arm: p for p in lr_picks([_cell(tmp_path, untied_at_4e3=3.00)])}
    assert picks["untied"].rate == 2e-3 and picks["untied"].runner_up == 4e-3 and picks["untied"].lead == 0.0
    assert picks["untied"].within_noise
