"""The store notices a stored file that changed after it was downloaded (web_src/src/store/stored_check.js).

Real headless Chromium and the real app (builder.site.server.create_app) behind a layer that records the requests;
the worker is driven through its protocol (tests/browser/helpers.py). After a first run has stored the model, a
stored file is changed from the page, as a disk, an extension or a person might change it: a flipped byte in a weight
file, a weight file cut one byte short. The next run must notice it while the file is read, say so in a progress
line, download that file (and only it) again, and finish as the first run did. Then the browser's own "clear site
data" (Chromium's Storage.clearDataForOrigin) runs under a generating page: that job may fail, the next one must
open the store again and download the model. Each test has its own origin (port), hence its own empty store.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WorkerClient  # tests/browser is on sys.path

from builder.pipeline import imaging, reference
from builder.repo import manifest
from builder.site.server import create_app, serve_in_thread

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
SEED = 3
STEPS = 2
# As tests/browser/test_store_trust.py: the tiny fp32 model's image in the browser against `klein-web reference`.
FP32_PSNR_MIN = 40.0
# SwiftShader on a busy 2-core machine takes minutes for one 64x64 image of the tiny model.
RUN_TIMEOUT_S = 900

# Change the stored copy of a repository file in place, from the page (the inference worker holds no handle on it
# between jobs): ['flip', offset] XORs one byte with 0x7f, ['shorten'] cuts the last byte off.
CHANGE_STORED_JS = """async ([path, change, offset]) => {
    const models = await (await navigator.storage.getDirectory()).getDirectoryHandle('klein-models');
    const parts = path.split('/');
    for await (const [, source] of models.entries()) {
        let handle;
        try {
            let dir = source;
            for (const part of parts.slice(0, -1)) dir = await dir.getDirectoryHandle(part);
            handle = await dir.getFileHandle(parts.at(-1));
        } catch { continue; }
        const file = await handle.getFile();
        const writable = await handle.createWritable({ keepExistingData: true });
        if (change === 'flip') {
            const byte = new Uint8Array(await file.slice(offset, offset + 1).arrayBuffer());
            await writable.write({ type: 'write', position: offset, data: new Uint8Array([byte[0] ^ 0x7f]) });
        } else {
            await writable.truncate(file.size - 1);
        }
        await writable.close();
        return (await handle.getFile()).size;
    }
    return null;
}"""


class Recorder:
    """ASGI layer over the real app: the path of every GET answered 200 or 206, in order."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.fetched: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def relay(message: Any) -> None:
            if (
                message["type"] == "http.response.start"
                and scope["method"] == "GET"
                and message["status"] in (200, 206)
            ):
                self.fetched.append(scope["path"].removeprefix("/models/"))
            await send(message)

        await self.target(scope, receive, relay if scope["type"] == "http" else send)

    def weights_fetched(self) -> list[str]:
        return [path for path in self.fetched if ".onnx" in path]


@pytest.fixture
def served(dist_dir: Path, tiny_models: dict[str, Path]) -> Iterator[tuple[str, Recorder]]:
    """(base URL, Recorder) of the tiny fp32 model on a new port (a new origin: an empty store)."""
    recorder = Recorder(create_app(dist_dir, tiny_models["fp32"]))
    with serve_in_thread(recorder, log_level="critical") as port:
        yield f"http://127.0.0.1:{port}/", recorder


def largest_weight_file(repo: Path) -> tuple[str, manifest.FileEntry]:
    files = manifest.load(repo).files
    path = max((p for p in files if ".onnx_data" in p), key=lambda p: files[p].size)
    return path, files[path]


def refetch_lines(reply: Reply) -> list[str]:
    return [e.get("detail", "") for e in reply.of_type("stage") if "downloading it again" in e.get("detail", "")]


def generate(client: WorkerClient) -> Reply:
    return client.generate(prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, timeout_s=RUN_TIMEOUT_S)


@pytest.mark.parametrize("change", ["flip", "shorten"])
def test_a_stored_weight_file_that_changed_is_downloaded_again(
    page: Any, served: tuple[str, Recorder], tiny_models: dict[str, Path], change: str
) -> None:
    base_url, recorder = served
    model = tiny_models["fp32"]
    path, entry = largest_weight_file(model)
    client = WorkerClient(page, base_url)
    client.open()
    client.load(timeout_s=RUN_TIMEOUT_S).ok()  # the store filled, every session created once
    assert path in recorder.weights_fetched()

    # A weight's exponent byte (little-endian float32: the fourth of each value) in the middle of the file.
    offset = (entry.size // 2) | 3
    size = page.evaluate(CHANGE_STORED_JS, [path, change, offset])
    assert size == (entry.size if change == "flip" else entry.size - 1)
    assert client.stored_file(path, sha256=True) != entry.sha256
    block, blocks = offset // manifest.BLOCK_SIZE + 1, -(-entry.size // manifest.BLOCK_SIZE)
    said = {
        "flip": rf"\(block {block} of {blocks}\) no longer match the model's manifest",
        "shorten": rf"it has {entry.size - 1} bytes, the model's manifest {entry.size}",
    }[change]

    # A reloaded page creates its sessions from the store again: the change is found while the file is read.
    client.reload()
    recorder.fetched.clear()
    again = generate(client) if change == "flip" else client.load(timeout_s=RUN_TIMEOUT_S)
    assert again.type == "result", again.error
    lines = refetch_lines(again)
    assert len(lines) == 1 and lines[0].startswith(f"{path} changed in this browser's storage"), lines
    assert re.search(said, lines[0]), lines[0]
    assert recorder.weights_fetched() == [path], "that file, and only it, is downloaded again"
    assert client.stored_file(path, sha256=True) == entry.sha256
    if change == "flip":
        # The image of the model's own weights (a changed exponent made every image NaN).
        expected = reference.generate(
            model, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _msg: None
        ).image
        assert imaging.psnr(again.rgb(), expected) >= FP32_PSNR_MIN

    # Stored as it should be now: the next reload downloads nothing.
    client.reload()
    recorder.fetched.clear()
    assert client.load(timeout_s=RUN_TIMEOUT_S).ok()["downloadedBytes"] == 0
    assert recorder.weights_fetched() == []


def wait_until(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.05)


def test_the_store_cleared_under_a_running_page_is_opened_again(
    page: Any, served: tuple[str, Recorder], tiny_models: dict[str, Path]
) -> None:
    base_url, recorder = served
    model = tiny_models["fp32"]
    files = manifest.load(model).files
    client = WorkerClient(page, base_url)
    client.open()
    client.load(timeout_s=RUN_TIMEOUT_S).ok()
    used = set(recorder.weights_fetched())
    assert used and used <= {p for p in files if ".onnx" in p}

    # "Clear site data" while an image is generating (a reloaded page: it reads the store), as the browser's
    # settings do it.
    client.reload()
    params = {"prompt": PROMPT, "seed": SEED, "width": 64, "height": 64, "steps": STEPS, "modelBase": client.model_base}
    running = client.send("generate", params=params)
    wait_until(
        lambda: any(e["type"] == "stage" and e["stage"] == "load" for e in client.events(running)),
        timeout_s=RUN_TIMEOUT_S,
        what="the running job reached its load stage",
    )
    cdp = page.context.new_cdp_session(page)
    cdp.send("Storage.clearDataForOrigin", {"origin": base_url.rstrip("/"), "storageTypes": "all"})
    client.wait(running, timeout_s=RUN_TIMEOUT_S)  # it may fail: its files went away under it

    # The next Generate opens the store again, downloads the model, and makes the model's image.
    recorder.fetched.clear()
    again = generate(client)
    assert again.type == "result", again.error
    assert set(recorder.weights_fetched()) == used, recorder.weights_fetched()
    for path in used:
        assert client.stored_file(path, sha256=True) == files[path].sha256, path
    expected = reference.generate(
        model, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _msg: None
    ).image
    assert imaging.psnr(again.rgb(), expected) >= FP32_PSNR_MIN
