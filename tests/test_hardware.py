"""Hardware choices: which precision ``train.dtype=auto`` picks, and what ``env.json`` says of the CPU.

Run: ``python -m pytest -q tests/test_hardware.py``  (CPU, offline, seconds).
"""

from pathlib import Path

import pytest
import torch

from core import hardware

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx2", "avx512f", "avx512_bf16"}, torch.bfloat16),  # Zen 4/5, Cooper Lake
        ({"avx2", "amx_bf16", "amx_tile"}, torch.bfloat16),  # Sapphire Rapids
        ({"avx2", "avx512f", "avx512bw"}, None),  # AVX512 with no bf16 dot product
        (set(), None),  # no /proc/cpuinfo (macOS, Windows)
    ],
)
def test_auto_picks_bf16_on_a_cpu_only_where_it_has_native_bf16(monkeypatch, flags, expected):
    """On a CPU, 'auto' means bf16 autocast exactly when the CPU has bf16 matmul instructions
    (AVX512-BF16 or AMX), else float32 (None); an explicit dtype is taken as given."""
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(flags))
    assert hardware.autocast_dtype(CPU, "auto") is expected
    assert hardware.autocast_dtype(CPU, "float32") is None
    assert hardware.autocast_dtype(CPU, "bfloat16") is torch.bfloat16


def test_cpu_flags_are_this_machines():
    """cpu_flags() reads the first processor's flags line: on Linux x86 it holds the basic sse2."""
    flags = hardware.cpu_flags()
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        assert flags == frozenset()
        return
    if "flags" in text and " sse2" in text:
        assert "sse2" in flags


def test_cpu_model_names_the_processor():
    """env.json's cpu_model starts with /proc/cpuinfo's 'model name' where there is one (Linux)."""
    try:
        lines = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        pytest.skip("no /proc/cpuinfo here")
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    if not names:
        pytest.skip("/proc/cpuinfo names no model here")
    assert hardware.cpu_model().startswith(names[0])


def test_env_records_the_script_relative_to_the_repository(monkeypatch):
    """env.json's argv names a script of this repository relative to its root (compare.py starts train.py by
    its absolute path), so a committed run record holds no path of the machine it ran on; the other
    arguments stay exactly as given, a relative path relative and an absolute one absolute."""
    from core.files import REPO_ROOT

    argv = [str(REPO_ROOT / "train.py"), "--train.out_dir=results/x", "--data.cache_dir=/data/cache"]
    monkeypatch.setattr("sys.argv", argv)
    assert hardware.environment(CPU)["argv"] == [
        "train.py",
        "--train.out_dir=results/x",
        "--data.cache_dir=/data/cache",
    ]
    assert hardware.recorded_argv(["/elsewhere/tool.py", "-q"]) == ["/elsewhere/tool.py", "-q"]


@pytest.mark.parametrize(
    "others, threads, cores, noted",
    [(1, 2, 2, True), (0, 2, 2, False), (2, 1, 2, False), (3, 4, 8, False), (6, 4, 8, True), (None, 2, 2, False)],
)
def test_threads_that_compete_with_other_processes_are_noted(monkeypatch, others, threads, cores, noted):
    """A run whose threads plus the threads running elsewhere now exceed its cores gets a note with a thread
    count that fits the free cores; one thread, a quiet machine or an unknown load gets none."""
    monkeypatch.setattr(hardware, "others_running", lambda: others)
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: cores)
    note = hardware.thread_contention(threads)
    assert (note is not None) == noted
    if noted:
        assert f"this run's {threads} threads compete" in note and "OMP_NUM_THREADS=" in note


def test_others_running_reads_the_kernels_runnable_count_less_the_reader(monkeypatch, tmp_path):
    """/proc/loadavg's fourth field counts runnable threads, this process's included: 3/410 with one
    of its own running is 2 others."""
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.50 1.20 0.90 3/410 12345\n")
    real = hardware.Path
    monkeypatch.setattr(hardware, "Path", lambda p: loadavg if p == "/proc/loadavg" else real(p))
    monkeypatch.setattr(hardware, "_own_running", lambda: 1)
    assert hardware.others_running() == 2


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc high-water mark reset")
def test_a_reset_drops_the_peak_memory_of_what_ran_and_was_freed_before():
    """bench.py times several variants in one process: after reset_peak_memory, 400 MiB that an earlier
    variant held and freed no longer count in peak_memory_mib (a max RSS would keep them for good)."""
    cpu = torch.device("cpu")
    big = torch.ones(100 * 2**20)  # 400 MiB, written so it is resident
    held = hardware.peak_memory_mib(cpu)
    del big
    hardware.reset_peak_memory(cpu)
    assert hardware.peak_memory_mib(cpu) < held - 300
