"""No development-process words and no machine paths in the tracked files.

Provenance in this repository is a date, a commit and the hardware.  A reader cannot look up the
working period a change was made in, an internal ticket number or a throwaway folder, and a path
of the machine a run happened on (``/work/...``, ``/home/<user>/...``, ``/tmp/...``) means nothing
on theirs.  This test scans every text file git tracks and names each offending line.

The words have legitimate technical uses, allowed by name (:data:`ALLOWED`): pytest's
``scope="session"``, ``subprocess``'s ``start_new_session`` (a POSIX session), an ssh session,
rebuilding "from scratch".  Seed indices in run names (``tied-lr0.002-s3``) are not process words;
names built from a working period are (``default-s9``, ``s10/``, ``-s5-superseded``).  Inside an
experiment folder, the names ``compare.py`` gives its runs (``ARM-sI``: an arm its
``experiment.json`` declares, a seed index it ran) are seed indices too, whatever the arm is called.

Run: ``python -m pytest -q tests/test_process_words.py``  (seconds).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()  # it must name the words it looks for

FORBIDDEN = {
    "a working-period word": re.compile(r"\bsessions?\b", re.IGNORECASE),
    "a ticket number": re.compile(r"\bissues?[\s#-]*\d+", re.IGNORECASE),
    "a throwaway-work word": re.compile(r"\bscratch\b", re.IGNORECASE),
    "a name built from a working period": re.compile(
        r"\bdefault(?:-untied)?-s\d+\b|-s\d+-superseded\b|(?<![\w.-])s\d+/"
    ),
    "a machine path": re.compile(r"/work/|/home/[\w.-]+/|/Users/[\w.-]+/|/root/|/tmp/[\w.-]"),
}
# Technical uses of those words, removed from a line before it is checked (case-insensitive).
ALLOWED = ('scope="session"', "scope='session'", "start_new_session", "posix session", "ssh session", "from scratch")


def offences(text: str, run_names: frozenset[str] = frozenset()) -> list[tuple[int, str, str]]:
    """``(line number, what, line)`` for every line of ``text`` holding a forbidden word or path; ``run_names``
    (an experiment's own run names) are allowed in it."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        checked = line
        for name in run_names:
            checked = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", "", checked)
        for phrase in ALLOWED:
            checked = re.sub(re.escape(phrase), "", checked, flags=re.IGNORECASE)
        found += [(number, what, line.strip()) for what, pattern in FORBIDDEN.items() if pattern.search(checked)]
    return found


def tracked_text_files() -> list[Path]:
    """Every file git tracks that reads as UTF-8 text (binary files such as PNGs left out)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git ls-files unavailable here: {e}")
    files = []
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or name == THIS or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def experiment_run_names(path: Path) -> frozenset[str]:
    """The run names ``compare.py`` gives the runs of the experiment folder holding ``path`` (``ARM-sI`` for
    each arm its ``experiment.json`` declares and each seed index it ran); empty outside such a folder."""
    for folder in path.parents:
        declared = folder / "experiment.json"
        if folder == REPO:
            return frozenset()
        if declared.is_file():
            experiment = json.loads(declared.read_text(encoding="utf-8"))
            seeds = max((look.get("seeds", 0) for look in experiment.get("looks", [])), default=0)
            return frozenset(f"{arm}-s{i}" for arm in experiment.get("arms", {}) for i in range(seeds))
    return frozenset()


def test_no_tracked_file_holds_process_words_or_machine_paths():
    """No tracked text file holds a working-period word, a ticket number, a throwaway-work word, a run or
    folder name built from them, or an absolute path of a machine (the allowed technical uses aside)."""
    files = tracked_text_files()
    assert len(files) > 50  # the scan sees the repository
    bad = [
        f"{p.relative_to(REPO)}:{n}: {what}: {line[:120]}"
        for p in files
        for n, what, line in offences(p.read_text(encoding="utf-8"), experiment_run_names(p))
    ]
    assert not bad, "\n".join(bad)


# The planted words are assembled here, so this file does not itself hold the text the scan forbids.
SESSION, ISSUE, SCRATCH, WORK_PATH = "ses" + "sion", "is" + "sue", "scr" + "atch", "/" + "work/main"


@pytest.mark.parametrize(
    "line",
    [
        f"Measured in {SESSION} 9 on the 2-core CPU.",
        f"This meets {ISSUE} 15's target.",
        f"see {ISSUE} #12",
        f"the {SCRATCH}/ folder holds the probes",
        "python train.py --run-name default-s9",
        "results/scaling-cpu-s5-superseded/README.md",
        "logs in s10/ beside it",
        f'"out_dir": "{WORK_PATH}/results/x"',
        "cd /home/alice/tinygpt",
        "bash mirror.sh /tmp/floorgrid",
    ],
)
def test_the_scan_catches_a_planted_line(line):
    """Each kind of forbidden text, planted in an otherwise clean file, is reported."""
    assert offences(f"A clean first line.\n{line}\n") and offences(f"x\n{line}\n")[0][0] == 2


@pytest.mark.parametrize(
    "line",
    [
        '@pytest.fixture(scope="' + SESSION + '")',
        "subprocess.Popen(cmd, start_new_" + SESSION + "=True)",
        f"runs in its own POSIX {SESSION}, so Ctrl-C reaches it once",
        f"a closed terminal or ssh {SESSION} is a stop request",
        f"rebuild from {SCRATCH} even if a matching folder exists",
        "tied-lr0.002-s3 and untied-split-lr0.004-s4 (seed indices)",
        "python compare.py results/tying-scaling-cpu-2026-11-24",
    ],
)
def test_the_scan_allows_the_technical_uses(line):
    """The technical uses named in ALLOWED, and seed indices in run names, are not reported."""
    assert offences(line) == []


def test_an_experiments_own_run_names_are_seed_indices(tmp_path):
    """``default-s2`` is a run name compare.py gave inside an experiment whose arms include ``default`` and that
    ran 3 seeds, so it passes there; a seed index it never ran, or the same name outside, is still reported."""
    names = frozenset({"default-s0", "default-s1", "default-s2"})
    assert offences('"run_name": "default-s2",', names) == []
    assert offences('"run_name": "default-s9",', names) and offences('"run_name": "default-s2",')
