"""check/driver/memory.py: the one GPU-memory sampler (peak above the level at start) and its single reading path."""

from __future__ import annotations

import re
from pathlib import Path

from builder.check.driver.memory import GpuMemorySampler, Nvml

ROOT = Path(__file__).resolve().parent.parent


class ScriptedNvml(Nvml):
    """NVML readings in a given order (the last one repeats): the sampler's arithmetic without a GPU."""

    def __init__(self, readings: list[int]) -> None:
        self.readings = readings

    def used_bytes(self) -> int | None:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_the_peak_is_taken_above_the_level_at_start_and_reset_keeps_the_baseline() -> None:
    sampler = GpuMemorySampler(ScriptedNvml([1000, 1500, 1300, 1100, 1200]), interval_s=3600)
    sampler.start()
    assert sampler.baseline_bytes == 1000
    sampler.sample()
    sampler.sample()
    assert sampler.peak_bytes == 500
    sampler.reset()
    sampler.sample()
    assert sampler.peak_bytes == 100
    sampler.sample()
    assert sampler.stop() == 200


def test_without_nvml_there_is_no_figure() -> None:
    sampler = GpuMemorySampler(None, interval_s=3600)  # as on a machine without the NVIDIA driver
    sampler.start()
    sampler.sample()
    assert sampler.stop() is None


def test_gpu_memory_is_read_in_one_place() -> None:
    """nvidia-smi's memory query or NVML's memory call anywhere else would be a second way to sample it."""
    readers = re.compile(r"memory\.used|nvmlDeviceGetMemoryInfo|pynvml")
    found = sorted(
        str(path.relative_to(ROOT))
        for folder in ("builder", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if readers.search(path.read_text(encoding="utf-8"))
    )
    assert found == ["builder/check/driver/memory.py"], found
