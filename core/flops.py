"""Peak matmul FLOP/s of a device, the denominator of MFU (model FLOPs utilization).

    peak = peak_flops(device, torch.bfloat16)   # Peak(flops=4.2e11, source="bf16 matmul 2048x2048, 2 threads, measured ...")
    mfu = model.flops_per_token() * tokens_per_s / peak.flops

MFU as in the PaLM paper (Chowdhery et al., 2022, appendix B): the FLOPs the model needs per
token (``GPT.flops_per_token``) times the tokens/s achieved, over the device's peak.

- **GPUs**: the dense (no sparsity) bf16 tensor-core peak from the vendor's datasheet, by device
  name (:data:`GPU_PEAK_BF16`).  An unknown GPU has no peak: MFU is then not reported.
- **CPUs**: no datasheet figure fits every CPU and thread count, so the peak is *measured*: the
  best rate of several square matmuls (:data:`PROBE_SIZE`) in the training dtype with the threads
  torch uses (other processes only ever slow a matmul down, so the best is the truest), cached
  per CPU model, dtype, thread count and torch version in tinygpt's cache folder
  (:func:`core.files.cache_dir`: ``$TINYGPT_CACHE_DIR`` or ``~/.cache/tinygpt``), so it is measured once
  (about a second).  A probe whose median lagged its
  best by more than :data:`BUSY_SPREAD`, or taken while other processes ran
  (:func:`core.hardware.others_running`), ran on a busy machine and is not cached; a new probe
  never lowers a cached figure.  It is a
  practical peak (what ``torch.mm`` reaches), not the silicon's, and the source line says so,
  with the probe's date and spread.
- **Never impossible**: an MFU above 100% means the peak was measured low (a busy machine):
  :func:`checked_peak` measures it again, and if the run still beat it, MFU is not reported.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from core import hardware
from core.files import cache_dir as tinygpt_cache_dir

# Dense bf16 peaks in FLOP/s, by a whole word (or words) of torch.cuda.get_device_name(), checked in order
# (the first match wins, so the more specific names come first): "L4" never matches an "L40".  Sources: NVIDIA's datasheets
# (H100/H200 SXM: 989.4 TFLOP/s; H100 PCIe: 756; A100: 312; L40S: 362; L4: 121) and the Ada and
# Ampere architecture whitepapers for the consumer cards (RTX 4090: 165.2, RTX 3090: 71, both with
# float32 accumulation, as training uses).
GPU_PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
)

PROBE_SIZE = 2048  # a (2048, 2048) @ (2048, 2048) matmul: 17.2 GFLOP, tens of ms on 2 cores, past cache effects
PROBE_REPEATS = 7
# A probe whose median time is more than this many times its best ran while other processes held the cores.
BUSY_SPREAD = 1.15


@dataclass(frozen=True)
class Peak:
    """A device's peak: FLOP/s and where the figure comes from, in words."""

    flops: float
    source: str


def peak_flops(device: torch.device, amp_dtype: torch.dtype | None, remeasure: bool = False) -> Peak | None:
    """The peak FLOP/s to measure MFU against on ``device`` when training in ``amp_dtype`` (None: float32).

    CUDA: the datasheet's dense bf16 peak (None for a GPU not in :data:`GPU_PEAK_BF16`).  CPU:
    the measured matmul rate in that dtype (:func:`cpu_matmul_peak`; ``remeasure`` measures it
    again).  Other devices: None.
    """
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if re.search(r"\bNVL\b", name):  # H100/H200 NVL: other clocks than the SXM parts listed; no figure here
            return None
        for key, flops in GPU_PEAK_BF16:
            if re.search(rf"\b{re.escape(key)}\b", name):
                return Peak(flops, f"dense bf16 peak of the {key} (datasheet)")
        return None
    if device.type == "cpu":
        return cpu_matmul_peak(amp_dtype or torch.float32, remeasure=remeasure)
    return None


def cpu_matmul_peak(dtype: torch.dtype, cache_dir: Path | None = None, remeasure: bool = False) -> Peak:
    """The best FLOP/s of ``PROBE_REPEATS`` ``PROBE_SIZE``-square ``torch.mm`` in ``dtype`` on this CPU, measured
    once and cached.

    The cache (a JSON file in ``cache_dir``, by default tinygpt's cache folder) is keyed by
    CPU model, dtype, ``torch.get_num_threads()`` and the torch version, because each changes
    the figure.  A busy machine measures a low peak (and so a high MFU): ``remeasure`` (bench.py
    ``--measure-peak``) measures again, and the faster of the new and the cached figure is the peak
    (load only ever slows a matmul, so the faster one is the truer).
    """
    threads = torch.get_num_threads()
    dtype_name = str(dtype).removeprefix("torch.")
    key = f"{hardware.cpu_model() or 'unknown cpu'}|{dtype_name}|{threads} threads|torch {torch.__version__}"
    path = Path(cache_dir or tinygpt_cache_dir()) / "cpu_matmul_peak.json"
    cached = _read_cache(path)
    entry, kept = cached.get(key), True
    if remeasure or not isinstance(entry, dict) or "median" not in entry:  # older entries: a median, maybe busy
        best, median = _measure_mm(dtype)
        entry = {"flops": best, "median": median, "measured": time.strftime("%Y-%m-%d")}
        if isinstance(cached.get(key), dict) and cached[key].get("median") and cached[key]["flops"] > best:
            entry = cached[key]  # load only slows a matmul: a faster figure measured before stays the peak
        kept = best / median <= BUSY_SPREAD and not hardware.others_running()
        if kept:  # a probe on a busy machine is used once, never kept
            cached[key] = entry
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(cached, indent=2) + "\n")
            except OSError:
                pass  # a read-only home: measure again next time rather than fail the benchmark
    lag = 100 * (entry["flops"] / entry["median"] - 1)
    busy = "" if kept else ", not cached: the machine was busy"
    return Peak(
        entry["flops"],
        f"{dtype_name} matmul {PROBE_SIZE}x{PROBE_SIZE}, {threads} threads, best of {PROBE_REPEATS}, measured on "
        f"this CPU on {entry['measured']}, median {lag:.0f}% slower{busy}",
    )


def _read_cache(path: Path) -> dict:
    """The cache's ``{key: flops}``, or ``{}`` when it is missing or unreadable (it is only a cache)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _measure_mm(dtype: torch.dtype) -> tuple[float, float]:
    """``(best, median)`` FLOP/s of ``PROBE_REPEATS`` timed ``torch.mm`` calls after two warm-ups, on random data."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=gen).to(dtype)
    b = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=gen).to(dtype)
    times = []
    for i in range(2 + PROBE_REPEATS):
        t0 = time.perf_counter()
        torch.mm(a, b)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * PROBE_SIZE**3 / min(times), 2 * PROBE_SIZE**3 / statistics.median(times)


def checked_peak(achieved_flops: float, device: torch.device, amp_dtype: torch.dtype | None) -> Peak | None:
    """:func:`peak_flops`, measured again on a CPU when ``achieved_flops`` (FLOP/s a run reached) beats it:
    a cached probe from a busy machine is replaced rather than giving an MFU above 100%."""
    peak = peak_flops(device, amp_dtype)
    if peak is not None and device.type == "cpu" and achieved_flops > peak.flops:
        peak = peak_flops(device, amp_dtype, remeasure=True)
    return peak


def mfu(flops_per_token: float, tokens_per_s: float, peak: Peak | None) -> str:
    """``'38.2% of 421 GFLOP/s (bf16 matmul ..., measured on this CPU)'``, or ``'n/a (...)'`` without a peak
    or when the rate beat the peak (never above 100%: :func:`checked_peak` measures a CPU's peak again first)."""
    if peak is None:
        return "n/a (no peak figure for this device)"
    if flops_per_token * tokens_per_s > peak.flops:
        if "measured" not in peak.source:
            return f"n/a (the run beat the peak figure, {peak.flops / 1e12:,.0f} TFLOP/s: {peak.source}; check it)"
        return (
            f"n/a (the run beat the measured peak of {peak.flops / 1e9:,.0f} GFLOP/s: the probe ran on a busy "
            "machine; python bench.py --measure-peak on a quiet one)"
        )
    scale, unit = (1e12, "TFLOP/s") if peak.flops >= 1e12 else (1e9, "GFLOP/s")
    return (
        f"{100 * flops_per_token * tokens_per_s / peak.flops:.1f}% of {peak.flops / scale:,.0f} {unit} ({peak.source})"
    )


def mfu_record(
    flops_per_token: float,
    tokens_per_s: float | None,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    devices: int = 1,
) -> dict:
    """A run summary's MFU fields: ``mfu_percent``, ``mfu`` (in words, with the peak) and ``mfu_peak_flops``.

    ``tokens_per_s`` is the whole job's (every rank), so the peak is ``devices`` times one device's.
    Empty when there is no speed or no peak for the device.
    """
    peak = checked_peak(flops_per_token * tokens_per_s / devices, device, amp_dtype) if tokens_per_s else None
    if not tokens_per_s or peak is None:
        return {}
    job = Peak(peak.flops * devices, peak.source + (f", x{devices} devices" if devices > 1 else ""))
    if flops_per_token * tokens_per_s > job.flops:
        return {"mfu": mfu(flops_per_token, tokens_per_s, job)}
    return {
        "mfu_percent": round(100 * flops_per_token * tokens_per_s / job.flops, 2),
        "mfu": mfu(flops_per_token, tokens_per_s, job),
        "mfu_peak_flops": job.flops,
    }
