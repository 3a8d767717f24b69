"""One lab run: serve the built lab with the cases, drive Chromium through them, check each result as it arrives."""

from __future__ import annotations

import queue
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.check.kernel_lab import browser, server
from builder.check.kernel_lab.cases import Case
from builder.check.kernel_lab.check import Checked, check
from builder.errors import KernelLabError

Log = Callable[[str], None]
# How often the wait wakes up to notice a browser that exited.
POLL_S = 1.0


@dataclass
class LabRun:
    env: dict[str, Any]
    rows: list[Checked]
    error: str | None = None  # why the page did not finish: `rows` holds what it reported until then

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.rows) and all(row.passed for row in self.rows)


def run_cases(
    cases: list[Case],
    *,
    site_dir: Path,
    executable: Path,
    gpu: bool,
    timeout_s: float,
    log: Log,
) -> LabRun:
    """Every case in every dtype and variant the page's device runs. When the page does not finish (a timeout,
    Chromium gone, the page failing) the run keeps the rows reported until then and says why in `error`."""
    run = LabRun(env={}, rows=[])
    try:
        _drive(cases, run, site_dir=site_dir, executable=executable, gpu=gpu, timeout_s=timeout_s, log=log)
    except KernelLabError as exc:
        run.error = str(exc)
    return run


def _drive(
    cases: list[Case], run: LabRun, *, site_dir: Path, executable: Path, gpu: bool, timeout_s: float, log: Log
) -> None:
    by_id = {case.id: case for case in cases}
    references: dict[tuple[str, str], np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="klein-kernel-lab-log-") as tmp:
        browser_log = Path(tmp) / "chromium.log"
        with (
            server.serving(site_dir, [case.page_json() for case in cases]) as lab,
            browser.chromium(executable, lab.url, gpu=gpu, log_path=browser_log) as process,
        ):
            deadline = time.monotonic() + timeout_s
            while True:
                if time.monotonic() > deadline:
                    raise KernelLabError(f"the lab page did not finish within {timeout_s:g} s{_tail(browser_log)}")
                try:
                    kind, report = lab.reports.get(timeout=POLL_S)
                except queue.Empty:
                    if process.poll() is not None:
                        raise KernelLabError(
                            f"Chromium exited ({process.returncode}) before the lab finished{_tail(browser_log)}"
                        ) from None
                    continue
                if kind == "log":
                    log(str(report.get("line", "")))
                elif kind == "env":
                    run.env = report
                    log(_describe(report))
                elif kind == "result":
                    case = by_id.get(str(report.get("id")))
                    if case is None:
                        raise KernelLabError(f"the page reported an unknown case {report.get('id')!r}")
                    row = check(case, report, references=references)
                    run.rows.append(row)
                    log(f"  {'ok' if row.passed else 'FAIL'} {row.message}".rstrip())
                elif kind == "done":
                    if not report.get("ok"):
                        raise KernelLabError(f"the lab page failed: {report.get('error')}")
                    break


def _describe(env: dict[str, Any]) -> str:
    adapter = env.get("adapter", {})
    name = " ".join(str(adapter.get(key) or "") for key in ("vendor", "architecture", "description")).strip()
    return f"adapter: {name or '?'}; features: {', '.join(env.get('features', []))}"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("; Chromium's last lines:\n" + "\n".join(text)) if text else ""
