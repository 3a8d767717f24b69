"""`klein-web regress`: drive the built app in Chromium like a user and compare its PNG with a reference.

One run, in numbered stages (`main`):

    1. Check inputs: the cases (one from the flags, or several from a JSON/TOML file), the model folder,
       each reference PNG and the browser, before anything slow starts.
    2. Read each --reference PNG.
    3. Build dist/ if stale and serve it plus the model folder on a free loopback port (in a thread).
    4. Launch Chromium once (persistent profile in a temp dir: the model store needs real storage) and
       check that the page gets a WebGPU adapter.
    5. For each case: type the prompt, set seed/size/steps, click Generate, wait for the app's state,
       click Download PNG and take the real browser download. No test hooks: only the UI's element ids.
       A --reference-from-cpu reference is made now, with the graph variants the app reports it ran
       (a repo holding q4 and fp32 graphs is then compared like with like).
    6. Compare with the reference, write the report folder, print a one-screen summary.

Verdicts and exit codes: 0 pass (PSNR >= --psnr-min, same size), 1 fail (lower PSNR, another size, or the
app itself reported degenerate output: NaN or a constant image is a wrong result, not a broken
environment), 2 could not run (no model folder, no browser, no reference, no WebGPU adapter or --gpu with
only the SwiftShader one, timeout, any other error the app showed). Could-not-run conditions raise
RegressionError with a one-line reason (after the report is written, when a case got that far); cli.py
prints it as "could not run: ...".
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder import DEFAULT_DIST, DEFAULT_MODEL_BASE, imaging, manifest
from builder.errors import InputError, KleinWebError, RegressionError
from builder.regress_report import (
    COULD_NOT_RUN,
    FAIL,
    REPORT_NAME,
    AppRun,
    CaseReport,
    Reference,
    compare,
    summary_lines,
    worst_exit_code,
    write_case_report,
    write_run_report,
)

Log = Callable[[str], None]

CASE_KEYS = frozenset({"name", "prompt", "seed", "size", "steps", "reference", "reference_from_cpu", "psnr_min",
                       "precision"})
CASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_SEED = 2**32  # the app and torch.Generator.manual_seed take seeds in [0, 2^32)
MAX_STEPS = 100

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


@dataclass(frozen=True)
class Case:
    """One generation to check: its parameters and where its reference comes from."""

    name: str
    prompt: str
    seed: int
    width: int
    height: int
    steps: int
    psnr_min: float
    reference_png: Path | None = None
    reference_from_cpu: bool = False
    # Force the app's graph variant (its `?precision=`); None: the app picks the best its adapter runs.
    precision: str | None = None

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    def parameters(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "seed": self.seed, "width": self.width, "height": self.height,
                "steps": self.steps, "psnr_min": self.psnr_min, "precision": self.precision}

    def page_path(self) -> str:
        return f"/?precision={self.precision}" if self.precision else "/"


# --- 1. Check inputs -----------------------------------------------------------------------------------


def parse_size(text: str, *, where: str = "--size") -> tuple[int, int]:
    """`64x48` -> (64, 48) as (width, height); both positive multiples of 16, like the app requires."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not match:
        raise InputError(f"{where} must look like 512x512 (WIDTHxHEIGHT), got {text!r}.")
    width, height = int(match.group(1)), int(match.group(2))
    if width <= 0 or height <= 0 or width % 16 or height % 16:
        raise InputError(
            f"{where} {text}: width and height must be positive multiples of 16 (the VAE works on 16-pixel "
            f"patches); try {max(16, width // 16 * 16)}x{max(16, height // 16 * 16)}."
        )
    return width, height


def _check_case(case: Case, *, where: str) -> Case:
    if not case.prompt or not case.prompt.strip():
        raise InputError(f"{where}: the prompt is empty; give --prompt TEXT (or `prompt` in the cases file).")
    if not 0 <= case.seed < MAX_SEED:
        raise InputError(f"{where}: seed {case.seed} is outside [0, 2^32); pick a seed like 42.")
    if not 1 <= case.steps <= MAX_STEPS:
        raise InputError(f"{where}: steps {case.steps} is outside 1..{MAX_STEPS}; klein is distilled for 4.")
    if case.precision is not None and case.precision not in manifest.VARIANTS:
        raise InputError(f"{where}: precision {case.precision!r} is not one of {', '.join(manifest.VARIANTS)}.")
    if not case.psnr_min > 0:
        raise InputError(f"{where}: psnr_min {case.psnr_min} must be a positive number of dB, e.g. 40.")
    if case.reference_png is not None and case.reference_from_cpu:
        raise InputError(
            f"{where}: give either a reference PNG or reference-from-cpu, not both "
            f"(got {case.reference_png} and reference-from-cpu)."
        )
    if case.reference_png is None and not case.reference_from_cpu:
        raise RegressionError(
            f"{where}: no reference image. Pass --reference PNG (e.g. made by `klein-web reference`) "
            "or --reference-from-cpu."
        )
    if case.reference_png is not None and not case.reference_png.is_file():
        raise RegressionError(
            f"{where}: reference image {case.reference_png} does not exist. Make it with `klein-web reference "
            "MODEL_DIR --prompt ... --out PNG`, or use --reference-from-cpu."
        )
    return case


def _typed(entry: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = entry[key]
    # bool is an int subclass: `seed = true` must not pass as seed 1.
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"{where}: `{key}` must be {expected}, got {value!r}.")
    return value


def load_cases(path: Path, *, defaults: Case) -> list[Case]:
    """Cases from a JSON or TOML file; every field a case leaves out comes from `defaults` (the flags).

    JSON: `{"cases": [{...}, ...]}` or a bare list. TOML: `[[cases]]` tables. Fields: name, prompt, seed,
    size ("WxH"), steps, reference (PNG path, relative to the file), reference_from_cpu, psnr_min.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--cases {path}: no such file.")
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise InputError(f"--cases {path} is not valid {kind}: {exc}.")
    entries = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise InputError(f"--cases {path}: expected a non-empty list of cases under `cases` (JSON or [[cases]] TOML).")

    cases: list[Case] = []
    for index, entry in enumerate(entries, start=1):
        where = f"--cases {path}, case {index}"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: expected a table/object of fields, got {entry!r}.")
        unknown = sorted(set(entry) - CASE_KEYS)
        if unknown:
            raise InputError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(CASE_KEYS))}.")
        case = replace(defaults)
        if "size" in entry:
            width, height = parse_size(_typed(entry, "size", str, where), where=f"{where}: `size`")
            case = replace(case, width=width, height=height)
        if "prompt" in entry:
            case = replace(case, prompt=_typed(entry, "prompt", str, where))
        if "seed" in entry:
            case = replace(case, seed=_typed(entry, "seed", int, where))
        if "steps" in entry:
            case = replace(case, steps=_typed(entry, "steps", int, where))
        if "psnr_min" in entry:
            case = replace(case, psnr_min=float(_typed(entry, "psnr_min", (int, float), where)))
        if "precision" in entry:
            case = replace(case, precision=_typed(entry, "precision", str, where))
        # A case that names its own reference replaces the flags' choice rather than combining with it.
        if "reference" in entry:
            reference = Path(_typed(entry, "reference", str, where))
            case = replace(case, reference_png=reference if reference.is_absolute() else path.parent / reference,
                           reference_from_cpu=False)
        if "reference_from_cpu" in entry:
            from_cpu = _typed(entry, "reference_from_cpu", bool, where)
            case = replace(case, reference_from_cpu=from_cpu, reference_png=None if from_cpu else case.reference_png)
        name = _typed(entry, "name", str, where) if "name" in entry else f"{index:02d}-seed{case.seed}-{case.size}"
        if not CASE_NAME.match(name):
            raise InputError(f"{where}: name {name!r} must be 1-64 letters, digits, '.', '_' or '-' (it names a folder).")
        cases.append(_check_case(replace(case, name=name), where=f"{where} ({name})"))

    names = [case.name for case in cases]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InputError(f"--cases {path}: case names must be unique (each gets a report folder); repeated: {duplicates}.")
    return cases


def _cases_from_options(*, prompt: str | None, seed: int, size: str, steps: int, cases_file: Path | None,
                        reference_png: Path | None, reference_from_cpu: bool, psnr_min: float,
                        precision: str | None) -> list[Case]:
    width, height = parse_size(size)
    flags = Case(name="case", prompt=prompt or "", seed=seed, width=width, height=height, steps=steps,
                 psnr_min=psnr_min, reference_png=Path(reference_png) if reference_png else None,
                 reference_from_cpu=reference_from_cpu, precision=precision)
    if cases_file is not None:
        return load_cases(Path(cases_file), defaults=flags)
    if prompt is None:
        raise InputError("--prompt is required (the text to generate), or pass --cases FILE with several cases.")
    return [_check_case(flags, where="regress")]


def _check_models(models_dir: Path | None) -> Path:
    if models_dir is None:
        raise RegressionError("--models DIR is required: the model folder to serve (e.g. `klein-web fetch --dir DIR`).")
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise RegressionError(
            f"--models {models_dir}: no such folder. Download one with `klein-web fetch --dir {models_dir}` "
            "or make a test model with `klein-web make-tiny`."
        )
    # load/verify name the missing manifest or file (or the wrong size) and how to repair the folder.
    manifest.verify(models_dir, manifest.load(models_dir))
    return models_dir


def check_browser(executable: Path) -> str:
    """`--version` of the browser ("Chromium 156.0..."), so a wrong --browser fails before anything slow."""
    if sys.platform == "win32":
        return ""  # chrome.exe --version opens a window instead of printing; Playwright's launch will tell.
    try:
        result = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=60,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegressionError(f"--browser {executable} cannot be run ({_first_line(exc)}).")
    lines = (result.stdout.strip() or result.stderr.strip()).splitlines()
    version = lines[0].strip() if lines else ""
    if not re.search(r"Chromium|Chrome|Edge", version):
        raise RegressionError(
            f"--browser {executable} is not a Chromium (`--version` says {version!r}); pass Chromium, Chrome or "
            "Edge: WebGPU compute with these flags is Chromium-only."
        )
    return version


# --- 2. References ---------------------------------------------------------------------------------------


def _read_reference(png: Path) -> Reference:
    image, _text = imaging.read_png(png)
    return Reference(source=str(png), image=image, png=png.read_bytes())


def _cpu_reference(case: Case, *, models_dir: Path, app_graphs: Any, log: Log) -> Reference:
    """builder.reference for the case's parameters, pinned to the graph variants the app ran (when it said)."""
    from builder import reference  # onnxruntime + tokenizers: only loaded when a CPU reference is asked for

    variants = {component: graph["variant"] for component, graph in (app_graphs or {}).items()
                if component in manifest.COMPONENTS and isinstance(graph, dict) and isinstance(graph.get("variant"), str)}
    log(f"[{case.name}] reference: running the pipeline on onnxruntime CPU "
        f"({', '.join(f'{c} {v}' for c, v in variants.items()) or 'default variants'}) ...")
    started = time.perf_counter()
    result = reference.generate(models_dir, prompt=case.prompt, seed=case.seed, width=case.width,
                                height=case.height, steps=case.steps, log=log, variants=variants or None)
    return Reference(source="cpu", image=result.image, seconds=time.perf_counter() - started,
                     variants=dict(result.variants))


# --- 3. Serving ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(dist_dir: Path, models_dir: Path, *, log: Log,
            middleware: Callable[[Any], Any] | None = None) -> Iterator[str]:
    """The real server app (builder.server) under uvicorn in a thread, on a free loopback port; yields its URL.

    `middleware` wraps the ASGI app (the browser benchmark counts the model bytes sent through it)."""
    import uvicorn

    from builder import server

    app = server.create_app(dist_dir, models_dir=models_dir)
    if middleware is not None:
        app = middleware(app)
    # Port 0 and handing the bound socket to uvicorn: no pick-a-free-port-then-bind race.
    sock = server.bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                       timeout_graceful_shutdown=3))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, name="klein-regress-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RegressionError(f"the app server did not start on 127.0.0.1:{port} within 30 s.")
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    log(f"serving {dist_dir} and models {models_dir} at {url}")
    try:
        yield url
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        sock.close()


# --- 4. Browser ------------------------------------------------------------------------------------------


@dataclass
class BrowserSession:
    """One Chromium launch shared by every case; `launches` goes into the report (it must stay 1)."""

    executable: Path
    gpu: bool
    headed: bool
    f16_toggle: bool = True  # Linux + NVIDIA: the Dawn toggle that exposes shader-f16 (see builder.browser)
    context: Any = None
    version: str = ""
    adapter: dict[str, Any] = field(default_factory=dict)
    launches: int = 0

    def describe(self) -> dict[str, Any]:
        return {"executable": str(self.executable), "version": self.version, "launches": self.launches,
                "mode": "gpu" if self.gpu else "software", "headed": self.headed}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def launched(session: BrowserSession, *, log: Log, profile: Path | None = None) -> Iterator[BrowserSession]:
    """Start Chromium through Playwright with a persistent profile (OPFS needs a real profile): `profile`, or a
    throw-away one. A kept profile keeps the model store, so the next run downloads nothing."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    from builder.browser import launch_persistent

    with sync_playwright() as playwright, contextlib.ExitStack() as stack:
        if profile is None:
            profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="klein-regress-profile-")))
        try:
            session.context = launch_persistent(playwright, Path(profile), executable=session.executable,
                                                headed=session.headed, gpu=session.gpu,
                                                f16_toggle=session.f16_toggle)
        except PlaywrightError as exc:
            raise RegressionError(f"could not launch {session.executable} as Chromium: {_first_line(exc)}")
        session.launches += 1
        browser = session.context.browser
        session.version = browser.version if browser is not None else session.version
        log(f"launched {session.executable} {session.version} ({'GPU' if session.gpu else 'SwiftShader'})")
        try:
            yield session
        finally:
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
        fix = ("check chrome://gpu, install libvulkan1 and the GPU vendor's Vulkan driver, or use --software"
               if gpu else "this Chromium build may lack SwiftShader; try another --browser, or --gpu on a GPU machine")
        raise RegressionError(f"no WebGPU adapter in {executable} ({adapter['error']}): {fix}.")
    software = adapter.get("isFallbackAdapter") or str(adapter.get("architecture", "")).lower() == "swiftshader"
    if gpu and software:
        raise RegressionError(
            f"--gpu, but {executable} only offers the software adapter ({adapter.get('vendor')} "
            f"{adapter.get('architecture')}): Chromium found no usable GPU through Vulkan. Check chrome://gpu, install "
            "libvulkan1 and the GPU vendor's Vulkan driver (ICD), or run with --software."
        )


# --- 5. Driving the UI -----------------------------------------------------------------------------------


class CaseCouldNotRun(Exception):
    """This case could not be carried out (timeout, the app's error); other cases still run."""


class AppReportedDegenerate(Exception):
    """The app ran and said its output is NaN or constant: a wrong result, so the case fails."""


def _set_field(page: Any, selector: str, value: str) -> None:
    """Type into an input/textarea, or choose in a select, whichever the UI uses for this control."""
    tag = page.eval_on_selector(selector, "el => el.tagName")
    if tag == "SELECT":
        page.select_option(selector, value)
    else:
        page.fill(selector, value)


def _fill_form(page: Any, case: Case) -> None:
    page.fill("#prompt", case.prompt)
    _set_field(page, "#seed", str(case.seed))
    _set_field(page, "#steps", str(case.steps))
    presets = page.eval_on_selector_all("#size option", "options => options.map(o => o.value)")
    if case.size in presets:
        page.select_option("#size", case.size)
    else:
        page.select_option("#size", "custom")
        page.fill("#width", str(case.width))
        page.fill("#height", str(case.height))


def _wait_settled(page: Any, case: Case, *, timeout_s: float, log: Log) -> str:
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
            raise CaseCouldNotRun(f"timed out after {timeout_s:g} s waiting for the image (last status: {last_status!r}); "
                                  "raise --timeout for slow (software) adapters")


def _read_json_attribute(page: Any, selector: str) -> Any:
    raw = page.get_attribute(selector, "data-json") if page.query_selector(selector) else None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"unparsed": raw}


def _app_error(page: Any) -> tuple[str, str]:
    element = page.query_selector("#error")
    if element is None:
        return "", "the app went to state `error` without an #error message"
    code = element.get_attribute("data-code") or ""
    return code, " ".join((element.inner_text() or "").split()) or "the app showed an empty #error"


def run_case(session: BrowserSession, case: Case, run: AppRun, *, base_url: str, timeout_s: float, log: Log) -> None:
    """Generate one image through the UI and fill `run` with the downloaded PNG, timings and errors.

    Raises CaseCouldNotRun or AppReportedDegenerate; `run` keeps what was collected up to that point.
    """
    from playwright.sync_api import Error as PlaywrightError

    page = session.context.new_page()
    page.set_default_timeout(UI_ACTION_TIMEOUT_MS)
    page.on("console", lambda message: run.console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: run.page_errors.append(str(error)))
    started = time.perf_counter()
    try:
        page.goto(base_url + case.page_path(), wait_until="load")
        page.wait_for_selector("#generate")
        if page.evaluate("document.body.dataset.state") == "error":  # e.g. the app's own WebGPU check failed
            run.app_error = _app_error(page)[1]
            raise CaseCouldNotRun(f"the app showed an error before generating: {run.app_error}")
        _fill_form(page, case)
        log(f"[{case.name}] generating {case.size}, {case.steps} steps, seed {case.seed} ...")
        page.click("#generate")
        state = _wait_settled(page, case, timeout_s=timeout_s, log=log)
        result_info = _read_json_attribute(page, "#timings")
        if isinstance(result_info, dict):
            # {timings: per-stage ms, graphs: variant + EP per component, notes, prompt: token counts}
            run.timings = result_info.pop("timings", None)
            run.result_info = result_info
        run.capabilities = (_read_json_attribute(page, "#capabilities")
                            or {"text": " ".join((page.text_content("#capabilities") or "").split())})
        if state == "rejected":
            run.app_error = _app_error(page)[1]
            raise CaseCouldNotRun(f"the app rejected the settings: {run.app_error}")
        if state == "error":
            code, message = _app_error(page)
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
        raise CaseCouldNotRun(f"driving the page failed: {_first_line(exc)}") from exc
    finally:
        run.seconds = time.perf_counter() - started
        with contextlib.suppress(PlaywrightError):
            page.close()


# --- 6. Entry point --------------------------------------------------------------------------------------


def site(dist_dir: Path | None, *, log: Log) -> Path:
    """The built app to serve: `dist_dir` as it is, or dist/ built if stale (keeping the model base it was built
    with: the server points the app at /models/ anyway)."""
    from builder import bundle

    if dist_dir is not None:
        if not (Path(dist_dir) / "index.html").is_file():
            raise RegressionError(f"--dist {dist_dir} holds no built app (no index.html); run `klein-web build --out "
                                  f"{dist_dir}` first, or leave --dist out to build dist/.")
        return Path(dist_dir)
    record = bundle.read_record(DEFAULT_DIST) or {}
    bundle.build(DEFAULT_DIST, model_base=str(record.get("model_base") or DEFAULT_MODEL_BASE), log=log)
    return DEFAULT_DIST


def _run_one(session: BrowserSession, case: Case, reference: Reference | None, *, models_dir: Path, base_url: str,
             timeout_s: float, log: Log) -> CaseReport:
    """One case, start to verdict; a problem of this case never stops the others."""
    report = CaseReport(name=case.name, parameters=case.parameters(), reference=reference)
    report.app = run = AppRun()
    try:
        run_case(session, case, run, base_url=base_url, timeout_s=timeout_s, log=log)
        assert run.image is not None  # run_case either downloaded an image or raised
        if report.reference is None:
            report.reference = _cpu_reference(case, models_dir=models_dir, app_graphs=run.result_info.get("graphs"),
                                              log=log)
        report.comparison = compare(run.image, report.reference.image, psnr_min=case.psnr_min)
        report.verdict, report.reason = report.comparison.verdict, report.comparison.reason
    except AppReportedDegenerate as exc:
        report.verdict, report.reason = FAIL, f"the app reported degenerate output: {exc}"
    except (CaseCouldNotRun, KleinWebError) as exc:
        report.verdict, report.reason = COULD_NOT_RUN, str(exc)
    return report


def main(*, log: Log, models_dir: Path | None, prompt: str | None, seed: int, size: str, steps: int,
         cases_file: Path | None, reference_png: Path | None, reference_from_cpu: bool, browser_path: Path | None,
         headed: bool, gpu: bool, report_dir: Path, psnr_min: float, timeout_s: float,
         dist_dir: Path | None = None, profile: Path | None = None, precision: str | None = None,
         f16_toggle: bool = True) -> int:
    """Run every case in one browser launch; return the worst exit code (0 pass, 1 fail, 2 could not run).

    `dist_dir`: serve this already-built site as it is (a machine without node); default: build dist/ if stale.
    `profile`: the browser profile to use and keep (its model store survives, so a re-run downloads nothing).
    """
    from builder.browser import find_chromium

    # 1. Check inputs: everything that can be wrong before a browser starts.
    if not timeout_s > 0:
        raise InputError(f"--timeout {timeout_s}: must be a positive number of seconds, e.g. 600.")
    cases = _cases_from_options(prompt=prompt, seed=seed, size=size, steps=steps, cases_file=cases_file,
                                reference_png=reference_png, reference_from_cpu=reference_from_cpu, psnr_min=psnr_min,
                                precision=precision)
    models_dir = _check_models(models_dir)
    session = BrowserSession(executable=find_chromium(Path(browser_path) if browser_path else None), gpu=gpu,
                             headed=headed, f16_toggle=f16_toggle)
    session.version = check_browser(session.executable)
    report_dir = Path(report_dir)

    # 2. Reference files, before the browser, so an unreadable PNG stops the run early.
    references = {case.name: _read_reference(case.reference_png) for case in cases if case.reference_png is not None}

    # 3. + 4. + 5. Serve, launch once, run every case in the same browser.
    dist_dir = site(dist_dir, log=log)
    reports: list[CaseReport] = []
    with serving(dist_dir, models_dir, log=log) as base_url, launched(session, log=log, profile=profile):
        session.adapter = probe_adapter(session, base_url)
        for case in cases:
            reports.append(_run_one(session, case, references.get(case.name), models_dir=models_dir,
                                    base_url=base_url, timeout_s=timeout_s, log=log))

    # 6. Report and verdict.
    single = len(cases) == 1
    browser = session.describe()
    if not single:
        (report_dir / REPORT_NAME).unlink(missing_ok=True)  # the run's report.json is written after every case's
    for report in reports:
        write_case_report(report_dir if single else report_dir / report.name, report, browser=browser,
                          adapter=session.adapter)
    if not single:
        write_run_report(report_dir, reports, browser=browser, adapter=session.adapter)
    for line in summary_lines(reports, browser=browser, adapter=session.adapter, report_dir=report_dir):
        log(line)
    code = worst_exit_code(reports)
    if code == COULD_NOT_RUN.exit_code:
        failed = [r for r in reports if r.verdict is COULD_NOT_RUN]
        prefix = "" if single else f"{len(failed)} of {len(reports)} cases; {failed[0].name}: "
        raise RegressionError(f"{prefix}{failed[0].reason} (report: {report_dir})")
    return code
