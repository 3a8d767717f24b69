"""Peak resident memory of this process, for the figures `convert` and `reference` print.

On Linux the peak (VmHWM) can be reset, so a long job can report the peak of each of its parts; elsewhere
the peak since the process started is reported (getrusage), or None where neither exists.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def peak_rss_bytes() -> int | None:
    """Peak resident memory since the last reset_peak_rss (Linux), else since the process started."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # bytes on macOS, KiB on Linux


def reset_peak_rss() -> int | None:
    """Start a new peak measurement (Linux: writing 5 to clear_refs resets VmHWM to the current RSS) and
    return the current RSS in bytes; None where the peak cannot be reset."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
        return peak_rss_bytes()
    return None


def available_memory_bytes() -> int | None:
    """Memory the machine can give a new job without swapping (Linux MemAvailable); None where unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def rss_bytes(pid: int) -> int | None:
    """Resident memory of process `pid` now (Linux VmRSS); None where unknown or once it has exited."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None
