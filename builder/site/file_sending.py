"""File bodies that `serve` hands to the kernel (sendfile) instead of reading them through Python.

A response that reads its file into memory holds those bytes until the client takes them: a client that asks for a
multi-GB weight file and never reads keeps a megabyte or more of the server's memory per connection, and glibc keeps
much of it after the connection closes. So `serve`'s HTTP protocol (builder.site.connection_guard) offers an ASGI
extension, SENDFILE: a response sends `{"type": SENDFILE, "file": <open binary file>, "offset": N, "count": M}`
instead of body chunks, and the protocol streams those bytes from the file to the socket with `loop.sendfile`, under
its send deadline, keeping nothing in memory.

`FileResponse` (Starlette's, with its Range, If-Range, 416 and ETag handling) uses it when the server offers it: the
status and headers are Starlette's answer to the same request made as HEAD, so they are exactly what Starlette would
send; the body (the whole file, one range, or several ranges as Starlette frames them in a multipart body) is then
sent as file slices through SENDFILE. Servers without the extension (`serve_in_thread`, for regress and the tests)
get Starlette's own reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.responses import FileResponse as StarletteFileResponse
from starlette.types import Message, Receive, Scope, Send

SENDFILE = "klein-web.sendfile"
# 1 MiB reads where Starlette reads the file itself (servers without the extension): 64 KiB reads make multi-GB
# weights crawl through the thread pool.
READ_CHUNK = 1024 * 1024
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/\d+")
BOUNDARY = re.compile(r"multipart/byteranges; boundary=(\w+)")
# A part of a response body: bytes as they are, or (offset, count) of the file.
Part = bytes | tuple[int, int]


@dataclass(frozen=True)
class FileSpan:
    """`count` bytes of a file as the HTTP framing counts them (h11 needs only their length)."""

    count: int

    def __len__(self) -> int:
        return self.count


class FileResponse(StarletteFileResponse):
    """Starlette's FileResponse, its body sent through SENDFILE where the server offers that extension."""

    chunk_size = READ_CHUNK

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or SENDFILE not in scope.get("extensions", {}):
            await super().__call__(scope, receive, send)
            return
        starts: list[Message] = []

        async def keep_start(message: Message) -> None:
            if message["type"] == "http.response.start":
                starts.append(message)

        await super().__call__({**scope, "method": "HEAD"}, receive, keep_start)
        parts = self.body_parts(starts[0], Headers(scope=scope)) if starts else None
        if parts is None:  # an answer that is not the file (400, 416): Starlette's, as it is
            await super().__call__(scope, receive, send)
            return
        file: BinaryIO = await anyio.to_thread.run_sync(open, self.path, "rb")
        try:
            await send(starts[0])
            for part in parts:
                if isinstance(part, bytes):
                    await send({"type": "http.response.body", "body": part, "more_body": True})
                elif part[1] > 0:
                    await send({"type": SENDFILE, "file": file, "offset": part[0], "count": part[1]})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            file.close()

    def body_parts(self, start: Message, request: Headers) -> list[Part] | None:
        """The body of the answer whose start is `start`, as file slices and the bytes between them (a multipart
        body's part headers, framed as Starlette frames them), or None when the body is no part of the file."""
        headers = Headers(raw=start["headers"])
        if start["status"] == 200:
            return [(0, int(headers["content-length"]))]
        if start["status"] != 206:
            return None
        single = CONTENT_RANGE.fullmatch(headers.get("content-range", ""))
        if single is not None:
            return [(int(single[1]), int(single[2]) - int(single[1]) + 1)]
        boundary = BOUNDARY.fullmatch(headers.get("content-type", ""))
        if boundary is None or self.stat_result is None:
            return None
        size = self.stat_result.st_size
        ranges = self._parse_range_header(request["range"], size)
        _length, part_head = self.generate_multipart(ranges, boundary[1], size, self.headers["content-type"])
        parts: list[Part] = []
        for first, end in ranges:
            parts += [part_head(first, end), (first, end - first), b"\r\n"]
        return [*parts, f"--{boundary[1]}--".encode("latin-1")]
