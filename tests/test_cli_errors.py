"""Bad paths and files given to every command end in one ``error:`` line and exit 2, never a traceback.

Run: ``python -m pytest -q tests/test_cli_errors.py``  (CPU, offline, well under a minute; the
commands run in-process through their ``main()``, as a user's argv, except the closed-pipe test,
which needs a real pipe).

A config file that is not UTF-8, a path through a file (``NotADirectoryError``), a path whose
parent is a file (``FileExistsError``), a run folder given as a file, a closed stdout, and a
refused ``--resume`` that must leave the run folder as it found it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch
from helpers import REPO, error_line, tiny_args

import compare
import hf as hf_cli
import sample
import train
from core.errors import UserError
from data import prepare
from data.hf_tokenizer import write_tokenizer_files
from data.tokenizers import CharTokenizer
from model import hf
from model.config import GPTConfig
from model.gpt import GPT
from training import faults

NOT_UTF8 = b"\xff\xfe[model]\n"  # a UTF-16 byte-order mark: an editor's "Unicode" save


@pytest.fixture
def bad_toml(tmp_path):
    """A config file saved as UTF-16, not UTF-8."""
    path = tmp_path / "bad.toml"
    path.write_bytes(NOT_UTF8)
    return path


@pytest.fixture
def afile(tmp_path):
    """A plain file, given where a folder's parent is expected."""
    path = tmp_path / "afile"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize("command", ["train", "compare", "prepare"])
def test_a_config_file_that_is_not_utf8_is_one_line(bad_toml, tmp_path, capsys, command):
    """train.py, compare.py and data.prepare given a UTF-16 --config: exit 2, one line saying it is not UTF-8."""
    main = {"train": train.main, "compare": compare.main, "prepare": prepare.main}[command]
    argv = ["--config", str(bad_toml)] + (
        ["--run-name", "x", f"--train.out_dir={tmp_path / 'runs'}"] if command == "train" else []
    )
    assert main(argv) == 2
    line = error_line(capsys)
    assert str(bad_toml) in line and "not UTF-8" in line
    assert not (tmp_path / "runs").exists()


def test_prepare_into_a_cache_under_a_file_is_one_line(afile, corpus, capsys):
    """python -m data.prepare --data.cache_dir=<a file>/c: exit 2, one line naming the path and that a part is a file."""
    cache = afile / "c"
    assert prepare.main([f"--data.source={corpus}", "--data.tokenizer=char", f"--data.cache_dir={cache}"]) == 2
    line = error_line(capsys)
    assert str(cache) in line and "is a file, not a folder" in line and "then run the same command again" in line


def test_train_with_a_cache_under_a_file_exits_2_like_every_command(afile, tmp_path, corpus, capsys):
    """train.py --data.cache_dir=<a file>/c is bad input: exit 2 (not 1), one line naming the path; no run folder."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r", f"--data.cache_dir={afile / 'c'}")
    assert train.main(args) == 2
    assert str(afile / "c") in error_line(capsys)
    assert not (tmp_path / "runs" / "r").exists()


@pytest.fixture
def char_hf_folder(tmp_path):
    """A Hugging Face GPT-2 folder of a tiny char model, with its tinygpt tokenizer file (nothing downloaded)."""
    tokenizer = CharTokenizer.from_text("ROMEO: but soft, what light\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    return hf.export(model, tmp_path / "hf", lambda folder: write_tokenizer_files(tokenizer, folder))


def test_hf_import_into_a_path_under_a_file_is_one_line(char_hf_folder, afile, capsys):
    """hf.py import --out <a file>/x: exit 2, one line naming the path (was a NotADirectoryError traceback)."""
    assert hf_cli.main(["import", "--hf", str(char_hf_folder), "--out", str(afile / "x")]) == 2
    assert str(afile) in error_line(capsys)


def test_hf_export_into_a_path_under_a_file_is_one_line(char_hf_folder, afile, tmp_path, capsys):
    """hf.py export --out <a file>/x: exit 2, one line naming the path (was a FileExistsError traceback)."""
    assert hf_cli.main(["import", "--hf", str(char_hf_folder), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert hf_cli.main(["export", "--run", str(tmp_path / "run"), "--out", str(afile / "x")]) == 2
    assert str(afile) in error_line(capsys)
    assert afile.read_text() == "not a folder"


@pytest.mark.skipif(not pathlib.Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be made")
def test_a_folder_that_cannot_be_made_is_named_as_given_not_by_its_temp_name(char_hf_folder, tmp_path, capsys):
    """hf.py export --out /proc/x (a place no file can be made, even as root): the error names /proc/x, the
    path given, not the hidden temp folder the export builds in first."""
    assert hf_cli.main(["import", "--hf", str(char_hf_folder), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert hf_cli.main(["export", "--run", str(tmp_path / "run"), "--out", "/proc/tinygpt-export"]) == 2
    line = error_line(capsys)
    assert line.startswith("error: cannot use /proc/tinygpt-export (") and "/proc/." not in line


def test_sample_with_a_file_for_its_run_folder_says_it_is_a_file(afile, capsys):
    """sample.py --run <a file>: the one line says it is a file, not a run folder (not that it does not exist)."""
    assert sample.main(["--run", str(afile)]) == 2
    line = error_line(capsys)
    assert "is a file, not a run folder" in line and "does not exist" not in line


def test_list_runs_into_a_closed_pipe_ends_quietly(tmp_path):
    """`list_runs.py --json | head -1`: the reader closes stdout; exit 0 and no BrokenPipeError traceback."""
    (tmp_path / "runs").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "list_runs.py", "--json", "--out-dir", str(tmp_path / "runs")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # as head does once it has its line: every write from now on meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_a_refused_resume_leaves_no_lock_file(tmp_path, corpus, capsys):
    """A --resume refused after the lock was taken (the run is already at max_iters) leaves the folder as it
    was: no .lock or lock.json behind, its checkpoints untouched."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")
    assert train.main(args) == 0
    run_dir = tmp_path / "runs" / "r"
    (run_dir / ".lock").unlink(missing_ok=True)  # as in a copy of the folder (git leaves lock files out)
    before = sorted(p.name for p in run_dir.iterdir())
    capsys.readouterr()
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume"]) == 2
    assert "already >= train.max_iters" in error_line(capsys)
    assert sorted(p.name for p in run_dir.iterdir()) == before and ".lock" not in before


def test_a_held_lock_file_is_never_removed_by_a_refused_run(tmp_path):
    """While one RunLock holds a folder, a second is refused and the holder's .lock and lock.json stay."""
    with faults.RunLock(tmp_path):
        with pytest.raises(UserError, match="in use by"):
            with faults.RunLock(tmp_path):
                pass
        assert (tmp_path / ".lock").is_file() and (tmp_path / "lock.json").is_file()
    assert not (tmp_path / ".lock").exists() and not (tmp_path / "lock.json").exists()


def test_a_lock_taken_on_a_removed_lock_file_is_taken_again(tmp_path, monkeypatch):
    """A process whose flock landed on a .lock its previous owner had just removed locks the file now there
    instead: two processes never both hold a folder, one through a file no longer at the path."""
    lock = faults.RunLock(tmp_path)
    real_acquire, calls = lock._lock.acquire, []

    def acquire_then_lose_the_path(*args, **kwargs):
        real_acquire(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:  # the owner removes the file between our open and our flock
            (tmp_path / ".lock").unlink()

    monkeypatch.setattr(lock._lock, "acquire", acquire_then_lose_the_path)
    with lock:
        assert len(calls) == 2 and lock._locks_its_path()


@pytest.mark.parametrize(
    "command, argv, words",
    [
        (train, ["--model.dropot=0.1"], "unknown option --model.dropot: did you mean --model.dropout?"),
        (train, ["--seed", "2"], "unknown option --seed: did you mean --train.seed?"),
        (train, ["--run-nme", "x"], "unknown option --run-nme: did you mean --run-name?"),
        (sample, ["--run", "runs/x", "--top_k", "5"], "unrecognized arguments: --top_k 5: did you mean --top-k?"),
        (train, ["--model.tie_embeddings=maybe"], "give --model.tie_embeddings=true or --model.tie_embeddings=false"),
        (train, ["--model.dropout=high"], "is not a valid float: give e.g. --model.dropout=0.0"),
    ],
)
def test_a_misspelt_option_or_a_bad_value_names_what_was_meant(command, argv, words, capsys):
    """An option one typo away from a real one is named (difflib), a bare key that some section has gets its
    section, and a bad value says what a good one looks like: one line, exit 2, before any work."""
    assert command.main(argv) == 2
    assert words in error_line(capsys)
