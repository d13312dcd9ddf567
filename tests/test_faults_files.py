"""Faults in files a run writes or reads, each injected for real, each checked for what was kept.

Run: ``python -m pytest -q tests/test_faults_files.py``  (CPU, offline, well under a minute).

A kill or a full disk in the middle of a checkpoint write; tampered, truncated and hostile
checkpoints; token files and metadata that disagree; two runs in one folder; run names and
links that would leave the run folder; compare.py's children; config values that look like
code; a non-finite model never written over a checkpoint.  SIGKILL, SIGTERM, Ctrl-C and
NaN / Inf steps are in ``test_faults.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, error_line, loss_curve, run_train, tiny_args, train_cmd, write_corpus

import sample
import train
from core.errors import UserError
from data.loader import TokenData
from experiment.runs import launch
from model.checkpoint import load_checkpoint, save_checkpoint
from model.gpt import GPT
from training import faults


# ----------------------------------------------------------------------------- crashes while writing


CRASH_MID_WRITE = """
import os, signal, sys, torch
import train
real_save = torch.save
def save_and_die(obj, f, *args, **kwargs):
    if "optimizer" in obj and obj["step"] == 8:  # ckpt_last.pt at step 8: write half, then die
        f.write(b"PK\\x03\\x04 half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *args, **kwargs)
torch.save = save_and_die
sys.exit(train.main(sys.argv[1:]))
"""


def test_kill_in_the_middle_of_a_checkpoint_write_keeps_the_previous_one(tmp_path, corpus):
    """Killed while writing ckpt_last.pt: the old file still loads (step 4), the half-written temp file
    is never read, the resume removes it and ends where an uninterrupted run ends."""
    args = tiny_args(tmp_path, corpus, "--train.max_iters=12", "--train.checkpoint_interval=4")
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_MID_WRITE, *args, "--run-name", "crash"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run_dir = tmp_path / "runs" / "crash"
    assert load_checkpoint(run_dir / "ckpt_last.pt")["step"] == 4
    (half,) = run_dir.glob(".ckpt_last.pt.*.tmp")
    with pytest.raises(UserError):
        load_checkpoint(half)
    resumed = run_train(f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "crash", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "removed 1 half-written file" in resumed.stdout
    assert not list(run_dir.glob(".*.tmp"))
    assert train.main([*args, "--run-name", "ref"]) == 0
    assert loss_curve(run_dir) == loss_curve(tmp_path / "runs" / "ref")


def test_full_disk_during_a_checkpoint_write_keeps_the_previous_one(tmp_path, corpus, monkeypatch, capsys):
    """ENOSPC while writing ckpt_last.pt: exit 2 with one line naming the file and the fix; the
    previous checkpoint is intact and no temp file is left."""
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if "optimizer" in obj and obj["step"] == 8:
            f.write(b"PK\x03\x04 some bytes")
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=12", "--run-name", "r")) == 2
    line = error_line(capsys)
    run_dir = tmp_path / "runs" / "r"
    assert f"could not write checkpoint {run_dir / 'ckpt_last.pt'} (No space left on device)" in line
    assert "free disk space" in line and "--resume" in line
    assert load_checkpoint(run_dir / "ckpt_last.pt")["step"] == 4
    assert not list(run_dir.glob(".*.tmp"))


# ----------------------------------------------------------------------------- damaged and hostile files


@pytest.fixture
def finished(tmp_path, corpus) -> Path:
    """A finished tiny char-tokenizer run folder."""
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r")) == 0
    return tmp_path / "runs" / "r"


def test_tampered_checkpoint_fails_its_digest_and_is_not_overwritten(finished, tmp_path, capsys):
    """One flipped byte inside a tensor (torch.load alone accepts it) fails the sha256 check; the
    resume exits 2 naming the file, and the file is left as it was."""
    path = finished / "ckpt_last.pt"
    ckpt = load_checkpoint(path)
    marker = ckpt["model"]["wte.weight"][3, :4].numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at > 0
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=True)  # the damage is invisible to torch
    argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]
    assert train.main(argv) == 2
    assert f"checkpoint {path} fails its sha256 check" in error_line(capsys)
    assert path.read_bytes() == bytes(data)
    # Relabelled as a format-1 file (written before digests existed), it is still checked.
    path.write_bytes(bytes(data).replace(b"tinygpt-checkpoint-2", b"tinygpt-checkpoint-1"))
    with pytest.raises(UserError, match="fails its sha256 check"):
        load_checkpoint(path)


def test_truncated_checkpoint_is_refused_by_sample_and_resume(finished, tmp_path, capsys):
    """A checkpoint cut short (a copy that died half way) is a one-line error for sample.py and --resume."""
    path = finished / "ckpt_last.pt"
    path.write_bytes(path.read_bytes()[:5000])
    assert sample.main(["--run", str(finished), "--checkpoint", "last"]) == 2
    assert f"checkpoint {path} could not be loaded safely" in error_line(capsys)
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]) == 2
    )
    assert f"checkpoint {path} could not be loaded safely" in error_line(capsys)


def test_checkpoint_carrying_a_pickled_object_is_refused_not_executed(tmp_path):
    """A crafted checkpoint whose unpickling would create a file: refused, and the file never appears."""
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"format": "tinygpt-checkpoint-2", "model": {}, "x": Exploit()}, tmp_path / "evil.pt")
    with pytest.raises(UserError, match="could not be loaded safely"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


def test_checkpoint_digest_round_trips_every_payload_type(tmp_path):
    """save/load keeps tensors of every dtype, nested dicts/lists, None and floats under one valid digest."""
    payload = {
        "model": {"a": torch.randn(3, 2).bfloat16(), "b": torch.tensor(7)},
        "step": 3,
        "val_loss": None,
        "best_val_loss": float("inf"),
        "nested": [1, {"x": 2.5}],
        "train_window": [0.5, 2],
    }
    save_checkpoint(tmp_path / "c.pt", payload)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert loaded.pop("format") == "tinygpt-checkpoint-2" and len(loaded.pop("sha256")) == 64
    assert loaded.keys() == payload.keys() and torch.equal(loaded["model"]["a"], payload["model"]["a"])
    assert loaded["model"]["a"].dtype == torch.bfloat16 and loaded["model"]["b"].item() == 7
    assert (loaded["step"], loaded["val_loss"], loaded["best_val_loss"]) == (3, None, float("inf"))
    assert loaded["nested"] == [1, {"x": 2.5}] and loaded["train_window"] == [0.5, 2]


def prepared(tmp_path, corpus) -> Path:
    """The prepared-data folder of the tiny runs."""
    (folder,) = (p for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock")  # .<name>.lock: the build lock
    return folder


def test_meta_json_that_disagrees_with_its_token_files_is_refused(finished, tmp_path, corpus, capsys):
    """meta.json claiming more tokens than a train shard holds: one line naming the token file and the fix."""
    folder = prepared(tmp_path, corpus)
    meta = json.loads((folder / "meta.json").read_text())
    meta["splits"]["train"]["shards"][0]["tokens"] += 10
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"token file '.*train-00000.bin' has \d+ bytes, expected .*--force"):
        TokenData(folder)


def test_token_ids_beyond_vocab_size_are_refused(finished, tmp_path, corpus, capsys):
    """A train shard holding an id >= vocab_size (another tokenizer's file) is refused before training."""
    folder = prepared(tmp_path, corpus)
    shard = folder / "train-00000.bin"
    data = bytearray(shard.read_bytes())
    data[10:12] = (60000).to_bytes(2, "little")
    shard.write_bytes(bytes(data))
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r2")) == 2
    line = error_line(capsys)
    assert f"token file '{shard}' holds token id 60000" in line and "--force" in line
    assert not (tmp_path / "runs" / "r2").exists()


def test_meta_vocab_size_that_disagrees_with_the_tokenizer_is_refused(finished, tmp_path, corpus, capsys):
    """meta.json's vocab_size differing from tokenizer.json's is refused, naming both and the fix."""
    folder = prepared(tmp_path, corpus)
    meta = json.loads((folder / "meta.json").read_text())
    meta["vocab_size"] += 100
    (folder / "meta.json").write_text(json.dumps(meta))
    assert train.main(tiny_args(tmp_path, corpus, "--train.max_iters=4", "--run-name", "r2")) == 2
    assert f"says vocab_size {meta['vocab_size']} but its tokenizer.json has" in error_line(capsys)


def test_prompt_the_char_tokenizer_cannot_encode_is_one_line(finished, capsys):
    """sample.py with characters outside a char run's alphabet exits 2 naming them and the fix."""
    assert sample.main(["--run", str(finished), "--prompt", "ROMEO: 日本"]) == 2
    line = error_line(capsys)
    assert "日" in line and "本" in line


# ----------------------------------------------------------------------------- two runs, one folder


def test_live_lock_refuses_a_resume(finished, tmp_path, capsys):
    """A folder whose lock is held (here by this process) refuses --resume, naming pid and host."""
    with faults.RunLock(finished):
        argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]
        assert train.main(argv) == 2
        assert f"in use by pid {os.getpid()} on host {socket.gethostname()}" in error_line(capsys)
        assert json.loads((finished / "lock.json").read_text())["pid"] == os.getpid()  # the owner's record stays
    assert not (finished / "lock.json").exists()


def test_stale_lock_from_a_dead_process_is_taken_over(finished, tmp_path, capsys):
    """A lock.json naming a pid that no longer exists (its flock died with it) does not block a resume."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": "earlier", "command": []}
    (finished / "lock.json").write_text(json.dumps(owner))
    argv = [f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=6"]
    assert train.main(argv) == 0
    assert f"of pid {owner['pid']} on host {owner['host']} taken over" in capsys.readouterr().err
    assert load_checkpoint(finished / "ckpt_last.pt")["step"] == 6


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "."])
def test_run_name_cannot_leave_out_dir(tmp_path, corpus, capsys, name):
    """A --run-name with a path in it is refused for new runs and resumes alike."""
    assert train.main(tiny_args(tmp_path, corpus, "--run-name", name)) == 2
    assert "must be a plain folder name" in error_line(capsys)
    assert train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", name, "--resume"]) == 2
    assert "must be a plain folder name" in error_line(capsys)
    assert not (tmp_path / "escape").exists()


def test_symlinked_run_folder_pointing_elsewhere_is_refused(finished, tmp_path, capsys):
    """A run folder that is a link to a folder outside train.out_dir is never written through."""
    outside = tmp_path / "elsewhere"
    finished.rename(outside)
    finished.symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    assert (
        train.main([f"--train.out_dir={tmp_path / 'runs'}", "--run-name", "r", "--resume", "--train.max_iters=8"]) == 2
    )
    assert f"is a link to {outside}" in error_line(capsys)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize("cache", ["runs", "."])
def test_run_folders_inside_the_data_cache_are_refused(tmp_path, corpus, capsys, cache):
    """train.out_dir equal to, or inside, data.cache_dir is refused: a data rebuild swaps folders there."""
    args = tiny_args(tmp_path, corpus, f"--data.cache_dir={tmp_path / cache}", "--run-name", "r")
    assert train.main(args) == 2
    assert "is inside data.cache_dir" in error_line(capsys)
    assert not (tmp_path / "runs" / "r").exists()


def test_training_writes_only_into_its_run_folder_and_the_data_cache(tmp_path):
    """A full run (wandb offline included) from a fresh working folder and HOME creates files only under
    runs/<name>/, the data cache and the one file of measured CPU matmul peaks in the user cache folder
    (core/flops.py, the end-of-run MFU), and none in the repository."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    corpus = write_corpus(tmp_path)
    repo_before = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True
    ).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TINYGPT_"))}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        TMPDIR=str(tmp_path / "tmp"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    (tmp_path / "tmp").mkdir()
    before = {p for p in tmp_path.rglob("*")}
    proc = subprocess.run(
        train_cmd(
            f"--data.source={corpus}",
            "--data.tokenizer=char",
            "--model.n_layer=1",
            "--model.n_embd=16",
            "--model.n_head=1",
            "--model.block_size=16",
            "--train.max_iters=4",
            "--train.eval_iters=1",
            "--train.sample_tokens=5",
            "--wandb.mode=offline",
            "--run-name",
            "r",
        ),
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    created = {p for p in tmp_path.rglob("*") if p.is_file()} - before
    allowed = (work / "runs" / "r", work / "data" / "cache", home / ".cache" / "tinygpt" / "cpu_matmul_peak.json")
    outside = sorted(str(p.relative_to(tmp_path)) for p in created if not any(p.is_relative_to(a) for a in allowed))
    assert outside == []
    repo_after = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert repo_after == repo_before


# ----------------------------------------------------------------------------- compare.py's children

CHILD = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
Path(sys.argv[1]).write_text(str(os.getsid(0)))
time.sleep(60)
"""


def test_compare_passes_a_signal_to_its_training_child_once(tmp_path):
    """compare.py's child train.py runs in its own POSIX session (``start_new_session``; a terminal's Ctrl-C
    reaches it once, through compare.py) and a SIGTERM sent to compare.py is passed on: the child stops cleanly."""
    import threading

    ready = tmp_path / "ready"

    def terminate_when_ready():
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_ready, daemon=True).start()
    started = time.monotonic()
    status, forwarded = launch.run_forwarding_signals([sys.executable, "-c", CHILD, str(ready)])
    assert (status, forwarded) == (128 + signal.SIGTERM, signal.SIGTERM) and time.monotonic() - started < 30
    assert int(ready.read_text()) != os.getsid(0)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_config_values_are_data_never_code(tmp_path, corpus, capsys):
    """Python in a TOML value or a CLI value is a string (or a type error), never run."""
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path('{marker}').touch()"
    toml = tmp_path / "c.toml"
    toml.write_text(f'[train]\nlearning_rate = "{code}"\n')
    assert train.main(["--config", str(toml), "--run-name", "r"]) == 2
    assert "train.learning_rate" in error_line(capsys)
    assert train.main(tiny_args(tmp_path, corpus, f"--model.n_layer={code}", "--run-name", "r")) == 2
    assert "model.n_layer" in error_line(capsys)
    assert (
        train.main(tiny_args(tmp_path, corpus, "--train.max_iters=1", f"--wandb.name={code}", "--run-name", "r")) == 0
    )
    assert not marker.exists()


def test_a_non_finite_model_is_never_written_over_a_checkpoint(tmp_path):
    """write_checkpoint refuses weights holding a NaN (naming the step) and leaves the old file as it was."""
    from model.config import GPTConfig

    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=8))
    path = tmp_path / "ckpt_last.pt"
    save_checkpoint(path, {"model": model.state_dict(), "step": 1})
    before = path.read_bytes()
    with torch.no_grad():
        model.blocks[0].mlp.up_proj.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match=r"blocks\.0\.mlp\.up_proj\.weight .*not finite at step 2"):
        faults.write_checkpoint(path, {"model": model.state_dict(), "step": 2}, model, "python train.py --resume")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("name", "text", "fix"),
    [
        ("config.json", "{broken", "restore it from the run's checkpoint"),
        ("experiment.json", "{broken", "restore it from a copy"),
        ("experiment.json", "[]", "holds a JSON list, not an object: restore it from a copy"),
    ],
)
def test_a_damaged_json_file_is_one_line_naming_a_fix_that_exists(tmp_path, name, text, fix):
    """A damaged JSON record names itself and a fix that exists for it: a run's config.json is in each of
    its checkpoints; an experiment.json has no second copy in its folder. Valid JSON that is no object
    (a list) is refused the same way, not a traceback later."""
    from core.errors import UserError
    from core.files import read_json

    (tmp_path / name).write_text(text)
    with pytest.raises(UserError, match=fix.replace("(", r"\(")):
        read_json(tmp_path / name, "record")
