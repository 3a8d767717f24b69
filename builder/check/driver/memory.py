"""Peak memory while something runs: GPU memory from NVML, and the resident memory of Chromium's processes.

GPU memory is read one way, NVML's device memory in use on GPU 0 (every process's), through the driver's own
library (libnvidia-ml, found wherever nvidia-smi works) with ctypes, so no Python binding is needed. Where
there is no NVML (a machine without an NVIDIA driver) the GPU figures are None.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class _MemoryInfo(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """GPU 0's memory in use, from NVML; `open()` gives None where the library or a GPU is missing."""

    def __init__(self, library: Any, handle: ctypes.c_void_p) -> None:
        self._library, self._handle = library, handle

    @classmethod
    def open(cls) -> Nvml | None:
        names = (
            ("nvml.dll",) if sys.platform == "win32" else ("libnvidia-ml.so.1", ctypes.util.find_library("nvidia-ml"))
        )
        for name in names:
            if not name:
                continue
            try:
                library = ctypes.CDLL(name)
                handle = ctypes.c_void_p()
                if library.nvmlInit_v2() == 0 and library.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0:
                    return cls(library, handle)
            except (OSError, AttributeError):  # no such library, or one without these entry points
                continue
        return None

    def used_bytes(self) -> int | None:
        info = _MemoryInfo()
        if self._library.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(info)) != 0:
            return None
        return int(info.used)


class GpuMemorySampler:
    """Peak GPU memory in use above the level at `start()` (or the last `reset()`), sampled every `interval_s`
    in a thread; `peak_bytes` stays None without NVML."""

    def __init__(self, nvml: Nvml | None, *, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self._nvml = nvml
        self.baseline_bytes: int | None = None
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def on_this_machine(cls, *, interval_s: float = 0.005) -> GpuMemorySampler:
        return cls(Nvml.open(), interval_s=interval_s)

    def start(self) -> GpuMemorySampler:
        if self._nvml is None:
            return self
        self.baseline_bytes = self._nvml.used_bytes()
        self.peak_bytes = 0 if self.baseline_bytes is not None else None
        self._thread = threading.Thread(target=self._run, name="klein-gpu-memory", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """One reading now (a session shorter than the interval can come and go between two readings)."""
        used = self._nvml.used_bytes() if self._nvml is not None else None
        if used is not None and self.baseline_bytes is not None:
            self.peak_bytes = max(self.peak_bytes or 0, used - self.baseline_bytes)

    def reset(self) -> None:
        """Start a new peak, above the same baseline."""
        if self.peak_bytes is not None:
            self.peak_bytes = 0

    def stop(self) -> int | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.peak_bytes


def process_kind(cmdline: Sequence[str]) -> str:
    """Chromium's role for a process: renderer, gpu-process, browser, or another helper type."""
    for arg in cmdline:
        if arg.startswith("--type="):
            return arg.split("=", 1)[1]
    return "browser"


@dataclass
class BrowserMemorySampler:
    """Peaks of GPU memory and of Chromium's processes' RSS (summed per process kind), sampled in a thread.

    Chromium's processes are this process's children (a browser Playwright launched here)."""

    interval_s: float = 0.25
    gpu: GpuMemorySampler = field(default_factory=lambda: GpuMemorySampler.on_this_machine(interval_s=0.25))
    peak_rss: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.gpu.start()
        self._thread = threading.Thread(target=self._run, name="klein-memory-sampler", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        self.gpu.reset()
        self.peak_rss = {}

    def stop(self) -> None:
        self._stop.set()
        self.gpu.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_rss()

    def sample(self) -> None:
        """One reading now (the threads take one every `interval_s`; a step shorter than that takes its own)."""
        self._sample_rss()
        self.gpu.sample()

    def _sample_rss(self) -> None:
        import psutil

        totals: dict[str, int] = {}
        for child in psutil.Process(os.getpid()).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "chrom" not in child.name().lower():
                    continue
                kind = process_kind(child.cmdline())
                totals[kind] = totals.get(kind, 0) + child.memory_info().rss
        for kind, rss in totals.items():
            self.peak_rss[kind] = max(self.peak_rss.get(kind, 0), rss)

    def figures(self) -> dict[str, Any]:
        gpu = self.gpu.peak_bytes
        return {
            "gpu_gib": None if gpu is None else gpu / 2**30,
            "rss_gib": {kind: rss / 2**30 for kind, rss in sorted(self.peak_rss.items())},
        }
