"""Finding, checking and launching Chromium (regress and the browser tests); its flags are site/chrome.py's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from builder.errors import RegressionError
from builder.site.chrome import launch_args


def find_chromium(explicit: Path | None = None) -> Path:
    """The browser to launch: --browser, $KLEIN_CHROMIUM, Playwright's own Chromium, or the system one."""
    candidates: list[Path] = []
    if explicit is not None:
        if not Path(explicit).is_file():
            raise RegressionError(f"--browser {explicit}: no such file.")
        return Path(explicit)
    if os.environ.get("KLEIN_CHROMIUM"):
        candidates.append(Path(os.environ["KLEIN_CHROMIUM"]))
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            candidates.append(Path(p.chromium.executable_path))
    except Exception:  # noqa: BLE001 - Playwright's browser registry is optional; the system browser is fine.
        pass
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        found = shutil.which(name)
        if found:
            candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    linux = sys.platform.startswith("linux")
    hint = "apt-get install -y chromium" if linux else "python -m playwright install chromium"
    raise RegressionError(f"No Chromium found. Install one ({hint}) or pass --browser PATH.")


def launch_persistent(playwright: Any, user_data_dir: Path, *, executable: Path, headed: bool = False,
                      gpu: bool = False, f16_toggle: bool = True, viewport: tuple[int, int] = (1280, 720)) -> Any:
    """A persistent context: incognito storage cannot hold the model files (OPFS quota errors)."""
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir),
        executable_path=str(executable),
        headless=not headed,
        args=launch_args(gpu=gpu, headed=headed, f16_toggle=f16_toggle),
        viewport={"width": viewport[0], "height": viewport[1]},
        accept_downloads=True,
    )


def check_browser(executable: Path) -> str:
    """`--version` of the browser ("Chromium 156.0..."), so a wrong --browser fails before anything slow."""
    if sys.platform == "win32":
        return ""  # chrome.exe --version opens a window instead of printing; Playwright's launch will tell.
    try:
        result = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=60,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegressionError(f"--browser {executable} cannot be run ({first_line(exc)}).") from exc
    lines = (result.stdout.strip() or result.stderr.strip()).splitlines()
    version = lines[0].strip() if lines else ""
    if not re.search(r"Chromium|Chrome|Edge", version):
        raise RegressionError(
            f"--browser {executable} is not a Chromium (`--version` says {version!r}); pass Chromium, Chrome or "
            "Edge: WebGPU compute with these flags is Chromium-only."
        )
    return version


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Playwright's run to dozens), for one-line reasons."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
