"""`serve`'s protocol: files sent by the kernel with Starlette's exact answers, and the send deadline.

Two servers run in this process on 127.0.0.1: the app on serve's guarded protocol (files through SENDFILE) and the
same app on uvicorn's own protocol (Starlette reads the files). Every kind of GET and HEAD a client can make of a
file, ranges included, must get the same status, headers and bytes from both. Then clients that ask for a large file
(or a large body the app computes) and stop reading must be cut off once their response has made no progress for
the send deadline (1 s here), while a client that reads slowly keeps its download.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.site.connection_guard import SENDFILE_PIECE, Guard
from builder.site.server import create_app, serve_in_thread

SEND_TIMEOUT_S = 1.0
SMALL = 3 * 1024 * 1024 + 17  # random bytes: any slice sent from the wrong offset shows
LARGE = 64 * 1024 * 1024  # far more than the socket buffers of both ends hold
STREAMED = 64 * 1024 * 1024  # the body the app computes, in 64 KiB pieces
# The answers that differ by nature: the time, and the random boundary of a multipart body.
BOUNDARY = re.compile(rb"[0-9a-f]{26}")


@pytest.fixture(scope="module")
def site(dist_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site") / "dist"
    shutil.copytree(dist_dir, folder)
    (folder / "small.bin").write_bytes(os.urandom(SMALL))
    (folder / "empty.bin").write_bytes(b"")
    with open(folder / "large.bin", "wb") as handle:
        handle.truncate(LARGE)  # sparse: no disk space
    return folder


def streamed_app(files: Any) -> Any:
    """`files` (the site), plus /streamed: a large body the app computes, not a file."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/streamed":
            await files(scope, receive, send)
            return
        headers = [(b"content-length", str(STREAMED).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        piece = b"x" * (64 * 1024)
        for _ in range(STREAMED // len(piece)):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


@pytest.fixture(scope="module")
def servers(site: Path) -> Iterator[tuple[int, int, list[str]]]:
    """(guarded port, plain port, the guarded server's log lines)."""
    lines: list[str] = []
    guard = Guard(lines.append, send_timeout_s=SEND_TIMEOUT_S)
    with (
        serve_in_thread(streamed_app(create_app(site)), guard=guard, log_level="critical") as guarded,
        serve_in_thread(create_app(site), log_level="critical") as plain,
    ):
        yield guarded, plain, lines


def answer(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        kept = {k.lower(): BOUNDARY.sub(b"B", v.encode()).decode() for k, v in response.getheaders() if k != "date"}
        return response.status, kept, BOUNDARY.sub(b"B", response.read())
    finally:
        connection.close()


ETAG = "__etag__"  # replaced by the file's current ETag
REQUESTS = [
    {},
    {"Range": "bytes=0-0"},
    {"Range": "bytes=0-"},
    {"Range": "bytes=1000-2000"},
    {"Range": "bytes=3000000-"},
    {"Range": "bytes=-100"},
    {"Range": f"bytes=-{SMALL + 5}"},
    {"Range": f"bytes=100-{SMALL * 2}"},
    {"Range": "bytes=0-99,200-299,1000-"},
    {"Range": "bytes=0-100,50-150"},  # overlapping: merged
    {"Range": "bytes=500-600, -10"},
    {"Range": ",".join(f"{i}-{i}" for i in range(0, 2000, 10))},  # more ranges than Starlette serves
    {"Range": "bytes=5-1"},  # malformed: 400
    {"Range": f"bytes={SMALL}-"},  # unsatisfiable: 416
    {"Range": "items=0-1"},
    {"Range": "bytes=x-y"},
    {"Range": "bytes=0-10", "If-Range": '"another-version"'},  # the whole file
    {"Range": "bytes=0-10", "If-Range": ETAG},
    {"If-None-Match": ETAG},  # 304
]


@pytest.mark.parametrize("path", ["/small.bin", "/empty.bin", "/index.html"])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_files_sent_by_the_kernel_are_the_answers_starlette_gives(
    servers: tuple[int, int, list[str]], site: Path, path: str, method: str
) -> None:
    guarded, plain = servers[:2]
    etag = answer(plain, "HEAD", path, {})[1]["etag"]
    data = (site / path.lstrip("/")).read_bytes()
    for request in REQUESTS:
        headers = {name: etag if value == ETAG else value for name, value in request.items()}
        got = answer(guarded, method, path, headers)
        assert got == answer(plain, method, path, headers), (path, method, request)
        single = re.fullmatch(r"bytes (\d+)-(\d+)/\d+", got[1].get("content-range", ""))
        if method == "GET" and got[0] == 206 and single is not None:  # the right bytes, not only the same ones
            assert got[2] == data[int(single[1]) : int(single[2]) + 1], request
        if method == "GET" and got[0] == 200:
            assert got[2] == data, request


def ended_early(client: socket.socket, expected: int, within_s: float) -> bool:
    """Whether the server ends the connection (a reset, or the end of the stream) within `within_s`, before
    `expected` body bytes came. What waits in the client's buffer is read meanwhile (a client that reads makes
    progress, so this is asked only once the deadline has passed)."""
    received = 0
    deadline = time.monotonic() + within_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            client.settimeout(left)
            chunk = client.recv(1024 * 1024)
            if not chunk:
                return received < expected  # the head's bytes counted too: fewer still means the body is short
            received += len(chunk)
    except ConnectionResetError:
        return received < expected
    except TimeoutError:
        pass
    return False  # still open


def test_a_response_that_makes_no_progress_is_cut_off_at_the_send_deadline(
    servers: tuple[int, int, list[str]],
) -> None:
    guarded, _plain, lines = servers
    stalled_requests = {
        "the whole file": (b"/large.bin", b"", LARGE),
        "one range": (b"/large.bin", b"Range: bytes=1000-\r\n", LARGE - 1000),
        "several ranges": (b"/large.bin", b"Range: bytes=0-99,5000-\r\n", LARGE - 5000 + 100),
        "a computed body": (b"/streamed", b"", STREAMED),
    }
    stalled: dict[str, tuple[socket.socket, int]] = {}
    with contextlib.ExitStack() as stack:
        for name, (path, extra, expected) in stalled_requests.items():
            client = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", guarded))
            client.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"\r\n")
            stalled[name] = (client, expected)
        # A client that reads, slowly but steadily, is no stalled client.
        reader = stack.enter_context(socket.create_connection(("127.0.0.1", guarded), timeout=5))
        reader.sendall(b"GET /large.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        read = 0
        until = time.monotonic() + SEND_TIMEOUT_S * 3
        while time.monotonic() < until:
            read += len(reader.recv(64 * 1024))  # about 3 MB/s
            time.sleep(0.02)
        assert read < LARGE  # still downloading: it was never given more than it asked for
        cut = {name: ended_early(client, expected, within_s=2.0) for name, (client, expected) in stalled.items()}
        assert cut == dict.fromkeys(stalled_requests, True), cut
        reader.settimeout(5)
        while read < LARGE:  # the reader's download was never cut: it completes
            chunk = reader.recv(SENDFILE_PIECE)
            assert chunk, read
            read += len(chunk)
    assert sum("made no progress for 1 s" in line for line in lines) == 1, lines
