"""Peak GPU memory of a running session, from NVML in a sampling thread (None where there is no NVML)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class GpuMemorySampler:
    """Peak NVML device memory in use above the level at start, sampled in a thread (None without NVML)."""

    def __init__(self) -> None:
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._used: Callable[[], int] = lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle).used
            self._base = self._used()
            self.peak_bytes = 0
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        except Exception:  # noqa: BLE001 -- no NVML (CPU machine): memory is simply not reported
            self._thread = None

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_bytes = max(self.peak_bytes or 0, self._used() - self._base)

    def stop(self) -> int | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peak_bytes
