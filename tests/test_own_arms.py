"""Is my change real? ``compare.py`` with arms of the user's own settings, and a verdict a script can read.

Run: ``python -m pytest -q tests/test_own_arms.py`` (CPU, offline; the end-to-end test is ``slow``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_runs import fake_run
from helpers import error_line, tiny_compare_args

import compare
from core.errors import UserError
from experiment import arms
from experiment.runs import launch
from experiment.ab import run as ab_run
from experiment.runs.plan import Plan
from experiment.arms import define_arms, parse_arm
from experiment.best import EDGE
from experiment.stats import look_alpha, sequential_looks

REPO = Path(__file__).resolve().parent.parent


def _dropout_runs(root, finals: dict[float, list[float]]) -> list:
    """Tied runs at each dropout, one per seed, ending at the given final val losses."""
    return [
        fake_run(root, f"d{dropout}-s{s}", True, 1337 + s, final, settings={"model.dropout": dropout})
        for dropout, seeds in finals.items()
        for s, final in enumerate(seeds)
    ]


def test_runs_that_differ_in_dropout_are_compared_by_dropout(tmp_path, capsys):
    """Two groups of run folders that differ only in dropout: the report names the dropout values as the
    arms, the first group given as the reference, and says the arms train the same budget."""
    paths = _dropout_runs(tmp_path, {0.0: [3.00, 3.01, 3.02], 0.1: [3.05, 3.06, 3.07]})
    assert compare.main([str(p) for p in paths]) == 0
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# model.dropout=0.0 vs model.dropout=0.1")
    assert "- model.dropout=0.1 vs model.dropout=0.0 (reference): **worse**" in md
    assert "The arms train the same budget" in md


def test_verdict_json_holds_every_seed_the_intervals_and_the_verdict(tmp_path):
    """verdict.json beside report.md: arms with their settings, per-seed values, Δ, both intervals, p-values,
    whether the margin was declared before the runs (not, for loose run folders) and the verdict."""
    paths = _dropout_runs(tmp_path, {0.0: [3.00, 3.01, 3.02], 0.1: [3.05, 3.06, 3.07]})
    assert compare.main([str(p) for p in paths]) == 0
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["schema"] == 3 and record["outcome"] == "final_val_loss"
    assert record["arms"] == {"model.dropout=0.0": {"model.dropout": 0.0}, "model.dropout=0.1": {"model.dropout": 0.1}}
    assert record["values"]["model.dropout=0.1"] == [3.05, 3.06, 3.07] and record["seeds"] == [1337, 1338, 1339]
    (c,) = record["comparisons"]
    assert c["delta"] == pytest.approx(0.05) and c["ci95"][0] > 0 and c["verdict"] == "worse"
    assert record["margin_declared"] is False and record["learning_rates_tuned"] is False
    assert record["sequential"] is None and record["code"] == {} and c["seeds_needed"] is None


@pytest.mark.parametrize(
    "fail_on, finals, status",
    [
        ("worse", {0.0: [3.00, 3.01, 3.02], 0.1: [3.05, 3.06, 3.07]}, 1),
        ("worse", {0.0: [3.05, 3.06, 3.07], 0.1: [3.00, 3.01, 3.02]}, 0),
        ("not-better", {0.0: [3.05, 3.06, 3.07], 0.1: [3.00, 3.01, 3.02]}, 0),
        ("not-better", {0.0: [3.00, 3.05, 3.02], 0.1: [3.04, 3.01, 3.03]}, 1),
    ],
)
def test_fail_on_sets_the_exit_status_from_the_verdict(tmp_path, capsys, fail_on, finals, status):
    """--fail-on worse exits 1 only for a worse arm; --fail-on not-better exits 1 unless every arm is better."""
    paths = _dropout_runs(tmp_path, finals)
    assert compare.main([str(p) for p in paths] + ["--fail-on", fail_on]) == status
    assert (f"--fail-on {fail_on}:" in capsys.readouterr().err) == bool(status)


def test_arm_options_are_refused_where_they_mean_nothing(tmp_path, capsys):
    """--arm on a report of run folders, --fail-on in the grid mode, a typo in an arm's key: one line each, exit 2."""
    paths = _dropout_runs(tmp_path, {0.0: [3.0, 3.1], 0.1: [3.0, 3.1]})
    assert compare.main([str(p) for p in paths] + ["--arm", "x:model.dropout=0.2"]) == 2
    assert "unrecognized arguments: --arm" in error_line(capsys)
    grid = ["grid", "--config", "configs/debug.toml", "--axis", "model.n_embd=32,64", "--fail-on", "worse"]
    assert compare.main(grid) == 2
    assert "unknown option --fail-on" in error_line(capsys)
    assert compare.main(["--config", "configs/debug.toml", "--arm", "a:model.dropot=0.1", "--arm", "b:"]) == 2
    assert "did you mean model.dropout?" in error_line(capsys)


@pytest.mark.slow
def test_compare_trains_arms_of_your_own_settings_and_remembers_them(tmp_path, capsys):
    """--arm base: --arm drop:model.dropout=0.1 trains both over 2 seeds; experiment.json records the arms, so
    a report on the folder's runs names them; a redefined arm is refused on the same folder."""
    base = [*tiny_compare_args(tmp_path), "--seeds", "2"]
    assert compare.main([*base, "--arm", "base:", "--arm", "drop:model.dropout=0.1"]) == 0
    exp = tmp_path / "exp"
    assert json.loads((exp / "experiment.json").read_text())["arms"] == {"base": {}, "drop": {"model.dropout": 0.1}}
    assert json.loads((exp / "drop-s1" / "config.json").read_text())["model"]["dropout"] == 0.1
    assert (exp / "report.md").read_text().startswith("# base vs drop: exp")
    runs = [str(exp / n) for n in ("base-s0", "base-s1", "drop-s0", "drop-s1")]
    assert compare.main([*runs, "--report-dir", str(tmp_path / "again")]) == 0
    assert "- drop vs base (reference): **" in (tmp_path / "again" / "report.md").read_text()
    capsys.readouterr()
    assert compare.main([*base, "--arm", "base:", "--arm", "drop:model.dropout=0.2"]) == 2
    assert "the settings of arm drop" in error_line(capsys)


# ----------------------------------------------------------------------------- arms from code


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A clone of this repository with one throwaway commit on top (the default init std 0.02 -> 0.05),
    which experiment.arms's arms from code work in."""
    path = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(path)], check=True)
    gpt = path / "model" / "gpt.py"
    gpt.write_text(
        gpt.read_text().replace(
            "nn.init.normal_(module.weight, mean=0.0, std=0.02)", "nn.init.normal_(module.weight, mean=0.0, std=0.05)"
        )
    )
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "a throwaway change"], check=True)
    monkeypatch.setattr(arms, "REPO_ROOT", path)
    return path


def test_an_arm_from_code_names_a_known_revision_of_a_clean_checkout(clone):
    """NAME@REV resolves REV to its commit; an unknown revision, the checkout's own commit and a dirty
    checkout are each one error naming the fix."""
    name, settings = parse_arm("before@HEAD~1")
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD~1"], capture_output=True, text=True).stdout
    assert name == "before" and settings == {"code": head.strip()}
    with pytest.raises(UserError, match="unknown revision 'nope'"):
        parse_arm("x@nope")
    with pytest.raises(UserError, match="the checkout's own commit"):
        parse_arm("x@HEAD")
    (clone / "train.py").write_text("# changed\n")
    with pytest.raises(UserError, match="uncommitted changes"):
        define_arms(None, {"base": {}, "before": settings})


def test_runs_that_differ_in_the_validation_data_are_refused(tmp_path, capsys):
    """Run folders that differ in a key no comparison may differ in (the tokenizer) are one error line."""
    paths = [
        fake_run(tmp_path, f"{tok}-s{s}", True, 1337 + s, 3.0, settings={"data.tokenizer": tok})
        for tok in ("gpt2", "char")
        for s in range(2)
    ]
    assert compare.main([str(p) for p in paths]) == 2
    assert "the runs differ in data.tokenizer, which no comparison may" in error_line(capsys)


def test_runs_that_no_preset_names_fall_back_to_the_keys_they_differ_in(tmp_path):
    """Untied runs with and without an lm_head bias (no preset is 'untied with a bias'): arms by lm_head_bias."""
    paths = [
        fake_run(tmp_path, f"b{b}-s{s}", False, 1337 + s, 3.0 + s / 10 + b / 100, settings={"model.lm_head_bias": b})
        for b in (False, True)
        for s in range(2)
    ]
    assert compare.main([str(p) for p in paths]) == 0
    assert (
        "- model.lm_head_bias=True vs model.lm_head_bias=False (reference): **" in (tmp_path / "report.md").read_text()
    )


def test_an_arm_that_equals_a_preset_is_refused():
    """'base:' trains exactly what 'tied' trains: both in one experiment would be the same runs."""
    with pytest.raises(UserError, match="same settings"):
        define_arms(["tied", "base"], {"base": {}})


def test_fail_on_with_a_bpb_margin_falls_back_to_nats_when_runs_lack_bpb(tmp_path, capsys):
    """Runs without final_val_bpb: --margin-bpb has nothing to gate on, so the nats verdict (worse) gates."""
    paths = _dropout_runs(tmp_path, {0.0: [3.00, 3.01, 3.02], 0.1: [3.05, 3.06, 3.07]})
    assert compare.main([str(p) for p in paths] + ["--fail-on", "worse", "--margin-bpb", "0.02"]) == 1


def _speed_runs(root, speeds: dict[str, list[float]]) -> list:
    """Tied runs of two code arms' worth of speed: the same loss, median tokens/s as given, per seed."""
    return [
        fake_run(root, f"{name}-s{s}", True, 1337 + s, 3.0, summary={"tokens_per_s_median": tps}, settings=settings)
        for name, settings in (("a", {"model.dropout": 0.0}), ("b", {"model.dropout": 0.1}))
        for s, tps in enumerate(speeds[name])
    ]


def test_the_speed_outcome_reads_tokens_per_s_as_a_ratio(tmp_path):
    """--outcome tokens-per-s: each pair's -ln tokens/s difference; b 5% faster on every seed is 'faster' by
    about 5%, in the verdict line and in verdict.json's outcome."""
    paths = _speed_runs(tmp_path, {"a": [1000, 1100, 900, 1050], "b": [1050, 1156, 944, 1103]})
    assert compare.main([str(p) for p in paths] + ["--outcome", "tokens-per-s", "--margin", "0.02"]) == 0
    md = (tmp_path / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("- model.dropout=0.1 vs model.dropout=0.0 (reference):"))
    assert "**faster** — tokens/s +5.0%" in line and "4 interleaved seed pairs" in line
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["outcome"] == "tokens_per_s" and record["comparisons"][0]["verdict"] == "better"


def test_the_outcome_is_refused_where_it_means_nothing(capsys):
    """The speed outcome in the budgets mode (which reads bits per byte) is not an option there: one error line."""
    argv = ["budgets", "--config", "configs/debug.toml", "--budgets", "1M", "--outcome", "tokens-per-s"]
    assert compare.main(argv) == 2
    assert "unknown option --outcome" in error_line(capsys)


def _looks(tmp_path, monkeypatch, gap: float) -> list[int]:
    """run_sequential over fake looks (drop − base = gap on every seed, plus alternating ±0.02 noise);
    returns the seed counts it asked for."""
    asked = []

    def fake_run_experiment(plan):
        asked.append(plan.seeds)
        root = tmp_path / f"look{plan.seeds}"
        paths = [
            fake_run(root, f"{arm}-s{i}", True, 1337 + i, 3.0 + i / 10 + d, settings={"model.dropout": p})
            for i in range(plan.seeds)
            for arm, p, d in (("base", 0.0, 0.0), ("drop", 0.1, gap + (0.02 if i % 2 else -0.02)))
        ]
        return paths, [], root

    monkeypatch.setattr(ab_run, "run_experiment", fake_run_experiment)
    arms = define_arms(None, {"base": {}, "drop": {"model.dropout": 0.1}})
    plan = Plan(config=None, overrides={}, arms=arms.names, seeds=3, reference="base", arm_set=arms, max_seeds=8)
    *_, (alpha, words, looks) = ab_run.run_sequential(plan)
    assert alpha == pytest.approx(0.05 / 4) and "0.05 over 4 looks, Bonferroni" in words
    assert looks == {
        "looks": [3, 5, 7, 8],
        "seeds_read": asked[-1],
        "alpha_per_look": alpha,
        "rule": "bonferroni",
        "declared": True,
    }
    return asked


def test_seeds_auto_stops_at_the_first_look_that_decides(tmp_path, monkeypatch):
    """A clear difference: decided at the first look (3 seeds), tested at 0.05 over the 4 looks to 8 seeds."""
    assert _looks(tmp_path, monkeypatch, 0.5) == [3]


def test_seeds_auto_adds_seeds_up_to_the_declared_most_when_nothing_is_decided(tmp_path, monkeypatch):
    """No difference and a spread too wide for equivalence: looks at 3, 5, 7 and 8 seeds, then stops."""
    assert _looks(tmp_path, monkeypatch, 0.0) == [3, 5, 7, 8]


def test_sequential_looks_and_their_level():
    """Looks every 2 seeds from 3, the most last; each at 0.05 over the number of looks."""
    assert sequential_looks(8) == [3, 5, 7, 8] and sequential_looks(3) == [3] and sequential_looks(9) == [3, 5, 7, 9]
    assert look_alpha([3, 5, 7, 8]) == pytest.approx(0.0125)
    with pytest.raises(UserError, match="below the first look"):
        sequential_looks(2)


def test_seeds_auto_needs_a_declared_most(capsys):
    """--seeds auto without --max-seeds, and --max-seeds without auto, are each one error line."""
    assert compare.main(["--config", "configs/debug.toml", "--seeds", "auto"]) == 2
    assert "--seeds auto trains in looks up to a declared --max-seeds" in error_line(capsys)
    assert compare.main(["--config", "configs/debug.toml", "--max-seeds", "9"]) == 2
    assert "--max-seeds bounds --seeds auto" in error_line(capsys)


def test_tokens_to_a_target_loss_interpolates_between_evals():
    """Val loss 3.5 at 1,000 tokens and 3.0 at 2,000: 3.25 is reached at 1,500; 2.0 never (inf)."""
    from experiment.ab.readout import tokens_to

    class R:
        evals = [{"tokens": 0, "val_loss": 10.8}, {"tokens": 1000, "val_loss": 3.5}, {"tokens": 2000, "val_loss": 3.0}]

    assert tokens_to(R, 3.25) == 1500 and tokens_to(R, 3.5) == 1000 and tokens_to(R, 2.0) == float("inf")


def test_the_tokens_to_target_outcome_names_runs_that_never_reached_it_first(tmp_path):
    """--outcome tokens-to:3.25: drop reaches it sooner on two seeds; on the third its run never does, which
    the report says before the verdicts, leaving that seed out; verdict.json lists it."""
    paths = [
        fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, final, settings={"model.dropout": p})
        for s, (base, drop) in enumerate([(3.0, 2.8), (3.0, 2.78), (3.0, 3.3)])
        for arm, p, final in (("base", 0.0, base), ("drop", 0.1, drop))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "tokens-to:3.25", "--margin", "0.05"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert md.index("**Never reached val loss 3.25:** model.dropout=0.1 on seed 1339") < md.index("- model.dropout")
    assert "tokens to reach val loss 3.25 −" in md and "2 seeds)" in md
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["outcome"] == "tokens-to:3.25" and record["never_reached"] == {"model.dropout=0.1": [1339]}


def test_an_arm_that_never_reaches_the_target_leaves_the_others_seeds_alone(tmp_path):
    """tokens-to:3.25 with three arms: one never reaches it on any seed, so it has no verdict; the other is
    still compared with the reference on all three seeds (a miss removes seeds from its own comparison only)."""
    paths = [
        fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, final, settings={"model.dropout": p})
        for s, finals in enumerate([(3.0, 2.8, 3.3), (3.0, 2.78, 3.31), (3.0, 2.81, 3.32)])
        for arm, p, final in zip(("base", "drop", "high"), (0.0, 0.1, 0.2), finals)
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "tokens-to:3.25", "--margin", "0.05"]) == 0
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["never_reached"] == {"model.dropout=0.2": [1337, 1338, 1339]}
    assert [(c["arm"], len(c["delta_per_seed"])) for c in record["comparisons"]] == [("model.dropout=0.1", 3)]
    (c,) = record["comparisons"]  # the arm without a verdict still counts in Holm's family, as p = 1
    assert c["p_holm"] == pytest.approx(min(1.0, 2 * c["p_t"])) and c["p_holm"] > c["p_t"]


def _race(tmp_path, drop_finals: list[float]) -> dict:
    """tokens-to:3.25 between base (final 3.0 on every seed) and drop (``drop_finals``; above 3.25 misses):
    verdict.json's one comparison."""
    paths = [
        fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, final, settings={"model.dropout": p})
        for s, drop in enumerate(drop_finals)
        for arm, p, final in (("base", 0.0, 3.0), ("drop", 0.1, drop))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "tokens-to:3.25", "--margin", "0.05"]) == 0
    (c,) = json.loads((tmp_path / "verdict.json").read_text())["comparisons"]
    return c


def test_a_race_to_a_val_loss_refuses_arms_that_evaluate_at_other_intervals(tmp_path, capsys):
    """The crossing is read between evals, so an arm evaluating more often would read sooner by that alone:
    refused before anything trains, and in a report of runs trained so."""
    argv = [*tiny_compare_args(tmp_path), "--seeds", "2", "--arm", "base:", "--arm", "dense:train.eval_interval=1"]
    assert compare.main([*argv, "--outcome", "tokens-to:3.0"]) == 2
    assert "arm dense evaluates every 1 steps and base every" in error_line(capsys)
    paths = [
        fake_run(tmp_path / "runs", f"{arm}-s{s}", True, 1337 + s, 2.8, settings={"train.eval_interval": every})
        for s in range(2)
        for arm, every in (("base", 250), ("dense", 50))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "tokens-to:3.25"]) == 2
    assert "give every arm one train.eval_interval" in error_line(capsys)


def test_an_arm_that_missed_where_the_reference_reached_cannot_read_better(tmp_path):
    """Dropping the seed drop missed would drop its worst: on the other three it reaches 3.25 sooner every time
    (better when it also reaches it on the fourth), but with the miss the verdict is inconclusive, the report
    says better was barred, and verdict.json names the seed of each difference it kept."""
    assert _race(tmp_path / "all", [2.8, 2.79, 2.81, 2.8])["verdict"] == "better"
    c = _race(tmp_path / "miss", [2.8, 2.79, 2.81, 3.3])
    assert c["verdict"] == "inconclusive" and c["p_holm"] < 0.05 and c["ci95"][1] < 0
    assert c["delta_seeds"] == [1337, 1338, 1339]
    md = (tmp_path / "miss" / "report.md").read_text()
    assert "**inconclusive** (better and equivalent barred by runs that missed)" in md


def test_a_verdict_json_is_strict_json_and_an_unread_verdict_fails_the_gate(tmp_path, capsys):
    """One seed gives no interval: verdict.json writes null, never NaN, so strict parsers read it.  A verdict
    that is none of the four ("not read" at a grid's edge) is no verdict to gate on: --fail-on exits 1."""
    from experiment.ab.readout import gate

    paths = [
        fake_run(tmp_path, f"{arm}-s0", tied, 1337, final) for arm, tied, final in (("t", True, 3.0), ("u", False, 2.9))
    ]
    assert compare.main([str(x) for x in paths]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} in verdict.json")

    (c,) = json.loads((tmp_path / "verdict.json").read_text(), parse_constant=refuse)["comparisons"]
    assert c["ci95"] == [None, None] and c["p_t"] is None
    record = {
        "arms": {"tied": {}, "untied": {}},
        "comparisons": [{"arm": "untied", "reference": "tied", "verdict": EDGE}],
    }
    (tmp_path / "edge.json").write_text(json.dumps(record))
    assert gate(tmp_path / "edge.json", "worse") == 1
    assert "untied has no verdict to gate on (not read" in capsys.readouterr().err


def test_a_bad_outcome_is_one_error_line(capsys):
    """An outcome that is none of loss, tokens-per-s, tokens-to:<loss>, time-to:<loss> names the four."""
    assert compare.main(["--config", "configs/debug.toml", "--outcome", "tokens-to:soon"]) == 2
    assert "choose loss, tokens-per-s, tokens-to:<val loss> or time-to:<val loss>" in error_line(capsys)


def test_no_verdict_at_all_fails_the_gate(tmp_path, capsys):
    """tokens-to: every seed of an arm missed the target, so no comparison exists: --fail-on worse exits 1
    (no verdict is not a pass), and verdict.json writes the misses as null."""
    paths = [
        fake_run(tmp_path, f"{arm}-s{s}", True, 1337 + s, final, settings={"model.dropout": p})
        for s in range(2)
        for arm, p, final in (("base", 0.0, 3.0), ("drop", 0.1, 3.3))
    ]
    assert compare.main([str(x) for x in paths] + ["--outcome", "tokens-to:3.25", "--fail-on", "worse"]) == 1
    assert "an arm has no verdict to gate on" in capsys.readouterr().err
    assert json.loads((tmp_path / "verdict.json").read_text())["values"]["model.dropout=0.1"] == [None, None]


# ----------------------------------------------------------------------------- refusals before the first run


def test_an_arm_that_changes_the_schedule_is_refused_before_anything_trains_or_is_recorded(tmp_path, capsys):
    """--arm short:train.lr_decay_iters=3 would follow another schedule than base, which the report refuses after
    training: compare.py refuses it first, naming the key and the fix, with no run trained and no experiment.json
    recording the arm."""
    argv = [*tiny_compare_args(tmp_path), "--seeds", "2", "--arm", "base:", "--arm", "short:train.lr_decay_iters=3"]
    assert compare.main(argv) == 2
    line = error_line(capsys)
    assert "arm short would follow another learning-rate schedule than base, parting at step 3" in line
    assert "because of its train.lr_decay_iters" in line and "drop train.lr_decay_iters from the arm" in line
    assert not (tmp_path / "exp" / "experiment.json").exists() and not list((tmp_path / "exp").glob("*/config.json"))


@pytest.mark.slow
def test_a_race_to_a_val_loss_lets_each_arm_keep_its_own_schedule(tmp_path):
    """With --outcome tokens-to:LOSS the arms are recipes racing to a val loss (a speedrun's rows), so an arm whose
    rate decays sooner trains and is reported, where --outcome loss refuses it (the test above)."""
    argv = [*tiny_compare_args(tmp_path), "--seeds", "2", "--arm", "base:train.lr_decay_iters=6"]
    argv += ["--arm", "short:train.lr_decay_iters=3", "--outcome", "tokens-to:3.3"]
    assert compare.main(argv) == 0
    md = (tmp_path / "exp" / "report.md").read_text()
    assert "## Paired statistics (ln tokens to val loss 3.3" in md and "**Reaches the target**" in md
    assert json.loads((tmp_path / "exp" / "verdict.json").read_text())["outcome"] == "tokens-to:3.3"


def test_a_learning_rate_arm_scales_min_lr_with_its_rate_as_the_grid_does(tmp_path, monkeypatch, capsys):
    """--arm lr4:train.learning_rate=4e-3: the run is started with min_lr scaled alike (the config's min_lr /
    learning_rate times 4e-3), said once, so its schedule has the others' shape and the report accepts it."""
    started = {}

    def record(base_argv, out_dir, name, extra, resume_argv, train_py=launch.TRAIN_PY):
        started[name] = extra
        if name == "lr4-s0":
            raise UserError("stop here")
        return out_dir / name

    monkeypatch.setattr(launch, "run_arm", record)
    argv = [*tiny_compare_args(tmp_path), "--seeds", "1", "--arm", "base:", "--arm", "lr4:train.learning_rate=4e-3"]
    assert compare.main(argv) == 2
    out = capsys.readouterr().out
    assert "arm lr4 sets train.learning_rate=0.004: train.min_lr=" in out and "follow it" in out
    cfg = json.loads((tmp_path / "exp" / "experiment.json").read_text())["config"]
    expected = 4e-3 * cfg["train.min_lr"] / cfg["train.learning_rate"]
    flags = dict(f[2:].split("=", 1) for f in started["lr4-s0"] if f.startswith("--"))
    assert float(flags["train.min_lr"]) == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- a code change to the parameters

# A throwaway commit that adds a parameter (a frozen zero gain on the final hidden state): the new code's
# checkpoints hold a key the old code's model lacks, and its logits are all zero, so its val loss stays at
# ln(vocab_size) while the old code learns: clearly worse, on every seed.
ADD_PARAMETER = (
    (
        "        self.loss_fn = nn.CrossEntropyLoss()\n",
        "        self.loss_fn = nn.CrossEntropyLoss()\n"
        "        self.out_gain = nn.Parameter(torch.zeros(config.n_embd), requires_grad=False)\n",
    ),
    (
        "        x = self.ln_f(self.hidden(idx))  # (B, T, n_embd)\n",
        "        x = self.ln_f(self.hidden(idx)) * self.out_gain  # (B, T, n_embd)\n",
    ),
)


@pytest.fixture
def param_clone(tmp_path, monkeypatch):
    """A clone of this repository whose last commit adds a parameter (:data:`ADD_PARAMETER`); returns
    ``(clone, the parent's commit, the new commit)``."""
    path = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(path)], check=True)
    gpt = path / "model" / "gpt.py"
    text = gpt.read_text()
    for old, new in ADD_PARAMETER:
        assert old in text, old
        text = text.replace(old, new)
    gpt.write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "add a parameter"], check=True)
    revs = subprocess.run([*git, "rev-parse", "HEAD~1", "HEAD"], capture_output=True, text=True, check=True)
    monkeypatch.setattr(arms, "REPO_ROOT", path)
    return path, *revs.stdout.split()


def _compare_in(clone: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """``python compare.py`` in ``clone`` on a tiny char experiment ``exp`` under ``tmp_path/runs`` (2 seeds: the
    arm with zero logits misses the other by the same amount on each, so even 1 df decides)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("ROMEO:\nWhat light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n\n" * 200)
    flags = [
        *("--config", "configs/debug.toml", "--name", "exp", "--seeds", "2", "--prompt", "ROMEO:"),
        *(f"--data.source={corpus}", "--data.tokenizer=char", f"--data.cache_dir={tmp_path / 'cache'}"),
        *(f"--train.out_dir={tmp_path / 'runs'}", "--train.max_iters=12", "--train.sample_tokens=0"),
    ]
    return subprocess.run([sys.executable, "compare.py", *flags, *argv], cwd=clone, capture_output=True, text=True)


def _samples_row(report: str) -> str:
    """The table row of the report's samples (one prompt)."""
    section = report[report.index("## Samples") :]
    return next(line for line in section.splitlines() if line.startswith("| ROMEO:") or line.startswith("| *"))


def test_a_virtual_environment_in_the_checkout_leaves_it_clean(clone):
    """A .venv/ or venv/ folder inside the checkout (where many users keep one) is ignored by git, so arms from
    code do not refuse the checkout as having uncommitted changes."""
    for folder in (".venv", "venv"):
        (clone / folder / "bin").mkdir(parents=True)
        (clone / folder / "bin" / "python").write_text("#!/bin/sh\n")
    arms.check_clean()


@pytest.mark.slow
def test_a_commit_that_adds_a_parameter_is_compared_with_its_parent_end_to_end(param_clone, tmp_path):
    """At the new commit, --arm old@HEAD~1 --arm new: --reference old --fail-on worse: both arms train, each
    is sampled by its own code (no checkpoint of the parent is loaded into the new model), the report names
    the commits and the diff (each run records its own), the gate exits 1 because new is worse than old, the folder re-renders alone,
    and the parent's worktree is gone afterwards."""
    clone, parent, new = param_clone
    done = _compare_in(
        clone, tmp_path, "--arm", "old@HEAD~1", "--arm", "new:", "--reference", "old", "--fail-on", "worse"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "--fail-on worse:" in done.stderr and "[compare] reference: old" in done.stdout
    exp = tmp_path / "runs" / "exp"
    md = (exp / "report.md").read_text()
    assert md.startswith("# old vs new: exp (reference: old)") or md.startswith("# new vs old")
    assert "- new vs old (reference): **worse**" in md
    assert f"the code, commit `{new[:12]}` against old's `{parent[:12]}`; 1 file changed" in md
    row = _samples_row(md)
    assert row.count("ROMEO:") == 2 and "not sampled" not in row, row
    record = json.loads((exp / "verdict.json").read_text())
    assert record["reference"] == "old" and record["code"]["new"]["commit"] == new
    commits = {n: json.loads((exp / n / "env.json").read_text())["git_commit"] for n in ("old-s1", "new-s1")}
    assert commits == {"old-s1": parent, "new-s1": new}
    assert not (clone / ".worktrees" / parent[:12]).exists()
    again = subprocess.run(
        [sys.executable, "compare.py", str(exp), "--prompt", "ROMEO:"], cwd=clone, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert _samples_row((exp / "report.md").read_text()) == row and not (clone / ".worktrees" / parent[:12]).exists()


@pytest.mark.slow
def test_the_parent_checked_out_compares_the_commit_that_adds_a_parameter_and_gates_the_other_way(
    param_clone, tmp_path
):
    """At the parent commit, --arm old: --arm new@<commit> --reference new: the new commit's checkpoints (a key
    the parent's model lacks) are sampled by the new code, and old is better than the reference, so --fail-on
    worse exits 0: the gate follows the reference, not the order of the arms."""
    clone, parent, new = param_clone
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", parent], check=True)
    done = _compare_in(
        clone, tmp_path, "--arm", "old:", "--arm", f"new@{new}", "--reference", "new", "--fail-on", "worse"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    md = ((tmp_path / "runs" / "exp") / "report.md").read_text()
    assert "- old vs new (reference): **better**" in md
    row = _samples_row(md)
    assert row.count("ROMEO:") == 2 and "not sampled" not in row, row


def test_fail_on_with_a_one_seed_rate_pick_is_refused_before_anything_trains(tmp_path, capsys):
    """--lr-tuning one-seed picks rates on one seed, whose verdicts are not calibrated: --fail-on with it is one
    error line before any run trains."""
    argv = [*tiny_compare_args(tmp_path), "--lr-grid", "1e-3,2e-3", "--lr-tuning", "one-seed", "--fail-on", "worse"]
    assert compare.main(argv) == 2
    assert "--fail-on gates only on calibrated verdicts" in error_line(capsys)
    assert not (tmp_path / "exp").exists()
