"""One regress case through the app's page: fill the form, Generate, take the downloaded PNG (check/driver drives)."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from builder.check.driver.chromium import first_line
from builder.check.driver.page import app_error, fill_form, read_json_attribute, wait_settled
from builder.check.driver.session import UI_ACTION_TIMEOUT_MS, BrowserSession
from builder.check.regress.cases import Case
from builder.check.regress.report import AppRun
from builder.check.regress.where import page_url
from builder.pipeline import imaging

Log = Callable[[str], None]


class CaseCouldNotRun(Exception):
    """This case could not be carried out (timeout, the app's error); other cases still run."""


class AppReportedDegenerate(Exception):
    """The app ran and said its output is NaN or constant: a wrong result, so the case fails."""


def run_case(session: BrowserSession, case: Case, run: AppRun, *, base_url: str, timeout_s: float, log: Log) -> None:
    """Generate one image through the UI of the app at `base_url` (regress.where.page_url) and fill `run` with the
    downloaded PNG, timings and errors.

    Raises CaseCouldNotRun or AppReportedDegenerate; `run` keeps what was collected up to that point.
    """
    from playwright.sync_api import Error as PlaywrightError

    if session.exited:
        raise CaseCouldNotRun(session.exit_reason())
    started = time.perf_counter()
    crashed: list[bool] = []
    page = None
    try:
        page = session.context.new_page()
        page.set_default_timeout(UI_ACTION_TIMEOUT_MS)
        page.on("console", lambda message: run.console_errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: run.page_errors.append(str(error)))
        page.on("crash", lambda _page: crashed.append(True))
        page.goto(page_url(base_url, case.page_path()), wait_until="load")
        page.wait_for_selector("#generate")
        if page.evaluate("() => document.body.dataset.state") == "error":  # e.g. the app's own WebGPU check failed
            run.app_error = app_error(page)[1]
            raise CaseCouldNotRun(f"the app showed an error before generating: {run.app_error}")
        fill_form(page, case)
        log(f"[{case.name}] generating {case.size}, {case.steps} steps, seed {case.seed} ...")
        page.click("#generate")
        state = wait_settled(page, label=case.name, timeout_s=timeout_s, log=log)
        result_info = read_json_attribute(page, "#timings")
        if isinstance(result_info, dict):
            # {timings: per-stage ms, graphs: variant + EP per component, notes, prompt: token counts}
            run.timings = result_info.pop("timings", None)
            run.result_info = result_info
        run.capabilities = read_json_attribute(page, "#capabilities") or {
            "text": " ".join((page.text_content("#capabilities") or "").split())
        }
        if state == "rejected":
            run.app_error = app_error(page)[1]
            raise CaseCouldNotRun(f"the app rejected the settings: {run.app_error}")
        if state == "error":
            code, message = app_error(page)
            run.app_error = message
            if code == "degenerate-output" or re.search(r"degenerate|\bNaN\b|constant image", message, re.IGNORECASE):
                raise AppReportedDegenerate(message)
            raise CaseCouldNotRun(f"the app showed an error: {message}")
        with page.expect_download() as download_info:
            page.click("#download")
        download = download_info.value
        failure = download.failure()
        if failure:
            raise CaseCouldNotRun(f"the Download PNG click gave no file ({failure})")
        run.download_name = download.suggested_filename
        with tempfile.TemporaryDirectory(prefix="klein-regress-download-") as folder:
            saved = Path(folder) / "candidate.png"
            download.save_as(saved)  # a browser server's download comes over the connection
            run.png = saved.read_bytes()
            run.image, run.png_text = imaging.read_png(saved)
    except PlaywrightError as exc:
        if session.exited or (session.context.browser is not None and not session.context.browser.is_connected()):
            session.exited = True
            raise CaseCouldNotRun(session.exit_reason()) from exc
        # A renderer that dies while the page is being made fails new_page() before `crash` can be heard.
        if crashed or "Target crashed" in str(exc):
            raise CaseCouldNotRun(
                "the page crashed (its renderer process died: out of memory, or a GPU driver fault); "
                "Chromium's log is browser.log in the report folder"
            ) from exc
        raise CaseCouldNotRun(f"driving the page failed: {first_line(exc)}") from exc
    finally:
        run.seconds = time.perf_counter() - started
        if page is not None:
            with contextlib.suppress(PlaywrightError):
                page.close()
