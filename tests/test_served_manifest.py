"""`klein-web serve --models` with a folder without manifest.json serves a manifest that follows the files.

The folder is make-tiny's q4 repo without its manifest.json (the seed layout, as `hf download` leaves it). A real
`klein-web serve` subprocess serves it; then files change under it: a new size, the same size with new bytes, the
same size and restored modification time, a file removed (the server must say why, 503, one log line each time)
and put back, and a manifest.json added. Each time /models/manifest.json must describe the files as they are now,
with the sha256 computed here from the bytes on disk. While a changed weight file is hashed again, 80 manifest
requests wait for it, and another file is still answered at once: waiting requests hold no worker thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from builder.repo import local

CHANGED = "scheduler/scheduler_config.json"


def get_manifest(server: Any) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(server.url("/models/manifest.json"), timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def on_disk(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def entry(served: dict[str, Any], rel: str) -> dict[str, Any]:
    return {key: served["files"][rel][key] for key in ("size", "sha256")}


def test_the_served_manifest_follows_the_files(
    tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path, live_server_factory: Any
) -> None:
    folder = tmp_path / "seed"
    shutil.copytree(tiny_models["q4"], folder)
    (folder / "manifest.json").unlink()
    assert local.has_seed_layout(folder)
    server = live_server_factory(dist_dir, models=folder)
    target = folder / CHANGED

    status, served = get_manifest(server)
    assert status == 200 and entry(served, CHANGED) == on_disk(target)

    # A new size.
    config = json.loads(target.read_text())
    target.write_text(json.dumps({**config, "note": "changed"}))
    status, served = get_manifest(server)
    assert status == 200 and entry(served, CHANGED) == on_disk(target)

    # The same size, other bytes, the modification time put back as it was.
    before = os.stat(target)
    text = target.read_text()
    target.write_text(text.replace("changed", "CHANGED"))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(target).st_size == before.st_size
    status, served = get_manifest(server)
    assert status == 200 and entry(served, CHANGED) == on_disk(target)

    # A file the model needs removed: the server says so instead of serving a manifest of files that are gone.
    kept = target.read_bytes()
    target.unlink()
    status, body = get_manifest(server)
    assert status == 503 and str(folder) in body and "no longer complete" in body and CHANGED in body
    assert sum("no longer complete" in line for line in server.output().splitlines()) == 1
    target.write_bytes(kept)
    status, served = get_manifest(server)
    assert status == 200 and entry(served, CHANGED) == on_disk(target)

    # Unchanged files: the same manifest, not hashed again.
    rebuilt = server.output().count("describing them again")
    assert get_manifest(server) == (200, served)
    assert server.output().count("describing them again") == rebuilt

    # A manifest.json of the folder's own wins once it is there.
    own = {**served, "source": "written by hand"}
    (folder / "manifest.json").write_text(json.dumps(own))
    assert get_manifest(server) == (200, own)


def test_the_hash_cache_sees_a_rewrite_with_the_modification_time_put_back(tmp_path: Path, monkeypatch: Any) -> None:
    from builder.repo import verify

    monkeypatch.setenv("KLEIN_WEB_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 64)
    first = verify.describe_files(tmp_path, ["weights.bin"])["weights.bin"].sha256
    before = os.stat(path)
    path.write_bytes(b"b" * 64)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = verify.describe_files(tmp_path, ["weights.bin"])["weights.bin"].sha256
    assert first == hashlib.sha256(b"a" * 64).hexdigest() and second == hashlib.sha256(b"b" * 64).hexdigest()


WAITING = 80  # twice the worker threads Starlette runs blocking work on
REHASHED = 1024 * 1024 * 1024  # the changed weight file: hashing it takes a second or more


def read_answer(client: socket.socket) -> tuple[int, bytes]:
    """(status, body) of the one answer on a `Connection: close` request."""
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_requests_waiting_for_a_rehash_hold_no_worker_thread(
    tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path, live_server_factory: Any
) -> None:
    folder = tmp_path / "seed"
    shutil.copytree(tiny_models["q4"], folder)
    (folder / "manifest.json").unlink()
    server = live_server_factory(dist_dir, models=folder)
    assert get_manifest(server)[0] == 200
    weights = max(folder.rglob("*.onnx_data*"), key=lambda path: path.stat().st_size)
    with open(weights, "r+b") as handle:
        handle.truncate(REHASHED)  # sparse: a new size, hashed again on the next manifest request

    clients = []
    try:
        for _ in range(WAITING):
            client = socket.create_connection(("127.0.0.1", server.port), timeout=60)
            client.sendall(b"GET /models/manifest.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            clients.append(client)
        start = time.monotonic()
        with urllib.request.urlopen(server.url("/index.html"), timeout=60) as response:
            assert response.status == 200 and response.read()
        answered_in = time.monotonic() - start
        assert answered_in < 1.0, f"the other file waited {answered_in:.1f} s for the rehash"
        # The rehash was still running: no manifest request has its answer yet.
        still_waiting = []
        for client in clients:
            client.setblocking(False)
            try:
                client.recv(1, socket.MSG_PEEK)  # an answer, or the end of one
                still_waiting.append(False)
            except BlockingIOError:
                still_waiting.append(True)
            client.setblocking(True)
        assert all(still_waiting), "the rehash ended before the other file was asked for: make REHASHED larger"
        answers = [read_answer(client) for client in clients]
    finally:
        for client in clients:
            client.close()
    relative = weights.relative_to(folder).as_posix()
    for status, body in answers:
        assert status == 200, body[:300]
        assert json.loads(body)["files"][relative]["size"] == REHASHED
    assert server.output().count("describing them again") == 1  # one rehash for all of them
