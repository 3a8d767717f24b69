"""`klein-web serve` under clients that connect and never finish a request, or never read the answer, with a low
open-file limit.

The server runs as a real subprocess with RLIMIT_NOFILE lowered. At 64 (a connection cap of 8), 80 connections to
127.0.0.1 are opened, half sending nothing and half an unfinished request head. A normal GET must still answer at
once, every one of those connections must be closed by the server within the request-head deadline, and the log
must hold one line per condition (no traceback, no "Too many open files" per accept). At 256 (a cap of 104), 115
clients ask for a large file (whole, one range, several ranges) and never read it: a normal GET must still answer
at once, and the server's memory must stay flat while they wait and after they close. A second wave changes none
of that. Only loopback is ever connected to.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import find_free_port

from builder import REPO_ROOT
from builder.site.connection_guard import HEAD_TIMEOUT_S, STALLED_S, QuietLog, connection_cap

OPEN_FILES = 64
CLIENTS = 80
# Clients that ask for a large file and never read it: more than the cap that this open-file limit gives.
READERS_OPEN_FILES = 256
STALLED_READERS = 115
LARGE_FILE = 64 * 1024 * 1024  # far more than the socket buffers of both ends hold
# The whole file, one range, several ranges (a multipart answer).
ASKED_RANGES = (b"", b"Range: bytes=1000-\r\n", b"Range: bytes=0-99,5000-\r\n")
# What the server may hold per stalled reader (its connection's own state included): a response that read its file
# through memory held megabytes each, and kept most of them after the clients closed.
MEMORY_PER_STALLED_READER = 128 * 1024


@contextlib.contextmanager
def limited_server(dist: Path, log_path: Path, open_files: int) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """(port, process) of `klein-web serve --dist dist` with RLIMIT_NOFILE lowered to `open_files` inside its own
    process before serve starts, answering `/` when it is yielded."""
    lowered = (
        f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({open_files}, {open_files}));"
        " sys.argv[0] = 'builder'; runpy.run_module('builder', run_name='__main__', alter_sys=True)"
    )
    port = find_free_port()
    with open(log_path, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-c", lowered, "serve", "--port", str(port), "--dist", str(dist)],
            cwd=REPO_ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.2)
            yield port, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def low_limit_server(dist_dir: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    log_path = tmp_path / "serve.log"
    with limited_server(dist_dir, log_path, OPEN_FILES) as (port, _process):
        yield port, log_path


def open_stalled(port: int) -> list[socket.socket]:
    clients = []
    for index in range(CLIENTS):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        if index % 2:
            client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow")  # never finished
        clients.append(client)
    return clients


def closed_by_server(client: socket.socket) -> bool:
    client.settimeout(0.5)
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def still_open_at(clients: list[socket.socket], deadline: float) -> list[int]:
    """The clients the server has not closed by `deadline` (time.monotonic()), watched until each is closed: a
    client that is sent anything instead counts as open."""
    watched = dict(enumerate(clients))
    answered: list[int] = []
    while watched and time.monotonic() < deadline:
        ready, _, _ = select.select(list(watched.values()), [], [], min(0.5, max(0.0, deadline - time.monotonic())))
        for index, client in list(watched.items()):
            if client in ready:
                del watched[index]
                if not closed_by_server(client):
                    answered.append(index)
    return sorted([*watched, *answered])


def get_answers(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as response:
        return response.status == 200 and len(response.read()) > 0


def test_stalled_connections_neither_starve_the_server_nor_flood_its_log(low_limit_server: tuple[int, Path]) -> None:
    port, log_path = low_limit_server
    assert connection_cap(OPEN_FILES) == 8
    for wave in range(2):
        clients = open_stalled(port)
        try:
            start = time.monotonic()
            assert get_answers(port)
            assert time.monotonic() - start < 3  # at once, not after the stalled ones time out
            still_open = still_open_at(clients, deadline=time.monotonic() + HEAD_TIMEOUT_S + 2)
            assert still_open == [], (wave, still_open)
            assert get_answers(port)
        finally:
            for client in clients:
                client.close()
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Too many open files" not in log, log[-3000:]
    assert sum("reach the cap of 8" in line for line in log.splitlines()) == 1, log[-3000:]
    assert sum("sent no complete request" in line for line in log.splitlines()) == 1, log[-3000:]
    assert len(log) < 20_000


def stalled_reader(port: int, asked_range: bytes) -> socket.socket:
    """A client that asks for the large file, with a small receive buffer, and never reads the answer."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(5)
    client.connect(("127.0.0.1", port))
    with contextlib.suppress(OSError):  # a connection beyond the cap may be closed before its request is sent
        client.sendall(b"GET /large.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n" + asked_range + b"\r\n")
    return client


def test_clients_that_stop_reading_neither_lock_out_a_request_nor_keep_memory(dist_dir: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(dist_dir, site)
    with open(site / "large.bin", "wb") as handle:
        handle.truncate(LARGE_FILE)  # sparse: no disk space
    log_path = tmp_path / "serve.log"
    assert connection_cap(READERS_OPEN_FILES) == 104 < STALLED_READERS
    budget = STALLED_READERS * MEMORY_PER_STALLED_READER
    with limited_server(site, log_path, READERS_OPEN_FILES) as (port, process):
        server = psutil.Process(process.pid)
        assert get_answers(port)
        before = server.memory_info().rss
        for wave in range(2):
            clients = [stalled_reader(port, ASKED_RANGES[i % len(ASKED_RANGES)]) for i in range(STALLED_READERS)]
            try:
                time.sleep(STALLED_S + 1)  # every response has been blocked long enough to count as stalled
                start = time.monotonic()
                assert get_answers(port), wave
                assert time.monotonic() - start < 3, wave  # at once, not when the stalled ones time out
                held = server.memory_info().rss - before
                assert held < budget, (wave, held)
            finally:
                for client in clients:
                    client.close()
            time.sleep(1)
            assert server.memory_info().rss - before < budget, wave
            assert get_answers(port)
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Too many open files" not in log, log[-3000:]
    assert sum("reach the cap of 104" in line for line in log.splitlines()) == 1, log[-3000:]


def test_quiet_log_says_each_condition_once_then_a_count_a_minute() -> None:
    lines: list[str] = []
    now = [0.0]
    quiet = QuietLog(lines.append, clock=lambda: now[0])
    for second in range(150):
        now[0] = float(second)
        for _ in range(100):
            quiet.note("cap", "at the cap")
        quiet.note("head", "timed out")
    assert lines[:2] == ["at the cap", "timed out"]
    assert len(lines) == 6  # each condition at 0 s, 60 s and 120 s
    assert lines[2] == "at the cap (6000 more time(s) in the last 60 s)"  # 99 + 59 x 100 + this one


@pytest.mark.parametrize(
    ("limit", "cap"), [(64, 8), (1024, 488), (10, 4), (10**9, 4096), (resource.RLIM_INFINITY, 4096)]
)
def test_the_cap_leaves_room_below_the_open_file_limit(limit: int, cap: int) -> None:
    assert connection_cap(limit) == cap
