"""The served page in headless Chromium: cross-origin isolated, a WebGPU adapter, and the coi-sw.js fallback (online
and offline)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser


def test_served_page_is_isolated_and_has_webgpu(
    live_server_factory: object, dist_dir: Path, fresh_context: object
) -> None:
    server = live_server_factory(dist_dir)  # type: ignore[operator]
    page = fresh_context.pages[0] if fresh_context.pages else fresh_context.new_page()  # type: ignore[attr-defined]
    csp_violations: list[str] = []
    page.on("console", lambda msg: csp_violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.goto(server.url("/"), wait_until="load")
    facts = page.evaluate("""async () => {
        const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
        return {
            isolated: self.crossOriginIsolated,
            sharedArrayBuffer: typeof SharedArrayBuffer === 'function',
            adapter: adapter !== null,
            // The headers made it isolated at once: the page had no reason to reload for the service worker.
            reloaded: sessionStorage.getItem('klein-coi-reloaded'),
        };
    }""")
    assert facts == {"isolated": True, "sharedArrayBuffer": True, "adapter": True, "reloaded": None}, (
        f"{facts}\nserver log:\n{server.output()}"
    )
    assert csp_violations == [], csp_violations


def test_coi_service_worker_isolates_a_host_without_headers(
    dist_dir: Path, fresh_context: object, tmp_path: Path
) -> None:
    """On a plain static host (python's http.server: no COOP/COEP), coi-sw.js adds them after one reload, and to the
    shell it serves from its cache when the network is gone."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path / "http.log", "wb")  # noqa: SIM115 - the server writes to it until it is stopped
    plain = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(dist_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.1)
        headers = urllib.request.urlopen(url, timeout=5).headers
        assert headers.get("Cross-Origin-Embedder-Policy") is None  # the premise: this host sends none
        page = fresh_context.new_page()  # type: ignore[attr-defined]
        page.goto(url, wait_until="load")
        # A function, not an expression: Playwright evaluates an expression again on every poll, which the page's CSP
        # (no unsafe-eval) refuses once the first poll is over; a function is evaluated once.
        page.wait_for_function("() => self.crossOriginIsolated === true", timeout=20_000)
        controlled = page.evaluate(
            "() => navigator.serviceWorker.controller && navigator.serviceWorker.controller.scriptURL"
        )
        assert controlled == url + "coi-sw.js"
        assert page.evaluate("() => sessionStorage.getItem('klein-coi-reloaded')") == "1"  # reloaded exactly once
        page.wait_for_function(
            "() => document.querySelector('#app-status').dataset.status === 'stored'", timeout=60_000
        )
        plain.terminate()  # the host is gone, and the browser offline
        plain.wait(10)
        fresh_context.set_offline(True)  # type: ignore[attr-defined]
        page.reload()
        assert page.evaluate("() => [self.crossOriginIsolated, navigator.onLine]") == [True, False]
    finally:
        plain.terminate()
        plain.wait(10)
        log.close()


# A worker that loads onnxruntime-web as the real one does: the hashed loader KLEIN_ORT_WASM names and the .wasm
# from the service worker's joined copy or joined from its parts here (runtime/wasm_parts.js), under the served CSP
# (wasm-unsafe-eval) and COOP/COEP (threads).
ORT_PROBE_WORKER = """
import * as ort from 'onnxruntime-web/webgpu';
import { runtimeFiles, runtimeSource } from '../runtime/wasm_parts.js';
self.onmessage = async (event) => {
    try {
        const files = runtimeFiles(KLEIN_ORT_WASM, self.location.href);
        const source = await runtimeSource(files);
        ort.env.wasm.wasmPaths = { mjs: files.mjs, ...('wasm' in source ? { wasm: source.wasm } : {}) };
        if ('binary' in source) ort.env.wasm.wasmBinary = source.binary;
        ort.env.wasm.numThreads = 2;
        const out = {};
        for (const ep of ['webgpu', 'wasm']) {
            const session = await ort.InferenceSession.create(event.data, { executionProviders: [ep] });
            const x = new ort.Tensor('float32', Float32Array.from([1, -1, 0.5, 2]), [4]);
            out[ep] = Array.from((await session.run({ x })).y.data);
            await session.release();
        }
        self.postMessage({ out, isolated: self.crossOriginIsolated, version: KLEIN_VERSION });
    } catch (error) {
        self.postMessage({ error: String((error && error.stack) || error) });
    }
};
"""


def tiny_mul_model() -> tuple[bytes, list[float]]:
    """y = x * w as ONNX (ir_version 10: onnxruntime-web 1.30 refuses 14), and the expected y."""
    import onnx
    from onnx import TensorProto, helper

    weights = [1.5, 2.0, -3.0, 0.25]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])],
        "mul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4], weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString(), [x * w for x, w in zip([1, -1, 0.5, 2], weights, strict=True)]


def test_built_worker_runs_onnxruntime_from_hashed_files(
    tmp_path: Path, fresh_context: object, web_src_copy: Path
) -> None:
    from builder import __version__
    from builder.site.bundle import build
    from builder.site.server import create_app, serve_in_thread

    web_src = web_src_copy
    (web_src / "src/worker/main.js").write_text(ORT_PROBE_WORKER)
    dist = tmp_path / "dist"
    build(dist, web_src=web_src)
    model, expected = tiny_mul_model()

    with serve_in_thread(create_app(dist)) as port:
        page = fresh_context.new_page()  # type: ignore[attr-defined]
        page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
        reply = page.evaluate(
            """(model) => new Promise((resolve) => {
            const url = document.querySelector('meta[name=klein-worker]').content;
            const worker = new Worker(url, { type: 'module' });
            worker.onmessage = (event) => resolve(event.data);
            worker.onerror = (event) => resolve({ error: event.message });
            worker.postMessage(new Uint8Array(model));
        })""",
            list(model),
        )
    assert "error" not in reply, reply["error"]
    assert reply["isolated"] is True and reply["version"] == __version__
    for ep in ("webgpu", "wasm"):
        assert reply["out"][ep] == pytest.approx(expected), ep
