"""Driving the app's page in Chromium like a user (regress): launch, adapter check, fill the form, Generate, Download.

No test hooks: only the UI's element ids, `body[data-state]` and the `data-json` attributes the app shows.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.check.browser import exit_cause, first_line, font_problem, launch_persistent
from builder.check.regress_cases import Case
from builder.check.regress_report import AppRun
from builder.errors import RegressionError
from builder.pipeline import imaging

Log = Callable[[str], None]

# How long a single UI action (fill, click, the download) may take; generation has its own --timeout.
UI_ACTION_TIMEOUT_MS = 60_000


# How often the waiting loop wakes up to log the app's #status line.
STATUS_POLL_MS = 2_000


# Evaluated in the page before the first case: the standard WebGPU API, not an app hook.
ADAPTER_PROBE_JS = """async () => {
    if (!navigator.gpu) return {error: 'navigator.gpu is undefined (WebGPU is disabled in this browser)'};
    // Chromium answers null while its GPU process is still starting; the app itself asks again too.
    let adapter = null;
    for (let attempt = 0; attempt < 3 && !adapter; attempt++) {
        if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 250));
        adapter = await navigator.gpu.requestAdapter();
    }
    if (!adapter) return {error: 'navigator.gpu.requestAdapter() returned null (3 tries)'};
    const info = adapter.info || {};
    return {
        vendor: info.vendor || '', architecture: info.architecture || '', device: info.device || '',
        description: info.description || '', isFallbackAdapter: !!info.isFallbackAdapter,
        features: [...adapter.features].sort(),
        maxBufferSize: adapter.limits.maxBufferSize,
        maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    };
}"""


# done | error | rejected (the form refused the settings: it shows #error but stays idle) | false (keep waiting).
STATE_SETTLED_JS = """() => {
    const state = document.body.dataset.state;
    if (state === 'done' || state === 'error') return state;
    const error = document.querySelector('#error');
    return state === 'idle' && error && error.textContent.trim() ? 'rejected' : false;
}"""


@dataclass
class BrowserSession:
    """One Chromium launch shared by every case; `launches` goes into the report (it must stay 1)."""

    executable: Path
    gpu: bool
    headed: bool
    f16_toggle: bool = True  # Linux + NVIDIA: the Dawn toggle that exposes shader-f16 (see builder.site.chrome)
    context: Any = None
    version: str = ""
    adapter: dict[str, Any] = field(default_factory=dict)
    launches: int = 0
    log_file: Path | None = None  # Chromium's own log while it runs (launched() keeps its text in `log`)
    log: str = ""
    exited: bool = False  # the browser went away before regress closed it

    def read_log(self) -> str:
        """Chromium's log so far (the whole file: FATAL lines come last, and it stays a few MB at most)."""
        if self.log_file is not None and self.log_file.is_file():
            self.log = self.log_file.read_text(encoding="utf-8", errors="replace")
        return self.log

    def exit_reason(self) -> str:
        return f"Chromium exited during the run: {exit_cause(self.read_log())}"

    def describe(self) -> dict[str, Any]:
        return {
            "executable": str(self.executable),
            "version": self.version,
            "launches": self.launches,
            "mode": "gpu" if self.gpu else "software",
            "headed": self.headed,
        }


@contextlib.contextmanager
def launched(session: BrowserSession, *, log: Log, profile: Path | None = None) -> Iterator[BrowserSession]:
    """Start Chromium through Playwright with a persistent profile (OPFS needs a real profile): `profile`, or a
    throw-away one. A kept profile keeps the model store, so the next run downloads nothing."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    if (fonts := font_problem()) is not None:
        log(f"warning: {fonts}")
    with sync_playwright() as playwright, contextlib.ExitStack() as stack:
        if profile is None:
            profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="klein-regress-profile-")))
        session.log_file = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="klein-regress-log-"))) / "chromium.log"
        )
        stack.callback(session.read_log)  # runs before the folder goes, after the browser closed
        try:
            session.context = launch_persistent(
                playwright,
                Path(profile),
                executable=session.executable,
                headed=session.headed,
                gpu=session.gpu,
                f16_toggle=session.f16_toggle,
                log_file=session.log_file,
            )
        except PlaywrightError as exc:
            raise RegressionError(f"could not launch {session.executable} as Chromium: {first_line(exc)}") from exc
        session.launches += 1
        closing = False

        def on_close(_context: Any) -> None:
            session.exited = not closing

        session.context.on("close", on_close)
        browser = session.context.browser
        session.version = browser.version if browser is not None else session.version
        log(f"launched {session.executable} {session.version} ({'GPU' if session.gpu else 'SwiftShader'})")
        try:
            yield session
        finally:
            closing = True
            with contextlib.suppress(PlaywrightError):
                session.context.close()


def probe_adapter(session: BrowserSession, base_url: str) -> dict[str, Any]:
    """The page's WebGPU adapter (vendor, architecture, limits), checked by `check_adapter`."""
    page = session.context.new_page()
    try:
        page.goto(base_url + "/", wait_until="load", timeout=UI_ACTION_TIMEOUT_MS)
        adapter: dict[str, Any] = page.evaluate(ADAPTER_PROBE_JS)
    finally:
        page.close()
    check_adapter(adapter, gpu=session.gpu, executable=session.executable)
    return adapter


def check_adapter(adapter: dict[str, Any], *, gpu: bool, executable: Path) -> None:
    """RegressionError with the fix when there is no adapter, or when --gpu got only a software one.

    Chromium silently falls back to SwiftShader when Vulkan is missing; a --gpu run on it would take
    hours and its timings would mean nothing, so that is a could-not-run, not a slow pass.
    """
    if "error" in adapter:
        fix = (
            "check chrome://gpu, install libvulkan1 and the GPU vendor's Vulkan driver, or use --software"
            if gpu
            else "this Chromium build may lack SwiftShader; try another --browser, or --gpu on a GPU machine"
        )
        raise RegressionError(f"no WebGPU adapter in {executable} ({adapter['error']}): {fix}.")
    software = adapter.get("isFallbackAdapter") or str(adapter.get("architecture", "")).lower() == "swiftshader"
    if gpu and software:
        raise RegressionError(
            f"--gpu, but {executable} only offers the software adapter ({adapter.get('vendor')} "
            f"{adapter.get('architecture')}): Chromium found no usable GPU through Vulkan. Check chrome://gpu, install "
            "libvulkan1 and the GPU vendor's Vulkan driver (ICD), or run with --software."
        )


class CaseCouldNotRun(Exception):
    """This case could not be carried out (timeout, the app's error); other cases still run."""


class AppReportedDegenerate(Exception):
    """The app ran and said its output is NaN or constant: a wrong result, so the case fails."""


def run_case(session: BrowserSession, case: Case, run: AppRun, *, base_url: str, timeout_s: float, log: Log) -> None:
    """Generate one image through the UI and fill `run` with the downloaded PNG, timings and errors.

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
        page.goto(base_url + case.page_path(), wait_until="load")
        page.wait_for_selector("#generate")
        if page.evaluate("() => document.body.dataset.state") == "error":  # e.g. the app's own WebGPU check failed
            run.app_error = app_error(page)[1]
            raise CaseCouldNotRun(f"the app showed an error before generating: {run.app_error}")
        fill_form(page, case)
        log(f"[{case.name}] generating {case.size}, {case.steps} steps, seed {case.seed} ...")
        page.click("#generate")
        state = wait_settled(page, case, timeout_s=timeout_s, log=log)
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
        run.png = Path(download.path()).read_bytes()
        run.image, run.png_text = imaging.read_png(Path(download.path()))
    except PlaywrightError as exc:
        if session.exited or (session.context.browser is not None and not session.context.browser.is_connected()):
            session.exited = True
            raise CaseCouldNotRun(session.exit_reason()) from exc
        if crashed:
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


# Sets a text control's value as typing would end (the native setter, then an `input` event).
FORM_WAIT_MS = 30_000  # the page decodes and checks each image file it is given
SET_VALUE_JS = """([selector, value]) => {
    const element = document.querySelector(selector);
    const setter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(element), 'value').set;
    setter.call(element, value);
    element.dispatchEvent(new Event('input', {bubbles: true}));
}"""


def fill_form(page: Any, case: Case) -> None:
    """Type the case's prompt, seed, steps and size into the form, as a user would."""
    page.fill("#prompt", case.prompt)
    if page.input_value("#prompt") != case.prompt:
        # Seen in headless Chromium on a GPU machine: fill() on the prompt of a page that has made an image
        # returned without changing it. The image would then be made for the previous prompt.
        page.evaluate(SET_VALUE_JS, ["#prompt", case.prompt])
        if page.input_value("#prompt") != case.prompt:
            raise RegressionError(f"could not enter the prompt {case.prompt!r} into the form")
    _set_field(page, "#seed", str(case.seed))
    _set_field(page, "#steps", str(case.steps))
    fill_images(page, case)
    if case.mode == "inpaint":
        return  # inpainting's size is the image's: the form locks it
    if case.mode == "edit":
        if case.size == _shown_size(page):
            return  # "match the first image" already set it
        if page.is_checked("#match-size"):
            page.uncheck("#match-size")
    presets = page.eval_on_selector_all("#size option", "options => options.map(o => o.value)")
    if case.size in presets:
        page.select_option("#size", case.size)
    else:
        page.select_option("#size", "custom")
        page.fill("#width", str(case.width))
        page.fill("#height", str(case.height))


# True once the page has read what it was given (`what`: the image to inpaint shown, the mask file named, `arg`
# references listed), or once it shows an error (it refused a file).
READ_OR_REFUSED_JS = """([what, arg]) => {
    const error = document.querySelector('#error');
    if (error && error.getClientRects().length > 0 && error.textContent.trim() !== '') return true;
    if (what === 'source') return !document.querySelector('#painter').hidden;
    if (what === 'mask') return document.querySelector('#mask-info').textContent.includes(arg);
    return document.querySelectorAll('#references li').length === arg;
}"""


def _wait_read(page: Any, what: str, arg: object = None) -> None:
    """Wait until the page has read the files it was given (READ_OR_REFUSED_JS), or has refused one: then the
    case could not run, in the page's own words, at once (not after FORM_WAIT_MS); other cases still run."""
    page.wait_for_function(READ_OR_REFUSED_JS, arg=[what, arg], timeout=FORM_WAIT_MS)
    if page.query_selector("#error") is not None and page.is_visible("#error"):
        raise CaseCouldNotRun(f"the page refused the case's images: {app_error(page)[1]}")


def fill_images(page: Any, case: Case) -> None:
    """Choose the case's mode and give the form its images as a user would: the file pickers' inputs, then wait
    until the page has read them (each reference listed, the image to inpaint shown with its mask)."""
    if case.mode == "text":
        if page.query_selector("#mode-text") is not None:
            _choose_mode(page, "text")  # after an editing case of the same run
        return
    _choose_mode(page, case.mode)
    references = list(case.images[1:] if case.mode == "inpaint" else case.images)
    if case.mode == "inpaint":
        page.set_input_files("#source-file", str(case.images[0]))
        _wait_read(page, "source")
        assert case.mask is not None
        page.set_input_files("#mask-file", str(case.mask))
        # The painter names a loaded mask file ("Mask: NAME, sent as given") once it has read it.
        _wait_read(page, "mask", case.mask.name)
        page.evaluate(SET_VALUE_JS, ["#strength", repr(case.strength_or_default)])
        if float(page.input_value("#strength")) != case.strength_or_default:
            raise RegressionError(
                f"the strength slider does not take {case.strength_or_default} (its step is "
                f"{page.get_attribute('#strength', 'step')}); use a multiple of it"
            )
    if references:
        page.set_input_files("#reference-files", [str(path) for path in references])
        _wait_read(page, "references", len(references))


def _choose_mode(page: Any, mode: str) -> None:
    """Click the mode's label, as a person does (the radio itself is drawn by its label)."""
    page.click(f"label[for=mode-{mode}]")
    if not page.is_checked(f"#mode-{mode}"):
        raise RegressionError(f"the page did not switch to the {mode} mode")


def _shown_size(page: Any) -> str:
    """The output size the form holds now, as WIDTHxHEIGHT."""
    value = page.input_value("#size")
    return value if value != "custom" else f"{page.input_value('#width')}x{page.input_value('#height')}"


def _set_field(page: Any, selector: str, value: str) -> None:
    """Type into an input/textarea, or choose in a select, whichever the UI uses for this control."""
    tag = page.eval_on_selector(selector, "el => el.tagName")
    if tag == "SELECT":
        page.select_option(selector, value)
    else:
        page.fill(selector, value)


def wait_settled(page: Any, case: Case, *, timeout_s: float, log: Log) -> str:
    """Wait for body[data-state] to settle (see STATE_SETTLED_JS), logging the app's #status as it changes."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout_s
    last_status = None
    while True:
        try:
            return str(page.wait_for_function(STATE_SETTLED_JS, timeout=STATUS_POLL_MS).json_value())
        except PlaywrightTimeout:
            pass
        status = (page.text_content("#status") or "").strip()
        if status and status != last_status:
            log(f"[{case.name}] {status}")
            last_status = status
        if time.monotonic() > deadline:
            raise CaseCouldNotRun(
                f"timed out after {timeout_s:g} s waiting for the image "
                f"(last status: {last_status!r}); "
                "raise --timeout for slow (software) adapters"
            )


def read_json_attribute(page: Any, selector: str) -> Any:
    """The parsed `data-json` of `selector` (None when absent; {"unparsed": text} when it is not JSON)."""
    raw = page.get_attribute(selector, "data-json") if page.query_selector(selector) else None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"unparsed": raw}


def app_error(page: Any) -> tuple[str, str]:
    """(code, message) of the app's #error element."""
    element = page.query_selector("#error")
    if element is None:
        return "", "the app went to state `error` without an #error message"
    code = element.get_attribute("data-code") or ""
    return code, " ".join((element.inner_text() or "").split()) or "the app showed an empty #error"
