"""compare.py's plan line (runs left, estimated time, checkpoint disk) and its progress bar over the experiment.

Run: ``python -m pytest -q tests/test_plan.py``  (CPU, offline, seconds; one real tiny run checks the disk rule).
"""

import json
import statistics

import pytest
from helpers import tiny_args

import compare
from experiment.ab import cli as ab_cli
import train
from data.loader import TokenData
from data.prepare import prepare_from_config
from experiment import stats
from experiment.runs import launch
from experiment.runs import plan
from training.config import parse_config


def _folder(root, name, summary=None, ckpt=False, step=None):
    """A run folder with a summary.json (finished), or a ckpt_last.pt and a metrics row at ``step`` (to resume)."""
    path = root / name
    path.mkdir(parents=True)
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    if ckpt:
        (path / "ckpt_last.pt").write_bytes(b"")
        (path / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": step, "lr": 1e-3}) + "\n")
    return path


def test_plan_line_counts_each_kind_of_run_and_labels_the_time_an_estimate(tmp_path):
    """Finished, adopted (adopted.json), to resume (a checkpoint: only its steps left count) and to train
    (no folder) are counted apart; the time is the finished runs' median times the runs left, said to be an
    estimate; the disk is the new runs' parameters x 16 bytes."""
    _folder(tmp_path, "tied-s0", {"elapsed_s": 60})
    (_folder(tmp_path, "untied-s0", {"elapsed_s": 120}) / "adopted.json").write_text("{}")
    _folder(tmp_path, "tied-s1", ckpt=True, step=50)
    runs = [plan.PlannedRun(arm, f"{arm}-s{i}") for i in range(2) for arm in ("tied", "untied")]
    states = [plan.run_state(tmp_path, r) for r in runs]
    assert states == ["finished", "adopted", "resume", "train"]
    timing = plan.time_per_run(tmp_path, parse_config(None, {}), 10_000)
    line = plan.plan_line(tmp_path, runs, states, {"tied": 1000, "untied": 2000}, 100, timing, "2 arms x 2 seeds")
    assert line.startswith(
        "[compare] plan: 4 runs (2 arms x 2 seeds): 1 finished, 1 adopted, 1 to resume, 1 to train; "
    )
    # 1.5 runs left (one to train, half of one to resume) at the median of 60 s and 120 s: 135 s.
    assert "roughly 2 min (an estimate, from the median of the 2 finished run(s) here: 2 min a run)" in line
    assert line.endswith(
        "and 32 kB of checkpoints for the 1 new runs (16 bytes a parameter: fp32 weights in "
        "ckpt_best.pt, weights and AdamW's two moments in ckpt_last.pt)"
    )


def test_plan_line_scales_each_arms_runs_by_its_steps(tmp_path):
    """Arms of different lengths: a run of an arm with half the timed arm's steps counts as half a run."""
    runs = [plan.PlannedRun(arm, f"{arm}-s0") for arm in ("long", "short")]
    timing = (100.0, "a timed step")
    line = plan.plan_line(
        tmp_path,
        runs,
        ["train", "train"],
        {"long": 10, "short": 10},
        100,
        timing,
        "x",
        scale={"long": 1.0, "short": 0.5},
    )
    # 1.5 runs at 100 s: 150 s.
    assert "roughly 2 min (an estimate, from a timed step: 2 min a run, each arm's scaled by its steps)" in line
    assert plan.steps_per_run(parse_config(None, {"train": {"max_iters": 50}}), 0) < plan.steps_per_run(
        parse_config(None, {"train": {"max_iters": 100}}), 0
    )


def test_a_resumed_run_counts_the_share_left_of_its_own_steps(tmp_path):
    """A run stopped at step 100 of its own 200 (config.json) has half of it left, whatever length the
    experiment's shared config gives: 100 of 2000 would count it as 95% left."""
    run = _folder(tmp_path, "short-s0", ckpt=True, step=100)
    (run / "config.json").write_text(json.dumps({"train": {"max_iters": 200}}))
    assert plan.fraction_left(run, 2000) == 0.5
    (run / "config.json").write_text("{not json")
    assert plan.fraction_left(run, 2000) == 0.95  # an unreadable config: the shared length is the guess


def test_plan_line_with_nothing_left_says_so(tmp_path):
    """Every run finished: no time, no disk, 'nothing to train'."""
    _folder(tmp_path, "tied-s0", {"elapsed_s": 60})
    runs = [plan.PlannedRun("tied", "tied-s0")]
    line = plan.plan_line(tmp_path, runs, ["finished"], {"tied": 1000}, 100, None, "x")
    assert line == "[compare] plan: 1 runs (x): 1 finished, 0 adopted, 0 to resume, 0 to train; nothing to train"


@pytest.fixture
def stop_at_first_run(tmp_path, monkeypatch):
    """compare.py argv for a tiny 2-arm, 1-seed experiment under tmp_path whose first run_arm call stops it."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be: that is the question.\n" * 300)

    class Reached(Exception):
        pass

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(launch, "run_arm", stop)
    argv = [
        "--config",
        "configs/debug.toml",
        "--seeds",
        "1",
        "--name",
        "exp",
        f"--data.source={corpus}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={tmp_path}",
    ]
    return argv, Reached


def test_compare_prints_the_plan_line_and_the_bar_before_the_first_run(stop_at_first_run, capsys):
    """Before run_arm is first called, compare.py has printed the plan (2 runs to train, a time from steps timed
    here, labelled an estimate, and the disk from the arms' parameter counts) and the bar at 0 of 2 runs."""
    argv, reached = stop_at_first_run
    with pytest.raises(reached):
        compare.main(argv)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("[compare] plan: "))
    assert line.startswith("[compare] plan: 2 runs (2 arms x 1 seed): 0 finished, 0 adopted, 0 to resume, 2 to train; ")
    assert "(an estimate, from 3 training steps timed here" in line
    args, overrides = ab_cli.parse_args(argv)
    cfg = parse_config(args.config, overrides)
    cfg.model.vocab_size = TokenData(prepare_from_config(cfg.data)).vocab_size
    disk = (plan.arm_params(cfg, "tied") + plan.arm_params(cfg, "untied")) * 16
    assert f" and {disk / 1e3:.0f} kB of checkpoints for the 2 new runs" in line
    assert "[compare] experiment:   0%" in out and "0/2" in out


def test_the_reference_line_says_what_better_means_under_the_outcome(stop_at_first_run, capsys):
    """With --outcome tokens-to:2.5 the plan says an arm is better with fewer training tokens to val loss 2.5,
    not with a lower loss."""
    argv, reached = stop_at_first_run
    with pytest.raises(reached):
        compare.main([*argv, "--outcome", "tokens-to:2.5", "--margin", "0.02"])
    out = capsys.readouterr().out
    assert "(better: fewer training tokens to val loss 2.5 than tied)" in out and "lower loss" not in out


def test_the_bar_counts_runs_done_over_the_experiment(tmp_path, capsys):
    """The bar starts at the runs already done, moves one step per run that ends here unfinished before (a
    reused finished run does not move it), and grows when runs are added (past a grid's edge)."""
    _folder(tmp_path, "done", {"elapsed_s": 1})
    bar = plan.RunsBar(total=3, done=1)

    def finish(name):
        def job():
            _folder(tmp_path, name, {"elapsed_s": 1})
            return name

        return job

    assert launch.run_shared(tmp_path, [("done", lambda: "done"), ("new", finish("new"))], bar) == ["done", "new"]
    bar.add(2)
    bar.close()
    shown = [
        line.split("|")[-1].split()[0]
        for line in capsys.readouterr().out.replace("\r", "\n").splitlines()
        if "experiment" in line
    ]
    assert shown == ["1/3", "2/3", "2/5"]


def test_the_disk_rule_is_what_a_run_writes(tmp_path, corpus):
    """A real run's two checkpoints hold its parameters x 16 bytes, plus a little metadata (RNG states,
    tokenizer, counters): the plan's disk figure is computed, and it is what lands on disk."""
    args = tiny_args(tmp_path, corpus, "--model.n_embd=64", "--train.max_iters=2", "--run-name", "r")
    assert train.main(args) == 0
    run = tmp_path / "runs" / "r"
    params = json.loads((run / "summary.json").read_text())["parameters"]
    written = sum(p.stat().st_size for p in run.glob("ckpt_*.pt"))
    assert (
        params * plan.CHECKPOINT_BYTES_PER_PARAM <= written <= params * plan.CHECKPOINT_BYTES_PER_PARAM * 1.05 + 100_000
    )


def test_the_power_line_gives_what_the_seeds_can_detect_from_the_spread_seen(tmp_path):
    """Three paired seeds finished: the spread of untied − tied, what --seeds 5 detects, and how many seeds the
    margin needs with its range (the same figure an inconclusive report gives) and that 3 seeds are too few to
    plan on; with no paired seeds, how to measure the spread."""
    for i, (t, u) in enumerate([(3.00, 3.02), (3.10, 3.09), (3.05, 3.08)]):
        for arm, final in (("tied", t), ("untied", u)):
            (tmp_path / f"{arm}-s{i}").mkdir()
            (tmp_path / f"{arm}-s{i}" / "summary.json").write_text(json.dumps({"final_val_loss": final}))
    line = plan.power_line(tmp_path, ["tied", "untied"], "tied", 5, 0.01)
    sd = statistics.stdev([0.02, -0.01, 0.03])
    assert f"untied − tied spreads by {sd:.4f} nats a seed (3 paired seeds finished here)" in line
    assert f"5 seeds detect a difference of about {stats.detectable_difference(sd, 5):.4f} nats (80% power, 5% " in line
    figure = stats.seeds_figure(sd, 3, 0.01)
    assert f"the declared margin: {figure.words('±0.01 nats')}" in line
    assert "a spread from 3 seeds is too uncertain to plan on: 5 or more" in line
    assert "a pilot (--seeds 3) measures it" in plan.power_line(tmp_path / "none", ["tied", "untied"], "tied", 5, 0.01)


def test_the_seeds_figure_widens_with_a_smaller_pilot():
    """The same observed spread from 3 seeds and from 9: the same point figure, a far wider range from 3, whose
    upper end is about 40 times its point (the sd's 95% interval on 2 df reaches 6.3 times the sd)."""
    small, large = stats.seeds_figure(0.01, 3, 0.01), stats.seeds_figure(0.01, 9, 0.01)
    assert small.seeds == large.seeds
    assert small.low < large.low <= large.seeds <= large.high < small.high
    assert 30 < small.high / small.seeds < 50 and small.too_small and not large.too_small
    assert stats.seeds_figure(0.0, 3, 0.01) is None and stats.seeds_figure(0.02, 1, 0.01) is None


def test_a_learning_rate_flag_moves_every_optimizer_group_by_one_factor():
    """lr_flags for a rate twice the config's: min_lr doubles too, and under Muon so does Muon's rate, so the
    ratio between the optimizer groups stays as declared; under AdamW no Muon flag is given."""
    from training.config import TrainConfig

    adamw = TrainConfig(learning_rate=1e-3, min_lr=1e-4)
    assert plan.lr_flags(adamw, 2e-3) == ["--train.learning_rate=0.002", "--train.min_lr=0.0002"]
    muon = TrainConfig(learning_rate=1e-3, min_lr=1e-4, optimizer="muon", muon_learning_rate=0.01)
    assert plan.lr_flags(muon, 2e-3)[2] == "--train.muon_learning_rate=0.02"


def test_a_rerun_may_add_arms_to_a_folder_but_never_drop_one(tmp_path):
    """experiment.json records every arm compared (the Holm family): a re-run with another arm adds it; one
    without an arm is refused by name, as fewer arms would ease the others' adjustment."""
    from core.errors import UserError
    from experiment.runs import record
    from experiment.runs.plan import Plan
    from training.config import RunConfig

    def plan(*arms):
        return Plan(config=None, overrides={}, arms=list(arms), seeds=2)

    assert record.remember_settings(tmp_path, RunConfig(), plan("tied", "untied")).compared == ["tied", "untied"]
    grown = record.remember_settings(tmp_path, RunConfig(), plan("tied", "untied", "tied-bias"))
    assert grown.compared == ["tied", "untied", "tied-bias"]
    with pytest.raises(UserError, match=r"arms \(without tied-bias: fewer arms would ease"):
        record.remember_settings(tmp_path, RunConfig(), plan("tied", "untied"))
