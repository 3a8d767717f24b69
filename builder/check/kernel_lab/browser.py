"""Chromium for the lab, started as a plain process (no Playwright: the GPU machine has none) with the app's
WebGPU flags (builder/site/chrome.py), headless, on a fresh profile, pointed at the lab's page."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from builder.site.chrome import launch_args

# Timestamp queries unquantised (Chromium rounds them to 100 µs otherwise): onnxruntime's per-kernel times need it.
LAB_FLAGS = ("--headless=new", "--enable-webgpu-developer-features", "--no-first-run")


def command(executable: Path, url: str, *, gpu: bool, profile_dir: Path) -> list[str]:
    return [str(executable), *launch_args(gpu=gpu), *LAB_FLAGS, f"--user-data-dir={profile_dir}", url]


@contextlib.contextmanager
def chromium(
    executable: Path, url: str, *, gpu: bool, log_path: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Chromium showing `url` until the block ends; its stderr goes to `log_path` (or nowhere)."""
    with contextlib.ExitStack() as stack:
        profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="klein-kernel-lab-")))
        log = stack.enter_context(open(log_path, "wb")) if log_path else subprocess.DEVNULL
        process = subprocess.Popen(
            command(executable, url, gpu=gpu, profile_dir=profile), stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
