"""The lab's HTTP server (the standard library's, so the lab runs where only Python and numpy are): the built lab,
cases.json, and the page's reports (POST api/env, api/log, api/result, api/done) into a queue the run reads."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".onnx": "application/octet-stream",
    ".map": "application/json",
}
# The page's reports are JSON of at most a few MB (sampled output rows).
MAX_REPORT_BYTES = 256 * 1024 * 1024


class LabServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site_dir: Path, cases: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), LabHandler)
        self.site_dir = Path(site_dir).resolve()
        self.cases = json.dumps(cases).encode()
        self.reports: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/lab.html"


class LabHandler(BaseHTTPRequestHandler):
    server: LabServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the page's own log lines are the progress

    def _send(self, status: int, body: bytes, media_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].lstrip("/")
        if path == "cases.json":
            self._send(200, self.server.cases, MEDIA_TYPES[".json"])
            return
        target = (self.server.site_dir / path).resolve()
        # Nothing outside the lab's folder is served.
        if self.server.site_dir not in target.parents or not target.is_file():
            self._send(404, b"not found", "text/plain")
            return
        self._send(200, target.read_bytes(), MEDIA_TYPES.get(target.suffix, "application/octet-stream"))

    def do_POST(self) -> None:
        kind = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
        length = int(self.headers.get("Content-Length") or 0)
        if kind not in ("env", "log", "result", "done") or not 0 < length <= MAX_REPORT_BYTES:
            self._send(400, b"bad report", "text/plain")
            return
        try:
            report = json.loads(self.rfile.read(length))
        except ValueError:
            self._send(400, b"not JSON", "text/plain")
            return
        self.server.reports.put((kind, report))
        self._send(204, b"", "text/plain")


@contextlib.contextmanager
def serving(site_dir: Path, cases: list[dict[str, Any]]) -> Iterator[LabServer]:
    server = LabServer(site_dir, cases)
    thread = threading.Thread(target=server.serve_forever, name="kernel-lab-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
