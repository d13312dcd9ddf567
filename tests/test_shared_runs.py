"""Several ``compare.py`` processes on one experiment folder (each run claimed, none trained twice), and
the progress line compare.py prints before each phase."""

import json
import socket

import pytest

from core.files import file_lock
from experiment.runs import launch
from experiment.ab import run as ab_run


def test_a_run_claimed_elsewhere_is_put_off_and_waited_for(tmp_path, capsys):
    """A run whose claim another process holds is skipped at first, the free runs go on, and it
    runs (reused or resumed by ``run_arm``) once the claim is free; results keep the given order."""
    ran = []
    (tmp_path / ".claims").mkdir()
    elsewhere = file_lock(tmp_path / ".claims" / "tied-s0.lock", timeout=0)
    elsewhere.acquire()  # another flock on the same file: what a second compare.py holds

    def job(name):
        def run():
            ran.append(name)
            if name == "untied-s0":  # the other process finishes while we train untied-s0
                elsewhere.release()
            return f"path of {name}"

        return run

    names = ["tied-s0", "untied-s0", "tied-s1"]
    assert launch.run_shared(tmp_path, [(n, job(n)) for n in names]) == [f"path of {n}" for n in names]
    assert ran == ["untied-s0", "tied-s1", "tied-s0"]
    assert "another compare.py holds it" in capsys.readouterr().out


def test_claims_are_released_when_a_run_fails(tmp_path):
    """A run that raises (a stop signal, a failed start) gives its claim back, so a rerun can take it."""

    def fail():
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError):
        launch.run_shared(tmp_path, [("tied-s0", fail)])
    claim = file_lock(tmp_path / ".claims" / "tied-s0.lock", timeout=0)
    claim.acquire()  # would raise filelock.Timeout if the failed run still held it
    claim.release()


def test_progress_line_counts_finished_unfinished_and_new_runs(tmp_path):
    """Before each phase compare.py says how much of it is done: a summary is finished, a checkpoint
    without one is to resume, no folder is to train."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text("{}")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ckpt_last.pt").write_bytes(b"")
    line = ab_run._progress(tmp_path, ["a", "b", "c"], "reported runs (3 arms x 1 seed)")
    assert line == "[compare] reported runs (3 arms x 1 seed): 3 runs, 1 finished, 1 to resume, 1 to train"
    (tmp_path / "a" / "summary.json").write_text('{"elapsed_s": 600}')  # with a timing, a labelled estimate
    line = ab_run._progress(tmp_path, ["a", "b", "c"], "reported runs (3 arms x 1 seed)")
    assert line.endswith("; roughly 20 min left at the finished runs' median of 10.0 min a run (an estimate)")
    (tmp_path / "b" / "summary.json").write_text('{"elapsed_s": 60}')
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text('{"elapsed_s": 60}')
    assert ab_run._progress(tmp_path, ["a", "b", "c"], "x").endswith("3 finished, 0 to resume, 0 to train")


def test_a_put_off_run_that_fails_gives_its_claim_back(tmp_path):
    """The second pass (runs first held elsewhere) also releases a claim when its run raises."""
    (tmp_path / ".claims").mkdir()
    elsewhere = file_lock(tmp_path / ".claims" / "tied-s0.lock", timeout=0)
    elsewhere.acquire()

    def release_then_ok():
        elsewhere.release()
        return "ok"

    def fail():
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError):
        launch.run_shared(tmp_path, [("tied-s0", fail), ("untied-s0", release_then_ok)])
    claim = file_lock(tmp_path / ".claims" / "tied-s0.lock", timeout=0)
    claim.acquire()
    claim.release()


def test_a_run_another_process_finished_is_reused_not_trained_again(tmp_path, monkeypatch):
    """Through ``run_arm``: the other process trains the run it holds; once it lets go, this one finds
    the finished run (summary.json) and starts no train.py for it."""
    started = []

    def fake_train(cmd, watch=None):
        name = cmd[cmd.index("--run-name") + 1]
        started.append(name)
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text("{}")
        if name == "untied-s0":  # meanwhile the other process finishes tied-s0 and lets go of it
            (tmp_path / "tied-s0").mkdir()
            (tmp_path / "tied-s0" / "summary.json").write_text("{}")
            elsewhere.release()
        return 0, None

    monkeypatch.setattr(launch, "run_forwarding_signals", fake_train)
    (tmp_path / ".claims").mkdir()
    elsewhere = file_lock(tmp_path / ".claims" / "tied-s0.lock", timeout=0)
    elsewhere.acquire()
    jobs = [(n, lambda n=n: launch.run_arm([], tmp_path, n, [], [])) for n in ("tied-s0", "untied-s0")]
    assert launch.run_shared(tmp_path, jobs) == [tmp_path / "tied-s0", tmp_path / "untied-s0"]
    assert started == ["untied-s0"]


@pytest.mark.parametrize("diverged", [False, True])
def test_a_run_that_fails_exits_1_and_a_diverged_one_says_so(tmp_path, monkeypatch, capsys, diverged):
    """A train.py that fails after compare.py started it is a failed run, exit 1 (2 is bad input, refused
    before anything trains); one that diverged says the same command would diverge again."""
    from core.cli import run_command
    from core.errors import RunFailed

    def failing_train(cmd, watch=None):
        if diverged:
            (tmp_path / "r").mkdir()
            (tmp_path / "r" / "diverged.json").write_text("{}")
        return 1, None

    monkeypatch.setattr(launch, "run_forwarding_signals", failing_train)
    with pytest.raises(RunFailed, match="diverged" if diverged else r"failed \(exit 1") as failed:
        launch.run_arm([], tmp_path, "r", [], [])
    assert ("would train it to the same step again" in str(failed.value)) == diverged

    def fail():
        raise failed.value

    assert run_command(fail) == 1 and "error: training" in capsys.readouterr().err


def test_a_job_whose_folder_a_train_py_still_holds_waits_for_it(tmp_path, capsys):
    """After a killed compare.py, the train.py it started may still hold its run folder: the same command
    again waits for it (said once) instead of starting a second train.py there, which would fail."""
    import subprocess
    import sys

    run_dir = tmp_path / "exp" / "4M" / "tied-s0"
    run_dir.mkdir(parents=True)
    hold = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); "
        "time.sleep(1.5); open(sys.argv[1] + '.ended', 'w').close()"  # then it exits, and the lock goes
    )
    leftover = subprocess.Popen([sys.executable, "-c", hold, str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    assert leftover.stdout.readline() == "held\n"
    (run_dir / "lock.json").write_text(json.dumps({"pid": leftover.pid, "host": socket.gethostname()}))  # as RunLock
    asked = []
    job = launch.Job(name="4M/tied-s0", command=lambda: asked.append((run_dir / ".lock.ended").exists()) or None)
    assert launch.run_parallel(tmp_path / "exp", [job], n=2, threads=1) == {"4M/tied-s0": True}
    assert asked == [True]  # its command was read only once the train.py holding the folder had ended
    assert capsys.readouterr().out.count("waiting for the train.py that still holds it") == 1
    leftover.wait()
