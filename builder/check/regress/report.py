"""What `klein-web regress` concludes and writes: verdicts, image metrics, report folders and the summary.

A report folder holds report.json, candidate.png (the browser's download, byte for byte), reference.png
and diff.png (a heat map of |candidate - reference|), and browser.log (Chromium's own log of the run, where a
crash or a GPU problem shows its cause). Each file is written to a temp file and renamed,
and report.json goes last, so a folder with a report.json is complete. With several cases each case
gets a sub-folder and the top folder's report.json lists them all.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder import __version__
from builder.pipeline import imaging
from builder.repo.files import atomic_write_bytes

REPORT_NAME = "report.json"
CANDIDATE_NAME = "candidate.png"
REFERENCE_NAME = "reference.png"
DIFF_NAME = "diff.png"
BROWSER_LOG_NAME = "browser.log"  # Chromium's own log of the whole run, in the top folder


class Verdict(enum.IntEnum):
    """Ordered so that the worst verdict of several cases is their max; the value is the exit code."""

    PASS = 0
    FAIL = 1
    COULD_NOT_RUN = 2

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @property
    def exit_code(self) -> int:
        return int(self)


PASS, FAIL, COULD_NOT_RUN = Verdict.PASS, Verdict.FAIL, Verdict.COULD_NOT_RUN


@dataclass
class Reference:
    """The image a case is compared with: `source` is a PNG path or "cpu" (builder.pipeline.reference)."""

    source: str
    image: np.ndarray  # uint8 [H, W, 3]
    png: bytes | None = None  # the reference file's bytes, copied as they are; None for a CPU reference
    seconds: float = 0.0
    variants: dict[str, str] = field(default_factory=dict)  # CPU reference: component -> graph variant it ran


@dataclass
class AppRun:
    """What the browser run produced, whether or not it got as far as an image."""

    png: bytes = b""  # the downloaded file, byte for byte
    image: np.ndarray | None = None  # its pixels, uint8 [H, W, 3]
    png_text: dict[str, str] = field(default_factory=dict)  # its tEXt/iTXt chunks (prompt, seed, ...)
    download_name: str = ""
    timings: Any = None  # per-stage milliseconds from #timings data-json, as the app reported them
    result_info: dict[str, Any] = field(default_factory=dict)  # the rest of it: graphs (variant + EP), notes, prompt
    capabilities: dict[str, Any] = field(default_factory=dict)
    app_error: str = ""
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    reason: str
    metrics: imaging.ImageComparison | None  # None when the sizes differ (no pixel-wise comparison exists)
    diff: np.ndarray | None  # imaging.diff_heatmap of the two, uint8 [H, W, 3]


@dataclass
class CaseReport:
    name: str
    parameters: dict[str, Any]  # prompt, seed, width, height, steps, psnr_min
    reference: Reference | None  # None when the case stopped before a CPU reference was made
    verdict: Verdict = COULD_NOT_RUN
    reason: str = ""
    comparison: Comparison | None = None
    app: AppRun = field(default_factory=AppRun)
    position: int = 0  # in the cases file, from 1 (shards keep the file's numbering)


def compare(candidate: np.ndarray, reference: np.ndarray, *, psnr_min: float) -> Comparison:
    """Pass when the sizes match and PSNR >= psnr_min; the metrics and diff image either way."""
    if candidate.shape != reference.shape:
        (ch, cw), (rh, rw) = candidate.shape[:2], reference.shape[:2]
        return Comparison(FAIL, f"size mismatch: the app made {cw}x{ch}, the reference is {rw}x{rh}", None, None)
    metrics = imaging.compare(candidate, reference)
    diff = imaging.diff_heatmap(candidate, reference)
    psnr_text = "identical" if math.isinf(metrics.psnr) else f"PSNR {metrics.psnr:.2f} dB"
    if metrics.psnr >= psnr_min:
        return Comparison(PASS, f"{psnr_text} >= {psnr_min:g} dB", metrics, diff)
    return Comparison(FAIL, f"{psnr_text} < {psnr_min:g} dB", metrics, diff)


def metrics_json(metrics: imaging.ImageComparison | None) -> dict[str, Any] | None:
    if metrics is None:
        return None
    # JSON has no Infinity: identical images get psnr null and identical true.
    return {
        "psnr": None if math.isinf(metrics.psnr) else round(metrics.psnr, 4),
        "identical": metrics.max_abs_diff == 0,
        "ssim": round(metrics.ssim, 6),
        "max_abs_diff": metrics.max_abs_diff,
        "share_off_by_more_than_8": round(metrics.share_off_by_8, 6),
    }


# --------------------------------------------------------------------------------------------- writing


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def case_json(report: CaseReport, *, browser: dict[str, Any], adapter: dict[str, Any]) -> dict[str, Any]:
    comparison = report.comparison
    files = {}
    if report.reference is not None:
        files["reference"] = REFERENCE_NAME
    if report.app.png:
        files["candidate"] = CANDIDATE_NAME
    if comparison is not None and comparison.diff is not None:
        files["diff"] = DIFF_NAME
    return {
        "verdict": report.verdict.label,
        "exit_code": report.verdict.exit_code,
        "reason": report.reason,
        "case": report.name,
        "parameters": report.parameters,
        "metrics": metrics_json(comparison.metrics if comparison else None),
        "reference": {
            "source": report.reference.source,
            "seconds": round(report.reference.seconds, 3),
            "variants": report.reference.variants,
        }
        if report.reference is not None
        else None,
        "timings": report.app.timings,
        "graphs": report.app.result_info.get("graphs"),
        "notes": report.app.result_info.get("notes"),
        # The shared GPU device's features, and the optional ones it was made without because they failed.
        "device": report.app.result_info.get("device"),
        "memory": report.app.result_info.get("memory"),
        "prompt_tokens": report.app.result_info.get("prompt"),
        # A base model's classifier-free guidance as the app ran it, and the transformer calls it took (two a step).
        "guidance": report.app.result_info.get("guidance"),
        "transformer_calls": report.app.result_info.get("transformerCalls"),
        "capabilities": report.app.capabilities,
        "adapter": adapter,
        "browser": browser,
        "app_error": report.app.app_error or None,
        "console_errors": report.app.console_errors,
        "page_errors": report.app.page_errors,
        "download": {"name": report.app.download_name, "png_text": report.app.png_text} if report.app.png else None,
        "browser_seconds": round(report.app.seconds, 3),
        "files": files,
        "klein_web": __version__,
        "finished_at": _now(),
    }


def _readable(path: Path) -> None:
    # Temp files are created 0600; a report is for sharing (CI artifacts, other users).
    path.chmod(0o644)


def _write_bytes(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)
    _readable(path)


def _write_png(path: Path, pixels: np.ndarray, *, text: dict[str, str] | None = None) -> None:
    imaging.write_png(path, pixels, text=text)
    _readable(path)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    _write_bytes(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def write_case_report(folder: Path, report: CaseReport, *, browser: dict[str, Any], adapter: dict[str, Any]) -> Path:
    """report.json + the PNGs of one case into `folder`; each file atomically, report.json last."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPORT_NAME).unlink(missing_ok=True)  # until the new one lands, the folder reads as incomplete
    reference, comparison = report.reference, report.comparison
    if reference is None:
        (folder / REFERENCE_NAME).unlink(missing_ok=True)
    elif reference.png is not None:
        _write_bytes(folder / REFERENCE_NAME, reference.png)
    else:
        p = report.parameters
        text = imaging.png_text(
            prompt=p["prompt"],
            seed=p["seed"],
            steps=p["steps"],
            width=p["width"],
            height=p["height"],
            model=f"{reference.source} reference",
        )
        _write_png(folder / REFERENCE_NAME, reference.image, text=text)
    if report.app.png:
        _write_bytes(folder / CANDIDATE_NAME, report.app.png)
    else:
        (folder / CANDIDATE_NAME).unlink(missing_ok=True)  # never leave an earlier run's image as this run's
    if comparison is not None and comparison.diff is not None:
        _write_png(folder / DIFF_NAME, comparison.diff)
    else:
        (folder / DIFF_NAME).unlink(missing_ok=True)
    path = folder / REPORT_NAME
    _write_json(path, case_json(report, browser=browser, adapter=adapter))
    return path


def write_browser_log(folder: Path, text: str) -> None:
    """Chromium's own log of the run (browser.log): where a crash or a GPU problem shows its cause."""
    _write_bytes(folder / BROWSER_LOG_NAME, text.encode("utf-8"))


def worst_exit_code(reports: Iterable[CaseReport]) -> int:
    return max((report.verdict for report in reports), default=COULD_NOT_RUN).exit_code


def write_run_report(
    folder: Path, reports: list[CaseReport], *, browser: dict[str, Any], adapter: dict[str, Any], run: dict[str, Any]
) -> Path:
    """The top report.json of a several-case run: the overall verdict, one entry per case folder, and `run`: what
    it ran (regress.shards.run_identity)."""
    worst = Verdict(worst_exit_code(reports))
    data = {
        "verdict": worst.label,
        "exit_code": worst.exit_code,
        "cases": [
            {
                "case": r.name,
                "folder": r.name,
                "position": r.position,
                "verdict": r.verdict.label,
                "reason": r.reason,
                "metrics": metrics_json(r.comparison.metrics if r.comparison else None),
            }
            for r in reports
        ],
        "adapter": adapter,
        "browser": browser,
        "run": run,
        "klein_web": __version__,
        "finished_at": _now(),
    }
    path = folder / REPORT_NAME
    _write_json(path, data)
    return path


# --------------------------------------------------------------------------------------------- summary


def _timing_text(timings: Any) -> str:
    """The app's StageTimings in the order it reports them (its stages, then total and sessionRun)."""
    if not isinstance(timings, dict):
        return "no timings reported"
    parts = [f"{stage} {ms / 1000:.2f}s" for stage, ms in timings.items() if isinstance(ms, (int, float))]
    return "app timings: " + ", ".join(parts) if parts else "no timings reported"


def summary_lines(
    reports: list[CaseReport], *, browser: dict[str, Any], adapter: dict[str, Any], report_dir: Path
) -> list[str]:
    """A one-screen summary: the browser and adapter, then two to four lines per case, then the overall verdict."""
    adapter_text = " ".join(str(adapter.get(k) or "") for k in ("vendor", "architecture", "description")).strip()
    lines = [
        (
            f"browser: {browser.get('version') or '?'} ({browser.get('mode')}), {browser.get('launches')} "
            f"launch(es); adapter: {adapter_text or 'unknown'}"
        )
    ]
    indent = " " * 15
    for report in reports:
        p = report.parameters
        lines.append(
            f"{report.verdict.label.upper():>13}  {report.name}: {p['width']}x{p['height']}, {p['steps']} "
            f"steps, seed {p['seed']}: {report.reason}"
        )
        metrics = report.comparison.metrics if report.comparison else None
        if metrics is not None:
            lines.append(indent + metrics.summary())
        lines.append(indent + _timing_text(report.app.timings))
        errors = report.app.page_errors + report.app.console_errors
        if errors:
            lines.append(f"{indent}{len(errors)} console/page error(s), first: {errors[0][:160]}")
    worst = Verdict(worst_exit_code(reports))
    lines.append(f"overall: {worst.label.upper()} (exit {worst.exit_code}); report in {report_dir}")
    return lines
