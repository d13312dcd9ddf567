"""The hardware a run uses: device choice, autocast, memory, and the environment record of a run folder.

from core.hardware import pick_device, autocast
device = pick_device("auto")          # cuda, then mps, then cpu
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from core.errors import UserError
from core.files import REPO_ROOT, sha256_bytes


def pick_device(name: str = "auto", option: str = "--train.device") -> torch.device:
    """``'auto'`` -> cuda if available, else mps, else cpu; other names are checked to exist.

    Raises :class:`UserError` if the requested device is not available; its fix names ``option``, the
    command's own flag for the device (``sample.py``'s is ``--device``).
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but CUDA is not available: use {option}=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(
                f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError(f"device 'mps' requested but MPS is not available: use {option}=cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    return device


def keep_freed_memory_on_cpu() -> bool:
    """Stop glibc from handing large freed blocks back to the OS (Linux only); True if applied.

    glibc serves allocations above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
    and unmaps them on free, so every training step page-faults its big tensors in anew --
    with a 50257-token vocabulary the logits alone are ``B*T*vocab_size*4`` bytes (400 MiB at
    B=16, T=128).  ``mallopt(M_MMAP_MAX, 0)`` plus a high ``M_TRIM_THRESHOLD`` keeps that memory
    in the heap for reuse (glibc manual, "Malloc Tunable Parameters").  Measured with
    ``python bench.py`` on a 2-core CPU: 1144 -> 725 ms/iter, at ~0.7 GiB more peak RSS.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # from glibc's malloc.h
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))
    except (OSError, AttributeError):  # not glibc (e.g. musl): leave the allocator alone
        return False


def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` fields in ``/proc/cpuinfo``; empty where there is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().split("\n\n")[0].splitlines()
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``/proc/cpuinfo`` (empty where there is none)."""
    return frozenset(_cpuinfo().get("flags", "").split())


# x86 instructions that do bf16 matmuls in hardware (AVX512-BF16: Cooper Lake, Zen 4 and later; AMX: Sapphire
# Rapids and later). Without them oneDNN converts to float32 and bf16 gains nothing.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def autocast_dtype(device: torch.device, dtype: str) -> torch.dtype | None:
    """The autocast dtype for ``dtype``: None means float32.

    'auto' -> bf16 on CUDA with bf16 support, and on a CPU with native bf16 matmuls
    (:data:`NATIVE_BF16_FLAGS`; there the default config's step at batch 16 is 1.94x faster with the same
    losses, results/bf16-cpu-2026-11-24), else float32.
    """
    if dtype == "float32":
        return None
    if dtype == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "cpu" and cpu_flags() & NATIVE_BF16_FLAGS:
        return torch.bfloat16
    return None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """A ``torch.autocast`` context for ``dtype``, or a null context for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def peak_memory_mib(device: torch.device) -> float:
    """Peak memory in MiB since the start or the last :func:`reset_peak_memory`: CUDA's max allocated
    bytes, else the process's resident high-water mark (Linux: ``VmHWM`` in ``/proc/self/status``, which
    a reset lowers; elsewhere the max RSS since the start, ``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    import resource  # POSIX only; imported here so the module still loads elsewhere

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def reset_peak_memory(device: torch.device) -> None:
    """Start :func:`peak_memory_mib`'s count again, so one process can measure several things in turn.

    CUDA: ``torch.cuda.reset_peak_memory_stats``.  Linux: memory freed by what ran before is returned
    to the system first (``gc.collect``, glibc's ``malloc_trim(0)``), then the high-water mark is reset
    to the current RSS by writing 5 to ``/proc/self/clear_refs`` (proc(5)).  Elsewhere nothing can be
    reset: the figure stays the process's peak so far.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: freed memory may stay resident and count
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def others_running() -> int | None:
    """Threads of other processes running or ready to run now: the kernel's count of runnable
    threads (``/proc/loadavg``'s fourth field) less this process's own (its OpenMP threads may
    still spin after a matmul), the least of 3 looks 10 ms apart (a passing blip is not load).
    None where the kernel does not say (not Linux)."""
    counts = []
    for i in range(3):
        try:
            running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
            counts.append(running - _own_running())
        except (OSError, IndexError, ValueError):
            return None
        if i < 2:
            time.sleep(0.01)
    return max(0, min(counts))


def _own_running() -> int:
    """This process's threads in the running state (``/proc/self/task/*/stat``), at least 1: the reader."""
    own = 0
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            own += stat.read_text().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return max(1, own)


def thread_contention(threads: int) -> str | None:
    """A note when other processes hold the cores a CPU run's ``threads`` want, else None.

    Judged from :func:`others_running` (what runs now, not a lagging load average that still
    counts the run that just ended): more than one thread, and the others plus the threads above
    the cores.  Threads that wait for a busy core slow every step, often several times over;
    fewer threads then run faster.  None where the kernel does not say.
    """
    others = others_running()
    cores = os.cpu_count() or 1
    if others is None or threads < 2 or others + threads <= cores:
        return None
    free = max(1, min(threads - 1, cores - others))
    return (
        f"note: {others} thread(s) of other processes are running on this machine's {cores} cores, so this run's "
        f"{threads} threads compete with them and each step may take several times longer; with "
        f"OMP_NUM_THREADS={free} it uses only the cores that are free"
    )


def cpu_model() -> str | None:
    """The CPU's name with its family and model numbers from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``.

    Returns e.g. ``"AMD EPYC (family 26, model 2)"``, or None where neither says anything.
    """
    fields = _cpuinfo()
    name = fields.get("model name") or platform.processor() or None
    if name and "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def recorded_argv(argv: list[str]) -> list[str]:
    """``argv`` as a run records it: a script inside this repository named relative to its root.

    compare.py starts each ``train.py`` by its absolute path (so it works from any folder); the
    record keeps ``train.py`` rather than where this checkout happens to live on the machine.
    Every other argument stays as the user gave it (a relative path stays relative).
    """
    if not argv:
        return list(argv)
    script = Path(argv[0]).resolve()
    first = script.relative_to(REPO_ROOT).as_posix() if script.is_relative_to(REPO_ROOT) else argv[0]
    return [first, *argv[1:]]


# The files train.py runs: two commits that agree on these train alike (a run's config is recorded whole).
TRAINING_CODE = ("train.py", "model", "training", "data", "core")


def checkout_code() -> tuple[str | None, bool | None, str | None]:
    """``(git commit, dirty, training_code_diff)`` of this checkout: its HEAD, whether it has uncommitted
    changes outside ``results/``, and the first 16 hex digits of the SHA-256 of ``git diff HEAD`` over
    :data:`TRAINING_CODE` (None: no such changes).  All None where git cannot tell."""
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        dirty = bool(
            subprocess.run(
                # results/ holds committed run folders and reports, which change while an experiment runs
                # on unchanged code: only the code makes a run "dirty".
                ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
        # What a commit does not say: the uncommitted changes to the code train.py runs, as a digest
        # (experiment.runs.seeds compares runs by it; docs or tests edited meanwhile leave it None).
        diff = subprocess.run(
            ["git", "diff", "HEAD", "--", *TRAINING_CODE], cwd=REPO_ROOT, capture_output=True, timeout=10
        ).stdout
        code_diff = sha256_bytes(diff)[:16] if diff.strip() else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty, code_diff = None, None, None
    return commit, dirty, code_diff


def environment(device: torch.device) -> dict:
    """What a reader needs to reproduce a run: git commit, versions, hardware (modded-nanogpt style)."""
    commit, dirty, code_diff = checkout_code()
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    # Read from the installed packages' metadata: importing datasets and wandb only to ask would cost
    # seconds and over 100 MiB per run (measured on a 2-core CPU, 2026-11-23).
    for dist in ("numpy", "tiktoken", "tokenizers", "datasets", "tqdm", "wandb"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:  # an optional library that is absent is recorded as such
            versions[dist] = None
    env = {
        "git_commit": commit,
        "git_dirty": dirty,
        "training_code_diff": code_diff,
        "versions": versions,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        # The kernels torch picked for this CPU (e.g. AVX2, AVX512): two machines that differ here round
        # differently, so the same run on each drifts apart the way two seeds do.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "argv": recorded_argv(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return env
