"""Serving the built app and a model folder to the browser a run drives: the real server (builder.site.server)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import DEFAULT_DIST, DEFAULT_MODEL_BASE, has_web_src
from builder.errors import RegressionError
from builder.repo import local, manifest
from builder.site import bundle

Log = Callable[[str], None]


def check_models(models_dir: Path | None, *, log: Log) -> tuple[Path, manifest.Manifest]:
    """The --models folder and its manifest (its own, or built from a seed-layout folder's files), every file's
    size and sha256 verified; RegressionError saying how to get one."""
    if models_dir is None:
        raise RegressionError("--models DIR is required: the model folder to serve (e.g. `klein-web fetch --dir DIR`).")
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise RegressionError(
            f"--models {models_dir}: no such folder. Download one with `klein-web fetch --dir {models_dir}` "
            "or make a test model with `klein-web make-tiny`."
        )
    # These name the malformed manifest or the missing, truncated or corrupt file and how to repair the folder.
    return models_dir, local.open_and_check(models_dir, log=log)


def site(dist_dir: Path | None, *, log: Log) -> Path:
    """The built app to serve: `dist_dir` as it is, or dist/ built if stale (keeping the model base it was built
    with: the server points the app at /models/ anyway)."""
    if dist_dir is not None:
        if not (Path(dist_dir) / "index.html").is_file():
            raise RegressionError(
                f"--dist {dist_dir} holds no built app (no index.html); run `klein-web build --out "
                f"{dist_dir}` first, or leave --dist out to build dist/."
            )
        return Path(dist_dir)
    record = bundle.read_record(DEFAULT_DIST) or {}
    if has_web_src():  # else an installed wheel: its packaged app, as built
        bundle.build(DEFAULT_DIST, model_base=str(record.get("model_base") or DEFAULT_MODEL_BASE), log=log)
    return DEFAULT_DIST


@contextlib.contextmanager
def serving(
    dist_dir: Path,
    models_dir: Path,
    *,
    log: Log,
    models_manifest: manifest.Manifest | None = None,
    middleware: Callable[[Any], Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[str]:
    """The real server app (builder.site.server) in a thread on `host` (a free port unless `port`); yields the URL a
    browser on this machine opens it at.

    `middleware` wraps the ASGI app (the browser benchmark counts the model bytes sent through it)."""
    from builder.site import server

    app = server.create_app(dist_dir, models_dir=models_dir, models_manifest=models_manifest)
    with server.serve_in_thread(app if middleware is None else middleware(app), host=host, port=port) as bound:
        url = served_url(host, bound)
        log(f"serving {dist_dir} and models {models_dir} at {url} (listening on {host}:{bound})")
        yield url


def served_url(host: str, port: int) -> str:
    """The app server's address for a browser on this machine (the loopback one for a wildcard `host`)."""
    if host in ("0.0.0.0", "::", ""):
        return f"http://{'[::1]' if host == '::' else '127.0.0.1'}:{port}"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class ByteCounter:
    """ASGI middleware state: bytes of model files the server sent (a warm reload must fetch none). The app
    re-reads manifest.json on every page load, by design (a re-converted repo must be noticed): not counted."""

    bytes: int = 0
    requests: int = 0

    def wrap(self, app: Any) -> Any:
        async def counting(scope: Any, receive: Any, send: Any) -> None:
            path = str(scope.get("path", ""))
            if scope.get("type") != "http" or not path.startswith("/models/") or path.endswith("/manifest.json"):
                await app(scope, receive, send)
                return
            self.requests += 1

            async def counted(message: Any) -> None:
                if message.get("type") == "http.response.body":
                    self.bytes += len(message.get("body", b""))
                await send(message)

            await app(scope, receive, counted)

        return counting
