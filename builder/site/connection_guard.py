"""`klein-web serve` under clients that connect and never finish a request: timeouts, a connection cap, quiet logs.

uvicorn closes a keep-alive connection that stays idle after a response, but not one that sent nothing, or half a
request head: each such connection holds a file descriptor forever. At the open-file limit (1024 on many desktops)
accept() then fails, no one is served, and asyncio logs every failed accept. So serve runs its HTTP/1.1 protocol
with three guards:

- a request-head deadline: from the moment a connection is made, or a response finished, a client has
  HEAD_TIMEOUT_S to send the whole head of its next request, however it trickles in; then it is closed;
- a connection cap below the open-file limit (each connection may hold a socket and a file being sent, plus the
  descriptors the process needs itself, plus the connections asyncio accepts in one go: the listen queue is kept
  short, BACKLOG): a connection beyond it closes the oldest one still waiting for a request
  head, or itself when every connection is busy with a response, so a real request is always answered;
- one log line per condition, then at most one a minute with a count, instead of a line per connection (and the
  same for asyncio's failed accepts, should the process run out of descriptors anyway).
"""

from __future__ import annotations

import asyncio
import resource
import socket
import time
from collections.abc import Callable
from typing import Any

from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

Log = Callable[[str], None]

HEAD_TIMEOUT_S = 10.0
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
    """What the protocol instances of one server share: the cap, the connections waiting for a request head."""

    def __init__(self, log: Log, *, cap: int | None = None, head_timeout_s: float = HEAD_TIMEOUT_S) -> None:
        self.cap = cap if cap is not None else connection_cap()
        self.head_timeout_s = head_timeout_s
        self.quiet = QuietLog(log)
        self.waiting: dict[GuardedH11Protocol, None] = {}  # insertion order: the oldest first

    def protocol_class(self) -> type[GuardedH11Protocol]:
        guard = self

        class Bound(GuardedH11Protocol):
            pass

        Bound.guard = guard
        return Bound

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
    """uvicorn's h11 protocol with a request-head deadline and the connection cap (see the module docstring)."""

    guard: Guard
    head_deadline: asyncio.TimerHandle | None = None
    timed_cycle: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.wait_for_head()
        if len(self.connections) > self.guard.cap:
            oldest = next((c for c in self.guard.waiting if c is not self), None)
            victim = oldest if oldest is not None else self
            self.guard.quiet.note(
                "cap",
                f"serve: {len(self.connections)} connections reach the cap of {self.guard.cap} "
                "(from the open-file limit); closing the oldest ones that sent no request",
            )
            victim.close_waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_waiting()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self.timed_cycle:  # a request head arrived
            self.timed_cycle = self.cycle
            self.stop_waiting()

    def on_response_complete(self) -> None:
        self.wait_for_head()  # before uvicorn handles a pipelined request, which stops the wait again
        super().on_response_complete()

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


class GuardedServer(Server):
    """uvicorn's Server with the guard's handler for failed accepts installed on its event loop."""

    def __init__(self, config: Config, *, guard: Guard) -> None:
        super().__init__(config)
        self.guard = guard

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.guard.loop_exception_handler)
        await super().serve(sockets)
