"""What the refusal tests of regress, browser-bench and load-bench share: a browser that only records that it was
started, the one-line refusal they check for, and a byte-for-byte picture of a folder that must stay as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path


def fake_browser(folder: Path) -> tuple[Path, Path]:
    """(browser, started): a script that answers --version like a browser that is no Chromium, and creates
    `started` when run, so a test proves a refusal came before any browser was launched."""
    started = folder / "browser-started"
    browser = folder / "fake-chrome"
    browser.write_text(f"#!/bin/sh\ntouch {started}\necho 'Firefox 140.0'\n")
    browser.chmod(0o755)
    return browser, started


def one_reason(result: subprocess.CompletedProcess[str]) -> str:
    """The single `could not run: ...` line of a command refused with exit code 2 (and no traceback)."""
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("could not run: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (folders as a marker)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(folder.rglob("*"))
    }
