"""`klein-web serve`: the built site (and optionally a local model repository) with the headers WebGPU apps need.

`create_app(dist_dir, models_dir)` is the whole HTTP behaviour; `serve()` adds the build-if-stale step, the
socket, the start message, `--watch` and `--open`. Every response, errors included, carries COOP/COEP/CORP so
the page is `crossOriginIsolated` (SharedArrayBuffer threads for onnxruntime-web). Files are streamed from disk
with HTTP Range support (Starlette's FileResponse; under `serve`, sent by the kernel: builder.site.file_sending),
so multi-GB weights never sit in memory and interrupted downloads resume.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
import sys
import threading
import time
import webbrowser
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.utils import parsedate
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.staticfiles import NotModifiedResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn import Config, Server

from builder import DEFAULT_MODEL_BASE, WEB_SRC, __version__, has_web_src
from builder.errors import KleinWebError, ModelRepoError, ServeError
from builder.repo import local, manifest, paths, verify
from builder.site.bundle import CROSS_ORIGIN_HEADERS, IMMUTABLE, build, manifest_schema, read_record
from builder.site.chrome import LINUX_DESKTOP_CHROME_FLAGS
from builder.site.connection_guard import Guard, GuardedServer
from builder.site.file_sending import FileResponse
from builder.site.served_manifest import ServedManifest

MODELS_PREFIX = "/models/"
# The page is never meant to be framed: no other site may overlay it (clickjacking). frame-ancestors only works
# as a header (browsers ignore it in the page's meta CSP), so the server adds it to the build's policy.
FRAME_ANCESTORS = "frame-ancestors 'none'"


def with_frame_ancestors(csp: str | None) -> str:
    """The build's CSP (if any) plus frame-ancestors, unless the policy already has one."""
    directives = [d.strip() for d in (csp or "").split(";") if d.strip()]
    if not any(d.split()[0].lower() == "frame-ancestors" for d in directives):
        directives.append(FRAME_ANCESTORS)
    return "; ".join(directives)


# Exact types matter: browsers refuse module scripts that are not JavaScript, and
# WebAssembly.instantiateStreaming needs application/wasm.
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".map": "application/json",
    ".onnx": "application/octet-stream",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".jinja": "text/plain; charset=utf-8",
}
# External-data files are `x.onnx_data`, `x.onnx_data_1`, ...: no suffix mimetypes knows.
ONNX_DATA = re.compile(r"\.onnx_data(_\d+)?$")


def media_type(name: str) -> str:
    if ONNX_DATA.search(name):
        return "application/octet-stream"
    return MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")


def resolve_inside(root: Path, url_path: str) -> Path | None:
    """The regular file `url_path` names under `root`, or None (-> 404) for anything that could escape it.

    `url_path` is already percent-decoded once by the server (so `%2e%2e` arrives as `..`); it is never
    decoded again, so `%252e%252e` stays a literal, non-existent name. Hidden names (`.git`, `.cache`,
    the build record) are not served either.
    """
    if paths.unsafe_reason(url_path) is not None:  # the containment rules every model file name follows
        return None
    parts = url_path.split("/")
    if any(part.startswith(".") for part in parts):
        return None
    candidate = os.path.realpath(root.joinpath(*parts))
    # realpath follows symlinks, so a link inside root that points outside it is caught here too.
    if os.path.commonpath([candidate, str(root)]) != str(root):
        return None
    return Path(candidate) if os.path.isfile(candidate) else None


def is_not_modified(response_headers: MutableHeaders, request_headers: Headers) -> bool:
    """RFC 9110 13.2.2: If-None-Match wins over If-Modified-Since."""
    if_none_match = request_headers.get("if-none-match")
    if if_none_match is not None:
        tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
        return "*" in tags or response_headers["etag"] in tags
    if_modified_since = parsedate(request_headers.get("if-modified-since", ""))
    last_modified = parsedate(response_headers["last-modified"])
    return if_modified_since is not None and last_modified is not None and if_modified_since >= last_modified


def file_response(root: Path, url_path: str, request: Request) -> Response:
    path = resolve_inside(root, url_path)
    if path is None:
        raise HTTPException(status_code=404)
    try:
        stat_result = path.stat()
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTDIR):
            raise HTTPException(status_code=404) from exc
        raise
    response = FileResponse(path, stat_result=stat_result, media_type=media_type(path.name))
    if is_not_modified(response.headers, request.headers):
        return NotModifiedResponse(response.headers)
    return response


class SiteHeaders:
    """ASGI wrapper adding COOP/COEP/CORP (and the build's CSP) to every response, and the cache policy.

    It wraps the whole Starlette stack, outside ServerErrorMiddleware, so even a 500 is cross-origin isolated.
    """

    def __init__(self, app: ASGIApp, *, csp: str | None) -> None:
        self.app = app
        self.csp = csp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in CROSS_ORIGIN_HEADERS.items():
                    headers[name] = value
                headers["X-Content-Type-Options"] = "nosniff"
                # The same policy as the page's meta tag (a worker takes its CSP from its own response), plus
                # frame-ancestors, which only a header can carry.
                headers["Content-Security-Policy"] = with_frame_ancestors(self.csp)
                if message["status"] >= 400:
                    headers["Cache-Control"] = "no-store"  # never let a cache keep an error as a model file
                elif path.startswith("/assets/"):
                    headers["Cache-Control"] = IMMUTABLE  # content-hashed names: a new build makes new names
                else:
                    headers["Cache-Control"] = "no-cache"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SiteApp(Starlette):
    """Starlette whose outermost layer is SiteHeaders."""

    csp: str | None = None

    def build_middleware_stack(self) -> ASGIApp:
        return SiteHeaders(super().build_middleware_stack(), csp=self.csp)


def create_app(
    dist_dir: Path,
    models_dir: Path | None = None,
    *,
    models_manifest: manifest.Manifest | None = None,
    log: Callable[[str], None] = lambda _message: None,
) -> Starlette:
    """The app: dist_dir at `/`, models_dir (a model repository) at `/models/`; only GET and HEAD.

    `models_manifest`: the folder's manifest as `check_models_dir` opened it. A seed-layout folder has no
    manifest.json; the app asks for `/models/manifest.json` (and would fall back to the seed layout with unknown
    sizes on a 404), so the manifest built from its files is served at that path instead, rebuilt whenever the
    files change (builder.site.served_manifest).
    """
    dist_root = Path(os.path.realpath(dist_dir))
    if not dist_root.is_dir():
        raise ServeError(f"--dist {dist_dir}: no such folder. Build it first: klein-web build --out {dist_dir}")
    models_root = Path(os.path.realpath(models_dir)) if models_dir is not None else None
    if models_root is not None and not models_root.is_dir():
        raise ServeError(f"--models {models_dir}: no such folder (expected a model repository with manifest.json).")

    async def site(request: Request) -> Response:
        url_path = request.path_params["path"] or "index.html"
        return file_response(dist_root, url_path, request)

    generated = (
        ServedManifest(models_root, models_manifest, log=log)
        if models_manifest is not None
        and models_root is not None
        and not (models_root / manifest.MANIFEST_NAME).exists()
        else None
    )

    async def models(request: Request) -> Response:
        if models_root is None:
            raise HTTPException(status_code=404)  # no --models: the app falls back to its model base URL
        if (
            generated is not None
            and request.path_params["path"] == manifest.MANIFEST_NAME
            and not (models_root / manifest.MANIFEST_NAME).exists()
        ):
            try:
                body = await generated.current()
            except ModelRepoError as exc:
                log(f"models: {exc}")
                return Response(f"{exc}\n", status_code=503, media_type=MEDIA_TYPES[".txt"])
            return Response(body, media_type=MEDIA_TYPES[".json"])
        return file_response(models_root, request.path_params["path"], request)

    methods = ["GET", "HEAD"]
    app = SiteApp(
        routes=[
            Route(MODELS_PREFIX + "{path:path}", models, methods=methods),
            Route("/{path:path}", site, methods=methods),
        ]
    )
    record = read_record(dist_root) or {}
    app.csp = str(record["csp"]) if record.get("csp") else None
    return app


# ---------------------------------------------------------------------------------------------- serve


def check_models_dir(models_dir: Path, *, log: Callable[[str], None]) -> manifest.Manifest:
    """The folder's manifest (its own, or built from a seed-layout folder), the files present checked by sha256.

    A folder that is neither layout, a malformed manifest or a corrupt file stops the server with the reason:
    serving it would make the app fail later, give a silently different image, or fall back to the Hub. Missing
    or short files only warn: the folder may still be downloading, and the app names them when it loads them.
    """
    if not models_dir.is_dir():
        raise ServeError(
            f"--models {models_dir}: no such folder. Download the model with `klein-web fetch --dir {models_dir}` "
            f"or make a tiny test model with `klein-web make-tiny OUT` and pass OUT/q4."
        )
    try:
        loaded = local.open_folder(models_dir, log=log)
        complete = verify.complete_files(models_dir, loaded)
        incomplete = sorted(set(loaded.files) - set(complete))
        if incomplete:
            log(
                f"warning: {len(incomplete)} file(s) of {models_dir} are missing or have the wrong size (e.g. "
                f"{incomplete[0]}); the app will report this when it loads them. Complete the folder with "
                f"`klein-web fetch --dir {models_dir}`."
            )
        verify.check_files(models_dir, loaded, complete, log=log)
    except ModelRepoError as exc:
        raise ServeError(f"--models {models_dir}: {exc}") from exc
    root = os.path.realpath(models_dir)
    outside = [
        path
        for path in models_dir.rglob("*")
        if path.is_symlink() and os.path.commonpath([os.path.realpath(path), root]) != root
    ]
    if outside:
        log(
            f"warning: {len(outside)} file(s) in {models_dir} are symlinks to outside it (e.g. {outside[0]}); they "
            "are not served (404). Copy the files in, e.g. download with `klein-web fetch --dir DIR`."
        )
    return loaded


def check_listen(host: str, port: int) -> None:
    """--host and --port as a user can give them wrong, refused before any build or bind."""
    if not host.strip():
        raise ServeError("--host is empty; pass 127.0.0.1 (this machine only) or 0.0.0.0 (every interface).")
    if isinstance(port, bool) or not 0 <= port <= 65535:
        raise ServeError(f"--port {port} is not a TCP port; pass one from 1 to 65535 (0: any free port), e.g. 8000.")


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before anything else so a busy port is a clear error, not a uvicorn traceback."""
    check_listen(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError, UnicodeError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        in_use = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
        hint = f"pass another --port (e.g. --port {port + 1})" if in_use else "check --host"
        raise ServeError(f"Cannot listen on {host}:{port}: {reason}; {hint}.") from exc
    sock.set_inheritable(True)
    return sock


@contextmanager
def serve_in_thread(
    app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning", guard: Guard | None = None
) -> Iterator[int]:
    """Serve `app` with uvicorn in a daemon thread (regress, the tests) on `host`; yields the port (`port` 0: a free
    one). With `guard`, on serve's guarded protocol (its deadlines, cap and sendfile), else on uvicorn's own, where
    ASGI middleware sees every body byte (regress and the tests count and cut them)."""
    # Port 0 and handing the bound socket to uvicorn: no pick-a-free-port-then-bind race.
    sock = bind_socket(host, port)
    port = int(sock.getsockname()[1])
    config: dict[str, Any] = {
        "log_level": log_level,
        "access_log": False,
        "lifespan": "off",
        "timeout_graceful_shutdown": 3,
    }
    server = Server(Config(app, **config)) if guard is None else GuardedServer(app, guard=guard, **config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"klein-serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise ServeError(f"The server did not start on {host}:{port} within 30 s.")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def browser_url(host: str, bound_host: str, port: int) -> str:
    """A URL a user can open: the loopback address for a wildcard bind (`0.0.0.0`, `::`, `0`), else the host."""
    address = ipaddress.ip_address(bound_host)
    if address.is_unspecified:
        return f"http://{'[::1]' if address.version == 6 else '127.0.0.1'}:{port}/"
    name = bound_host if _is_ip(host) else host  # a name as given; an address as the system spells it
    return f"http://{'[' + name + ']' if ':' in name else name}:{port}/"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def start_message(url: str, *, dist_dir: Path, models_dir: Path | None, model_base: str) -> str:
    lines = [f"klein-web {__version__} serving {dist_dir}", f"  App:    {url}"]
    if models_dir is not None:
        lines.append(f"  Models: {models_dir} at {url}models/ (the app loads from here)")
    else:
        lines.append(f"  Models: {model_base} (no --models)")
    if sys.platform.startswith("linux"):
        # Linux Chrome ships WebGPU disabled (users hit this first, see the README); the Dawn toggle gives
        # NVIDIA GPUs shader-f16, the app's fast path.
        lines.append(f"  Chrome on Linux needs WebGPU switched on: google-chrome {LINUX_DESKTOP_CHROME_FLAGS} {url}")
    lines.append("  Press Ctrl+C to stop.")
    return "\n".join(lines)


def watch_and_rebuild(
    dist_dir: Path, *, model_base: str, stop: threading.Event, log: Callable[[str], None], web_src: Path = WEB_SRC
) -> None:
    """Rebuild on every change under web_src (node_modules excluded) or to the manifest's schema the app imports; a
    failed build is logged, not fatal. The builds keep no shell in the service worker's cache (a development build),
    so a reload always gets the latest one."""
    from watchfiles import watch

    def relevant(_change: object, path: str) -> bool:
        return "node_modules" not in Path(path).parts

    # Polling: inotify misses changes on some mounted and network file systems; 0.5 s is plenty for a dev loop.
    watched = (web_src, manifest_schema(web_src))
    for _changes in watch(*watched, watch_filter=relevant, stop_event=stop, force_polling=True, poll_delay_ms=500):
        try:
            result = build(dist_dir, model_base=model_base, web_src=web_src, cache_shell=False, log=log, what="--dist")
            if result.changed:
                log(f"rebuilt in {result.seconds:.2f} s; reload the page")
        except KleinWebError as exc:
            log(f"rebuild failed (still serving the last good build): {exc}")


def check_prebuilt(dist_dir: Path, *, model_base: str, watch: bool) -> None:
    """Without web_src (an installed wheel) the app is served as built: say what cannot be done instead of failing
    in the bundler."""
    record = read_record(dist_dir)
    if record is None:
        raise ServeError(
            f"--dist {dist_dir} holds no built app, and this installation has no app sources to build "
            "one. Serve a folder made by `klein-web build`, or leave --dist out to serve the packaged app."
        )
    if record.get("model_base") != model_base:
        raise ServeError(
            f"--model-base {model_base}: {dist_dir} was built for {record.get('model_base')}, and "
            "rebuilding needs the app sources (a checkout). To load a local model, use --models DIR."
        )
    if watch:
        raise ServeError("--watch rebuilds the app from web_src/, which this installation does not have.")


def serve(
    dist_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    models_dir: Path | None = None,
    model_base: str | None = None,
    open_browser: bool = False,
    watch: bool = False,
    log: Callable[[str], None] = lambda _message: None,
) -> None:
    """Build dist if stale, then serve it until Ctrl+C. model_base None: the one dist was built with."""
    check_listen(host, port)
    models_manifest = check_models_dir(models_dir, log=log) if models_dir is not None else None
    if model_base is None:
        # Keep the base of an existing build (e.g. one made with --model-base) rather than rebuilding it.
        model_base = str((read_record(Path(dist_dir)) or {}).get("model_base") or DEFAULT_MODEL_BASE)
    if not has_web_src():
        check_prebuilt(Path(dist_dir), model_base=model_base, watch=watch)
    else:
        try:
            # --watch: a build whose service worker keeps no shell, so every reload shows the latest sources.
            build(dist_dir, model_base=model_base, cache_shell=not watch, log=log, what="--dist")
        except KleinWebError as exc:
            if read_record(Path(dist_dir)) is None:
                raise
            # Mid-edit sources should not stop the server (nor --watch): say so loudly and serve the last good build.
            log(f"warning: the build failed, serving the previous build of {dist_dir}:\n{exc}")
    app = create_app(dist_dir, models_dir, models_manifest=models_manifest, log=log)
    sock = bind_socket(host, port)
    bound_host, port = sock.getsockname()[:2]
    if not ipaddress.ip_address(bound_host).is_loopback:
        log(
            f"warning: listening on {bound_host}, reachable from other machines. Browsers only allow WebGPU and "
            "cross-origin isolation in a secure context: other machines need https (e.g. a reverse proxy), "
            "plain http works only on localhost."
        )
    url = browser_url(host, bound_host, port)
    log(start_message(url, dist_dir=Path(dist_dir), models_dir=models_dir, model_base=model_base))

    # access_log on: each line names the path, which the tests read to prove no weight file was re-requested.
    # The h11 protocol with a request-head deadline, a send deadline, a connection cap and files sent by the kernel
    # (builder.site.connection_guard).
    server = GuardedServer(app, guard=Guard(log), log_level="info", access_log=True, timeout_graceful_shutdown=3)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    if watch:
        threads.append(
            threading.Thread(
                target=watch_and_rebuild,
                args=(Path(dist_dir),),
                kwargs={"model_base": model_base, "stop": stop, "log": log},
                daemon=True,
            )
        )
    if open_browser:
        threads.append(threading.Thread(target=open_when_started, args=(server, url, stop), daemon=True))
    for thread in threads:
        thread.start()
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        sock.close()


def open_when_started(server: object, url: str, stop: threading.Event) -> None:
    while not stop.is_set() and not getattr(server, "started", False):
        stop.wait(0.1)
    if not stop.is_set():
        webbrowser.open(url)
