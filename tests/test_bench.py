"""bench.py prints its figures (training, and generation with --generate) in a fixed format, and rejects bad flags cleanly.

Run: ``python -m pytest -q tests/test_bench.py``  (CPU, a few seconds).  Only the format and
plausibility of the output are checked: speed itself is never asserted in a unit test.
"""

import re

import pytest

import bench


def tiny_bench_args(tmp_path, *extra: str) -> list[str]:
    """bench.py arguments for a 1-layer char model on a small corpus written under tmp_path."""
    path = tmp_path / "c.txt"
    path.write_text("To be, or not to be, that is the question.\n" * 300)
    return [f"--data.source={path}", "--data.tokenizer=char", f"--data.cache_dir={tmp_path / 'cache'}",
            "--model.n_layer=1", "--model.n_head=2", "--model.n_embd=32", *extra]


def test_bench_prints_every_figure(tmp_path, capsys):
    """Each line is printed once; tokens/s equals tokens/step divided by the median step time."""
    code = bench.main(tiny_bench_args(tmp_path, "--model.block_size=32", "--train.batch_size=4", "--iters", "3", "--warmup", "1"))
    out = capsys.readouterr().out
    assert code == 0
    for label in ("device", "attention", "model", "parameters", "tokens/step", "ms/iter", "tokens/s", "peak memory", "MFU"):
        assert re.search(rf"^{re.escape(label)}:", out, re.M), label
    ms = float(re.search(r"^ms/iter:\s+([\d.]+)", out, re.M).group(1))
    tps = float(re.search(r"^tokens/s:\s+([\d,]+)", out, re.M).group(1).replace(",", ""))
    # ms/iter is printed to 0.1 ms, tokens/s to 1 token: allow for both roundings.
    assert 4 * 32 / ((ms + 0.051) / 1000) - 1 <= tps <= 4 * 32 / ((ms - 0.051) / 1000) + 1
    assert "n/a" in re.search(r"^MFU:.*$", out, re.M).group(0)  # no peak figure for a CPU


def test_bench_bad_flag_is_one_line(capsys):
    """A bad --iters value is a one-line error with exit status 2."""
    assert bench.main(["--iters", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_bench_generate_times_both_paths_and_checks_their_tokens(tmp_path, capsys):
    """--generate prints tokens/s with and without the KV cache, the ratio, and that both made the same tokens."""
    code = bench.main(tiny_bench_args(tmp_path, "--model.block_size=16", "--generate", "--new-tokens", "40", "--repeats", "2"))
    out = capsys.readouterr().out
    assert code == 0
    assert "24 steps slide the window" in out  # 40 new tokens, block_size 16
    cached = float(re.search(r"^with cache:\s+([\d,.]+) tokens/s", out, re.M).group(1).replace(",", ""))
    uncached = float(re.search(r"^without cache:\s+([\d,.]+) tokens/s", out, re.M).group(1).replace(",", ""))
    ratio = float(re.search(r"^speed-up:\s+([\d.]+)x", out, re.M).group(1))
    assert ratio == pytest.approx(cached / uncached, abs=0.051)
    assert re.search(r"^same tokens:\s+yes$", out, re.M)
