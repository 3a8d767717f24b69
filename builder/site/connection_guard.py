"""`klein-web serve` under clients that connect and never finish a request, or never read the answer.

uvicorn closes a keep-alive connection that stays idle after a response, but not one that sent nothing, or half a
request head, or one that asked for a multi-GB file and stopped reading: each such connection holds a file
descriptor (two while a file is sent) forever. At the open-file limit (1024 on many desktops) accept() then fails,
no one is served, and asyncio logs every failed accept. So serve runs its HTTP/1.1 protocol with these guards:

- a request-head deadline: from the moment a connection is made, or a response finished, a client has
  HEAD_TIMEOUT_S to send the whole head of its next request, however it trickles in; then it is closed;
- a send deadline: a response that gets no bytes to the client for SEND_TIMEOUT_S (its socket accepts nothing:
  the client stopped reading) is abandoned and its connection closed;
- files are sent by the kernel (builder.site.file_sending: sendfile), and at most one piece of any other body is
  queued per connection (the transport's buffer limit is 0: the next piece waits until the last has gone), so a
  response that is not read holds no memory worth counting, and nothing is left behind when it closes;
- a connection cap below the open-file limit (each connection may hold a socket and a file being sent, plus the
  descriptors the process needs itself, plus the connections asyncio accepts in one go: the listen queue is kept
  short, BACKLOG): a connection beyond it closes the oldest one still waiting for a request head, else the one
  whose response has made no progress the longest (for at least STALLED_S), or itself when every connection is
  busy with a response that moves, so a real request is answered at once while stalled ones can be closed;
- one log line per condition, then at most one a minute with a count, instead of a line per connection (and the
  same for asyncio's failed accepts, should the process run out of descriptors anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import h11
from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

from builder.site.file_sending import SENDFILE, FileSpan

Log = Callable[[str], None]
ASGIMessage = dict[str, Any]

HEAD_TIMEOUT_S = 10.0
# A response whose client takes no byte for this long is abandoned. Long enough for a browser that pauses reading
# while it writes what it downloaded to disk; short enough that stalled clients do not pile up.
SEND_TIMEOUT_S = 30.0
# A response counts as stalled, and may be closed to make room under the cap, after this long without progress;
# a client that reads takes bytes far more often than this.
STALLED_S = 1.0
# The piece of a file handed to the kernel at a time: each piece that goes out is progress.
SENDFILE_PIECE = 1024 * 1024
# The listen queue, and so how many connections asyncio accepts in one go, before the cap can close any.
BACKLOG = 16
# Descriptors left to the process itself (stdio, logs, the event loop, the listening socket) and to two bursts of
# BACKLOG accepted connections not yet closed.
RESERVED_FDS = 16 + 2 * BACKLOG
MAX_CONNECTIONS = 4096
# Per condition, the first occurrence is logged at once, later ones summed up at most this often.
REPEAT_LOG_S = 60.0


def connection_cap(open_file_limit: int | None = None) -> int:
    """How many connections serve keeps open at once: half of what the open-file limit leaves (a socket and a file
    each), at least 4, at most MAX_CONNECTIONS."""
    if open_file_limit is None:
        open_file_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_file_limit == resource.RLIM_INFINITY or open_file_limit < 0:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, (open_file_limit - RESERVED_FDS) // 2))


class QuietLog:
    """One line the first time a condition happens, then at most one per REPEAT_LOG_S with how often it recurred."""

    def __init__(self, log: Log, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.clock = clock
        self.counts: dict[str, int] = {}
        self.last: dict[str, float] = {}

    def note(self, condition: str, message: str) -> None:
        now = self.clock()
        if condition not in self.last:
            self.log(message)
            self.last[condition], self.counts[condition] = now, 0
            return
        self.counts[condition] += 1
        if now - self.last[condition] >= REPEAT_LOG_S:
            self.log(
                f"{message} ({self.counts[condition]} more time(s) in the last {now - self.last[condition]:.0f} s)"
            )
            self.last[condition], self.counts[condition] = now, 0


class Guard:
    """What the protocol instances of one server share: the cap, the connections waiting for a request head, those
    whose response is blocked (the oldest first in both)."""

    def __init__(
        self,
        log: Log,
        *,
        cap: int | None = None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        self.cap = cap if cap is not None else connection_cap()
        self.head_timeout_s = head_timeout_s
        self.send_timeout_s = send_timeout_s
        self.quiet = QuietLog(log)
        self.waiting: dict[GuardedH11Protocol, None] = {}  # insertion order: the oldest first
        self.blocked: dict[GuardedH11Protocol, None] = {}  # insertion order: blocked the longest first

    def protocol_class(self) -> type[GuardedH11Protocol]:
        guard = self

        class Bound(GuardedH11Protocol):
            pass

        Bound.guard = guard
        return Bound

    def make_room(self, newcomer: GuardedH11Protocol) -> None:
        """Over the cap: close the oldest connection waiting for a request head, else the response stalled the
        longest, else the newcomer itself (every other connection is busy with a response that moves)."""
        self.quiet.note(
            "cap",
            f"serve: {len(newcomer.connections)} connections reach the cap of {self.cap} (from the open-file "
            "limit); closing the oldest ones that sent no request or stopped reading",
        )
        waiting = next((c for c in self.waiting if c is not newcomer), None)
        if waiting is not None:
            waiting.close_waiting()
            return
        stalled = next(iter(self.blocked), None)
        if stalled is not None and stalled.blocked_for() >= STALLED_S:
            stalled.abandon_response()
            return
        newcomer.close_waiting()

    def loop_exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's handler, except that failed accepts (out of descriptors) are one line, not one per try."""
        exception = context.get("exception")
        if isinstance(exception, OSError) and "accept" in str(context.get("message", "")):
            self.quiet.note(
                "accept",
                f"serve: cannot accept connections ({exception.strerror}); raise the open-file "
                "limit (ulimit -n) if this is not an attack",
            )
            return
        loop.default_exception_handler(context)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines, the cap and the SENDFILE extension (see the module docstring)."""

    guard: Guard
    head_deadline: asyncio.TimerHandle | None = None
    timed_cycle: object = None
    send_deadline: asyncio.TimerHandle | None = None
    blocked_since: float | None = None
    # The kernel's sending of one piece of a file, and whether the send deadline or the cap gave up on it.
    sending: asyncio.Task[int] | None = None
    abandoned = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.served_app = self.app
        self.app = self.app_with_sendfile  # the app every request cycle of this connection runs

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Buffer no more than the piece being written: the next waits until this one has gone to the kernel.
        transport.set_write_buffer_limits(high=0)
        self.wait_for_head()
        if len(self.connections) > self.guard.cap:
            self.guard.make_room(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_waiting()
        self.unblock()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self.timed_cycle:  # a request head arrived
            self.timed_cycle = self.cycle
            self.stop_waiting()

    def on_response_complete(self) -> None:
        self.wait_for_head()  # before uvicorn handles a pipelined request, which stops the wait again
        super().on_response_complete()

    # -- the request-head deadline

    def wait_for_head(self) -> None:
        self.stop_waiting()
        self.guard.waiting[self] = None
        self.head_deadline = self.loop.call_later(self.guard.head_timeout_s, self.head_timed_out)

    def stop_waiting(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None
        self.guard.waiting.pop(self, None)

    def head_timed_out(self) -> None:
        self.head_deadline = None
        self.guard.quiet.note(
            "head",
            f"serve: closing connections that sent no complete request within "
            f"{self.guard.head_timeout_s:g} s (idle or half-open clients)",
        )
        self.close_waiting()

    def close_waiting(self) -> None:
        self.stop_waiting()
        if not self.transport.is_closing():
            self.transport.close()

    # -- the send deadline: blocked while the transport's buffer or a piece of a file waits for the client

    def pause_writing(self) -> None:
        super().pause_writing()
        self.block()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.unblock()

    def block(self) -> None:
        if self.blocked_since is None:
            self.blocked_since = time.monotonic()
            self.guard.blocked[self] = None
            self.send_deadline = self.loop.call_later(self.guard.send_timeout_s, self.send_timed_out)

    def unblock(self) -> None:
        if self.send_deadline is not None:
            self.send_deadline.cancel()
            self.send_deadline = None
        self.blocked_since = None
        self.guard.blocked.pop(self, None)

    def blocked_for(self) -> float:
        return 0.0 if self.blocked_since is None else time.monotonic() - self.blocked_since

    def send_timed_out(self) -> None:
        self.send_deadline = None
        self.guard.quiet.note(
            "send",
            f"serve: closing connections whose response made no progress for {self.guard.send_timeout_s:g} s "
            "(clients that stopped reading)",
        )
        self.abandon_response()

    def abandon_response(self) -> None:
        """Drop the connection without flushing what is queued for it (the client is not reading it)."""
        self.unblock()
        self.stop_waiting()
        if self.sending is not None:
            # send_file resets the connection once loop.sendfile has handed the transport back.
            self.abandoned = True
            self.sending.cancel()
        else:
            self.reset()

    def reset(self) -> None:
        """Close with a reset, not a close: the kernel drops what the client did not read instead of holding it for
        minutes while it tries to deliver it."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    # -- SENDFILE

    async def app_with_sendfile(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The served app, offered the SENDFILE extension; its SENDFILE messages are sent here, the rest by uvicorn."""
        scope.setdefault("extensions", {})[SENDFILE] = {}

        async def send_or_sendfile(message: ASGIMessage) -> None:
            if message["type"] == SENDFILE:
                await self.send_file(message["file"], message["offset"], message["count"])
            else:
                await send(message)

        await self.served_app(scope, receive, send_or_sendfile)

    async def send_file(self, file: BinaryIO, offset: int, count: int) -> None:
        """`count` bytes of `file` from `offset`, as the response body (or part of it), piece by piece, each piece
        under the send deadline. A client gone, a piece abandoned or a file that ends early resets the connection
        (the response cannot be completed)."""
        try:
            # h11 counts the bytes against Content-Length, and frames them if it has to.
            framing = self.conn.send_with_data_passthrough(h11.Data(data=FileSpan(count)))  # type: ignore[arg-type]  # h11 takes only len() of it
        except h11.LocalProtocolError:
            return  # the connection was lost meanwhile: uvicorn ends the response
        for part in framing or []:
            if not isinstance(part, FileSpan):
                self.transport.write(part)
                continue
            while count > 0:
                await self.flow.drain()  # the transport's buffer empty (its limit is 0): the kernel's turn
                piece = min(count, SENDFILE_PIECE)
                self.sending = self.loop.create_task(self.loop.sendfile(self.transport, file, offset, piece))
                self.block()
                try:
                    sent = await self.sending
                except asyncio.CancelledError:
                    if not self.abandoned:
                        raise
                    sent = -1
                except (OSError, RuntimeError):  # the client went away, or the transport is closing
                    sent = -1
                finally:
                    self.sending = None
                    self.unblock()
                if self.abandoned or sent != piece:
                    self.reset()
                    return
                offset, count = offset + piece, count - piece


class GuardedServer(Server):
    """uvicorn's Server running `app` with the guard's protocol, on asyncio's own loop (whose sendfile the protocol
    uses), a short listen queue, and the guard's handler for failed accepts installed on its event loop."""

    def __init__(self, app: Any, *, guard: Guard, **config: Any) -> None:
        super().__init__(Config(app, http=guard.protocol_class(), loop="asyncio", backlog=BACKLOG, **config))
        self.guard = guard

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.guard.loop_exception_handler)
        await super().serve(sockets)
