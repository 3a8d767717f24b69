"""`klein-web serve` under clients that connect and never finish a request, with a low open-file limit.

The server runs as a real subprocess with RLIMIT_NOFILE lowered to 64 (a connection cap of 8); 80 connections to
127.0.0.1 are opened, half sending nothing and half an unfinished request head. A normal GET must still answer at
once, every one of those connections must be closed by the server within the request-head deadline, and the log
must hold one line per condition (no traceback, no "Too many open files" per accept). A second wave changes none
of that. Only loopback is ever connected to.
"""

from __future__ import annotations

import os
import resource
import select
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import find_free_port

from builder import REPO_ROOT
from builder.site.connection_guard import HEAD_TIMEOUT_S, QuietLog, connection_cap

OPEN_FILES = 64
CLIENTS = 80


@pytest.fixture
def low_limit_server(dist_dir: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port = find_free_port()
    log_path = tmp_path / "serve.log"

    # The limit is lowered inside the server's own process, before `klein-web serve` starts.
    lowered = (
        f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({OPEN_FILES}, {OPEN_FILES}));"
        " sys.argv[0] = 'builder'; runpy.run_module('builder', run_name='__main__', alter_sys=True)"
    )
    with open(log_path, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-c", lowered, "serve", "--port", str(port), "--dist", str(dist_dir)],
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
            yield port, log_path
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
