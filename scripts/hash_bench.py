"""What checking the bytes costs the model store, and how fast the store fills: SHA-256 and downloads in Chromium.

    python scripts/hash_bench.py [--gb 1.8] [--repeat 2] [--sources synthetic,fetch,webcrypto]
    python scripts/hash_bench.py --store [--files 1.80,0.51,1.80,0.97,0.10] [--at-once 4] [--helpers 0,N]
        [--check blocks,whole-file] [--no-baseline]

Streams (the default): the store's hashing module (web_src/src/store/hashing.js) bundled into a worker reads a
1.8 GB stream (the size of the largest seed-repo file) once without hashing and once feeding every chunk to the
hasher, and prints the throughput and the seconds hashing adds. Sources: `synthetic` (a ReadableStream made in the
worker: the hashing cost alone), `fetch` (the same bytes over HTTP from a loopback server, read like the downloader
reads them) and `webcrypto` (crypto.subtle.digest of each 16 MiB chunk on its own: the browser's native SHA-256,
what the store uses per block when the manifest lists block hashes).

--store: the app's own WeightStore (web_src/src/store/weights.js) fills an empty store from a loopback server with
files of the given sizes in GB (by default the q4f16 set's five weight files) and checks every byte, in a fresh
persistent profile: first (the baseline) one file at a time, fetched, written and hashed on the store's thread, then
`--at-once` files at once the app's way, each download in a helper worker (store/store_workers.js; `--helpers N`:
at most N download helpers, 0: all on the store's thread), checked by each `--check`: `blocks` (the manifest lists
block hashes: WebCrypto per 16 MiB block, store/block_check.js) or `whole-file` (the file's SHA-256 in hash-wasm,
in a hashing helper), and prints GB/s for each. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from builder import WEB_SRC
from builder.check.driver.chromium import find_chromium, launch_persistent
from builder.node import ensure_node_modules, find_node
from builder.repo import verify
from builder.site.chrome import launch_args

MIB = 1024 * 1024
# The q4f16 set's weight files, in GB: text encoder and transformer data (two files each), the fp16 VAE decoder.
DEFAULT_FILES = "1.80,0.51,1.80,0.97,0.10"

STREAM_WORKER = """
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
        if (hasher) await hasher.update(value);
    }
    const digest = hasher ? await hasher.hex() : null;
    return { bytes, seconds: (performance.now() - started) / 1000, digest };
}

/** WebCrypto's digest of each 16 MiB piece on its own (no incremental digest exists): native SHA-256 speed. */
async function webcrypto(total, hash) {
    const piece = new Uint8Array(16 * MIB);
    for (let i = 0; i < piece.length; i += 65536) crypto.getRandomValues(piece.subarray(i, i + 65536));
    const started = performance.now();
    let bytes = 0;
    while (bytes < total) {
        const n = Math.min(piece.length, total - bytes);
        if (hash) await crypto.subtle.digest('SHA-256', piece.subarray(0, n));
        else piece.slice(0, n);
        bytes += n;
    }
    return { bytes, seconds: (performance.now() - started) / 1000 };
}

onmessage = async ({ data }) => {
    try {
        if (data.source === 'webcrypto') return postMessage(await webcrypto(data.total, data.hash));
        const stream = data.source === 'fetch' ? (await fetch(data.url, { cache: 'no-store' })).body : synthetic(data.total);
        postMessage(await consume(stream, data.hash));
    } catch (err) {
        postMessage({ error: String(err) });
    }
};
"""

STORE_WORKER = """
import { WeightStore } from %(weights)s;
import { configureStoreWorkers } from %(workers)s;

onmessage = async ({ data }) => {
    try {
        // helpers: 0 downloads and hashes on this thread; null lets the pool choose from the cores, as the app does.
        const url = data.helpers === 0 ? null : new URL('/helper.js', location.href).href;
        configureStoreWorkers(url, data.helpers ? { workers: data.helpers } : {});
        await WeightStore.clear();
        const store = await WeightStore.open(data.base);
        const started = performance.now();
        const result = await store.ensure(data.files, { downloadsAtOnce: data.atOnce });
        const seconds = (performance.now() - started) / 1000;
        store.close();
        await WeightStore.clear();
        postMessage({ bytes: result.downloadedBytes, files: result.files, seconds });
    } catch (err) {
        postMessage({ error: `${err?.name}: ${err?.message ?? err}` });
    }
};
"""

PAGE = "<!doctype html><meta charset=utf-8><title>hash bench</title>"

RUN_JS = """async ([script, job]) => {
    const worker = new Worker(script, { type: 'module' });
    const result = await new Promise((resolve) => { worker.onmessage = (e) => resolve(e.data); worker.postMessage(job); });
    worker.terminate();
    return result;
}"""


def bundle(out: Path, name: str, source: str) -> Path:
    """`source` (a worker entry importing the app's modules) bundled with the app's esbuild into out/name."""
    ensure_node_modules(log=lambda _msg: None)
    entry = out / f"{name}.entry.js"
    entry.write_text(source)
    target = out / name
    esbuild = WEB_SRC / "node_modules" / ".bin" / "esbuild"
    subprocess.run(
        [str(esbuild), str(entry), "--bundle", "--format=esm", f"--outfile={target}", "--log-level=warning"],
        cwd=WEB_SRC,
        env=find_node().env(),
        check=True,
    )
    return target


def module_path(relative: str) -> str:
    return json.dumps((WEB_SRC / "src" / relative).as_posix())


def file_bytes(index: int, size: int) -> Iterator[bytes]:
    """The bytes of synthetic file `index`: a random 1 MiB block, shifted per file so the files differ."""
    block = hashlib.sha256(str(index).encode()).digest() * (MIB // 32)
    sent = 0
    while sent < size:
        n = min(MIB, size - sent)
        yield block[:n]
        sent += n


@contextmanager
def server(scripts: dict[str, Path], sizes: dict[str, int]) -> Iterator[str]:
    """A loopback HTTP server: the page, the bundled scripts, /stream/N (N bytes) and /files/NAME (`sizes`)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def send_bytes(self, total: int, chunks: Iterator[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(total))
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(chunk)

        def do_GET(self) -> None:
            if self.path.startswith("/stream/"):
                total = int(self.path.removeprefix("/stream/"))
                self.send_bytes(total, file_bytes(0, total))
                return
            if self.path.startswith("/files/") and self.path.removeprefix("/files/") in sizes:
                name = self.path.removeprefix("/files/")
                self.send_bytes(sizes[name], file_bytes(int(name.split(".")[0]), sizes[name]))
                return
            if self.path in scripts:
                body, kind = scripts[self.path].read_bytes(), "text/javascript"
            elif self.path == "/":
                body, kind = PAGE.encode(), "text/html"
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


def run_streams(args: argparse.Namespace) -> None:
    total = int(args.gb * 1e9)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        scripts = {
            "/bench.js": bundle(Path(tmp), "bench.js", STREAM_WORKER % {"hashing": module_path("store/hashing.js")})
        }
        browser = playwright.chromium.launch(
            executable_path=str(find_chromium()), headless=True, args=launch_args(gpu=False)
        )
        print(f"{browser.version} headless; stream {total / 1e9:.2f} GB; best of {args.repeat}")
        with server(scripts, {}) as base:
            page = browser.new_page()
            page.goto(base + "/")
            for source in args.sources.split(","):
                best: dict[bool, float] = {}
                for _ in range(args.repeat):
                    for hash_it in (False, True):
                        job = {"source": source, "hash": hash_it, "total": total, "url": f"{base}/stream/{total}"}
                        result = page.evaluate(RUN_JS, ["/bench.js", job])
                        if "error" in result:
                            raise SystemExit(f"{source}: {result['error']}")
                        assert result["bytes"] == total, result
                        best[hash_it] = min(best.get(hash_it, float("inf")), result["seconds"])
                plain, hashed = best[False], best[True]
                if source == "webcrypto":
                    print(
                        f"{source:9}  SHA-256 of each 16 MiB piece {hashed:6.1f} s ({total / hashed / 1e6:6.0f} MB/s): "
                        "the browser's native speed, which has no incremental digest"
                    )
                    continue
                print(
                    f"{source:9}  read only {plain:6.1f} s ({total / plain / 1e6:7.0f} MB/s)   "
                    f"read + SHA-256 {hashed:6.1f} s ({total / hashed / 1e6:6.0f} MB/s)   "
                    f"hashing adds {hashed - plain:5.1f} s"
                )
        browser.close()


def run_store(args: argparse.Namespace) -> None:
    gigabytes = [float(part) for part in args.files.split(",") if part.strip()]
    sizes = {f"{index}.bin": int(gb * 1e9) for index, gb in enumerate(gigabytes)}
    print(f"hashing {sum(sizes.values()) / 1e9:.2f} GB for the manifest ...", flush=True)
    digests: dict[str, verify.Digests] = {}
    for name, size in sizes.items():
        stream = verify.DigestStream()
        for chunk in file_bytes(int(name.split(".")[0]), size):
            stream.update(chunk)
        digests[name] = stream.digests()
    total = sum(sizes.values())
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        scripts = {
            "/store.js": bundle(
                Path(tmp),
                "store.js",
                STORE_WORKER
                % {"weights": module_path("store/weights.js"), "workers": module_path("store/store_workers.js")},
            ),
            "/helper.js": bundle(Path(tmp), "helper.js", f"import {module_path('store/store_worker.js')};\n"),
        }
        context = launch_persistent(playwright, Path(tmp) / "profile", executable=find_chromium())
        try:
            with server(scripts, sizes) as base:
                page = context.new_page()
                page.goto(base + "/")
                cores = page.evaluate("() => navigator.hardwareConcurrency")
                print(
                    f"{context.browser.version if context.browser else 'Chromium'} headless, {cores} cores; "
                    f"{len(sizes)} files, {total / 1e9:.2f} GB from a loopback server, every digest checked"
                )
                runs = [(1, 0, "whole-file")] if args.baseline else []
                runs += [(args.at_once, helpers, check) for check in args.check for helpers in args.helpers]
                for at_once, helpers, check in runs:
                    files = [
                        {"path": name, "size": size, "sha256": digests[name].sha256}
                        | ({"blocks": asdict(digests[name].blocks)} if check == "blocks" else {})
                        for name, size in sizes.items()
                    ]
                    job: dict[str, Any] = {
                        "base": f"{base}/files/",
                        "files": files,
                        "atOnce": at_once,
                        "helpers": helpers,
                    }
                    started = time.perf_counter()
                    result = page.evaluate(RUN_JS, ["/store.js", job])
                    if "error" in result:
                        raise SystemExit(f"store: {result['error']}")
                    assert result["bytes"] == total, result
                    how = (
                        "on the store's thread"
                        if helpers == 0
                        else f"in at most {helpers} helper worker(s)"
                        if helpers
                        else "in the app's helper workers"
                    )
                    checked = "by block hashes (WebCrypto)" if check == "blocks" else "by SHA-256 (hash-wasm)"
                    print(
                        f"  {at_once} file(s) at once, downloaded {how}, checked {checked}: {result['seconds']:6.1f} s "
                        f"({total / result['seconds'] / 1e9:.3f} GB/s; {time.perf_counter() - started:.1f} s "
                        "with clearing the store)",
                        flush=True,
                    )
        finally:
            context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.8, help="stream size in GB (10^9 bytes)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per source (the best of each is kept)")
    parser.add_argument("--sources", default="synthetic,fetch,webcrypto")
    parser.add_argument("--store", action="store_true", help="time the app's store filling instead")
    parser.add_argument("--files", default=DEFAULT_FILES, help="--store: the files' sizes in GB, comma-separated")
    parser.add_argument("--at-once", type=int, default=4, help="--store: files downloading at once")
    parser.add_argument(
        "--helpers",
        default="",
        help="--store: download helper counts to time, comma-separated (default: the app's own choice from the cores)",
    )
    parser.add_argument(
        "--check",
        default="blocks,whole-file",
        help="--store: how the app checks the bytes, comma-separated: blocks (the manifest's block hashes, WebCrypto), "
        "whole-file (the file's SHA-256, hash-wasm)",
    )
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--store: time one file at a time on the store's thread first",
    )
    args = parser.parse_args()
    if args.store:
        args.helpers = [int(n) for n in args.helpers.split(",") if n.strip()] or [None]
        args.check = [c.strip() for c in args.check.split(",") if c.strip()]
        if set(args.check) - {"blocks", "whole-file"}:
            parser.error(f"--check takes blocks and whole-file, got {','.join(args.check)}")
        run_store(args)
    else:
        run_streams(args)


if __name__ == "__main__":
    main()
