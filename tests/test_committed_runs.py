"""Experiments kept in git: what ``.gitignore`` keeps of a run folder under ``results/`` is enough.

A machine is not always kept from one day to the next, so a long experiment lives on as the text files of its run
folders committed under ``results/`` (docs/experiment.md, "Keeping runs in git").  These tests
check the ignore rules and that ``compare.py`` reuses such a copy without retraining anything.

Run: ``python -m pytest -q tests/test_committed_runs.py``  (CPU, offline, about half a minute).
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

import compare

REPO = Path(compare.__file__).resolve().parent


def _ignored(rel_paths: list[str]) -> set[str]:
    """The paths among ``rel_paths`` (relative to the repository root) that git's ignore rules drop."""
    try:
        proc = subprocess.run(
            ["git", "check-ignore", "--no-index", "--stdin"],
            cwd=REPO,
            input="\n".join(rel_paths),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        pytest.skip("git is not installed here")
    if proc.returncode not in (0, 1):  # 1: none ignored; a checkout without git cannot say
        pytest.skip(f"git check-ignore unavailable here: {proc.stderr.strip()}")
    return set(proc.stdout.split())


def test_results_keep_a_runs_text_files_and_drop_checkpoints_and_locks():
    """Under results/, a run's config, metrics, summary and env are kept; checkpoints, the tokenizer
    copies, the per-run loss.png, the locks of a running process and compare.py's claims are not."""
    run = "results/some-experiment/cell/tune-tied-lr0.002"
    kept = [
        f"{run}/{name}"
        for name in ("config.json", "metrics.jsonl", "summary.json", "env.json", "env-resume-step100.json")
    ]
    dropped = [
        f"{run}/{name}"
        for name in (
            "ckpt_last.pt",
            "ckpt_best.pt",
            "gpt2.tiktoken",
            "tokenizer.json",
            "loss.png",
            ".lock",
            "lock.json",
            ".ckpt_last.pt.k2j9x.tmp",
        )
    ]
    dropped.append("results/some-experiment/cell/.claims/tied-s0.lock")
    assert _ignored(kept + dropped) == set(dropped)


@pytest.mark.slow
def test_a_committed_experiment_is_reused_without_its_checkpoints(tmp_path):
    """An experiment folder stripped of what .gitignore drops (as a fresh clone has it; here the tied run
    keeps its checkpoint, as one trained on this machine would) trains nothing when compare.py runs
    again, from another machine's data cache: every run is reused, the report is rewritten, and the arm
    whose folders kept no checkpoint shows 'no checkpoint' in place of a sample instead of failing."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("ROMEO:\nWhat light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n\n" * 200)
    out = tmp_path / "results"
    argv = [
        "--config",
        "configs/debug.toml",
        "--name",
        "exp",
        f"--data.source={corpus}",
        "--data.tokenizer=char",
        f"--data.cache_dir={tmp_path / 'cache'}",
        f"--train.out_dir={out}",
        "--train.max_iters=6",
        "--train.eval_interval=3",
        "--train.sample_tokens=0",
        "--seeds",
        "1",
        "--prompt",
        "RO",
    ]
    assert compare.main(argv) == 0
    files = [p for p in (out / "exp").rglob("*") if p.is_file()]
    rel = {f"results/{p.relative_to(out).as_posix()}": p for p in files}
    for name in _ignored(list(rel)):
        if "/tied-s0/" not in name:
            rel[name].unlink()
    assert not list((out / "exp" / "untied-s0").glob("*.pt")) and (out / "exp" / "untied-s0" / "summary.json").is_file()
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}

    moved = [a.replace(str(tmp_path / "cache"), str(tmp_path / "elsewhere")) for a in argv]  # bookkeeping
    assert compare.main(moved) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == stamps
    assert not list((out / "exp" / "untied-s0").glob("*.pt"))  # nothing trained, nothing resumed
    md = (out / "exp" / "report.md").read_text()
    assert "untied vs tied (reference): **" in md
    assert re.search(r"^\| [^|*]*RO[^|]* \| \*no checkpoint\* \|$", md, re.M)  # tied's sample, then untied's gap
    assert "- `tied-s0` (tied, seed 1337)" in md  # runs named from the report's folder, not this machine's path
    assert json.loads((out / "exp" / "experiment.json").read_text())["lr_grid"] == []


SCALING = REPO / "results" / "tying-scaling-cpu-2026-11-24"


def test_the_scaling_experiment_has_committed_cells():
    """results/tying-scaling-cpu-2026-11-24 holds committed cells (so the test below, parametrized over them, checks something)."""
    assert len(list(SCALING.glob("*/experiment.json"))) >= 5


@pytest.mark.parametrize("cell", sorted(p.parent.name for p in SCALING.glob("*/experiment.json")))
def test_run_sh_resolves_to_the_config_of_every_committed_cell(cell):
    """run.sh's --config file with its --train.dtype flag resolves to the config each committed cell of
    results/tying-scaling-cpu-2026-11-24 was trained with (the cell's own axes, n_embd and tokenizer, aside), so
    re-running run.sh continues those cells instead of being refused or training them again."""
    from experiment.runs import record
    from training.config import parse_config

    run_sh = (SCALING / "run.sh").read_text()
    config = re.search(r"COMMON=\(--config (\S+)", run_sh).group(1)
    dtype = re.search(r"--train\.dtype=(\w+)", run_sh).group(1)
    axes = {"model.n_embd", "data.tokenizer", "model.vocab_size"}  # vocab_size follows the tokenizer
    recorded = json.loads((SCALING / cell / "experiment.json").read_text())["config"]
    pinned = record.flatten(parse_config(REPO / config, {"train": {"dtype": dtype}}).to_dict())
    changed = record.config_changes(
        {k: v for k, v in recorded.items() if k not in axes}, {k: v for k, v in pinned.items() if k not in axes}
    )
    assert not changed, f"{config} no longer matches {cell} in {changed}"
