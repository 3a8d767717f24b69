"""`klein-web load-bench`: can Chromium hold this model? Every session created and released, peaks measured.

Running the full-size pipeline on a software adapter (SwiftShader, the WebGPU of a machine without a GPU) takes
hours; creating its sessions takes minutes. So this drives the app's worker through its `load` request
(web_src/src/pipeline/load_sessions.js), one session at a time, in a fresh browser profile:

    1. store     every file the chosen graphs need, fetched from a local server into the browser's store
                 (bytes, seconds, GB/s);
    2. sessions  the text encoder, the transformer once per size (its size class and pinned dims, as an image of
                 that size creates it), the VAE decoder: each created, then released before the next;

and reports, per row, the session's creation time and the peaks while it was created: Chromium's renderer (the
page and its worker, where onnxruntime's wasm heap lives) and GPU process (on a software adapter it holds the
"GPU" buffers in CPU memory), the wasm heap, and GPU memory where NVML exists. A memory regression at real
size shows here without a GPU. Results go to OUT/load-bench.json and OUT/load-bench.md.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.check.bench.browser_common import check_variant, run_environment
from builder.check.bench.output import check_out
from builder.check.driver.memory import BrowserMemorySampler
from builder.check.driver.serving import ByteCounter, check_models, serving, site
from builder.check.driver.session import launched, local_session, probe_adapter
from builder.check.driver.wasm_heap import hooked_worker, wasm_heap_bytes
from builder.errors import InputError, RegressionError
from builder.pipeline.limits import parse_size
from builder.repo.files import atomic_write_bytes

Log = Callable[[str], None]

JSON_NAME = "load-bench.json"
MARKDOWN_NAME = "load-bench.md"

# Starts the app's worker in a page whose own UI script is blocked, so only this worker loads models.
START_WORKER_JS = """(url) => { globalThis.__kleinWorker = new Worker(url, {type: 'module'}); return true; }"""
# One protocol request; resolves with the final message (result or error) and the stages it announced.
REQUEST_JS = """([type, fields]) => new Promise((resolve) => {
    const worker = globalThis.__kleinWorker;
    const id = `${type}-${Math.random().toString(36).slice(2)}`;
    const stages = [];
    const listen = (message) => {
        const data = message.data;
        if (!data || data.id !== id) return;
        if (data.type === 'stage') stages.push(data.detail ? `${data.stage}:${data.detail}` : data.stage);
        if (data.type !== 'result' && data.type !== 'error') return;
        worker.removeEventListener('message', listen);
        resolve({final: data, stages});
    };
    worker.addEventListener('message', listen);
    worker.postMessage({type, id, ...fields});
})"""


@dataclass
class LoadRow:
    """One measured step: the store filling (`component` 'store') or one session created and released."""

    component: str
    size: str
    graph: str
    seconds: float
    read_seconds: float | None  # of `seconds`, reading the files from the browser's store
    bytes: int
    memory: dict[str, Any]
    wasm_heap_gib: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class WorkerDriver:
    """The app's worker in one page, spoken to through the page <-> worker protocol (web_src/src/protocol.js)."""

    def __init__(self, context: Any, base_url: str) -> None:
        self.page = context.new_page()
        # The page's own script is not run: it would start a second worker. (The context blocks the service
        # worker, whose cached answers this route would not see.)
        self.page.route(
            "**/assets/page-*.js", lambda route: route.fulfill(status=200, body="", content_type="text/javascript")
        )
        self.page.goto(base_url + "/", wait_until="load")
        worker_path = self.page.get_attribute('meta[name="klein-worker"]', "content")
        if not worker_path:
            raise RegressionError("the served index.html names no worker (<meta name=klein-worker>): rebuild the app")
        self.page.evaluate(START_WORKER_JS, f"{base_url}/{worker_path}")
        self.worker = hooked_worker(self.page)

    def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        reply = self.page.evaluate(REQUEST_JS, [kind, fields])
        final = reply["final"]
        if final["type"] == "error":
            error = final.get("error") or {}
            raise RegressionError(f"the worker refused `{kind}`: {error.get('code')}: {error.get('message')}")
        return dict(final["result"])

    def wasm_heap_gib(self) -> float | None:
        size = wasm_heap_bytes(self.worker)
        return None if size is None else size / 2**30

    def close(self) -> None:
        self.page.close()


def measure(
    driver: WorkerDriver,
    *,
    model_base: str,
    sizes: Sequence[str],
    precision: str | None,
    counter: ByteCounter,
    sampler: BrowserMemorySampler,
    log: Log,
    repeat: int = 0,
) -> list[LoadRow]:
    rows: list[LoadRow] = []
    base: dict[str, Any] = {"modelBase": model_base, **({"precision": precision} if precision else {})}

    def load(size: str, components: list[str]) -> dict[str, Any]:
        width, height = parse_size(size)
        counter.bytes = 0
        sampler.reset()
        result = driver.request("load", params={**base, "width": width, "height": height, "components": components})
        # A session of a small model can come and go between two of the sampler's readings: take one now.
        sampler.sample()
        return result

    # 1. The store: every file of the graphs chosen at the first size, no session.
    started = time.perf_counter()
    result = load(sizes[0], [])
    rows.append(
        LoadRow(
            component="store",
            size=sizes[0],
            graph="all files",
            seconds=time.perf_counter() - started,
            read_seconds=None,
            bytes=counter.bytes,
            memory=sampler.figures(),
            wasm_heap_gib=driver.wasm_heap_gib(),
        )
    )
    log(f"  store: {counter.bytes / 1e9:.2f} GB in {rows[-1].seconds:.1f} s")
    for note in result.get("notes", []):
        log(f"  note: {note}")

    # 2. Each session on its own. Sizes beyond the first may choose other transformer graphs (size classes),
    #    whose files the store fetches then (counted in that row's bytes).
    #    `repeat` more transformers at the first size follow, as a user switching sizes re-creates it: memory
    #    that is not given back when a session is released shows as peaks that grow from row to row.
    plan = [("text_encoder", sizes[0])] + [("transformer", size) for size in sizes] + [("vae_decoder", sizes[-1])]
    plan += [("transformer", sizes[0])] * repeat
    for index, (component, size) in enumerate(plan):
        result = load(size, [component])
        graph = result["graphs"][component]
        label = component if index < len(plan) - repeat else f"{component} (again)"
        rows.append(
            LoadRow(
                component=label,
                size=size,
                graph=f"{graph['path']} ({graph['variant']}/{graph['ep']})",
                seconds=float(graph["loadMs"]) / 1000,
                read_seconds=float(graph["readMs"]) / 1000,
                bytes=int(graph["bytes"]),
                memory=sampler.figures(),
                wasm_heap_gib=driver.wasm_heap_gib(),
            )
        )
        rss = rows[-1].memory["rss_gib"]
        log(
            f"  {label} {size}: {rows[-1].seconds:.1f} s (reading the store {graph['readMs'] / 1000:.1f} s), "
            f"{graph['bytes'] / 1e9:.2f} GB of files, renderer {rss.get('renderer', 0):.1f} GiB, "
            f"GPU process {rss.get('gpu-process', 0):.1f} GiB peak"
        )
    return rows


def markdown(environment: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    def num(value: Any, digits: int = 1) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    title = (
        f"{environment['adapter']} · {environment['browser']} · "
        f"onnxruntime-web {environment['onnxruntime_web']} · {environment['date']}"
    )
    header = (
        "| what | size | graph | seconds | of which store read s | GB | renderer peak GiB | GPU process peak GiB "
        "| wasm heap GiB | GPU GiB |"
    )
    lines = [title, "", header, "|" + "---|" * 10]
    for r in rows:
        rss = r["memory"]["rss_gib"]
        lines.append(
            f"| {r['component']} | {r['size']} | {r['graph']} | {num(r['seconds'])} | "
            f"{num(r['read_seconds'])} | "
            f"{num(r['bytes'] / 1e9, 2)} | {num(rss.get('renderer'))} | {num(rss.get('gpu-process'))} | "
            f"{num(r['wasm_heap_gib'], 2)} | {num(r['memory']['gpu_gib'])} |"
        )
    return lines


def main(
    out_dir: Path,
    *,
    models_dir: Path,
    log: Log,
    sizes: Sequence[str] = ("512x512", "1024x1024"),
    precision: str | None = None,
    gpu: bool = False,
    browser_path: Path | None = None,
    dist_dir: Path | None = None,
    f16_toggle: bool = True,
    repeat: int = 0,
) -> list[dict[str, Any]]:
    # 1. Check inputs before anything slow starts.
    models_dir, repo = check_models(models_dir, log=log)
    if precision is not None:
        if not precision.strip():
            raise InputError(
                "--precision is empty; give a transformer variant (e.g. q4), or leave it out for the app's choice."
            )
        check_variant(repo, models_dir, precision)
    if not sizes:
        raise InputError("--sizes is empty; give one or more image sizes, e.g. --sizes 512x512.")
    for size in sizes:
        parse_size(size, where="--sizes")
    if not 0 <= repeat <= 20:
        raise InputError(f"--repeat {repeat}: give 0 to 20 more transformer sessions.")
    out_dir = check_out(out_dir, json_name=JSON_NAME, markdown_name=MARKDOWN_NAME)
    session = local_session(browser_path, gpu=gpu, f16_toggle=f16_toggle)

    # 2. Serve the app and the models in a fresh profile (an empty store), sampling memory throughout.
    dist_dir = site(dist_dir, log=log)
    counter, sampler = ByteCounter(), BrowserMemorySampler()
    rows: list[dict[str, Any]] = []
    sampler.start()
    try:
        with (
            serving(dist_dir, models_dir, log=log, models_manifest=repo, middleware=counter.wrap) as base_url,
            tempfile.TemporaryDirectory(prefix="klein-load-profile-") as profile,
            launched(session, log=log, profile=Path(profile), service_workers="block"),
        ):
            session.adapter = probe_adapter(session, base_url)
            driver = WorkerDriver(session.context, base_url)
            try:
                measured = measure(
                    driver,
                    model_base=f"{base_url}/models/",
                    sizes=sizes,
                    precision=precision,
                    counter=counter,
                    sampler=sampler,
                    log=log,
                    repeat=repeat,
                )
            finally:
                driver.close()
            rows = [row.as_dict() for row in measured]
    finally:
        sampler.stop()
    environment = {**run_environment(session, models_dir, dist_dir), "precision": precision}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown(environment, rows)
    atomic_write_bytes(
        out_dir / JSON_NAME, (json.dumps({"environment": environment, "rows": rows}, indent=1) + "\n").encode("utf-8")
    )
    atomic_write_bytes(out_dir / MARKDOWN_NAME, ("\n".join(table) + "\n").encode("utf-8"))
    for line in table:
        log(line)
    return rows
