"""sample.py and bench.py as a user meets them: pipes, Ctrl-C, long runs, --help.

Run: ``python -m pytest -q tests/test_sample_cli.py``  (CPU, offline, a few seconds: the run
folder is an untrained 1-layer char model written directly, no training; three short
subprocesses start Python as a user does).
"""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import VERSE, error_line

import bench
import sample
from data.tokenizers import CharTokenizer, save_tokenizer
from model.checkpoint import save_checkpoint
from model.gpt import GPT
from training.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run folder as train.py leaves it (config, tokenizer, ckpt_best.pt) holding a seeded, untrained char model."""
    folder = tmp_path_factory.mktemp("run")
    tokenizer = CharTokenizer.from_text(VERSE)
    cfg = RunConfig.from_dict(
        {
            "model": dict(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16),
            "data": {"tokenizer": "char"},
        }
    )
    torch.manual_seed(0)
    model = GPT(cfg.model)
    save_tokenizer(tokenizer, folder)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    save_checkpoint(
        folder / "ckpt_best.pt",
        {
            "model": model.state_dict(),
            "step": 0,
            "tie_embeddings": True,
            "tokenizer": tokenizer.to_dict(),
            "val_loss": None,
        },
    )
    return folder


def test_piping_into_head_ends_quietly(run_dir):
    """`sample.py | head -c 20`: the first 20 bytes, then exit status 0 and no traceback once head closes the pipe."""
    cmd = (
        f"{shlex.quote(sys.executable)} sample.py --run {shlex.quote(str(run_dir))} --prompt ROMEO: "
        '--max-new-tokens 1000000 | head -c 20; echo "sample.py exit status ${PIPESTATUS[0]}" >&2'
    )
    proc = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("ROMEO:") and len(proc.stdout.encode()) == 20
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert "sample.py exit status 0" in proc.stderr


def stop_after(monkeypatch, tokens: int) -> None:
    """Make generation raise KeyboardInterrupt (as Ctrl-C does) while computing token ``tokens + 1``."""
    generate_stream = GPT.generate_stream

    def interrupted(self, *args, **kwargs):
        for step, ids in enumerate(generate_stream(self, *args, **kwargs)):
            if step == tokens:
                raise KeyboardInterrupt
            yield ids

    monkeypatch.setattr(GPT, "generate_stream", interrupted)


@pytest.mark.parametrize("num_samples", ["1", "3"])
def test_ctrl_c_prints_what_was_generated_and_exits_130(run_dir, monkeypatch, capsys, num_samples):
    """--max-new-tokens 1e9, Ctrl-C after 25 tokens: the text --max-new-tokens 25 prints, status 130, a notice first.

    The notice (expected time at the speed so far, and that Ctrl-C stops) is measured right
    away here instead of after a second.
    """
    monkeypatch.setattr(sample, "MEASURE_AFTER_S", 0.0)
    argv = ["--run", str(run_dir), "--prompt", "ROMEO:", "--top-k", "20", "--seed", "3", "--num-samples", num_samples]
    assert sample.main([*argv, "--max-new-tokens", "25"]) == 0
    short = capsys.readouterr()
    stop_after(monkeypatch, 25)
    assert sample.main([*argv, "--max-new-tokens", "1000000000"]) == 130
    stopped = capsys.readouterr()
    assert stopped.out == short.out and len(short.out) > 25
    notice = [line for line in stopped.err.splitlines() if "1,000,000,000 new tokens" in line]
    assert (
        len(notice) == 1 and "Ctrl-C stops" in notice[0] and re.search(r"take about [\d,.]+ (s|min|h|days):", notice[0])
    )
    assert "stopped by Ctrl-C" in stopped.err.splitlines()[-1]


def test_the_long_run_notice_uses_the_speed_after_the_first_step(monkeypatch, capsys):
    """4 steps per second (a fake clock): 1,000 tokens take about 4 min, said once; 200 tokens (50 s) are not worth a line."""
    ticks = iter(i * 0.25 for i in range(100))
    items = [[str(i)] for i in range(10)]
    assert list(sample.announce_long_runs(iter(items), 1000, clock=lambda: next(ticks))) == items
    err = capsys.readouterr().err
    assert (
        err == "# 1,000 new tokens at 4 tokens/s (measured after the first) take about 4 min: "
        "Ctrl-C stops and prints what was generated so far\n"
    )
    ticks = iter(i * 0.25 for i in range(100))
    assert list(sample.announce_long_runs(iter(items), 200, clock=lambda: next(ticks))) == items
    assert capsys.readouterr().err == ""


def test_a_slow_first_step_does_not_inflate_the_estimate(capsys):
    """A first step of 0.9 s (the prompt and warm-up) then 100 steps/s: 5,000 tokens take about 51 s, not worth a
    line, and 20,000 about 3 min (counting the first step in the speed said 8 and 30 min)."""

    def clock():
        times = iter([0.0, 0.9] + [0.9 + 0.01 * i for i in range(1, 400)])
        return lambda: next(times)

    items = [[str(i)] for i in range(300)]
    assert list(sample.announce_long_runs(iter(items), 5_000, clock=clock())) == items
    assert capsys.readouterr().err == ""
    assert list(sample.announce_long_runs(iter(items), 20_000, clock=clock())) == items
    assert "at 100 tokens/s (measured after the first) take about 3 min:" in capsys.readouterr().err


def test_a_sample_that_ends_at_once_says_it_is_empty(run_dir, monkeypatch, capsys):
    """A --stop string the first token meets: the prompt alone on stdout, and one # line saying the sample is empty
    and why (the --stop given)."""
    monkeypatch.setattr(sample, "announce_long_runs", lambda stream, n: stream)
    argv = ["--run", str(run_dir), "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "5"]
    assert sample.main(argv) == 0
    first = capsys.readouterr().out[len("ROMEO:")]  # the first character the model generates
    assert sample.main([*argv, "--stop", first]) == 0
    out, err = capsys.readouterr()
    assert out == "ROMEO:\n"
    assert (
        f"# the sample is empty: nothing was generated after the prompt (it ended at once, at --stop {first!r}" in err
    )


def test_the_header_rounds_the_val_loss_and_names_imported_weights(run_dir, capsys):
    """The # header gives the val loss to 4 decimals, and for weights without one says none was recorded."""
    assert (
        sample._header(run_dir, {"step": 300, "val_loss": 5.362213540077209, "tie_embeddings": True})
        == f"# {run_dir} step 300, val loss 5.3622, tie_embeddings=True"
    )
    imported = {"step": 0, "val_loss": None, "tie_embeddings": True, "imported_from": "hf/gpt2"}
    assert (
        sample._header(run_dir, imported)
        == f"# {run_dir} step 0, no val loss recorded (imported weights), tie_embeddings=True"
    )
    assert sample.main(["--run", str(run_dir), "--max-new-tokens", "2"]) == 0
    assert "val loss None" not in capsys.readouterr().err


def test_greedy_with_an_explicit_temperature_is_still_refused(run_dir, capsys):
    """--temperature's default (1.0) is shown in --help, but --greedy --temperature 1.0 stays a one-line error."""
    assert sample.main(["--run", str(run_dir), "--greedy", "--temperature", "1.0"]) == 2
    assert "--greedy" in error_line(capsys)
    assert sample.main(["--run", str(run_dir), "--greedy", "--max-new-tokens", "5"]) == 0


def _run_with_config(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of ``run_dir`` whose checkpoint records the config it was trained with, as train.py's do."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_bytes((run_dir / name).read_bytes())
    ckpt = torch.load(run_dir / "ckpt_best.pt", weights_only=True)
    save_checkpoint(folder / "ckpt_best.pt", {**ckpt, "config": json.loads((run_dir / "config.json").read_text())})
    return folder


@pytest.mark.parametrize(
    "key, value", [("n_head", 4), ("mlp", "relu2"), ("logit_softcap", 1.0), ("tie_embeddings", False)]
)
def test_a_hand_edited_model_setting_is_refused_not_sampled(run_dir, tmp_path, capsys, key, value):
    """config.json's model settings must be the checkpoint's: n_head, mlp or logit_softcap keep every tensor's
    shape, so the weights would load into another function; the error names the setting and says to restore it."""
    folder = _run_with_config(run_dir, tmp_path)
    assert sample.main(["--run", str(folder), "--greedy", "--max-new-tokens", "2"]) == 0
    capsys.readouterr()
    config = json.loads((folder / "config.json").read_text())
    config["model"][key] = value
    (folder / "config.json").write_text(json.dumps(config))
    assert sample.main(["--run", str(folder), "--greedy", "--max-new-tokens", "2"]) == 2
    err = error_line(capsys)
    assert f"model.{key}=" in err and "restore config.json" in err and "--model." not in err


def test_a_device_the_machine_lacks_names_sample_pys_own_flag(run_dir, capsys, monkeypatch):
    """--device cuda where no CUDA GPU is visible is one error line whose fix is sample.py's --device, not
    train.py's --train.device."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sample.main(["--run", str(run_dir), "--device", "cuda"]) == 2
    assert error_line(capsys).endswith("use --device=cpu")


def option_helps(help_text: str) -> dict[str, str]:
    """``--help`` output -> {first option string: its entry's text on one line}."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        match = re.match(r"  (-{1,2}[\w.-]+)", line)
        if match:
            current = match.group(1)
            entries[current] = ""
        elif not line.startswith("   "):
            current = None
        if current:
            entries[current] += " " + line.strip()
    return {k: " ".join(v.split()) for k, v in entries.items()}


def help_of(script: str) -> dict[str, str]:
    """The option entries of ``python <script> --help``, run as a user does."""
    proc = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return option_helps(proc.stdout)


def test_sample_help_shows_every_default():
    """Each option of sample.py --help shows its default or says what leaving it out means."""
    helps = help_of("sample.py")
    assert "(default: 200)" in helps["--max-new-tokens"] and "(default: 1)" in helps["--num-samples"]
    assert "(default: 1.0)" in helps["--temperature"] and "(default: 1337)" in helps["--seed"]
    assert [k for k, text in helps.items() if "default" not in text] == [
        "-h",
        "--run",
    ]  # help, and the one required option


def test_bench_help_shows_every_default_and_only_options_that_apply(capsys):
    """bench.py --help: every default shown; no wandb or evaluation/checkpoint keys, which are refused in one line."""
    helps = help_of("bench.py")
    assert "(default: 10)" in helps["--iters"] and "(default: 512)" in helps["--new-tokens"]
    assert "(default: 100 10000)" in helps["--stream-tokens"] and "(default: 128)" in helps["--model.block_size"]
    assert [k for k, text in helps.items() if "default" not in text] == ["-h"]
    for absent in ("--wandb.mode", "--train.out_dir", "--train.eval_interval", "--train.sample_tokens"):
        assert absent not in helps
        assert bench.main([f"{absent}=1"]) == 2
        assert error_line(capsys) == f"error: {absent} does not apply to bench.py: drop it"


def test_bench_stream_reports_speed_and_decoding_cost_per_length(tmp_path, capsys):
    """bench.py --stream: one line per --stream-tokens length with tokens/s and the decoding's microseconds per token."""
    from test_bench import tiny_bench_args

    assert (
        bench.main(
            tiny_bench_args(
                tmp_path, "--model.block_size=16", "--stream", "--stream-tokens", "10", "60", "--repeats", "2"
            )
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stream_samples" in out and "with cache:" not in out  # --generate's figures only with --generate
    for n in (10, 60):
        line = re.search(
            rf"^  {n} tokens:\s+([\d,.]+) tokens/s, median of 2 runs .*; decoding ([\d,.]+) us/token$", out, re.M
        )
        assert line and float(line.group(1).replace(",", "")) > 0, out
