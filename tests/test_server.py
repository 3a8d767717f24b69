"""`klein-web serve` (builder/site/server.py): headers, MIME types, Range, conditional requests, path containment.

Most tests run `create_app` under a real uvicorn on a free loopback port (in a thread) and talk to it with
http.client, which sends the request target exactly as given: no client-side `..` normalisation.
The CLI tests start the real `python -m builder serve` subprocess through the conftest fixture.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
from stub_repo import write_stub_repo

from builder import DEFAULT_MODEL_BASE, REPO_ROOT
from builder.errors import BuildError, ServeError
from builder.site.bundle import build, read_record
from builder.site.server import check_prebuilt, create_app, serve_in_thread, watch_and_rebuild

ISOLATION = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "cross-origin-resource-policy": "same-origin",
}
SECRET = b"klein-secret-must-never-be-served-" + os.urandom(8).hex().encode()
MIB = 1024 * 1024


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def request(port: int, target: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)  # target sent verbatim
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small dist and model repo with one file per MIME type, plus a secret and symlinks beside them."""
    root = tmp_path_factory.mktemp("serve")
    dist, models = root / "dist", root / "models"
    (dist / "assets").mkdir(parents=True)
    (models / "transformer").mkdir(parents=True)
    (root / "secret.txt").write_bytes(SECRET)
    (dist / "index.html").write_text("<!doctype html><title>klein</title>")
    (dist / "_headers").write_text("/*\n")
    (dist / ".klein-build.json").write_text('{"csp": "default-src \'self\'"}')
    (dist / "coi-sw.js").write_text("self.addEventListener('fetch', () => {});")
    (dist / "assets" / "page-ABCDEFGH.js").write_text("console.log(1);")
    (dist / "assets" / "page-ABCDEFGH.css").write_text("body{}")
    (dist / "assets" / "page-ABCDEFGH.js.map").write_text("{}")
    (dist / "assets" / "ort-1234567890.mjs").write_text("export default 1;")
    (dist / "assets" / "ort-1234567890.wasm").write_bytes(b"\0asm\1\0\0\0")
    (dist / "icon.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (dist / "manifest.webmanifest").write_text('{"name": "klein"}')
    (dist / "inside-link.html").symlink_to(dist / "index.html")
    (dist / "outside-link.txt").symlink_to(root / "secret.txt")
    (dist / "outside-dir").symlink_to(root, target_is_directory=True)
    (models / "manifest.json").write_text('{"format": "klein-web-model-repo"}')
    (models / "transformer" / "transformer_q4.onnx").write_bytes(os.urandom(2000))
    (models / "transformer" / "transformer_q4.onnx_data").write_bytes(os.urandom(10_000))
    (models / "transformer" / "transformer_q4.onnx_data_1").write_bytes(os.urandom(3000))
    (models / "escape.onnx_data").symlink_to(root / "secret.txt")
    return {"root": root, "dist": dist, "models": models}


@pytest.fixture(scope="module")
def port(site: dict[str, Path]) -> Iterator[int]:
    with serve_in_thread(create_app(site["dist"], site["models"])) as port:
        yield port


@pytest.fixture(scope="module")
def port_without_models(site: dict[str, Path]) -> Iterator[int]:
    with serve_in_thread(create_app(site["dist"])) as port:
        yield port


# ---------------------------------------------------------------------------------------------- headers and types


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("/", "text/html; charset=utf-8"),
        ("/index.html", "text/html; charset=utf-8"),
        ("/coi-sw.js", "text/javascript; charset=utf-8"),
        ("/assets/page-ABCDEFGH.js", "text/javascript; charset=utf-8"),
        ("/assets/ort-1234567890.mjs", "text/javascript; charset=utf-8"),
        ("/assets/ort-1234567890.wasm", "application/wasm"),
        ("/assets/page-ABCDEFGH.css", "text/css; charset=utf-8"),
        ("/assets/page-ABCDEFGH.js.map", "application/json"),
        ("/icon.png", "image/png"),
        ("/manifest.webmanifest", "application/manifest+json"),
        ("/models/manifest.json", "application/json"),
        ("/models/transformer/transformer_q4.onnx", "application/octet-stream"),
        ("/models/transformer/transformer_q4.onnx_data", "application/octet-stream"),
        ("/models/transformer/transformer_q4.onnx_data_1", "application/octet-stream"),
    ],
)
def test_isolation_headers_and_mime_types(port: int, site: dict[str, Path], path: str, media_type: str) -> None:
    reply = request(port, path)
    assert reply.status == 200
    assert reply.headers["content-type"] == media_type
    for name, value in ISOLATION.items():
        assert reply.headers[name] == value, f"{name} on {path}"
    assert reply.headers["accept-ranges"] == "bytes"
    assert reply.headers["x-content-type-options"] == "nosniff"
    # The build record's policy, plus frame-ancestors, which only works as a header.
    assert reply.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
    relative = "index.html" if path == "/" else path.removeprefix("/models/").removeprefix("/")
    folder = site["models"] if path.startswith("/models/") else site["dist"]
    assert reply.body == (folder / relative).read_bytes()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/missing.js", 404),
        ("POST", "/index.html", 405),
        ("PUT", "/models/manifest.json", 405),
        ("DELETE", "/", 405),
        ("GET", "/assets/", 404),
    ],
)
def test_errors_are_isolated_too_and_never_cached(port: int, method: str, path: str, status: int) -> None:
    reply = request(port, path, method=method)
    assert reply.status == status
    for name, value in ISOLATION.items():
        assert reply.headers[name] == value
    assert reply.headers["cache-control"] == "no-store"
    if status == 405:
        assert set(reply.headers["allow"].split(", ")) == {"GET", "HEAD"}


def test_cache_control(port: int) -> None:
    assert request(port, "/assets/page-ABCDEFGH.js").headers["cache-control"] == "public, max-age=31536000, immutable"
    assert request(port, "/").headers["cache-control"] == "no-cache"
    assert request(port, "/coi-sw.js").headers["cache-control"] == "no-cache"
    assert request(port, "/models/manifest.json").headers["cache-control"] == "no-cache"


def test_head_sends_headers_only(port: int, site: dict[str, Path]) -> None:
    reply = request(port, "/models/transformer/transformer_q4.onnx_data", method="HEAD")
    assert reply.status == 200 and reply.body == b""
    assert reply.headers["content-length"] == "10000"
    assert reply.headers["cross-origin-embedder-policy"] == "require-corp"


# ---------------------------------------------------------------------------------------------- Range


DATA = "/models/transformer/transformer_q4.onnx_data"


@pytest.mark.parametrize(
    ("range_header", "start", "end"),
    [
        ("bytes=0-99", 0, 100),
        ("bytes=9990-20000", 9990, 10_000),  # end past the file: clipped
        ("bytes=-500", 9500, 10_000),  # suffix
        ("bytes=100-", 100, 10_000),  # open
        ("bytes=9999-9999", 9999, 10_000),
    ],
)
def test_single_range(port: int, site: dict[str, Path], range_header: str, start: int, end: int) -> None:
    data = (site["models"] / DATA.removeprefix("/models/")).read_bytes()
    reply = request(port, DATA, headers={"Range": range_header})
    assert reply.status == 206
    assert reply.body == data[start:end]
    assert reply.headers["content-range"] == f"bytes {start}-{end - 1}/{len(data)}"
    assert reply.headers["content-length"] == str(end - start)
    assert reply.headers["cross-origin-resource-policy"] == "same-origin"


@pytest.mark.parametrize("range_header", ["bytes=10000-", "bytes=20000-20100", "bytes=-0"])
def test_unsatisfiable_range_is_416(port: int, range_header: str) -> None:
    reply = request(port, DATA, headers={"Range": range_header})
    assert reply.status == 416
    assert reply.headers["content-range"] == "bytes */10000"
    assert reply.headers["cross-origin-opener-policy"] == "same-origin"


def test_if_range_with_stale_etag_sends_whole_file(port: int) -> None:
    reply = request(port, DATA, headers={"Range": "bytes=0-9", "If-Range": '"stale"'})
    assert reply.status == 200 and len(reply.body) == 10_000


# ---------------------------------------------------------------------------------------------- conditional


def test_etag_and_last_modified_give_304(port: int) -> None:
    first = request(port, DATA)
    etag, last_modified = first.headers["etag"], first.headers["last-modified"]
    by_etag = request(port, DATA, headers={"If-None-Match": etag})
    assert by_etag.status == 304 and by_etag.body == b""
    assert by_etag.headers["etag"] == etag
    assert by_etag.headers["cross-origin-embedder-policy"] == "require-corp"
    by_date = request(port, DATA, headers={"If-Modified-Since": last_modified})
    assert by_date.status == 304
    changed = request(port, DATA, headers={"If-None-Match": '"something-else"', "If-Modified-Since": last_modified})
    assert changed.status == 200, "If-None-Match takes precedence over If-Modified-Since"


# ---------------------------------------------------------------------------------------------- containment


def absolute_target(site: dict[str, Path]) -> str:
    return "/" + quote(str(site["root"] / "secret.txt"), safe="")


TRAVERSALS = [
    "/../secret.txt",
    "/assets/../../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/assets/%2e%2e/%2e%2e/secret.txt",
    "/..%2fsecret.txt",
    "/..%2Fsecret.txt",
    "/%252e%252e/secret.txt",
    "/%252e%252e%252fsecret.txt",
    "/..%5csecret.txt",
    "/assets\\..\\..\\secret.txt",
    "/..\\secret.txt",
    "/index.html%00",
    "/%00../secret.txt",
    "/outside-link.txt",
    "/outside-dir/secret.txt",
    "/./index.html",
    "//secret.txt",
    "/.klein-build.json",
    "/models/../../secret.txt",
    "/models/%2e%2e/secret.txt",
    "/models/..%2f..%2fsecret.txt",
    "/models/escape.onnx_data",
    "/models/%2e%2e/dist/index.html",
]


@pytest.mark.parametrize("target", [*TRAVERSALS, "ABSOLUTE", "ABSOLUTE_MODELS"])
def test_no_path_escapes_the_served_folders(port: int, site: dict[str, Path], target: str) -> None:
    if target == "ABSOLUTE":
        target = absolute_target(site)
    elif target == "ABSOLUTE_MODELS":
        target = "/models" + absolute_target(site)
    reply = request(port, target)
    assert reply.status == 404, f"{target} -> {reply.status}"
    assert SECRET not in reply.body
    assert reply.headers["cross-origin-embedder-policy"] == "require-corp"


def test_symlink_inside_the_folder_is_served(port: int, site: dict[str, Path]) -> None:
    reply = request(port, "/inside-link.html")
    assert reply.status == 200 and reply.body == (site["dist"] / "index.html").read_bytes()


def test_models_are_404_without_models_dir(port_without_models: int) -> None:
    for path in ("/models/manifest.json", "/models/", "/models/transformer/transformer_q4.onnx"):
        reply = request(port_without_models, path)
        assert reply.status == 404, path
        assert reply.headers["cross-origin-opener-policy"] == "same-origin"


def test_create_app_rejects_missing_folders(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=r"--dist .*no such folder"):
        create_app(tmp_path / "nope")
    with pytest.raises(ServeError, match=r"--models .*no such folder"):
        create_app(tmp_path, tmp_path / "no-models")


def test_a_prebuilt_app_is_served_only_as_built(tmp_path: Path) -> None:
    """Without web_src (an installed wheel), serve says what needs a checkout instead of failing in the bundler."""
    with pytest.raises(ServeError, match="holds no built app"):
        check_prebuilt(tmp_path, model_base=DEFAULT_MODEL_BASE, watch=False)
    (tmp_path / ".klein-build.json").write_text(f'{{"model_base": "{DEFAULT_MODEL_BASE}"}}')
    check_prebuilt(tmp_path, model_base=DEFAULT_MODEL_BASE, watch=False)
    with pytest.raises(ServeError, match=r"https://example\.com/m/: .* was built for .*--models DIR"):
        check_prebuilt(tmp_path, model_base="https://example.com/m/", watch=False)
    with pytest.raises(ServeError, match="--watch"):
        check_prebuilt(tmp_path, model_base=DEFAULT_MODEL_BASE, watch=True)


def test_build_without_app_sources_names_the_cause(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"holds no app sources .*needs a checkout"):
        build(tmp_path / "out", web_src=tmp_path / "web_src")


# ---------------------------------------------------------------------------------------------- the real CLI


def test_cli_missing_models_dir_fails_before_serving(dist_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "not-here"
    result = subprocess.run(
        [sys.executable, "-m", "builder", "serve", "--port", "1", "--dist", str(dist_dir), "--models", str(missing)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert f"--models {missing}: no such folder" in result.stderr
    assert "klein-web fetch" in result.stderr


def test_cli_busy_port_is_a_clear_error(dist_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "builder", "serve", "--port", str(taken), "--dist", str(dist_dir)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert f"Cannot listen on 127.0.0.1:{taken}" in result.stderr and "--port" in result.stderr


def test_cli_serves_sparse_3gb_file_by_range_without_reading_it(
    live_server_factory: object, dist_dir: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    (models / "transformer").mkdir(parents=True)
    big = models / "transformer" / "transformer_q4.onnx_data_1"
    size = 3 * 1024**3
    with open(big, "wb") as handle:  # sparse: only the marked blocks take disk space
        handle.truncate(size)
        handle.seek(size // 2)
        handle.write(b"MIDDLE-MARK")
        handle.seek(size - 9)
        handle.write(b"END-MARK!")
    # The rest of a model folder, small; its manifest records no hashes, so start-up never reads the 3 GB.
    write_stub_repo(models)
    server = live_server_factory(dist_dir, models=models)  # type: ignore[operator]
    process = psutil.Process(server.process.pid)
    rss_before = process.memory_info().rss

    tail = request(server.port, "/models/transformer/transformer_q4.onnx_data_1", headers={"Range": "bytes=-1048576"})
    assert tail.status == 206 and len(tail.body) == MIB and tail.body.endswith(b"END-MARK!")
    assert tail.headers["content-range"] == f"bytes {size - MIB}-{size - 1}/{size}"
    middle = request(
        server.port,
        "/models/transformer/transformer_q4.onnx_data_1",
        headers={"Range": f"bytes={size // 2 - 5}-{size // 2 + 15}"},
    )
    assert middle.status == 206 and middle.body == b"\0" * 5 + b"MIDDLE-MARK" + b"\0" * 5
    # A 256 MiB stream, read and dropped chunk by chunk: the server must stream it, not load it.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("GET", "/models/transformer/transformer_q4.onnx_data_1", headers={"Range": f"bytes=0-{256 * MIB - 1}"})
    response = conn.getresponse()
    assert response.status == 206
    received = 0
    while chunk := response.read(4 * MIB):
        received += len(chunk)
    conn.close()
    assert received == 256 * MIB
    head = request(server.port, "/models/transformer/transformer_q4.onnx_data_1", method="HEAD")
    assert head.headers["content-length"] == str(size)
    assert head.headers["content-type"] == "application/octet-stream"

    growth = process.memory_info().rss - rss_before
    assert growth < 100 * MIB, f"server RSS grew by {growth / MIB:.0f} MiB while serving a 3 GiB file"
    # The access log names each request path (tests of the app read it to count weight downloads).
    assert '"GET /models/transformer/transformer_q4.onnx_data_1 HTTP/1.1" 206' in server.output()


def test_cli_start_message_and_non_loopback_warning(live_server_factory: object, dist_dir: Path) -> None:
    server = live_server_factory(dist_dir, extra=("--host", "0.0.0.0"))  # type: ignore[operator]
    output = server.output()
    assert f"App:    http://127.0.0.1:{server.port}/" in output
    assert (
        "--enable-unsafe-webgpu --enable-features=Vulkan --enable-dawn-features=vulkan_enable_f16_on_nvidia" in output
    )
    assert "warning: listening on 0.0.0.0" in output and "https" in output
    reply = request(server.port, "/")
    assert reply.status == 200 and reply.headers["cross-origin-opener-policy"] == "same-origin"


def test_cli_keeps_the_model_base_dist_was_built_with(live_server_factory: object, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build(dist, model_base="https://models.example.org/k/")
    server = live_server_factory(dist)  # type: ignore[operator]
    # A rebuild with the CLI's default base would have replaced it (the base is part of the build stamp).
    page = request(server.port, "/").body.decode()
    assert '<meta name="klein-model-base" content="https://models.example.org/k/">' in page


def test_watch_rebuilds_on_change(tmp_path: Path, web_src_copy: Path) -> None:
    web_src, dist = web_src_copy, tmp_path / "dist"
    first = build(dist, web_src=web_src)
    messages: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=watch_and_rebuild,
        args=(dist,),
        daemon=True,
        kwargs={"model_base": DEFAULT_MODEL_BASE, "stop": stop, "log": messages.append, "web_src": web_src},
    )
    watcher.start()
    time.sleep(1.0)  # let the poller take its first snapshot
    (web_src / "style.css").write_text('body::after { content: "klein-watch-test"; }\n')
    deadline = time.monotonic() + 20
    while not any(m.startswith("rebuilt in") for m in messages):
        assert time.monotonic() < deadline, f"no rebuild after a change: {messages}"
        time.sleep(0.1)
    stop.set()
    watcher.join(5)
    css = next((dist / "assets").glob("page-*.css"))
    assert "klein-watch-test" in css.read_text()
    assert first.files["page_css"] != f"assets/{css.name}"
    assert (read_record(dist) or {})["cache_shell"] is False, "a watch build keeps no shell in the service worker"


def test_open_waits_for_the_server_then_opens_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from builder.site.server import open_when_started

    opened: list[str] = []
    monkeypatch.setattr("builder.site.server.webbrowser.open", opened.append)
    server = SimpleNamespace(started=False)
    thread = threading.Thread(target=open_when_started, args=(server, "http://127.0.0.1:1/", threading.Event()))
    thread.start()
    time.sleep(0.3)
    assert opened == [], "opened before the server was listening"
    server.started = True
    thread.join(5)
    assert opened == ["http://127.0.0.1:1/"]


def test_the_page_cannot_be_framed_even_without_a_recorded_policy(
    port: int, port_without_models: int, tmp_path: Path
) -> None:
    from builder.site.server import with_frame_ancestors

    for where in (port, port_without_models):
        for path in ("/", "/missing.js"):
            assert "frame-ancestors 'none'" in request(where, path).headers["content-security-policy"]
    assert with_frame_ancestors(None) == "frame-ancestors 'none'"
    assert (
        with_frame_ancestors("default-src 'self'; frame-ancestors 'self';")
        == "default-src 'self'; frame-ancestors 'self'"
    )
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "index.html").write_text("<!doctype html>")
    with serve_in_thread(create_app(dist)) as bare:
        assert request(bare, "/").headers["content-security-policy"] == "frame-ancestors 'none'"
