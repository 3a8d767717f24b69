"""Finding, checking and launching Chromium (regress and the browser tests); its flags are site/chrome.py's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
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


def launch_persistent(
    playwright: Any,
    user_data_dir: Path,
    *,
    executable: Path,
    headed: bool = False,
    gpu: bool = False,
    f16_toggle: bool = True,
    viewport: tuple[int, int] = (1280, 720),
    log_file: Path | None = None,
    extra_args: tuple[str, ...] = (),
    service_workers: str = "allow",
) -> Any:
    """A persistent context: incognito storage cannot hold the model files (OPFS quota errors).

    `log_file` keeps Chromium's own log (its FATAL lines say why a browser that went away did); `extra_args` go
    after the usual flags (e.g. another WebGPU adapter); `service_workers` "block" keeps the app's service worker
    out (what it serves from its cache bypasses Playwright's request routing)."""
    logging = ["--enable-logging", f"--log-file={log_file}"] if log_file is not None else []
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir),
        executable_path=str(executable),
        headless=not headed,
        args=launch_args(gpu=gpu, headed=headed, f16_toggle=f16_toggle) + logging + list(extra_args),
        viewport={"width": viewport[0], "height": viewport[1]},
        accept_downloads=True,
        service_workers=service_workers,
    )


def check_browser(executable: Path) -> str:
    """`--version` of the browser ("Chromium 156.0..."), so a wrong --browser fails before anything slow."""
    if sys.platform == "win32":
        return ""  # chrome.exe --version opens a window instead of printing; Playwright's launch will tell.
    try:
        result = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=60, check=False)
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


# Chromium's log lines look like `[pid:tid:MMDD/HHMMSS.micros:FATAL:path/file.cc:123] message`.
_FATAL = re.compile(r"^\[[^\]]*:FATAL:([^\]]+)\]\s*(.*)$", re.MULTILINE)
# Debian/Ubuntu's fontconfig configuration and one font family: what a server image without fonts lacks.
FONT_PACKAGES = "fontconfig fonts-dejavu-core"


def exit_cause(log_text: str) -> str:
    """Why Chromium went away, from its own log: the first FATAL line, with the fix where the cause is known."""
    match = _FATAL.search(log_text)
    if match is None:
        return (
            "its log has no FATAL line: it was killed from outside (out of memory? check `dmesg`) or "
            "crashed without a message"
        )
    where, message = match.group(1).strip(), match.group(2).strip()
    cause = f"FATAL at {where}: {message or '(no message)'}"
    if "SkFontMgr" in where or "fontconfig" in where.lower():
        return (
            f"{cause}. Chromium found no fonts: this machine has no fontconfig configuration or no font. "
            f"Install them (Debian/Ubuntu: apt-get install -y {FONT_PACKAGES}) and run again."
        )
    if "GPU process isn't usable" in message:
        return f"{cause}. The GPU process kept failing: check chrome://gpu on this machine, or run with --software."
    return cause


def font_problem(
    platform: str = sys.platform, environ: Mapping[str, str] | None = None, system_dir: Path = Path("/etc/fonts")
) -> str | None:
    """On Linux, what is missing for Chromium to find a font (it aborts when it needs one and has none), or None.

    Only fontconfig's configuration is checked: without it fontconfig knows no font folder at all."""
    if environ is None:
        environ = os.environ
    if not platform.startswith("linux") or environ.get("FONTCONFIG_FILE"):
        return None
    if any(Path(folder, "fonts.conf").is_file() for folder in (environ.get("FONTCONFIG_PATH"), system_dir) if folder):
        return None
    return (
        f"this machine has no fontconfig configuration ({system_dir / 'fonts.conf'}), so Chromium finds no font and "
        f"aborts when a page or its own UI needs one; install them (Debian/Ubuntu: apt-get install -y "
        f"{FONT_PACKAGES})"
    )


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Playwright's run to dozens), for one-line reasons."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
