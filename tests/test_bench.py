"""bench.py prints its figures (training, and generation with --generate) in a fixed format, and rejects bad flags cleanly.

Run: ``python -m pytest -q tests/test_bench.py``  (CPU, a few seconds).  Only the format and
plausibility of the output are checked: speed itself is never asserted in a unit test.
"""

import re

import pytest

import bench
from helpers import error_line
from core.flops import Peak


def tiny_bench_args(tmp_path, *extra: str) -> list[str]:
    """bench.py arguments for a 1-layer char model on a small corpus written under tmp_path."""
    path = tmp_path / "c.txt"
    path.write_text("To be, or not to be, that is the question.\n" * 300)
    return [
        f"--data.source={path}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        "--model.n_layer=1",
        "--model.n_head=2",
        "--model.n_embd=32",
        *extra,
    ]


def test_bench_prints_every_figure(tmp_path, capsys, monkeypatch):
    """Each line is printed once; tokens/s equals tokens/step divided by the median step time; on a CPU the MFU
    is a number against the measured matmul peak, which the line names."""
    monkeypatch.setattr(bench, "checked_peak", lambda achieved, device, amp: Peak(1e11, "a stub CPU peak"))
    code = bench.main(
        tiny_bench_args(tmp_path, "--model.block_size=32", "--train.batch_size=4", "--iters", "3", "--warmup", "1")
    )
    out = capsys.readouterr().out
    assert code == 0
    for label in (
        "device",
        "attention",
        "model",
        "parameters",
        "tokens/step",
        "ms/iter",
        "tokens/s",
        "peak memory",
        "MFU",
    ):
        assert re.search(rf"^{re.escape(label)}:", out, re.M), label
    ms = float(re.search(r"^ms/iter:\s+([\d.]+)", out, re.M).group(1))
    tps = float(re.search(r"^tokens/s:\s+([\d,]+)", out, re.M).group(1).replace(",", ""))
    # ms/iter is printed to 0.1 ms, tokens/s to 1 token: allow for both roundings.
    assert 4 * 32 / ((ms + 0.051) / 1000) - 1 <= tps <= 4 * 32 / ((ms - 0.051) / 1000) + 1
    assert re.search(r"^MFU:\s+[\d.]+% of 100 GFLOP/s \(a stub CPU peak\)", out, re.M)


def test_bench_notes_other_processes_on_the_cores_as_train_py_does(tmp_path, capsys, monkeypatch):
    """With other processes' threads running on the cores (stubbed), bench.py prints train.py's contention note
    after its figures and says the timings are low."""
    from core import hardware

    monkeypatch.setattr(bench, "checked_peak", lambda achieved, device, amp: Peak(1e11, "a stub CPU peak"))
    monkeypatch.setattr(hardware, "others_running", lambda: 64)
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 2)
    args = tiny_bench_args(tmp_path, "--model.block_size=32", "--train.batch_size=4", "--iters", "2", "--warmup", "1")
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert "note: 64 thread(s) of other processes are running" in out and "these timings are low" in out
    assert out.index("these timings are low") > out.index("MFU:")


def test_bench_bad_flag_is_one_line(capsys):
    """A bad --iters value is a one-line error with exit status 2."""
    assert bench.main(["--iters", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_bench_generate_times_both_paths_and_checks_their_tokens(tmp_path, capsys):
    """--generate prints tokens/s with and without the KV cache, the ratio, and that both made the same tokens."""
    code = bench.main(
        tiny_bench_args(tmp_path, "--model.block_size=16", "--generate", "--new-tokens", "40", "--repeats", "2")
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "24 steps slide the window" in out  # 40 new tokens, block_size 16
    cached = float(re.search(r"^with cache:\s+([\d,.]+) tokens/s", out, re.M).group(1).replace(",", ""))
    uncached = float(re.search(r"^without cache:\s+([\d,.]+) tokens/s", out, re.M).group(1).replace(",", ""))
    ratio = float(re.search(r"^speed-up:\s+([\d.]+)x", out, re.M).group(1))
    assert ratio == pytest.approx(cached / uncached, abs=0.051)
    assert re.search(r"^same tokens:\s+yes$", out, re.M)


def test_bench_grid_times_every_variant_and_tabulates_them(tmp_path, capsys, monkeypatch):
    """--grid times one set-up per combination of values (here 2 x 2) and ends with a table row for each."""
    monkeypatch.setattr(bench, "checked_peak", lambda achieved, device, amp: Peak(1e11, "stub"))
    code = bench.main(
        tiny_bench_args(
            tmp_path,
            "--model.block_size=16",
            "--train.batch_size=2",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--grid",
            "model.tie_embeddings=true,false",
            "--grid",
            "train.pad_vocab_multiple=1,64",
        )
    )
    out = capsys.readouterr().out
    assert code == 0
    rows = re.findall(r"^\| (True|False) \| (1|64) \| [\d.]+ \| [\d,]+ \| [\d.]+% \| [\d,]+ \|$", out, re.M)
    assert rows == [("True", "1"), ("True", "64"), ("False", "1"), ("False", "64")]


def test_bench_arms_file_times_every_arm_each_round_in_alternating_order(tmp_path, capsys, monkeypatch):
    """--arms-file times every arm once a round, the order reversed every other round, and tabulates each
    arm's rounds, their median and its step time over the first arm's (1.000 for the first arm itself)."""
    monkeypatch.setattr(bench, "checked_peak", lambda achieved, device, amp: Peak(1e11, "stub"))
    arms = tmp_path / "arms.toml"
    arms.write_text('[tied]\n"model.tie_embeddings" = true\n\n[untied]\n"model.tie_embeddings" = false\n')
    short = ["--model.block_size=16", "--train.batch_size=2", "--iters", "1", "--warmup", "0"]
    code = bench.main(tiny_bench_args(tmp_path, *short, "--arms-file", str(arms), "--rounds", "2"))
    out = capsys.readouterr().out
    assert code == 0
    assert re.findall(r"^\[bench\] round (\d)/2, arm (\w+)$", out, re.M) == [
        ("1", "tied"),
        ("1", "untied"),
        ("2", "untied"),
        ("2", "tied"),
    ]
    rows = re.findall(r"^\| (\w+) \| [\d.]+ / [\d.]+ \| [\d.]+ \| ([\d.]+) \|$", out, re.M)
    assert [name for name, _ in rows] == ["tied", "untied"] and rows[0][1] == "1.000"


def test_bench_arms_file_is_refused_before_any_timing_when_missing(tmp_path, capsys):
    """A missing arms file is one line naming it, exit 2, and nothing timed."""
    code = bench.main(tiny_bench_args(tmp_path, "--arms-file", str(tmp_path / "none.toml")))
    captured = capsys.readouterr()
    assert code == 2 and "--arms-file" in captured.err and "ms/iter" not in captured.out


def test_bench_profile_reports_the_matmul_share(tmp_path, capsys, monkeypatch):
    """--profile prints the share of the step's self time inside matmuls and the top ops."""
    monkeypatch.setattr(bench, "checked_peak", lambda achieved, device, amp: None)
    assert (
        bench.main(tiny_bench_args(tmp_path, "--model.block_size=16", "--iters", "2", "--warmup", "1", "--profile"))
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"^profile:\s+2 steps; \d+% of self time in matmuls, \d+% outside them", out, re.M)
    assert re.search(r"ms/step .* aten::", out)


@pytest.mark.parametrize("grid", ["model.nope=1,2", "model.tie_embeddings"])
def test_a_bad_grid_option_is_named_as_bench_pys_own(grid, capsys):
    """A malformed or unknown --grid is one error line that names --grid (bench.py's flag), never
    compare.py's --axis, before anything is timed."""
    assert bench.main(["--config", "configs/debug.toml", "--grid", grid]) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: --grid {grid.split('=')[0]}") or line.startswith(f"error: --grid '{grid}'"), line
    assert "--axis" not in line


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--generate", "--iters", "3"],
            "--iters applies to training steps, which --generate and --stream do not time",
        ),
        (["--stream", "--warmup=1"], "--warmup applies to training steps"),
        (["--new-tokens", "40"], "--new-tokens applies to --generate: drop it, or add --generate"),
        (["--generate", "--stream-tokens", "10"], "--stream-tokens applies to --stream"),
        (["--repeats", "2"], "--repeats applies to --generate and --stream"),
        (["--rounds", "2"], "--rounds applies to --arms-file"),
    ],
)
def test_an_option_the_chosen_timing_does_not_read_is_refused(argv, message, capsys):
    """An option of another way of timing (--iters with --generate, --new-tokens without it) is one error line
    before anything is built, not ignored in silence."""
    assert bench.main(["--config", "configs/debug.toml", *argv]) == 2
    assert error_line(capsys).startswith(f"error: {message}")
