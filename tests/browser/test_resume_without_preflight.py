"""A model on another origin whose host refuses CORS preflights, as the Hub's storage host has been reported to do
(store/download.js): a download cut mid-file resumes with `Range` + `If-Range`, which needs a preflight; the host
refuses the OPTIONS, so the app downloads that file again from its start, says so in one line under the image, and
generates. Chromium, the tiny model, the app's page and worker as a user runs them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from helpers import generate_through_form

from builder.repo import manifest as repo
from builder.site.bundle import build
from builder.site.server import create_app, serve_in_thread

pytestmark = pytest.mark.browser


@dataclass
class StorageHost:
    """Serves a model folder to other origins (CORS for GET and HEAD, strong ETags, Range), refuses every OPTIONS,
    and cuts the first GET of `cut` half-way."""

    root: Path
    cut: str
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Range

    def handler(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_OPTIONS(self) -> None:
                host.requests.append(("OPTIONS", urlsplit(self.path).path, None))
                self.send_response(405)  # no Access-Control-* headers: the preflight fails
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, *, body: bool) -> None:
                path = unquote(urlsplit(self.path).path).lstrip("/")
                asked = self.headers.get("Range")
                host.requests.append((self.command, path, asked))
                file = host.root / path
                if not file.is_file():
                    self.send_response(404)
                    self.cors()
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = file.read_bytes()
                etag = f'"{len(data)}-{file.stat().st_mtime_ns}"'
                start = int(asked.removeprefix("bytes=").rstrip("-")) if asked else 0
                if asked and self.headers.get("If-Range") not in (None, etag):
                    start = 0
                self.send_response(206 if start else 200)
                self.cors()
                self.send_header("ETag", etag)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                first_get = [r for r in host.requests if r[:2] == ("GET", path)] == [("GET", path, asked)]
                if path == host.cut and first_get:
                    self.wfile.write(data[start : len(data) // 2])
                    self.wfile.flush()
                    time.sleep(2)  # the page reads and stores what came before the connection breaks
                    self.close_connection = True  # the rest never comes: a cut connection
                    return
                self.wfile.write(data[start:])

            def cors(self) -> None:
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Access-Control-Expose-Headers", "ETag, Content-Length, Content-Range")
                self.send_header("Cross-Origin-Resource-Policy", "cross-origin")

        return Handler


@contextmanager
def storage_host(root: Path, cut: str) -> Iterator[tuple[str, StorageHost]]:
    host = StorageHost(root, cut)
    server = ThreadingHTTPServer(("127.0.0.1", 0), host.handler())
    threading.Thread(target=server.serve_forever, name="storage-host", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", host
    finally:
        server.shutdown()
        server.server_close()


def test_a_resume_the_host_will_not_preflight_starts_the_file_over_and_says_so(
    fresh_context: Any, tiny_models: dict[str, Path], tmp_path: Path, node_modules: Path
) -> None:
    model = tiny_models["fp32"]
    files = repo.load(model).files
    cut = max((path for path in files if path.endswith((".onnx", ".onnx_data"))), key=lambda path: files[path].size)
    with storage_host(model, cut) as (base, host):
        dist = build(tmp_path / "dist", model_base=base).out_dir
        with serve_in_thread(create_app(dist)) as port:
            page = fresh_context.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            generate_through_form(page, prompt="a harbour at night", seed=11)
            notes = page.inner_text("#notes")
    of_the_file = [(method, asked) for method, path, asked in host.requests if path.lstrip("/") == cut]
    # Cut half-way; the resume's preflight refused (the browser never sent the Range request itself); the host
    # answers a plain HEAD; the whole file again, without conditions.
    assert of_the_file[0] == ("GET", None)
    assert ("OPTIONS", None) in of_the_file
    assert not [asked for method, asked in of_the_file if method == "GET" and asked is not None]
    assert of_the_file[-1] == ("GET", None) and of_the_file.count(("GET", None)) == 2, of_the_file
    line = f"{base}{cut} could not be resumed (the request for the rest failed: the host refused its CORS preflight)"
    assert line in notes, notes
    assert notes.count("could not be resumed") == 1, notes
