"""One decoding contract for input images: the worker reads every file of tests/data/input_images/ to the pixels
the CPU reference reads (builder/pipeline/inputs.py, i.e. diffusers' `load_image`), and refuses the same files
for the same reason (docs/editing.md "How input files are read").

The worker is asked through the protocol's `decode` request, which reads one file exactly as `generate` does
(pipeline/input_images.js decodeRequest) and returns its upright RGB bytes before any resizing. PNG files are
decoded by the app itself and must match bit for bit; JPEG and WebP by the browser's libjpeg-turbo and libwebp,
as Pillow's: they must match within LOSSY_TOLERANCE (what two builds of those decoders may differ by; measured
exact in Chromium 156). The corpus is remade by tests/data/input_images/make_corpus.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import WorkerClient

from builder.errors import InputError
from builder.pipeline import inputs

pytestmark = pytest.mark.browser

CORPUS = Path(__file__).resolve().parent.parent / "data" / "input_images"
CASES = json.loads((CORPUS / "cases.json").read_text())
# Largest per-channel difference allowed between the browser's and Pillow's decode of a lossy file.
LOSSY_TOLERANCE = 2

DECODE_JS = """([name, data, role]) => window.kleinTest.send('decode', {
    params: { role, image: { name, bytes: Uint8Array.from(atob(data), (c) => c.charCodeAt(0)).buffer } },
})"""


@pytest.fixture(scope="module")
def client(context: Any, dist_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import start_server
    from helpers import new_page

    server = start_server(dist_dir, tmp_path_factory.mktemp("decode-server"))
    page = new_page(context)
    worker = WorkerClient(page, server.url("/"))
    worker.open()
    yield worker
    page.close()
    server.stop()


def cli_read(path: Path, role: str) -> np.ndarray:
    file = inputs.read_mask(path) if role == "mask" else inputs.read_image(path)
    return np.asarray(file.image)


def worker_read(client: WorkerClient, path: Path, role: str) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    request = str(client.page.evaluate(DECODE_JS, [path.name, data, role]))
    reply = client.wait(request, timeout_s=60)
    return {"type": reply.type, "result": reply.result, "error": reply.error}


def reason(message: str) -> str:
    """The refusal after the file's label ("... (name) is animated; ..." -> "is animated; ...")."""
    return message.split(") ", 1)[1] if ") " in message else message


@pytest.mark.parametrize("case", CASES, ids=[case["file"] for case in CASES])
def test_worker_reads_each_file_as_the_cpu_reference(client: WorkerClient, case: dict[str, Any]) -> None:
    path = CORPUS / case["file"]
    role = case["role"]
    answer = worker_read(client, path, role)
    if "refuse" in case:
        with pytest.raises(InputError) as refused:
            cli_read(path, role)
        assert answer["type"] == "error", (
            f"the worker read {path.name}, which the CPU reference refuses: {refused.value}"
        )
        assert answer["error"]["code"] == "input", answer["error"]
        assert reason(answer["error"]["message"]) == reason(str(refused.value)), (answer["error"], str(refused.value))
        if case["refuse"] in inputs.REFUSALS:
            assert reason(str(refused.value)) == inputs.REFUSALS[case["refuse"]]
        return
    expected = cli_read(path, role)
    assert answer["type"] == "result", f"the worker refused {path.name}: {answer['error']}"
    result = answer["result"]
    got = np.frombuffer(base64.b64decode(result["rgb"]), dtype=np.uint8).reshape(result["height"], result["width"], 3)
    assert got.shape == expected.shape, (
        f"{path.name}: worker {got.shape[1]}x{got.shape[0]}, CPU {expected.shape[1]}x{expected.shape[0]}"
    )
    diff = int(np.abs(got.astype(np.int16) - expected.astype(np.int16)).max())
    lossy = path.suffix in (".jpg", ".webp") and "lossless" not in path.name
    assert diff <= (LOSSY_TOLERANCE if lossy else 0), f"{path.name}: max |worker - CPU| = {diff}"


def test_a_bad_decode_request_is_refused_in_one_line(client: WorkerClient) -> None:
    data = base64.b64encode((CORPUS / "png_rgb8.png").read_bytes()).decode()
    wrong_role = client.wait(str(client.page.evaluate(DECODE_JS, ["a.png", data, "picture"])), timeout_s=60)
    assert wrong_role.type == "error" and wrong_role.error is not None
    assert wrong_role.error["code"] == "input" and "`role` must be 'image' or 'mask'" in wrong_role.error["message"]
    no_image = client.request("decode", params={"role": "image"})
    assert no_image.type == "error" and no_image.error is not None
    assert "`image` must be {name: string, bytes: ArrayBuffer}" in no_image.error["message"]
