"""The model store trusts a stored file only as the version it was downloaded for (web_src/src/store/identity.js).

Real headless Chromium and the real app (builder.site.server.create_app) behind a recording ASGI layer that can
cut, truncate or re-label a file; the worker is driven through its protocol (tests/browser/helpers.py) and the
store is read back from OPFS. Each test has its own origin (port), hence its own empty store, except where the
point is the same origin.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import WorkerClient  # tests/browser is on sys.path

from builder import REPO_ROOT
from builder.pipeline import imaging, reference
from builder.repo import manifest
from builder.site.server import create_app, serve_in_thread

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
FP32_PSNR_MIN = 40.0

# {repo path: size} of every complete file in this origin's model store (names ending in .partial or
# .identity.json are the store's own bookkeeping, listed as they are).
OPFS_SIZES_JS = """async () => {
    const sizes = {};
    const walk = async (dir, prefix) => {
        for await (const [name, handle] of dir.entries()) {
            if (handle.kind === 'directory') await walk(handle, prefix + name + '/');
            else sizes[prefix + name] = (await handle.getFile()).size;
        }
    };
    const root = await navigator.storage.getDirectory();
    let models;
    try { models = await root.getDirectoryHandle('klein-models'); } catch { return sizes; }
    for await (const [, source] of models.entries()) await walk(source, '');
    return sizes;
}"""


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    if_range: str | None
    status: int = 0
    body_bytes: int = 0
    started: float = 0.0  # time.monotonic() when the request came in
    ended: float = 0.0  # and when its answer was done (0 while it is not)


class Recorder:
    """ASGI layer over the real app: records every request (status, body bytes sent, when) and lets a test change
    the app behind it (`target`), and delay, cut, truncate or strip headers of the answers for one path (`hooks`)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.seen: list[Seen] = []
        # path -> hook(seen, scope) -> None or a dict of actions: {"delay": seconds before the answer starts,
        # "cut_after": n, "end_after": n, "drop_headers": {...}, "on_cut": callable}
        self.hooks: dict[str, Callable[[Seen], dict[str, Any] | None]] = {}

    def requests(self, path: str, method: str = "GET") -> list[Seen]:
        return [s for s in self.seen if s.path == path and s.method == method]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.target(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        seen = Seen(
            scope["method"], scope["path"], headers.get("range"), headers.get("if-range"), started=time.monotonic()
        )
        self.seen.append(seen)
        hook = self.hooks.get(scope["path"])
        actions = (hook(seen) if hook else None) or {}
        if "delay" in actions:
            await asyncio.sleep(actions["delay"])
        drop = {name.lower().encode() for name in actions.get("drop_headers", ())}
        finished = False

        async def relay(message: Any) -> None:
            nonlocal finished
            if finished:
                return  # the answer was ended early on purpose: the rest of the file is not sent
            if message["type"] == "http.response.start":
                seen.status = message["status"]
                if drop:
                    message = {**message, "headers": [(k, v) for k, v in message["headers"] if k.lower() not in drop]}
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if "cut_after" in actions and seen.body_bytes + len(body) >= actions["cut_after"]:
                    body = body[: actions["cut_after"] - seen.body_bytes]
                    seen.body_bytes += len(body)
                    await send({**message, "body": body, "more_body": True})
                    # Let the browser read those bytes before the connection drops (a stall, then a reset).
                    await asyncio.sleep(1.0)
                    if "on_cut" in actions:
                        actions["on_cut"]()
                    raise ConnectionResetError("connection cut by the test")
                if "end_after" in actions and seen.body_bytes + len(body) >= actions["end_after"]:
                    body = body[: actions["end_after"] - seen.body_bytes]
                    seen.body_bytes += len(body)
                    finished = True
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
                seen.body_bytes += len(body)
            await send(message)

        try:
            await self.target(scope, receive, relay)
        finally:
            seen.ended = time.monotonic()


@pytest.fixture
def serve(dist_dir: Path) -> Iterator[Callable[[Path], tuple[str, Recorder]]]:
    """serve(models_dir) -> (base URL, Recorder) on a new port; stopped after the test."""
    stack: list[Any] = []

    def start(models: Path) -> tuple[str, Recorder]:
        recorder = Recorder(create_app(dist_dir, models))
        server = serve_in_thread(recorder, log_level="critical")
        port = server.__enter__()
        stack.append(server)
        return f"http://127.0.0.1:{port}/", recorder

    yield start
    for server in reversed(stack):
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def other_model(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny fp32 model: tiny_models['fp32'] with its weights drawn again (scripts/weightless_repo.py strip,
    then fill with another seed), so the same file sizes and other bytes."""
    folder = tmp_path_factory.mktemp("other-model")
    for command in (
        ["strip", str(tiny_models["fp32"]), str(folder / "structure")],
        ["fill", str(folder / "structure"), str(folder / "fp32"), "--seed", "1"],
    ):
        subprocess.run(
            [sys.executable, str(REPO_ROOT / "scripts" / "weightless_repo.py"), *command],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return folder / "fp32"


def weight_paths(repo: Path) -> list[str]:
    return [path for path in manifest.load(repo).files if ".onnx" in path]


def stored_sizes(page: Any) -> dict[str, int]:
    return dict(page.evaluate(OPFS_SIZES_JS))


def test_model_of_equal_sizes_on_the_same_origin_is_downloaded_again(
    page: Any, serve: Any, dist_dir: Path, tiny_models: dict[str, Path], other_model: Path
) -> None:
    model_a, model_b = tiny_models["fp32"], other_model
    files_a, files_b = manifest.load(model_a).files, manifest.load(model_b).files
    assert {p: f.size for p, f in files_a.items()} == {p: f.size for p, f in files_b.items()}, "the point: equal sizes"
    changed = {p for p in files_a if files_a[p].sha256 != files_b[p].sha256}

    base_url, recorder = serve(model_a)
    client = WorkerClient(page, base_url)
    client.open()
    first = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=2)
    image_a = first.rgb()
    used = {s.path.removeprefix("/models/") for s in recorder.seen if s.method == "GET" and s.status == 200}
    assert used & changed, (used, changed)

    # `klein-web serve --models B` on the same port: same origin, same store, same open page and worker.
    recorder.target = create_app(dist_dir, model_b)
    recorder.seen.clear()
    second = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=2)
    fetched = {s.path.removeprefix("/models/") for s in recorder.seen if s.method == "GET" and s.status in (200, 206)}
    fetched.discard("manifest.json")
    assert fetched == used & changed, "exactly the files that changed are downloaded again"
    for path in fetched:
        assert sum(s.body_bytes for s in recorder.requests("/models/" + path)) == files_b[path].size, path
    image_b = second.rgb()
    expected_b = reference.generate(
        model_b, prompt=PROMPT, seed=0, width=64, height=64, steps=2, log=lambda _msg: None
    ).image
    assert imaging.psnr(image_b, expected_b) >= FP32_PSNR_MIN, "the image comes from B's weights"
    assert imaging.psnr(image_b, image_a) < FP32_PSNR_MIN, "and not from A's"

    # A fresh worker on B: the recorded identities match, nothing is downloaded again, and every session is created
    # from the stored files (a load request: what a generation does before its first run).
    recorder.seen.clear()
    client.reload()
    again = client.load().ok()
    assert again["downloadedBytes"] == 0
    assert set(again["graphs"]) == {"text_encoder", "transformer", "vae_decoder"}, again["graphs"]
    assert not [s for s in recorder.seen if ".onnx" in s.path], [s.path for s in recorder.seen]


def with_one_bit_flipped(model: Path, repo: Path, pick: Callable[[list[str]], str]) -> tuple[str, bytes]:
    """Copy `model` to `repo` and flip one bit of the weight file `pick` chooses (from them, smallest first): the
    same size, but the manifest's sha256 no longer holds. Returns the file and its good bytes."""
    shutil.copytree(model, repo)
    files = manifest.load(repo).files
    bad = pick(sorted(weight_paths(repo), key=lambda p: files[p].size))
    good = (repo / bad).read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x01
    (repo / bad).write_bytes(bytes(data))
    return bad, good


@pytest.mark.parametrize("check", ["blocks", "whole-file"])
def test_corrupted_byte_is_caught_before_any_session_and_not_kept(
    page: Any, serve: Any, tiny_models: dict[str, Path], tmp_path: Path, check: str
) -> None:
    repo = tmp_path / "corrupt"
    bad, _good = with_one_bit_flipped(tiny_models["fp32"], repo, lambda weights: weights[-1])
    data = json.loads((repo / manifest.MANIFEST_NAME).read_text())
    # The manifest `convert` writes lists each file's block hashes, which the app checks with WebCrypto; without them
    # (an older manifest) it computes the whole file's SHA-256.
    assert all("blocks" in entry for entry in data["files"].values())
    if check == "whole-file":
        for entry in data["files"].values():
            del entry["blocks"]
        (repo / manifest.MANIFEST_NAME).write_text(json.dumps(data))

    base_url, _recorder = serve(repo)
    client = WorkerClient(page, base_url)
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=1)
    assert reply.type == "error" and reply.error is not None, reply.result
    assert reply.error["code"] == "integrity", reply.error
    assert bad in reply.error["message"] and "manifest" in reply.error["message"], reply.error
    size, block = manifest.load(repo).files[bad].size, manifest.BLOCK_SIZE
    # with_one_bit_flipped changes the middle byte.
    named = f"(block {size // 2 // block + 1} of {-(-size // block)})" if check == "blocks" else "its SHA-256 is"
    assert named in reply.error["message"], reply.error
    stages = [e["stage"] for e in reply.of_type("stage")]
    assert "load" not in stages, f"a session was started from unverified bytes: {stages}"
    name = Path(bad).name
    assert not [p for p in stored_sizes(page) if Path(p).name.startswith(name + ".") or p.endswith("/" + name)], (
        stored_sizes(page)
    )


def test_corrupted_byte_in_one_of_several_files_downloaded_at_once_is_refused(
    page: Any, serve: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    repo = tmp_path / "corrupt-one"
    # Neither the first nor the last to start (the largest start first).
    bad, good_bytes = with_one_bit_flipped(tiny_models["fp32"], repo, lambda weights: weights[len(weights) // 2])
    files = manifest.load(repo).files
    weights = weight_paths(repo)

    base_url, recorder = serve(repo)
    for path in weights:
        # Every weight file's answer starts a second late: downloads that run one at a time cannot overlap.
        recorder.hooks["/models/" + path] = lambda seen: {"delay": 1.0} if seen.method == "GET" else None
    client = WorkerClient(page, base_url)
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=1)
    assert reply.type == "error" and reply.error is not None, reply.result
    assert reply.error["code"] == "integrity" and bad in reply.error["message"], reply.error
    assert "load" not in [e["stage"] for e in reply.of_type("stage")], "a session was started from unverified bytes"

    gets = [s for s in recorder.seen if s.method == "GET" and s.path.removeprefix("/models/") in weights]
    at_once = max(sum(1 for o in gets if o.started <= s.started < (o.ended or float("inf"))) for s in gets)
    assert at_once >= 2, [(s.path, s.started, s.ended) for s in gets]
    # The digests were taken by the store's helper worker, not on the thread that fetched and wrote.
    assert [s for s in recorder.seen if s.path.startswith("/assets/store-") and s.status == 200], sorted(
        {s.path for s in recorder.seen}
    )
    stored = stored_sizes(page)
    name = Path(bad).name
    assert not [p for p in stored if Path(p).name.startswith(name + ".") or p.endswith("/" + name)], stored
    # What the other downloads completed before they were stopped is whole and verified; the rest resumes later.
    complete = [p for p in weights if p in stored]
    for path in complete:
        assert stored[path] == files[path].size, path

    # The server's copy is repaired: the next request downloads what is missing, not what is stored, and creates
    # every session (a load request: what a generation does before its first run).
    (repo / bad).write_bytes(good_bytes)
    recorder.seen.clear()
    again = client.load().ok()
    assert set(again["graphs"]) == {"text_encoder", "transformer", "vae_decoder"}, again["graphs"]
    fetched = {s.path.removeprefix("/models/") for s in recorder.seen if s.method == "GET" and s.status in (200, 206)}
    assert bad in fetched and not fetched & set(complete), (fetched, complete)


@pytest.mark.parametrize(
    ("validator", "changed"), [("etag", False), ("etag", True), ("last-modified", False), ("last-modified", True)]
)
def test_cut_download_resumes_only_against_the_same_version(
    page: Any, serve: Any, tiny_models: dict[str, Path], tmp_path: Path, validator: str, changed: bool
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_models["fp32"], repo)
    files = manifest.load(repo).files
    path = max(weight_paths(repo), key=lambda p: files[p].size)
    size = files[path].size
    url_path = "/models/" + path

    def new_version() -> None:
        # Same bytes, a new modification time: to the server another version (new ETag and Last-Modified), as a
        # re-published file of the same name is. (Same bytes, so the manifest still holds and the run ends well.)
        later = time.time() + 100
        os.utime(repo / path, (later, later))

    cut = {"done": False}

    def hook(seen: Seen) -> dict[str, Any] | None:
        actions: dict[str, Any] = {"drop_headers": {"etag"}} if validator == "last-modified" else {}
        if seen.method == "GET" and not cut["done"]:
            cut["done"] = True
            actions["cut_after"] = size // 2
            if changed:
                actions["on_cut"] = new_version
        return actions

    base_url, recorder = serve(repo)
    recorder.hooks[url_path] = hook
    client = WorkerClient(page, base_url)
    client.open()
    # Only the download matters: `load` fetches the file's component through the store as a generation does
    # (models.prepare), then creates its session from the stored bytes, without running an image.
    client.request(
        "load",
        params={"modelBase": client.model_base, "width": 64, "height": 64, "components": [path.split("/")[0]]},
        timeout_s=300,
    ).ok()
    gets = recorder.requests(url_path)
    assert len(gets) == 2, gets
    assert gets[0].range is None and gets[0].status == 200
    resumed_from = int(gets[1].range.removeprefix("bytes=").removesuffix("-")) if gets[1].range else 0
    assert 0 < resumed_from <= size // 2, gets[1]
    # The resume carries the validator of the first answer; the server proves the version or sends all of it.
    assert gets[1].if_range and (gets[1].if_range.startswith('"') == (validator == "etag")), gets[1]
    if changed:
        assert gets[1].status == 200 and gets[1].body_bytes == size, gets[1]
    else:
        assert gets[1].status == 206 and gets[1].body_bytes == size - resumed_from, gets[1]
    assert stored_sizes(page)[path] == size


def test_manifest_less_truncated_stream_is_not_stored_as_complete(
    page: Any, serve: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    repo = tmp_path / "seed-like"
    shutil.copytree(tiny_models["q4"], repo)
    files = manifest.load(repo).files
    (repo / manifest.MANIFEST_NAME).unlink()  # the seed repo on the Hub has none: no sizes, no hashes
    path = "text_encoder/text_encoder_q4.onnx_data"
    size = files[path].size
    url_path = "/models/" + path
    first = {"done": False}

    def hook(seen: Seen) -> dict[str, Any] | None:
        if seen.method == "HEAD":
            return {"drop_headers": {"content-length"}}
        if seen.range is None and not first["done"]:
            first["done"] = True
            # No length stated, and the body ends cleanly half way (chunked, terminated): looks finished.
            return {"drop_headers": {"content-length"}, "end_after": size // 2}
        return None

    base_url, recorder = serve(repo)
    recorder.hooks[url_path] = hook
    client = WorkerClient(page, base_url)
    client.open()
    # The seed layout names files this tiny repo lacks (transformer_q4.onnx_data_2): the run may fail after the
    # downloads, at session creation; the store is what is checked here.
    client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=1)
    gets = recorder.requests(url_path)
    assert gets[0].status == 200 and gets[0].body_bytes == size // 2, gets
    stored = stored_sizes(page)
    assert stored.get(path) in (None, size), f"a truncated copy was stored as complete: {stored.get(path)} of {size}"
    assert stored.get(path) == size, (stored, gets)
    assert any(s.range == f"bytes={size // 2}-" for s in gets[1:]), gets
    text = client.stored_file(path + ".identity.json")
    identity = json.loads(text) if text else None
    # Recorded beside the file once its bytes were complete: the digest of the whole file, not of half of it.
    assert identity and identity["size"] == size
    assert identity["sha256"] == hashlib.sha256((repo / path).read_bytes()).hexdigest()
