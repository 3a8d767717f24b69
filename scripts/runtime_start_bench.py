"""What the runtime's `.wasm` in parts costs at start-up, against a build that ships it as one file.

    python scripts/runtime_start_bench.py --baseline REF [--trials 10] [--threads 4] [--gpu]

Two sites are built with a worker that, on request, starts onnxruntime-web the way the app does and creates one
session of a one-node graph: this checkout's (the `.wasm` in parts, fetched, joined and checked, handed over as
`env.wasm.wasmBinary`: web_src/src/runtime/wasm_parts.js) and REF's (a commit whose build ships the `.wasm` whole and
lets onnxruntime fetch it: `wasmPaths.wasm`). Each site is opened in its own tab and its service worker stores the
shell first, as on every visit after the first, so the runtime comes from Cache Storage either way. Each trial is a
fresh worker (a fresh onnxruntime); trials alternate between the sites after one warm-up each. Prints the time from
asking for the first session to having it (median, min, max) per site, and how much of it fetching, joining and
hashing the parts took. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder import WEB_SRC  # noqa: E402
from builder.check.driver.chromium import find_chromium, launch_persistent  # noqa: E402
from builder.node import ensure_node_modules  # noqa: E402
from builder.site.bundle import build  # noqa: E402
from builder.site.server import create_app, serve_in_thread  # noqa: E402

# Both workers time the same span: from the request to a created session, the runtime started the site's way.
PARTS_WORKER = """
import * as ort from 'onnxruntime-web/webgpu';
import { runtimeBinary, runtimeFiles, runtimeSource } from '../runtime/wasm_parts.js';

self.onmessage = async ({ data }) => {
    if (!data || !data.bench) return; // the page's own protocol messages
    try {
        const files = runtimeFiles(KLEIN_ORT_WASM, self.location.href);
        ort.env.wasm.numThreads = data.threads;
        ort.env.wasm.proxy = false;
        const started = performance.now();
        // 'parts': as the app starts (the service worker's joined copy); 'join': the parts joined here, as without one
        const source = data.bench === 'parts' ? await runtimeSource(files) : { binary: await runtimeBinary(files) };
        const joined = performance.now() - started;
        ort.env.wasm.wasmPaths = { mjs: files.mjs, ...('wasm' in source ? { wasm: source.wasm } : {}) };
        if ('binary' in source) ort.env.wasm.wasmBinary = source.binary;
        const session = await ort.InferenceSession.create(data.model, { executionProviders: ['wasm'] });
        const ready = performance.now() - started;
        await session.release();
        self.postMessage({ joined, ready, via: 'wasm' in source ? 'service worker' : 'worker' });
    } catch (error) {
        self.postMessage({ error: String((error && error.stack) || error) });
    }
};
"""
WHOLE_WORKER = """
import * as ort from 'onnxruntime-web/webgpu';

self.onmessage = async ({ data }) => {
    if (!data || !data.bench) return;
    try {
        ort.env.wasm.numThreads = data.threads;
        ort.env.wasm.proxy = false;
        const started = performance.now();
        ort.env.wasm.wasmPaths = {
            mjs: new URL(KLEIN_ORT_WASM.mjs, self.location.href).href,
            wasm: new URL(KLEIN_ORT_WASM.wasm, self.location.href).href,
        };
        const session = await ort.InferenceSession.create(data.model, { executionProviders: ['wasm'] });
        const ready = performance.now() - started;
        await session.release();
        self.postMessage({ joined: null, ready });
    } catch (error) {
        self.postMessage({ error: String((error && error.stack) || error) });
    }
};
"""

TRIAL_JS = """async ([job, model]) => {
    const url = document.querySelector('meta[name=klein-worker]').content;
    const worker = new Worker(url, { type: 'module' });
    const reply = await new Promise((resolve) => {
        worker.onmessage = (event) => resolve(event.data);
        worker.onerror = (event) => resolve({ error: event.message });
        setTimeout(() => resolve({ error: 'no answer within 120 s' }), 120000);
        worker.postMessage({ ...job, model: new Uint8Array(model) });
    });
    worker.terminate();
    return reply;
}"""


def one_node_model() -> bytes:
    """y = x * w (ir_version 10: onnxruntime-web 1.30 refuses 14)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])],
        "mul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4], [1.5, 2.0, -3.0, 0.25])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def with_worker(web_src: Path, worker: str, node_modules: Path) -> None:
    (web_src / "node_modules").symlink_to(node_modules, target_is_directory=True)
    (web_src / "src/worker/main.js").write_text(worker)


def parts_site(work: Path, node_modules: Path) -> Path:
    web_src = work / "parts" / "web_src"
    shutil.copytree(WEB_SRC, web_src, ignore=shutil.ignore_patterns("node_modules", ".*"))
    with_worker(web_src, PARTS_WORKER, node_modules)
    build(work / "parts" / "dist", web_src=web_src)
    return work / "parts" / "dist"


def baseline_site(work: Path, ref: str, node_modules: Path) -> Path:
    """REF's web_src built by REF's own builder, in a process of its own."""
    base = work / "baseline"
    base.mkdir()
    archive = base / "source.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "web_src", "builder"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(base, filter="data")
    with_worker(base / "web_src", WHOLE_WORKER, node_modules)
    code = f"from pathlib import Path; from builder.site.bundle import build; build(Path({str(base / 'dist')!r}))"
    env = {**os.environ, "PYTHONPATH": str(base)}
    subprocess.run([sys.executable, "-c", code], cwd=base, env=env, check=True)
    return base / "dist"


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} | {min(values):7.1f} | {max(values):7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, metavar="REF", help="a commit whose build ships the .wasm whole")
    parser.add_argument("--trials", type=int, default=10, help="trials per site, after one warm-up each")
    parser.add_argument("--threads", type=int, default=4, help="onnxruntime's wasm threads (the app uses up to 4)")
    parser.add_argument("--gpu", action="store_true", help="the machine's GPU (else SwiftShader); wasm either way")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    model = list(one_node_model())
    node_modules = ensure_node_modules(log=lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="runtime-start-") as tmp:
        work = Path(tmp)
        sites = {"parts": parts_site(work, node_modules), "whole": baseline_site(work, args.baseline, node_modules)}
        ways = ("parts", "join", "whole")  # this checkout as the app starts; its parts joined in the worker; REF
        times: dict[str, list[float]] = {way: [] for way in ways}
        joined: dict[str, list[float]] = {way: [] for way in ways}
        with (
            serve_in_thread(create_app(sites["parts"])) as parts_port,
            serve_in_thread(create_app(sites["whole"])) as whole_port,
            sync_playwright() as playwright,
        ):
            context = launch_persistent(playwright, work / "profile", executable=find_chromium(), gpu=args.gpu)
            try:
                pages = {}
                for site, port in (("parts", parts_port), ("whole", whole_port)):
                    page = context.new_page()
                    page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
                    page.wait_for_function(
                        "() => document.querySelector('#app-status').dataset.status === 'stored'", timeout=180_000
                    )
                    page.reload(wait_until="load")  # the page and its worker now come from the stored shell
                    pages[site] = page
                for trial in range(args.trials + 1):
                    for way in ways[trial % 3 :] + ways[: trial % 3]:
                        job = {"bench": way, "threads": args.threads}
                        reply: dict[str, Any] = pages["whole" if way == "whole" else "parts"].evaluate(
                            TRIAL_JS, [job, model]
                        )
                        if "error" in reply:
                            raise SystemExit(f"{way}: {reply['error']}")
                        via = f" (.wasm from the {reply['via']})" if reply.get("via") else ""
                        print(
                            f"trial {trial}/{args.trials} {way}: {reply['ready']:.0f} ms{via}",
                            file=sys.stderr,
                            flush=True,
                        )
                        if trial == 0:
                            continue  # warm-up: each way's first start fills the browser's caches
                        times[way].append(float(reply["ready"]))
                        if reply["joined"] is not None:
                            joined[way].append(float(reply["joined"]))
            finally:
                context.close()
    print(f"onnxruntime-web started and one session created; {args.trials} trials each, {args.threads} threads")
    print("| the .wasm | median ms | min ms | max ms |")
    print("|---|---|---|---|")
    print(f"| in parts, as the app starts it (the service worker's joined copy) | {summary(times['parts'])} |")
    print(f"| in parts joined in the worker (`wasmBinary`: no service worker) | {summary(times['join'])} |")
    print(f"| of which: the parts fetched, joined and hashed | {summary(joined['join'])} |")
    print(f"| whole, fetched by onnxruntime ({args.baseline}) | {summary(times['whole'])} |")
    difference = statistics.median(times["parts"]) - statistics.median(times["whole"])
    print(f"median difference (as the app starts - whole): {difference:+.1f} ms")


if __name__ == "__main__":
    main()
