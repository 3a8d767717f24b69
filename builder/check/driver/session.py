"""One Chromium launch for a run: the session every page of it opens in, and the WebGPU adapter it offers."""

from __future__ import annotations

import contextlib
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.check.driver.chromium import (
    check_browser,
    exit_cause,
    find_chromium,
    first_line,
    font_problem,
    launch_persistent,
)
from builder.errors import RegressionError

Log = Callable[[str], None]

# How long a single UI action (fill, click, the download) may take; generation has its own --timeout.
UI_ACTION_TIMEOUT_MS = 60_000


# Evaluated in the page before the first case: the standard WebGPU API, not an app hook.
ADAPTER_PROBE_JS = """async () => {
    // WebGPU and the model store exist only in a secure context: https, or http on localhost.
    if (!window.isSecureContext) return {error: `${location.origin} is not a secure context`, insecure: true};
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


@dataclass
class BrowserSession:
    """One Chromium, launched here (`executable`) or reached at a Playwright browser server (`endpoint`), shared by
    every case; `launches` goes into the report (it must stay 1)."""

    executable: Path | None
    gpu: bool
    headed: bool
    endpoint: str | None = None  # ws://... of a browser server (`connected`); None: launched here
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

    @property
    def name(self) -> str:
        """The browser in a sentence: its path, or the browser server's address (without its secret path)."""
        return str(self.executable) if self.endpoint is None else f"the browser at {public_endpoint(self.endpoint)}"

    def exit_reason(self) -> str:
        if self.endpoint is not None:
            return (
                f"{self.name} went away during the run (its log is on its own machine, in the browser server's output)"
            )
        return f"Chromium exited during the run: {exit_cause(self.read_log())}"

    def describe(self) -> dict[str, Any]:
        where = (
            {"executable": str(self.executable)}
            if self.endpoint is None
            else {"remote": public_endpoint(self.endpoint)}
        )
        return {
            **where,
            "version": self.version,
            "launches": self.launches,
            "mode": "gpu" if self.gpu else "software",
            "headed": self.headed,
        }


def public_endpoint(endpoint: str) -> str:
    """A browser server's ws:// address without its path, which works as the server's password."""
    parts = urllib.parse.urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}/…" if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}"


def local_session(
    browser_path: Path | None, *, gpu: bool, headed: bool = False, f16_toggle: bool = True
) -> BrowserSession:
    """A Chromium of this machine (--browser, else find_chromium's) checked to be one, before anything slow starts."""
    executable = find_chromium(browser_path)
    return BrowserSession(
        executable=executable, gpu=gpu, headed=headed, f16_toggle=f16_toggle, version=check_browser(executable)
    )


@contextlib.contextmanager
def launched(
    session: BrowserSession, *, log: Log, profile: Path | None = None, service_workers: str = "allow"
) -> Iterator[BrowserSession]:
    """Start Chromium through Playwright with a persistent profile (OPFS needs a real profile): `profile`, or a
    throw-away one. A kept profile keeps the model store, so the next run downloads nothing. `service_workers`
    "block" keeps the app's service worker out, for a run whose request routing must see every request."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    assert session.executable is not None, "a browser server's session is `connected`, not launched"
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
                service_workers=service_workers,
            )
        except PlaywrightError as exc:
            raise RegressionError(f"could not launch {session.executable} as Chromium: {first_line(exc)}") from exc
        session.launches += 1
        browser = session.context.browser
        session.version = browser.version if browser is not None else session.version
        log(f"launched {session.executable} {session.version} ({'GPU' if session.gpu else 'SwiftShader'})")
        with _watched(session):
            yield session


# How long attaching to a browser server may take (a grid may first have to start a browser).
CONNECT_TIMEOUT_MS = 120_000


@contextlib.contextmanager
def connected(
    session: BrowserSession, *, log: Log, viewport: tuple[int, int] = (1280, 720)
) -> Iterator[BrowserSession]:
    """Attach to the Playwright browser server at `session.endpoint` and open a context in it.

    A browser server only makes new contexts: in memory, like a private window, and empty. So the model store
    starts empty on every run and lives in memory (its quota is the private one), and the browser's flags and
    log are the server's: what differs from `launched` is in docs/regress.md."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    assert session.endpoint is not None
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.connect(session.endpoint, timeout=CONNECT_TIMEOUT_MS)
        except PlaywrightError as exc:
            raise RegressionError(
                f"--connect: could not attach to a Playwright browser server at "
                f"{public_endpoint(session.endpoint)} ({first_line(exc)}); start one there "
                "(docs/regress.md: `playwright launch-server`) and pass the ws:// address it "
                "printed."
            ) from exc
        try:
            session.context = browser.new_context(
                viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=True
            )
            session.launches += 1
            session.version = browser.version
            session.log = ""
            log(f"attached to {session.name}: Chromium {session.version}, a new in-memory context")
            with _watched(session):
                yield session
        finally:
            with contextlib.suppress(PlaywrightError):
                browser.close()  # for a connected browser: disconnect, the server's browser stays


@contextlib.contextmanager
def _watched(session: BrowserSession) -> Iterator[None]:
    """Marks `session.exited` when its context closes before the run closes it; closes it at the end."""
    from playwright.sync_api import Error as PlaywrightError

    closing = False

    def on_close(_context: Any) -> None:
        session.exited = not closing

    session.context.on("close", on_close)
    try:
        yield
    finally:
        closing = True
        with contextlib.suppress(PlaywrightError):
            session.context.close()


def probe_adapter(session: BrowserSession, app_url: str) -> dict[str, Any]:
    """The WebGPU adapter (vendor, architecture, limits) of the app's page at `app_url`, checked by `check_adapter`."""
    page = session.context.new_page()
    try:
        page.goto(app_url, wait_until="load", timeout=UI_ACTION_TIMEOUT_MS)
        adapter: dict[str, Any] = page.evaluate(ADAPTER_PROBE_JS)
    finally:
        page.close()
    check_adapter(adapter, gpu=session.gpu, executable=session.name)
    return adapter


def check_adapter(adapter: dict[str, Any], *, gpu: bool, executable: Path | str) -> None:
    """RegressionError with the fix when there is no adapter, or when --gpu got only a software one.

    Chromium silently falls back to SwiftShader when Vulkan is missing; a --gpu run on it would take
    hours and its timings would mean nothing, so that is a could-not-run, not a slow pass.
    """
    if adapter.get("insecure"):
        raise RegressionError(
            f"{executable} opened the app at {adapter['error']}, so it offers neither WebGPU nor the model store. "
            "Let the browser reach the app as http://localhost (e.g. a tunnel: `ssh -R PORT:localhost:PORT` and "
            "--advertise http://localhost:PORT), or over https, or start that browser with "
            "--unsafely-treat-insecure-origin-as-secure=ORIGIN (docs/regress.md)."
        )
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
