"""The page, end to end in headless Chromium (WebGPU on SwiftShader), driven only through its stable element ids.

One module-scoped server (the built app + the tiny fp32 model repo) and one persistent Chromium profile are shared;
`generated` runs one real generation through the UI (custom size 64x64, 4 steps) that several tests then inspect.
The page's CSP forbids eval, so every Playwright predicate below is a function, never a bare expression string.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import LiveServer, start_server  # tests/ is on sys.path (rootdir-relative conftest import)

from builder.check.driver.chromium import launch_persistent
from builder.pipeline import imaging, reference
from builder.site.chrome import QUIET_FLAGS

pytestmark = pytest.mark.browser

PROMPT = "a lighthouse on a cliff at dusk, oil painting"
SEED = 1234
# fp32 graphs on WebGPU vs onnxruntime on the CPU differ only by float rounding (see test_worker.py).
FP32_PSNR_MIN = 40.0
GENERATE_TIMEOUT_MS = 240_000
WEIGHT_REQUEST = re.compile(r"GET /models/\S+\.onnx(_data(_\d+)?)?\b")

# Installed before any page script: the long-task observer the task asks for, and a record of the message
# types the page posts to its worker (to prove a rejected form sends nothing). Both only observe.
OBSERVE_PAGE_JS = """
window.__longTasks = [];
new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__longTasks.push({start: entry.startTime, duration: entry.duration});
}).observe({type: 'longtask', buffered: true});
// Long animation frames name the scripts that ran in a slow frame: shown when the long-task check fails.
window.__longFrames = [];
new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
        window.__longFrames.push({start: entry.startTime, duration: entry.duration,
                                  scripts: entry.scripts.map((s) => [s.invoker, Math.round(s.duration)])});
    }
}).observe({type: 'long-animation-frame', buffered: true});
window.__posted = [];
const originalPost = Worker.prototype.postMessage;
Worker.prototype.postMessage = function (message, ...rest) {
    window.__posted.push(message && message.type);
    return originalPost.call(this, message, ...rest);
};
"""

STATE_IS = "(states) => states.includes(document.body.dataset.state)"
POLL_MS = 100


def state(page: Any) -> str:
    return str(page.evaluate("() => document.body.dataset.state"))


def wait_state(page: Any, *states: str, timeout_ms: float = GENERATE_TIMEOUT_MS) -> str:
    # Interval polling, not Playwright's default requestAnimationFrame polling: that forces a frame every
    # vsync on the page thread, and with the GPU busy those frames themselves show up as long tasks.
    page.wait_for_function(STATE_IS, arg=list(states), timeout=timeout_ms, polling=POLL_MS)
    return state(page)


def weight_requests(server: LiveServer) -> list[str]:
    return [match.group(0) for match in WEIGHT_REQUEST.finditer(server.output())]


def fill_custom_size(page: Any, width: int, height: int) -> None:
    page.select_option("#size", "custom")
    page.fill("#width", str(width))
    page.fill("#height", str(height))


def form_values(page: Any) -> dict[str, str]:
    return {name: page.input_value(f"#{name}") for name in ("prompt", "seed", "steps", "size", "width", "height")}


@pytest.fixture(scope="module")
def server(
    dist_dir: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    live = start_server(dist_dir, tmp_path_factory.mktemp("ui-server"), models=tiny_models["fp32"])
    yield live
    live.stop()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as instance:
        yield instance


@pytest.fixture(scope="module")
def context(playwright: Any, profile_dir: Path, chromium_path: Path) -> Iterator[Any]:
    ctx = launch_persistent(playwright, profile_dir, executable=chromium_path)
    ctx.add_init_script(OBSERVE_PAGE_JS)
    try:
        yield ctx
    finally:
        ctx.close()


def open_page(context: Any, url: str, *, viewport: tuple[int, int] = (1280, 720)) -> Any:
    page = context.new_page()
    page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
    page.on(
        "console",
        lambda message: (
            print(f"[console.{message.type}] {message.text}") if message.type in ("error", "warning") else None
        ),
    )
    page.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    page.goto(url)
    return page


@dataclass
class Generated:
    """One finished generation through the UI, kept open for the tests that inspect it."""

    page: Any
    clicked_at: float  # page clock (performance.now()) at the Generate click
    done_at: float


@pytest.fixture(scope="module")
def generated(context: Any, server: LiveServer) -> Iterator[Generated]:
    page = open_page(context, server.url("/"))
    # Start once the page has settled (probe answered), so page-load work is not counted as generation.
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    page.fill("#prompt", PROMPT)
    page.fill("#seed", str(SEED))
    page.fill("#steps", "4")
    fill_custom_size(page, 64, 64)
    clicked_at = float(page.evaluate("() => performance.now()"))
    page.click("#generate")
    final = wait_state(page, "done", "error")
    assert final == "done", f"generation ended in state {final}: {page.inner_text('#error')}"
    yield Generated(page, clicked_at, float(page.evaluate("() => performance.now()")))
    page.close()


def test_generation_shows_image_timings_and_tokens(generated: Generated, tiny_models: dict[str, Path]) -> None:
    page = generated.page
    assert page.is_visible("#result-image")
    size = page.evaluate(
        "() => { const i = document.querySelector('#result-image'); return [i.naturalWidth, i.naturalHeight]; }"
    )
    assert size == [64, 64]
    assert "Done" in page.inner_text("#status")
    assert page.is_disabled("#cancel") and page.is_enabled("#generate")
    assert "Local" in page.inner_text("#model-source"), "a served --models repo must be used and shown"

    report = json.loads(page.get_attribute("#timings", "data-json") or "null")
    # StageTimings (protocol 2) has every stage, `images` included (0 in text to image, and not shown).
    assert set(report["timings"]) == {
        "check",
        "download",
        "load",
        "encode",
        "images",
        "latents",
        "timesteps",
        "denoise",
        "decode",
        "total",
        "sessionRun",
    }
    assert report["timings"]["images"] == 0
    assert report["timings"]["total"] > 0
    assert report["graphs"]["transformer"]["ep"] == "webgpu"
    timings_text = page.inner_text("#timings")
    for label in (
        "Check inputs",
        "Download",
        "Prepare latents",
        "Prepare timesteps",
        "Denoise",
        "Decode",
        "Total",
        "Transformer",
        "fp32",
        "graph capture",
    ):
        assert label in timings_text
    assert "Encode images" not in timings_text, "text to image has no images stage"
    # A distilled model: one transformer call a step, counted; the form says why it has no guidance fields.
    assert report["transformerCalls"] == 4 and report["guidance"] is None
    assert re.search(r"transformer calls\s+4\b", timings_text), timings_text
    assert page.get_attribute("#guidance", "data-model") == "distilled" and page.is_hidden("#guidance-scale")
    assert "this model is distilled" in page.inner_text("#guidance-note")
    # The kernel paths: SwiftShader offers no subgroup-matrix, and the graphs' attention is never flash attention.
    assert "GPU device:" in timings_text and "matrix units off" in timings_text
    assert "no flash attention" in timings_text
    # The line says how a q4 transformer's MatMulNBits run on this device; this module's repository is the fp32 one.
    q4 = report["graphs"]["transformer"]["variant"] == "q4"
    dp4a = "subgroups" in report["device"]["features"]
    assert ("q4 weights as int8 dot products (DP4A kernels)" in timings_text) == (q4 and dp4a)
    assert ("q4 weights on fp32 kernels (no subgroups: no DP4A)" in timings_text) == (q4 and not dp4a)

    tokens = report["prompt"]["tokens"]
    assert tokens > 0 and report["prompt"]["droppedTokens"] == 0
    assert str(tokens) in page.inner_text("#token-info")


def test_download_png_carries_settings_and_the_image(
    generated: Generated, server: LiveServer, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    page = generated.page
    with page.expect_download() as info:
        page.click("#download")
    download = info.value
    assert download.suggested_filename == f"klein-{SEED}-64x64.png"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    pixels, text = imaging.read_png(saved)
    assert text["prompt"] == PROMPT
    assert text["seed"] == str(SEED)
    assert text["steps"] == "4"
    assert text["size"] == "64x64"
    assert text["model"] == server.url("/models/")
    # Edit and Inpaint add `mode`, `images`, `mask`, `strength`; text to image keeps exactly these.
    assert set(text) == {"prompt", "seed", "steps", "size", "model", "model-source", "graphs", "Software"}
    # The PNG path (canvas -> toBlob -> text chunks) must not alter pixels: compare with the CPU reference.
    expected = reference.generate(
        tiny_models["fp32"], prompt=PROMPT, seed=SEED, width=64, height=64, steps=4, log=lambda _msg: None
    ).image
    assert imaging.psnr(pixels, expected) >= FP32_PSNR_MIN


def test_history_entry_restores_settings_and_survives_reload(
    generated: Generated, context: Any, server: LiveServer
) -> None:
    page = generated.page
    items = page.locator("#history .history-item")
    assert items.count() == 1
    assert f"seed {SEED}" in items.first.inner_text()
    assert items.first.locator("img").evaluate("(img) => img.complete && img.naturalWidth > 0")

    page.fill("#prompt", "something else entirely")
    page.fill("#seed", "7")
    page.fill("#steps", "9")
    page.select_option("#size", "1024x1024")
    items.first.click()
    assert form_values(page) == {
        "prompt": PROMPT,
        "seed": str(SEED),
        "steps": "4",
        "size": "custom",
        "width": "64",
        "height": "64",
    }

    fresh = open_page(context, server.url("/"))
    try:
        fresh.wait_for_selector("#history .history-item")
        assert fresh.locator("#history .history-item").count() == 1, "history is stored in this browser"
    finally:
        fresh.close()


def test_page_thread_has_no_long_task_during_generation(generated: Generated) -> None:
    page = generated.page
    tasks = page.evaluate("() => window.__longTasks")
    during = [task for task in tasks if generated.clicked_at <= task["start"] <= generated.done_at]
    assert generated.done_at > generated.clicked_at
    too_long = [task for task in during if task["duration"] > 100]
    frames = [
        frame
        for frame in page.evaluate("() => window.__longFrames")
        if any(frame["start"] <= task["start"] <= frame["start"] + frame["duration"] for task in too_long)
    ]
    assert not too_long, f"long tasks on the page thread: {too_long}; their frames ran: {frames}"


@pytest.mark.parametrize("viewport", [(1280, 720), (400, 800)], ids=["desktop", "narrow"])
def test_layout_every_control_reachable_and_no_horizontal_scroll(
    generated: Generated, viewport: tuple[int, int], tmp_path: Path
) -> None:
    page = generated.page
    page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
    page.select_option("#size", "custom")  # show the width/height inputs too
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(tmp_path / f"ui-{viewport[0]}x{viewport[1]}.png"), full_page=True)
    print(f"screenshot: {tmp_path}")
    overflow = page.evaluate("() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
    assert overflow[0] <= overflow[1], f"horizontal scroll at {viewport}: scrollWidth {overflow[0]} > {overflow[1]}"
    for control in (
        "prompt",
        "seed",
        "seed-random",
        "steps",
        "size",
        "width",
        "height",
        "generate",
        "cancel",
        "download",
        "result-image",
        "status",
        "progress",
        "timings",
        "history",
        "capabilities",
        "clear-cache",
        "copy-link",
        "token-info",
        "clear-history",
    ):
        locator = page.locator(f"#{control}")
        locator.scroll_into_view_if_needed()
        assert locator.is_visible(), f"#{control} is not visible at {viewport}"
        box = locator.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport[0] + 0.5, (
            f"#{control} sticks out of the {viewport[0]} px wide window: {box}"
        )


def test_url_parameters_prefill_the_form_and_copy_link_writes_them(context: Any, server: LiveServer) -> None:
    page = open_page(context, server.url("/?prompt=a%20cat%20in%20a%20hat&seed=99&steps=8&size=768x768"))
    try:
        assert form_values(page)["prompt"] == "a cat in a hat"
        assert form_values(page)["seed"] == "99"
        assert form_values(page)["steps"] == "8"
        assert form_values(page)["size"] == "768x768"
        page.goto(server.url("/?prompt=x&seed=5&size=96x64"))
        assert form_values(page) == {
            "prompt": "x",
            "seed": "5",
            "steps": "4",
            "size": "custom",
            "width": "96",
            "height": "64",
        }
        page.fill("#prompt", "a fox & a hound")
        page.fill("#seed", "4294967295")
        page.click("#copy-link")
        page.wait_for_function("() => location.search.includes('seed=4294967295')")
        query = parse_qs(urlsplit(page.url).query)
        assert query == {"prompt": ["a fox & a hound"], "seed": ["4294967295"], "steps": ["4"], "size": ["96x64"]}
    finally:
        page.close()


def test_the_top_note_and_the_panel_say_what_this_browser_lacks_and_what_it_costs(
    context: Any, server: LiveServer
) -> None:
    """SwiftShader has WebGPU, OPFS and subgroups but no shader-f16: the page runs the app and says what that costs,
    decided from the probe (shared/browser_needs.js), never from the browser's name."""
    page = open_page(context, server.url("/"))
    try:
        page.wait_for_function(
            "() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS
        )
        note = page.inner_text("#browser-note")
        assert note.startswith("This browser runs the app: the q4 graphs"), note
        assert "No fp16 shaders" in note and "software rasteriser" in note, note
        assert page.get_attribute("#browser-note", "data-tone") == "warn"
        panel = page.inner_text("#capabilities")
        assert "subgroups" in panel and "Graphs" in panel and "q4, on int8 dot products (DP4A)" in panel, panel
        assert "not supported" not in (note + panel).lower()
        assert page.is_enabled("#generate")
    finally:
        page.close()


def test_invalid_size_shows_message_and_starts_no_work(context: Any, server: LiveServer) -> None:
    page = open_page(context, server.url("/"))
    try:
        page.wait_for_function("() => window.__posted.includes('probe')")
        before = len(weight_requests(server))
        page.fill("#prompt", "anything")
        fill_custom_size(page, 500, 512)
        page.click("#generate")
        page.wait_for_selector("#error:not(:empty)")
        message = page.inner_text("#error")
        assert "500" in message and "multiple of 16" in message, message
        assert page.get_attribute("#width", "aria-invalid") == "true"
        page.keyboard.press("Control+Enter")  # the shortcut validates the same way
        page.wait_for_timeout(1000)  # anything the click could have started would have begun by now
        assert state(page) == "idle"
        assert "generate" not in page.evaluate("() => window.__posted")
        assert len(weight_requests(server)) == before, "a rejected size must not download anything"
    finally:
        page.close()


def assert_refused_then_open(page: Any, server: LiveServer, good_url: str, *said: str) -> None:
    """The page refused its address's parameter (its message names `said`, Generate blocked); then open `good_url`
    and wait until the page is ready."""
    page.wait_for_selector("#error:not(:empty)")
    message = page.inner_text("#error")
    assert all(fragment in message for fragment in said), message
    assert page.is_disabled("#generate")
    page.goto(server.url(good_url))
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)


def test_precision_parameter_is_validated_and_forwarded(context: Any, server: LiveServer) -> None:
    page = open_page(context, server.url("/?precision=q8"))
    try:
        # Not a variant at all: refused by the page. Then a real variant the served (fp32) repo does not have: the
        # worker refuses it before any download.
        assert_refused_then_open(page, server, "/?precision=q4f16&prompt=x&size=64x64", "precision=q8", "q4f16")
        assert "q4f16" in page.inner_text("#model-source")
        before = len(weight_requests(server))
        page.click("#generate")
        assert wait_state(page, "done", "error") == "error"
        message = page.inner_text("#error")
        assert "q4f16" in message and "fp32" in message, message
        assert len(weight_requests(server)) == before
    finally:
        page.close()


def test_profile_parameter_shows_each_components_kernels(context: Any, server: LiveServer) -> None:
    page = open_page(context, server.url("/?profile=flame"))
    try:
        assert_refused_then_open(
            page, server, "/?profile=kernels&prompt=a%20fox&size=64x64&steps=2", "?profile=flame", "?profile=kernels"
        )
        page.click("#generate")
        assert wait_state(page, "done", "error") == "done", page.inner_text("#error")
        captions = page.eval_on_selector_all("#timings table.kernels caption", "cs => cs.map(c => c.textContent)")
        assert len(captions) == 3 and all("GPU" in caption for caption in captions), captions
        assert any("per run of 2" in caption for caption in captions), captions  # the transformer, once per step
        rows = page.eval_on_selector_all("#timings table.kernels tbody tr", "rows => rows.length")
        assert rows > 3
        data = json.loads(page.get_attribute("#timings", "data-json") or "{}")
        assert set(data["kernels"]) == {"text_encoder", "transformer", "vae_decoder"}
    finally:
        page.close()


def test_cancel_during_denoising_returns_to_idle_within_a_step(generated: Generated) -> None:
    # The page that already generated: model cached, prompt encoded, so this run reaches denoising fast.
    page = generated.page
    page.fill("#prompt", PROMPT)
    page.fill("#seed", "5")
    page.fill("#steps", "30")
    fill_custom_size(page, 64, 64)
    # Record every change of the step counter and of the state with the page clock.
    page.evaluate("""() => {
        window.__trace = [];
        const bar = document.querySelector('#progress');
        const note = () => window.__trace.push({t: performance.now(), value: bar.value, max: bar.max,
                                                 state: document.body.dataset.state});
        new MutationObserver(note).observe(bar, {attributes: true});
        new MutationObserver(note).observe(document.body, {attributes: true, attributeFilter: ['data-state']});
    }""")
    page.click("#generate")
    page.wait_for_function(
        "() => { const b = document.querySelector('#progress'); return b.max === 30 && b.value >= 2; }",
        timeout=GENERATE_TIMEOUT_MS,
        polling=20,
    )
    cancelled_at = float(page.evaluate("() => performance.now()"))
    page.click("#cancel")
    assert wait_state(page, "idle", "done", "error", timeout_ms=60_000) == "idle"
    idle_at = float(page.evaluate("() => performance.now()"))
    assert page.inner_text("#status").startswith("Cancelled")
    assert page.is_enabled("#generate") and page.is_disabled("#cancel")

    # When each step was first shown (the bar's max is the step count while denoising).
    step_shown: dict[float, float] = {}
    for entry in page.evaluate("() => window.__trace"):
        if entry["max"] == 30 and entry["value"] >= 1:
            step_shown.setdefault(entry["value"], entry["t"])
    assert max(step_shown) < 30, "cancel came too late: all 30 steps ran"
    times = sorted(step_shown.values())
    assert len(times) >= 2, f"expected at least two step events before cancel: {step_shown}"
    per_step = max(later - earlier for earlier, later in itertools.pairwise(times))
    # Within one step: the step in flight finishes, then the worker stops (plus messaging slack).
    assert idle_at - cancelled_at <= 2 * per_step + 1500, (
        f"cancel took {idle_at - cancelled_at:.0f} ms with up to {per_step:.0f} ms per step"
    )

    page.fill("#steps", "4")
    page.click("#generate")
    assert wait_state(page, "done", "error") == "done", page.inner_text("#error")
    assert page.is_visible("#result-image")
    assert "Seed 5 ·" in page.inner_text("#result-caption"), "the new image replaced the old one"


def test_clear_cached_model_reports_freed_bytes(generated: Generated) -> None:
    # Last of the `generated` tests: it deletes the model this origin downloaded.
    page = generated.page
    page.click("#clear-cache")
    page.wait_for_function(
        "() => /Freed|Could not/.test(document.querySelector('#cache-message').textContent)", polling=POLL_MS
    )
    message = page.inner_text("#cache-message")
    assert re.match(r"Freed [1-9][\d.]* (kB|MB|GB)\b", message), message
    assert page.is_enabled("#clear-cache")


def test_without_webgpu_flags_the_page_says_so_and_disables_generate(
    playwright: Any,
    dist_dir: Path,
    chromium_path: Path,
    live_server_factory: Any,
    tiny_models: dict[str, Path],
    tmp_path: Path,
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    args = [*QUIET_FLAGS]  # plain headless Chromium: none of the WebGPU/SwiftShader flags
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # as builder.site.chrome.launch_args does for root
    ctx = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=str(chromium_path), headless=True, args=args
    )
    try:
        page = ctx.new_page()
        page.goto(server.url("/"))
        assert wait_state(page, "error", timeout_ms=60_000) == "error"
        assert page.get_attribute("#error", "data-code") == "no-webgpu"
        message = page.inner_text("#error")
        assert "WebGPU" in message and "--enable-unsafe-webgpu" in message and "Chrom" in message, message
        assert page.is_disabled("#generate")
        assert "not available" in page.inner_text("#capabilities")
        page.keyboard.press("Control+Enter")
        page.wait_for_timeout(500)
        assert weight_requests(server) == [], "nothing may be downloaded without WebGPU"
    finally:
        ctx.close()
