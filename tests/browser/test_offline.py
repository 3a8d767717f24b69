"""The app installs and opens offline (web_src/src/service_worker.js, page/ui/offline_status.js), in headless Chromium.

Each test starts from a fresh profile (conftest's `fresh_context`): no service worker, no cache, no stored model.
One visit stores the shell (Cache Storage) and, with a Generate, the model (the Origin Private File System); then the
network goes (Playwright's offline mode and the server stopped) and the reloaded page generates the same image. A
rebuilt site waits until the page switches to it, and then runs whole: page and service worker of one build.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import start_server  # tests/ is on sys.path (rootdir-relative conftest import)

from builder.site.bundle import build, read_record
from builder.site.server import create_app, serve_in_thread

pytestmark = pytest.mark.browser

GENERATE_TIMEOUT_MS = 240_000
SETTLE_MS = 60_000
PROMPT = "a paper boat on a puddle"
SEED = 77

# The page's own answers, read the way a user's browser has them.
SHELL_STATE_JS = """async () => {
    const names = await caches.keys();
    const entries = {};
    for (const name of names) entries[name] = (await (await caches.open(name)).keys()).map((r) => r.url).sort();
    const controller = navigator.serviceWorker.controller;
    const worker = controller && await new Promise((resolve) => {
        const channel = new MessageChannel();
        channel.port1.onmessage = (event) => resolve(event.data);
        controller.postMessage({ type: 'build' }, [channel.port2]);
    });
    return {
        pageBuild: document.querySelector('meta[name="klein-build"]').content,
        workerBuild: worker ? worker.build : null,
        status: document.querySelector('#app-status').dataset.status,
        isolated: self.crossOriginIsolated,
        online: navigator.onLine,
        caches: entries,
    };
}"""
RESULT_PIXELS_JS = """() => {
    const image = document.querySelector('#result-image');
    const canvas = document.createElement('canvas');
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0);
    return Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
}"""


def open_page(context: Any, url: str) -> Any:
    page = context.pages[0] if context.pages else context.new_page()
    page.on("console", lambda m: print(f"[console.{m.type}] {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    page.goto(url)
    return page


def wait_status(page: Any, status: str, *, timeout_ms: float = SETTLE_MS) -> None:
    page.wait_for_function(
        "(s) => document.querySelector('#app-status').dataset.status === s", arg=status, timeout=timeout_ms, polling=100
    )


def shell_state(page: Any) -> dict[str, Any]:
    return dict(page.evaluate(SHELL_STATE_JS))


def settled_state(page: Any, what: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The page's facts once `ok` holds for them (the service worker activates in the background)."""
    deadline = time.monotonic() + SETTLE_MS / 1000
    while not ok(state := shell_state(page)):
        assert time.monotonic() < deadline, f"not {what}: {state}"
        page.wait_for_timeout(100)
    return state


def shell_urls(base_url: str, dist: Path) -> list[str]:
    """What the service worker keeps: the shell, the runtime's .wasm joined in place of its parts."""
    record = read_record(dist) or {}
    shell, runtime = record.get("shell"), record.get("runtime")
    assert isinstance(shell, list) and isinstance(runtime, dict)
    kept = [name for name in shell if name not in runtime["parts"]] + [runtime["whole"]]
    return sorted(base_url + str(name) for name in kept)


def generate(page: Any) -> list[int]:
    """One 64x64 text-to-image run through the form; the image's RGBA pixels."""
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('Ready')", timeout=SETTLE_MS, polling=100
    )
    page.fill("#prompt", PROMPT)
    page.fill("#seed", str(SEED))
    page.fill("#steps", "2")
    page.select_option("#size", "custom")
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.click("#generate")
    page.wait_for_function(
        "() => ['done', 'error'].includes(document.body.dataset.state)", timeout=GENERATE_TIMEOUT_MS, polling=100
    )
    assert page.evaluate("() => document.body.dataset.state") == "done", page.inner_text("#error")
    return list(page.evaluate(RESULT_PIXELS_JS))


def test_the_app_installs(fresh_context: Any, dist_dir: Path, live_server_factory: Any) -> None:
    """Chrome's installability criteria as Chromium itself checks them, the icons loaded, the shell cached."""
    server = live_server_factory(dist_dir)
    page = open_page(fresh_context, server.url("/"))
    wait_status(page, "stored")
    cdp = fresh_context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"] == server.url("/manifest.webmanifest") and manifest["errors"] == [], manifest
    assert cdp.send("Page.getInstallabilityErrors")["installabilityErrors"] == []
    sizes = page.evaluate("""async () => {
        const manifest = await (await fetch('manifest.webmanifest')).json();
        return Promise.all(manifest.icons.map(async (icon) => {
            const bitmap = await createImageBitmap(await (await fetch(icon.src)).blob());
            return [icon.sizes, `${bitmap.width}x${bitmap.height}`];
        }));
    }""")
    assert sizes and all(declared == loaded for declared, loaded in sizes), sizes
    state = shell_state(page)
    build_id = (read_record(dist_dir) or {})["build_id"]
    assert state["pageBuild"] == state["workerBuild"] == build_id
    assert state["caches"] == {f"klein-shell-{build_id}": shell_urls(server.url("/"), dist_dir)}


def test_generates_offline_after_one_visit(
    fresh_context: Any, dist_dir: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    server = start_server(dist_dir, tmp_path, models=tiny_models["fp32"])
    try:
        page = open_page(fresh_context, server.url("/"))
        wait_status(page, "stored")
        online = generate(page)  # downloads the model into the store
    finally:
        server.stop()  # the network really is gone: nothing answers on that port any more
    fresh_context.set_offline(True)
    page.reload()
    wait_status(page, "offline")
    state = shell_state(page)
    assert state["online"] is False and state["isolated"] is True, state
    assert page.get_attribute("#model-source", "data-kind") == "local", "the local repository of the last visit"
    offline = generate(page)
    assert offline == online, "the offline image differs from the online one"
    # The cache holds the shell and nothing else: the weights stay in the store.
    assert list(state["caches"].values()) == [shell_urls(server.url("/"), dist_dir)]


def restyle(web_src: Path, colour: str) -> None:
    """A change to the shell (the stylesheet) that a new build makes."""
    with open(web_src / "style.css", "a") as handle:
        handle.write(f"\n.brand-klein {{ color: {colour}; }}\n")


def test_a_new_build_waits_then_replaces_the_shell_whole(
    fresh_context: Any, web_src_copy: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    first = build(dist, web_src=web_src_copy)
    with serve_in_thread(create_app(dist)) as port:
        base = f"http://127.0.0.1:{port}/"
        page = open_page(fresh_context, base)
        wait_status(page, "stored")
        restyle(web_src_copy, "rgb(1, 2, 3)")
        second = build(dist, web_src=web_src_copy)
        assert second.build_id != first.build_id
        page.reload()
        wait_status(page, "update")
        # The old page still runs, whole, from its own cache; the new build sits complete beside it.
        state = shell_state(page)
        assert state["pageBuild"] == state["workerBuild"] == first.build_id
        assert set(state["caches"]) == {f"klein-shell-{first.build_id}", f"klein-shell-{second.build_id}"}
        assert state["caches"][f"klein-shell-{second.build_id}"] == shell_urls(base, dist)
        assert page.is_visible("#app-update")
        with page.expect_navigation():
            page.click("#app-update")
        wait_status(page, "stored")
        # Activating deletes the old cache; the page reloads as soon as the new worker controls it.
        state = settled_state(
            page,
            "the new build's cache alone",
            lambda state: list(state["caches"]) == [f"klein-shell-{second.build_id}"],
        )
        assert state["pageBuild"] == state["workerBuild"] == second.build_id
        assert page.evaluate("() => getComputedStyle(document.querySelector('.brand-klein')).color") == "rgb(1, 2, 3)"


def test_development_build_serves_each_rebuild_at_once(fresh_context: Any, web_src_copy: Path, tmp_path: Path) -> None:
    """`serve --watch` builds keep no shell: switching to one drops the stored shell, and a reload after a rebuild
    is the new build, with no update step."""
    dist = tmp_path / "dist"
    cached = build(dist, web_src=web_src_copy)
    with serve_in_thread(create_app(dist)) as port:
        page = open_page(fresh_context, f"http://127.0.0.1:{port}/")
        wait_status(page, "stored")
        first = build(dist, web_src=web_src_copy, cache_shell=False)
        assert first.build_id == cached.build_id  # the same files: the id does not tell the two apart
        page.reload()
        wait_status(page, "development")  # the development worker took over by itself
        settled_state(page, "without a stored shell", lambda state: state["caches"] == {})
        restyle(web_src_copy, "rgb(4, 5, 6)")
        second = build(dist, web_src=web_src_copy, cache_shell=False)
        page.reload()
        assert page.get_attribute('meta[name="klein-build"]', "content") == second.build_id != first.build_id
        state = settled_state(
            page, f"served by build {second.build_id}", lambda state: state["workerBuild"] == second.build_id
        )
        assert state["status"] == "development" and state["caches"] == {}
