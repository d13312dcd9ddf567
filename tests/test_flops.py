"""MFU's denominator (``core.flops``): a datasheet peak for known GPUs, a measured and cached matmul peak on a CPU.

Run: ``python -m pytest -q tests/test_flops.py``  (CPU, seconds; the probe itself is replaced by a stub).
"""

import json

import pytest
import torch

from core import flops


def test_gpu_peaks_come_from_the_datasheet_table(monkeypatch):
    """H100 SXM and H200 are 989 TFLOP/s, the PCIe H100 756 (the more specific name wins), an unknown GPU None."""
    for name, want in (
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA GeForce RTX 4090", 165e12),
    ):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        peak = flops.peak_flops(torch.device("cuda"), torch.bfloat16)
        assert peak.flops == want and "datasheet" in peak.source, name
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert flops.peak_flops(torch.device("cuda"), torch.bfloat16) is None


@pytest.mark.parametrize("name", ["NVIDIA L40", "NVIDIA H100 NVL", "NVIDIA H200 NVL"])
def test_a_card_whose_name_contains_a_listed_ones_has_no_borrowed_peak(monkeypatch, name):
    """An L40 is not an L4 (121 TFLOP/s would put its MFU 1.5x too high) and an NVL part not the SXM one:
    names match whole words, and a card with no figure of its own gets no MFU rather than another's."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert flops.peak_flops(torch.device("cuda"), torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    assert flops.peak_flops(torch.device("cuda"), torch.bfloat16).flops == 121e12


def test_cpu_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """Whatever else runs on the machine (others_running stubbed), The probe runs on the first call for a dtype; later calls read the cached figure, which names the
    dtype, size, threads and date; --measure-peak (remeasure) replaces it."""
    calls = []
    monkeypatch.setattr(flops.hardware, "others_running", lambda: 0)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: calls.append(dtype) or (4.2e11, 4.1e11))
    first = flops.cpu_matmul_peak(torch.bfloat16, cache_dir=tmp_path)
    again = flops.cpu_matmul_peak(torch.bfloat16, cache_dir=tmp_path)
    assert calls == [torch.bfloat16] and first == again and first.flops == 4.2e11
    threads = torch.get_num_threads()
    assert f"bfloat16 matmul 2048x2048, {threads} threads, best of 7, measured on this CPU on " in first.source
    assert first.source.endswith("median 2% slower")
    flops.cpu_matmul_peak(torch.float32, cache_dir=tmp_path)
    assert calls == [torch.bfloat16, torch.float32]  # another dtype is another figure
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (5e11, 5e11))
    assert flops.cpu_matmul_peak(torch.bfloat16, cache_dir=tmp_path, remeasure=True).flops == 5e11
    assert len(json.loads((tmp_path / "cpu_matmul_peak.json").read_text())) == 2


def test_an_unreadable_cache_is_measured_again(tmp_path, monkeypatch):
    """A corrupt cache file is only a cache: the peak is measured and the file rewritten."""
    (tmp_path / "cpu_matmul_peak.json").write_text("{not json")
    monkeypatch.setattr(flops.hardware, "others_running", lambda: 0)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (1e11, 1e11))
    assert flops.cpu_matmul_peak(torch.float32, cache_dir=tmp_path).flops == 1e11
    assert json.loads((tmp_path / "cpu_matmul_peak.json").read_text())


def test_mfu_is_model_flops_times_tokens_over_the_peak():
    """MFU = flops_per_token x tokens/s / peak, printed with the peak and its source; n/a without a peak."""
    text = flops.mfu(44.1e6, 4000, flops.Peak(4.41e11, "probe"))
    assert text == "40.0% of 441 GFLOP/s (probe)"
    assert flops.mfu(1e9, 4e5, flops.Peak(989e12, "sheet")).startswith("40.4% of 989 TFLOP/s")
    assert flops.mfu(1.0, 1.0, None).startswith("n/a")


def test_a_job_of_several_devices_is_measured_against_their_summed_peak(monkeypatch):
    """The summary's MFU divides the whole job's tokens/s by the peak of all its devices."""
    monkeypatch.setattr(flops, "peak_flops", lambda device, amp: flops.Peak(1e12, "sheet"))
    one = flops.mfu_record(1e6, 4e5, torch.device("cuda"), torch.bfloat16, devices=1)
    four = flops.mfu_record(1e6, 4e5, torch.device("cuda"), torch.bfloat16, devices=4)
    assert one["mfu_percent"] == pytest.approx(40.0) and four["mfu_percent"] == pytest.approx(10.0)
    assert flops.mfu_record(1e6, None, torch.device("cuda"), None) == {}


def test_a_probe_on_a_busy_machine_is_used_once_and_not_cached(tmp_path, monkeypatch):
    """A probe whose median lagged its best by more than BUSY_SPREAD, or taken while other processes ran, is
    returned, said so, and not written."""
    monkeypatch.setattr(flops.hardware, "others_running", lambda: 0)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (4e11, 2e11))
    peak = flops.cpu_matmul_peak(torch.bfloat16, cache_dir=tmp_path)
    assert peak.flops == 4e11 and "median 100% slower, not cached: the machine was busy" in peak.source
    assert not (tmp_path / "cpu_matmul_peak.json").exists()
    monkeypatch.setattr(flops.hardware, "others_running", lambda: 2)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (4e11, 3.9e11))
    assert "not cached: the machine was busy" in flops.cpu_matmul_peak(torch.bfloat16, cache_dir=tmp_path).source
    assert not (tmp_path / "cpu_matmul_peak.json").exists()


def test_a_poisoned_cached_peak_is_measured_again_and_never_printed_above_100_percent(tmp_path, monkeypatch):
    """A cached CPU peak below what a run achieved is replaced by a new probe; if the run still beats the
    new one, MFU reads n/a with the fix, never a figure above 100%."""
    monkeypatch.setenv("TINYGPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(flops.hardware, "others_running", lambda: 0)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (4e10, 4e10))  # probed while the machine was loaded
    flops.cpu_matmul_peak(torch.bfloat16)
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (4e11, 3.9e11))  # the quiet machine's truth
    record = flops.mfu_record(44e6, 4000, torch.device("cpu"), torch.bfloat16)  # 1.76e11 FLOP/s achieved
    assert record["mfu_percent"] == pytest.approx(44.0) and record["mfu_peak_flops"] == 4e11
    monkeypatch.setattr(flops, "_measure_mm", lambda dtype: (1e11, 1e11))  # still below what the run did
    cached = json.loads((tmp_path / "cpu_matmul_peak.json").read_text())
    (tmp_path / "cpu_matmul_peak.json").write_text(json.dumps({k: {**v, "flops": 1e10} for k, v in cached.items()}))
    again = flops.mfu_record(44e6, 4000, torch.device("cpu"), torch.bfloat16)
    assert "mfu_percent" not in again and again["mfu"].startswith("n/a (the run beat the measured peak")
