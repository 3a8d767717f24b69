"""A fake Hugging Face Hub on loopback: just the endpoints `klein-web fetch` (through huggingface_hub) calls.

    GET  /api/models/{owner}/{name}[/revision/{rev}]   model info with `sha` and `siblings` (size, blobId, lfs)
    HEAD /{owner}/{name}/resolve/{rev}/{path}          X-Repo-Commit, ETag, Content-Length (+ X-Linked-* for LFS)
    GET  /{owner}/{name}/resolve/{rev}/{path}          the bytes, with Range support

Errors carry the `X-Error-Code` header huggingface_hub maps to exceptions (RepoNotFound, RevisionNotFound,
EntryNotFound). Test knobs: `cut[path] = n` ends the next n downloads of `path` half-way (the connection
drops with bytes missing), `slow[path] = s` sleeps s seconds per 64 KiB of `path` so a test can interrupt it, and
`requests` records (method, path, Range header) of every file request.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from builder.site.server import serve_in_thread

CHUNK = 64 * 1024
LFS_SUFFIXES = (".onnx",)


def is_lfs(path: str) -> bool:
    # The real repo stores graphs and external data in LFS (.gitattributes); configs are plain git files.
    return path.endswith(LFS_SUFFIXES) or ".onnx_data" in path


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    folder: Path
    commit: str
    exclude: tuple[str, ...] = ()

    def files(self) -> dict[str, Path]:
        return {
            p.relative_to(self.folder).as_posix(): p
            for p in sorted(self.folder.rglob("*"))
            if p.is_file() and p.relative_to(self.folder).as_posix() not in self.exclude
        }


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo]
    cut: dict[str, int] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/models/{owner}/{name}", self.model_info),
                Route("/api/models/{owner}/{name}/revision/{revision:path}", self.model_info),
                Route("/{owner}/{name}/resolve/{revision}/{path:path}", self.resolve, methods=["GET", "HEAD"]),
            ]
        )

    def _lookup(self, request: Request) -> FakeRepo | Response:
        repo_id = f"{request.path_params['owner']}/{request.path_params['name']}"
        repo = self.repos.get(repo_id)
        if repo is None:
            return Response("Repository not found", status_code=404, headers={"X-Error-Code": "RepoNotFound"})
        revision = request.path_params.get("revision", "main")
        if revision not in ("main", repo.commit):
            return Response("Invalid rev id", status_code=404, headers={"X-Error-Code": "RevisionNotFound"})
        return repo

    async def model_info(self, request: Request) -> Response:
        repo = self._lookup(request)
        if isinstance(repo, Response):
            return repo
        siblings = []
        for rel, path in repo.files().items():
            data = path.read_bytes()
            entry = {"rfilename": rel, "size": len(data), "blobId": git_blob_sha1(data)}
            if is_lfs(rel):
                entry["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            siblings.append(entry)
        repo_id = f"{request.path_params['owner']}/{request.path_params['name']}"
        return JSONResponse(
            {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False, "siblings": siblings}
        )

    async def resolve(self, request: Request) -> Response:
        repo = self._lookup(request)
        if isinstance(repo, Response):
            return repo
        rel = request.path_params["path"]
        self.requests.append((request.method, rel, request.headers.get("range")))
        path = repo.files().get(rel)
        if path is None:
            return Response(
                "Entry not found",
                status_code=404,
                headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit},
            )
        data = path.read_bytes()
        headers = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes", "ETag": f'"{git_blob_sha1(data)}"'}
        if is_lfs(rel):
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(data).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(data))
        start, status = 0, 200
        range_header = request.headers.get("range")
        if range_header and range_header.startswith("bytes="):
            first, _, last = range_header[6:].partition("-")
            start = int(first)
            end = int(last) + 1 if last else len(data)
            if start >= len(data):
                return Response(status_code=416, headers={"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            data, status = data[start:end], 206
        headers["Content-Length"] = str(len(data))
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers)
        cut_now = self.cut.get(rel, 0) > 0
        if cut_now:
            self.cut[rel] -= 1
        return StreamingResponse(
            self._body(data, cut_now, self.slow.get(rel, 0.0)),
            status_code=status,
            headers=headers,
            media_type="application/octet-stream",
        )

    def _body(self, data: bytes, cut: bool, delay_s: float) -> Iterator[bytes]:
        limit = len(data) // 2 if cut else len(data)
        for offset in range(0, limit, CHUNK):
            if delay_s:
                time.sleep(delay_s)
            yield data[offset : min(offset + CHUNK, limit)]
        if cut:
            # Raising after the headers went out makes uvicorn drop the connection with bytes missing.
            raise ConnectionAbortedError("fake hub: cutting the download half-way")


@contextmanager
def serving(hub: FakeHub) -> Iterator[str]:
    """FakeHub served in a thread on a free loopback port (builder's own helper); yields its endpoint URL."""
    with serve_in_thread(hub.app(), log_level="critical") as port:
        yield f"http://127.0.0.1:{port}"
