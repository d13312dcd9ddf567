"""benchmarks/nanogpt_char.py, the side-by-side with nanoGPT: what it reads from each program and how it measures.

The whole comparison needs a nanoGPT checkout and minutes of training, so these tests check its
parts: the val loss it reads from both programs' output, one measured child process, and the
error for a checkout whose data is not prepared.

Run: ``python -m pytest -q tests/test_benchmarks.py``  (CPU, offline, seconds).
"""

import json
import sys

from benchmarks import nanogpt_char


def test_the_last_val_loss_is_read_from_both_programs_output():
    """nanoGPT's eval line and tinygpt's (which adds perplexity and bpb) give the last step's val loss."""
    nano = "step 1750: train loss 1.8, val loss 1.9\nstep 2000: train loss 1.7648, val loss 1.8857\n"
    tiny = "step 2000: train loss 1.8035, val loss 1.8878, val ppl 6.6, val bpb 2.7235\ndone: 2000 steps\n"
    assert nanogpt_char.last_val_loss(nano) == 1.8857
    assert nanogpt_char.last_val_loss(tiny) == 1.8878
    assert nanogpt_char.last_val_loss("no evaluation yet") is None


def test_run_once_times_a_child_and_reads_its_peak_memory(tmp_path):
    """A child run to its end gives its wall time, a plausible peak RSS (a Python process: over 1 MiB) and its
    output, which is also in the log."""
    code = "import time; time.sleep(0.2); print('step 5: train loss 1.0, val loss 2.5')"
    wall, peak_mib, text, curve = nanogpt_char.run_once([sys.executable, "-c", code], tmp_path, tmp_path / "a.log")
    assert wall >= 0.2 and 1 < peak_mib < 4096
    assert nanogpt_char.last_val_loss(text) == 2.5 and (tmp_path / "a.log").read_text() == text
    ((seconds, step, loss),) = curve
    assert 0.2 <= seconds <= wall and (step, loss) == (5, 2.5)


def test_each_eval_line_is_stamped_when_the_child_prints_it(tmp_path):
    """Lines arrive as printed (the child runs unbuffered): an eval printed before a 0.5 s sleep is stamped
    before it, the next one after it."""
    code = (
        "import time; print('step 1: train loss 1.0, val loss 2.0'); time.sleep(0.5); "
        "print('step 2: train loss 1.0, val loss 1.5')"
    )
    _, _, _, curve = nanogpt_char.run_once([sys.executable, "-c", code], tmp_path, tmp_path / "a.log")
    assert [c[1:] for c in curve] == [(1, 2.0), (2, 1.5)] and curve[1][0] - curve[0][0] >= 0.45


def test_a_nanogpt_checkout_without_prepared_data_is_refused(tmp_path, capsys):
    """Without data/shakespeare_char/train.bin the tool says how to prepare it and exits 2 before running anything."""
    assert nanogpt_char.main(["--nanogpt", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "prepare.py" in err and not (tmp_path / "out").exists()


def test_two_records_with_one_label_are_refused_before_any_run(tmp_path, capsys):
    """Each --record is one program with its own logs: two configs that would share a name are refused (exit 2)
    before anything runs, and a record kept as a row folder's record.toml is named by that folder."""
    (tmp_path / "data" / "shakespeare_char").mkdir(parents=True)
    (tmp_path / "data" / "shakespeare_char" / "train.bin").write_bytes(b"")
    for row in ("a", "b"):
        (tmp_path / row).mkdir()
        (tmp_path / row / "fast.toml").write_text("")
        (tmp_path / row / "record.toml").write_text("")
    clash = ["--record", str(tmp_path / "a" / "fast.toml"), "--record", str(tmp_path / "b" / "fast.toml")]
    assert nanogpt_char.main(["--nanogpt", str(tmp_path), "--out", str(tmp_path / "out"), *clash]) == 2
    assert "share the label" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert nanogpt_char.record_label(tmp_path / "a" / "record.toml") == "a/record.toml"
    assert nanogpt_char.record_label(tmp_path / "b" / "fast.toml") == "fast"


def test_seconds_to_the_target_is_the_first_eval_at_or_below_it():
    """The seconds-to column reads the first evaluation at or below the target, not a later or interpolated one;
    a curve that never gets there has none."""
    curve = [(10.0, 0, 4.2), (20.0, 250, 1.9), (30.0, 500, 1.88), (40.0, 750, 1.85)]
    assert nanogpt_char.seconds_to(curve, 1.88) == 30.0
    assert nanogpt_char.seconds_to(curve, 1.8) is None


def test_a_failed_program_is_reported_and_the_race_goes_on(tmp_path, monkeypatch, capsys):
    """A program that exits with an error costs its own round only: the others still run and are timed, race.json
    (rewritten after each program) records the failure, the table marks it, and the exit status is 1."""
    nano = tmp_path / "nanoGPT"
    (nano / "data" / "shakespeare_char").mkdir(parents=True)
    (nano / "data" / "shakespeare_char" / "train.bin").write_bytes(b"")
    (nano / "train.py").write_text("print('step 10: train loss 2.0, val loss 1.5')\n")
    broken = nanogpt_char.Recipe(nanogpt_args=(), tinygpt_config="no/such/config.toml", tinygpt_args=(), target=1.6)
    monkeypatch.setitem(nanogpt_char.RECIPES, "cpu", broken)
    assert nanogpt_char.main(["--nanogpt", str(nano), "--out", str(tmp_path / "out"), "--rounds", "1"]) == 1
    race = json.loads((tmp_path / "out" / "race.json").read_text())
    assert race["target"] == 1.6 and race["programs"]["tinygpt"]["failed"] == [1]
    assert set(race["setup"]) == {"omp_num_threads", "nanogpt_commit", "tinygpt_args"}  # what the numerics hang on
    assert race["programs"]["nanoGPT"]["curves"][0][0][1:] == [10, 1.5]
    out = capsys.readouterr().out
    assert "round 1: tinygpt failed" in out and "| tinygpt | failed (round 1) | n/a |" in out


def test_rounds_run_the_programs_in_alternating_order(tmp_path, monkeypatch):
    """Round 1 runs nanoGPT then tinygpt, round 2 tinygpt then nanoGPT, as bench.py --arms-file alternates: a
    place in the order (cold caches first, the previous process's memory) never falls on one program alone."""
    nano = tmp_path / "nanoGPT"
    (nano / "data" / "shakespeare_char").mkdir(parents=True)
    (nano / "data" / "shakespeare_char" / "train.bin").write_bytes(b"")
    order = []
    monkeypatch.setattr(nanogpt_char, "race_one", lambda prog, i, out, extra: order.append((i, prog.name)))
    monkeypatch.setattr(nanogpt_char, "figure", lambda *a, **k: None)
    assert nanogpt_char.main(["--nanogpt", str(nano), "--out", str(tmp_path / "out"), "--rounds", "3"]) == 0
    assert [name for _, name in order] == ["nanoGPT", "tinygpt", "tinygpt", "nanoGPT", "nanoGPT", "tinygpt"]
