"""What hashing costs the model store: SHA-256 of a 1.8 GB stream in a worker of headless Chromium.

    python scripts/hash_bench.py [--gb 1.8] [--repeat 2]

The store hashes every model file as it streams in (web_src/src/store/hashing.js, in the worker). This bundles
that very module into a worker, then reads a 1.8 GB stream (the size of the largest seed-repo file) twice per
round: once without hashing, once feeding every chunk to the hasher, and prints the throughput and the seconds
hashing adds. Two sources: `synthetic` (a ReadableStream made in the worker: the hashing cost alone) and `fetch`
(the same bytes over HTTP from a loopback server, read like the downloader reads them). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from builder import WEB_SRC
from builder.check.driver.chromium import find_chromium
from builder.site.chrome import launch_args
from builder.site.node import ensure_node_modules, find_node

MIB = 1024 * 1024

WORKER = """
import { createSha256 } from %(hashing)s;

const MIB = 1024 * 1024;

/** A stream of `total` bytes in fresh 1 MiB chunks (fetch hands out fresh buffers too). */
function synthetic(total) {
    const block = new Uint8Array(MIB);
    for (let i = 0; i < MIB; i += 65536) crypto.getRandomValues(block.subarray(i, i + 65536));
    let sent = 0;
    return new ReadableStream({
        pull(controller) {
            if (sent >= total) return controller.close();
            const n = Math.min(MIB, total - sent);
            controller.enqueue(block.slice(0, n));
            sent += n;
        },
    }, { highWaterMark: 4 });
}

async function consume(stream, hash) {
    const hasher = hash ? await createSha256() : null;
    const reader = stream.getReader();
    const started = performance.now();
    let bytes = 0;
    for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        bytes += value.byteLength;
        if (hasher) hasher.update(value);
    }
    const digest = hasher ? hasher.hex() : null;
    return { bytes, seconds: (performance.now() - started) / 1000, digest };
}

onmessage = async ({ data }) => {
    try {
        const stream = data.source === 'fetch' ? (await fetch(data.url, { cache: 'no-store' })).body : synthetic(data.total);
        postMessage(await consume(stream, data.hash));
    } catch (err) {
        postMessage({ error: String(err) });
    }
};
"""

PAGE = "<!doctype html><meta charset=utf-8><title>hash bench</title>"

RUN_JS = """async (job) => {
    const worker = new Worker('/bench.js', { type: 'module' });
    const result = await new Promise((resolve) => { worker.onmessage = (e) => resolve(e.data); worker.postMessage(job); });
    worker.terminate();
    return result;
}"""


def bundle_worker(out: Path) -> Path:
    """The benchmark worker with the app's hashing module (and its hash-wasm) bundled in by the app's esbuild."""
    ensure_node_modules(log=lambda _msg: None)
    entry = out / "entry.js"
    entry.write_text(WORKER % {"hashing": json.dumps((WEB_SRC / "src" / "store" / "hashing.js").as_posix())})
    target = out / "bench.js"
    esbuild = WEB_SRC / "node_modules" / ".bin" / "esbuild"
    subprocess.run(
        [str(esbuild), str(entry), "--bundle", "--format=esm", f"--outfile={target}", "--log-level=warning"],
        cwd=WEB_SRC,
        env=find_node().env(),
        check=True,
    )
    return target


@contextmanager
def server(worker_js: Path, total: int) -> Iterator[str]:
    """A loopback HTTP server: the page, the worker, and /stream (`total` bytes with a Content-Length)."""
    block = bytes(range(256)) * (MIB // 256)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/bench.js":
                body, kind = worker_js.read_bytes(), "text/javascript"
            elif self.path == "/":
                body, kind = PAGE.encode(), "text/html"
            elif self.path == "/stream":
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(total))
                self.end_headers()
                sent = 0
                while sent < total:
                    n = min(MIB, total - sent)
                    self.wfile.write(block[:n])
                    sent += n
                return
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.8, help="stream size in GB (10^9 bytes)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per source (the best of each is kept)")
    parser.add_argument("--sources", default="synthetic,fetch")
    args = parser.parse_args()
    total = int(args.gb * 1e9)

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        worker_js = bundle_worker(Path(tmp))
        browser = playwright.chromium.launch(
            executable_path=str(find_chromium()), headless=True, args=launch_args(gpu=False)
        )
        print(f"{browser.version} headless; stream {total / 1e9:.2f} GB; best of {args.repeat}")
        with server(worker_js, total) as base:
            page = browser.new_page()
            page.goto(base + "/")
            for source in args.sources.split(","):
                best: dict[bool, float] = {}
                for _ in range(args.repeat):
                    for hash_it in (False, True):
                        result = page.evaluate(
                            RUN_JS, {"source": source, "hash": hash_it, "total": total, "url": base + "/stream"}
                        )
                        if "error" in result:
                            raise SystemExit(f"{source}: {result['error']}")
                        assert result["bytes"] == total, result
                        best[hash_it] = min(best.get(hash_it, float("inf")), result["seconds"])
                plain, hashed = best[False], best[True]
                print(
                    f"{source:9}  read only {plain:6.1f} s ({total / plain / 1e6:7.0f} MB/s)   "
                    f"read + SHA-256 {hashed:6.1f} s ({total / hashed / 1e6:6.0f} MB/s)   "
                    f"hashing adds {hashed - plain:5.1f} s"
                )
        browser.close()


if __name__ == "__main__":
    main()
