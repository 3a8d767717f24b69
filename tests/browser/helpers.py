"""Shared Playwright helpers for the browser tests: a persistent Chromium context and a protocol client for the worker.

The worker is driven exactly as the page drives it: `new Worker(<meta name="klein-worker">, {type: 'module'})` and
the messages of web_src/src/protocol.js. Nothing here reaches into the worker's internals.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.check.driver.chromium import launch_persistent

# Installed into the page: one Worker plus a pending-request table, like page/worker_client.js. Events are kept
# per request id (with the time they arrived, for the cancel test); an RGBA or RGB result, and a step's preview, are
# returned base64-encoded because Playwright does not carry typed arrays across evaluate().
INSTALL_CLIENT_JS = r"""
async (workerUrl) => {
    if (window.kleinTest) window.kleinTest.worker.terminate();
    const worker = new Worker(workerUrl, { type: 'module' });
    const requests = new Map();
    let counter = 0;
    const toBase64 = (bytes) => {
        let text = '';
        for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
        return btoa(text);
    };
    worker.onmessage = (message) => {
        const event = message.data;
        const entry = requests.get(event.id);
        if (!entry) return;
        const at = performance.now();
        // Protocol invariant: exactly one result or error per id, and nothing after it.
        if (entry.final) entry.violations.push(event.type);
        else if (event.type === 'result' || event.type === 'error') {
            let result = event.result;
            if (result && result.rgba) result = { ...result, rgba: toBase64(new Uint8Array(result.rgba.buffer)) };
            if (result && result.rgb) result = { ...result, rgb: toBase64(new Uint8Array(result.rgb.buffer)) };
            entry.final = { type: event.type, result, error: event.error, at };
            entry.resolve();
        } else if (event.preview) {
            entry.events.push({ ...event, preview: { ...event.preview, rgba: toBase64(event.preview.rgba) }, at });
        } else {
            entry.events.push({ ...event, at });
        }
    };
    worker.onerror = (err) => {
        for (const entry of requests.values()) {
            entry.final = entry.final || { type: 'crash', error: { message: String(err.message || err) }, at: performance.now() };
            entry.resolve();
        }
    };
    window.kleinTest = {
        worker,
        send(type, fields) {
            const id = `t${++counter}`;
            const entry = { events: [], final: null, violations: [], sentAt: performance.now() };
            entry.done = new Promise((resolve) => { entry.resolve = resolve; });
            requests.set(id, entry);
            worker.postMessage({ type, id, ...fields });
            return id;
        },
        async wait(id, timeoutMs) {
            const entry = requests.get(id);
            const timer = new Promise((resolve) => setTimeout(resolve, timeoutMs));
            await Promise.race([entry.done, timer]);
            return { id, sentAt: entry.sentAt, events: entry.events, final: entry.final, violations: entry.violations };
        },
        events(id) {
            return requests.get(id).events;
        },
    };
}
"""


# A repository file under the store's folder of any model source (klein-models/<source>/<path>): its text, or its
# SHA-256 in hex; null when no source has it.
STORED_FILE_JS = """async ([path, sha256]) => {
    const models = await (await navigator.storage.getDirectory()).getDirectoryHandle('klein-models');
    const parts = path.split('/');
    for await (const [, source] of models.entries()) {
        let file;
        try {
            let dir = source;
            for (const part of parts.slice(0, -1)) dir = await dir.getDirectoryHandle(part);
            file = await (await dir.getFileHandle(parts.at(-1))).getFile();
        } catch { continue; } // another source
        if (!sha256) return await file.text();
        const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await file.arrayBuffer()));
        return [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
    }
    return null;
}"""


@dataclass
class Reply:
    """Everything the worker sent for one request."""

    id: str
    type: str  # 'result', 'error', or 'crash' (the worker died)
    result: Any
    error: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    sent_at: float = 0.0  # page clock (performance.now(), ms)
    answered_at: float = 0.0

    def ok(self) -> Any:
        """The result, or an AssertionError carrying the worker's error."""
        assert self.type == "result", f"worker answered {self.type}: {self.error}"
        return self.result

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]

    def rgb(self) -> np.ndarray:
        """The generated image as uint8 [H, W, 3] (alpha dropped), as builder.pipeline.imaging compares images."""
        result = self.ok()
        rgba = np.frombuffer(base64.b64decode(result["rgba"]), dtype=np.uint8)
        return rgba.reshape(result["height"], result["width"], 4)[:, :, :3].copy()


class WorkerClient:
    """Talks to the inference worker of the app served at `base_url`, in one Playwright page."""

    def __init__(self, page: Any, base_url: str, *, worker_query: str = "") -> None:
        """`worker_query`: appended to the worker script's URL (e.g. "gpu-fault=subgroups", runtime/gpu.js)."""
        self.page = page
        self.base_url = base_url.rstrip("/") + "/"
        self.worker_query = worker_query
        self.worker_url = ""

    def open(self) -> None:
        """Load the app page (its own UI script blocked, so only our worker runs) and start a worker."""
        self.page.goto(self.base_url)
        self.start_worker()

    def reload(self) -> None:
        self.page.reload()
        self.start_worker()

    def start_worker(self) -> None:
        worker_path = self.page.get_attribute('meta[name="klein-worker"]', "content")
        assert worker_path, "index.html has no <meta name=klein-worker>"
        query = f"?{self.worker_query}" if self.worker_query else ""
        self.worker_url = self.base_url + worker_path + query
        self.page.evaluate(INSTALL_CLIENT_JS, self.worker_url)
        assert self.page.evaluate("() => crossOriginIsolated"), (
            "the page is not cross-origin isolated (COOP/COEP missing)"
        )

    @property
    def model_base(self) -> str:
        return self.base_url + "models/"

    def send(self, kind: str, **fields: Any) -> str:
        return str(self.page.evaluate("([t, f]) => window.kleinTest.send(t, f)", [kind, fields]))

    def wait(self, request_id: str, *, timeout_s: float) -> Reply:
        raw = self.page.evaluate("([id, ms]) => window.kleinTest.wait(id, ms)", [request_id, timeout_s * 1000])
        final = raw["final"]
        assert final is not None, (
            f"request {request_id}: no result or error within {timeout_s} s; events: {raw['events'][-5:]}"
        )
        assert not raw["violations"], f"request {request_id}: messages after its {final['type']}: {raw['violations']}"
        return Reply(
            id=request_id,
            type=final["type"],
            result=final.get("result"),
            error=final.get("error"),
            events=raw["events"],
            sent_at=raw["sentAt"],
            answered_at=final["at"],
        )

    def events(self, request_id: str) -> list[dict[str, Any]]:
        return list(self.page.evaluate("(id) => window.kleinTest.events(id)", request_id))

    def request(self, kind: str, *, timeout_s: float = 60, **fields: Any) -> Reply:
        return self.wait(self.send(kind, **fields), timeout_s=timeout_s)

    def generate(
        self,
        *,
        prompt: str,
        seed: int,
        width: int,
        height: int,
        steps: int = 4,
        precision: str | None = None,
        profile: bool = False,
        memory: str | None = None,
        preview: bool = False,
        vae_tile: int | None = None,
        guidance_scale: float | None = None,
        negative_prompt: str | None = None,
        step_kernels: bool | None = None,
        step_check: bool = False,
        timeout_s: float = 300,
    ) -> Reply:
        """`step_kernels`: False runs the transformer on onnxruntime even where our kernels could; `step_check`: the
        first step on our kernels is run on onnxruntime too and compared (GenerateResult.stepCheck)."""
        params: dict[str, Any] = {
            "prompt": prompt,
            "seed": seed,
            "width": width,
            "height": height,
            "steps": steps,
            "modelBase": self.model_base,
        }
        if precision:
            params["precision"] = precision
        if memory:
            params["memory"] = memory
        if profile:
            params["profile"] = True
        if preview:
            params["preview"] = True
        if vae_tile is not None:
            params["vaeTile"] = vae_tile
        if guidance_scale is not None:
            params["guidanceScale"] = guidance_scale
        if negative_prompt is not None:
            params["negativePrompt"] = negative_prompt
        if step_kernels is not None:
            params["stepKernels"] = step_kernels
        if step_check:
            params["stepCheck"] = True
        return self.request("generate", params=params, timeout_s=timeout_s)

    def load(self, *, width: int = 64, height: int = 64, timeout_s: float = 120) -> Reply:
        """A `load` request for every component: download what the store lacks and create each session, no run."""
        params = {"modelBase": self.model_base, "width": width, "height": height}
        return self.request("load", params=params, timeout_s=timeout_s)

    def stored_file(self, path: str, *, sha256: bool = False) -> str | None:
        """A repository file as the store holds it (its text, or with `sha256` its SHA-256 in hex); None when no
        model source in this origin's store has it."""
        return self.page.evaluate(STORED_FILE_JS, [path, sha256])  # type: ignore[no-any-return]

    def worker_fetches(self) -> list[str]:
        """The URLs the inference worker fetched itself (its Resource Timing entries; its helper workers' are not
        among them)."""
        worker = next(w for w in self.page.workers if w.url == self.worker_url)
        return worker.evaluate("() => performance.getEntriesByType('resource').map((entry) => entry.name)")  # type: ignore[no-any-return]

    def wait_for_event(self, request_id: str, kind: str, *, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            matching = [event for event in self.events(request_id) if event["type"] == kind]
            if matching:
                return matching[0]
            time.sleep(0.05)
        raise AssertionError(f"request {request_id}: no {kind!r} event within {timeout_s} s")


@contextmanager
def browser_context(user_data_dir: Path, chromium: Path, *, extra_args: tuple[str, ...] = ()) -> Iterator[Any]:
    """A persistent Chromium context (OPFS needs one: incognito storage is an in-memory quota); `extra_args` are
    more Chromium flags."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # The app's service worker would serve its cached page script past the route below.
        context = launch_persistent(
            playwright, user_data_dir, executable=chromium, extra_args=extra_args, service_workers="block"
        )
        # The app's own UI would start a second worker; these tests speak to the worker directly.
        context.route(
            "**/assets/page-*.js", lambda route: route.fulfill(status=200, body="", content_type="text/javascript")
        )
        try:
            yield context
        finally:
            context.close()


def new_page(context: Any) -> Any:
    """A fresh page whose console errors are echoed to the test output (seen on failure)."""
    page = context.new_page()
    page.on(
        "console",
        lambda message: (
            print(f"[console.{message.type}] {message.text}") if message.type in ("error", "warning") else None
        ),
    )
    page.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    return page


# The result image's RGBA pixels, read back through a canvas.
RESULT_PIXELS_JS = """() => {
    const image = document.querySelector('#result-image');
    const canvas = document.createElement('canvas');
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0);
    return Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
}"""


def generate_through_form(page: Any, *, prompt: str, seed: int, timeout_ms: float = 600_000) -> list[int]:
    """One 64x64, 2-step text-to-image run through the page's form, as a user starts it; the image's RGBA pixels."""
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('Ready')", timeout=120_000, polling=100
    )
    page.fill("#prompt", prompt)
    page.fill("#seed", str(seed))
    page.fill("#steps", "2")
    page.select_option("#size", "custom")
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.click("#generate")
    try:
        page.wait_for_function(
            "() => ['done', 'error'].includes(document.body.dataset.state)", timeout=timeout_ms, polling=200
        )
    except Exception as exc:  # Playwright's TimeoutError: say where the run stood
        where = page.evaluate(
            "() => [document.querySelector('#status').textContent, document.querySelector('#progress-detail').textContent]"
        )
        raise AssertionError(f"no image within {timeout_ms / 1000:.0f} s; the page says {where}") from exc
    assert page.evaluate("() => document.body.dataset.state") == "done", page.inner_text("#error")
    return list(page.evaluate(RESULT_PIXELS_JS))
