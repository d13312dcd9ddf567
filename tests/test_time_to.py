"""--outcome time-to:LOSS: a run's training seconds until its val loss first reaches LOSS, evaluation and
checkpoints left out, read on the log scale; the report says the seconds compare only on one machine.

Run: ``python -m pytest -q tests/test_time_to.py``  (CPU, seconds; fake runs, no training).
"""

import json

import pytest
from fake_runs import fake_run
from helpers import error_line

import compare
from experiment.ab import readout
from experiment.runs import folders


def with_speed(path, tokens_per_s: float):
    """Add train rows to a fake run: a window every 500 tokens at ``tokens_per_s``, one logged again as a resumed
    run logs it (skipped), and an eval row's wall clock that must not count."""
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    last = max(r["tokens"] for r in rows)
    train = [
        {"kind": "train", "step": t // 100, "tokens": t, "tokens_per_s": tokens_per_s}
        for t in range(500, last + 1, 500)
    ]
    train.insert(2, dict(train[1]))  # a resume's repeat of the same window
    rows = sorted(rows + train, key=lambda r: (r["tokens"], r["kind"] == "eval"))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_training_clock_sums_each_window_over_its_own_rate():
    """Windows of 1,000 tokens at 500 and then 1,000 tokens/s take 2 s and 1 s; an eval row and a row logged
    again after a resume add nothing, so 1,500 tokens are reached at 2.5 s."""
    rows = [
        {"kind": "eval", "step": 0, "tokens": 0, "elapsed_s": 9.0},
        {"kind": "train", "step": 10, "tokens": 1000, "tokens_per_s": 500.0},
        {"kind": "eval", "step": 10, "tokens": 1000, "elapsed_s": 99.0},
        {"kind": "train", "step": 10, "tokens": 1000, "tokens_per_s": 50.0},
        {"kind": "train", "step": 20, "tokens": 2000, "tokens_per_s": 1000.0},
    ]
    assert folders.train_clock(rows) == [(0.0, 0.0), (1000.0, 2.0), (2000.0, 3.0)]
    run = folders.Run(None, {}, {}, [], True, 0, "tied", clock=folders.train_clock(rows))
    assert run.train_seconds(1500) == pytest.approx(2.5)


def test_time_to_reads_the_faster_arm_as_better_and_names_the_machine(tmp_path):
    """Two arms with the same losses, one training at twice the tokens/s: it reaches the target in half the
    seconds on every seed, "better" on ln(seconds) (−50%); the report says seconds compare only on one machine."""
    paths = [
        with_speed(fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, 3.0 + 0.01 * s, settings={"model.dropout": p}), v)
        for s in range(3)
        for arm, p, v in (("base", 0.0, 100.0), ("fast", 0.1, 200.0 + s))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "time-to:3.5", "--margin", "0.05"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "**better** — training seconds to reach val loss 3.5 −50." in md
    assert "Training seconds compare only within one experiment on one machine" in md
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["outcome"] == "time-to:3.5" and record["unit"].startswith("ln(training seconds")
    assert record["comparisons"][0]["verdict"] == "better"


def test_a_run_without_timed_windows_is_one_error_line(tmp_path, capsys):
    """A run whose metrics hold no tokens/s rows has no training time: one error line naming the run."""
    paths = [
        fake_run(tmp_path, f"{arm}-s0", True, 1337, 3.0, settings={"model.dropout": p})
        for arm, p in (("a", 0.0), ("b", 0.1))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "time-to:3.5"]) == 2
    assert "logged no tokens/s" in error_line(capsys)


def test_time_to_parses_like_tokens_to():
    """time-to:<val loss> is an outcome; its target is read like tokens-to's."""
    assert readout.parse_outcome("time-to:1.880") == "time-to:1.88" and readout.target_of("time-to:1.88") == 1.88
    assert readout.target_of("tokens-per-s") is None


def test_the_record_rule_is_a_one_sided_one_sample_t_test_at_one_percent():
    """below_target: t = (mean − target) / (sd / √n) on n − 1 df, one-sided; 1.86 ± 0.01 over 5 seeds is well
    below 1.88 (qualifies), 1.875 ± 0.01 over 3 is not below it at p < 0.01, and identical values have no test."""
    import math

    from scipy import stats as sps

    from experiment import stats

    values = [1.85, 1.86, 1.87, 1.855, 1.865]
    q = stats.below_target("fast", values, 1.88)
    sd = sps.tstd(values)
    want = sps.t(df=4).cdf((sum(values) / 5 - 1.88) / (sd / math.sqrt(5)))
    assert q.p == pytest.approx(want) and q.qualifies and q.seeds == 5
    assert not stats.below_target("close", [1.865, 1.875, 1.885], 1.88).qualifies
    assert math.isnan(stats.below_target("flat", [1.8, 1.8], 1.88).p)


def test_a_timed_report_says_which_arms_reach_the_target_as_a_record_must(tmp_path):
    """With time-to, the report and verdict.json say for each arm whether its mean final val loss is below the
    target at p < 0.01: both arms here end at 3.00-3.02 against 3.5, so both qualify."""
    paths = [
        with_speed(fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, 3.0 + 0.01 * s, settings={"model.dropout": p}), v)
        for s in range(3)
        for arm, p, v in (("base", 0.0, 100.0), ("fast", 0.1, 200.0 + s))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "time-to:3.5", "--margin", "0.05"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "**Reaches the target** (a speedrun record's rule" in md and md.count("**qualifies**") == 2
    found = json.loads((tmp_path / "verdict.json").read_text())["qualifies"]
    assert [(q["qualifies"], q["seeds"], q["target"]) for q in found] == [(True, 3, 3.5)] * 2
