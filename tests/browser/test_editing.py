"""Editing (reference images) and inpainting in the worker, in real headless Chromium (WebGPU on SwiftShader).

The worker's image is compared with the CPU reference (builder.pipeline.reference.generate with images / mask /
strength: the same fp32 ONNX graphs on onnxruntime CPU, diffusers' preprocessing and sampling, itself tested
against diffusers in tests/test_reference_editing.py) for the same files, prompt, seed and size. The graphs run on
WebGPU in the worker, so the images are not bit-identical: float rounding of two runtimes, at most a few uint8
steps (PSNR_MIN). The tiny random-weight transformer attends only weakly to reference tokens (an image made
without its reference is about 64 dB from the one with it), so each test also requires the worker to be much
closer to the reference than a run with other inputs is (OTHER_MARGIN): a wrong crop, resize, id, schedule or
mask blend lands near the latter.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import start_server  # tests/ is on sys.path (rootdir-relative conftest import)
from helpers import Reply, WorkerClient, new_page

from builder.pipeline import imaging, reference
from builder.repo import manifest

pytestmark = pytest.mark.browser

PROMPT = "the same fox, now in a green forest"
STEPS = 4
# Measured on SwiftShader: 1 reference 86 dB, 2 references 87 dB, inpainting 90.8 dB (at most 1 uint8 step apart).
# Text-to-image is bit-identical to the CPU reference on the same graphs; with images the VAE encoder runs on
# WebGPU against onnxruntime's CPU kernels, so the latents differ in their last bits and so, rarely, does a pixel.
PSNR_MIN = 60.0
# dB by which the worker must be closer to diffusers than diffusers with other input images is (10 dB: a tenth
# of the squared error).
OTHER_MARGIN = 10.0

SEND_JS = """([params, files]) => {
    const bytes = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0)).buffer;
    const images = files.images.map(([name, data]) => ({ name, bytes: bytes(data) }));
    const full = { ...params, images };
    if (files.mask) full.mask = { name: files.mask[0], bytes: bytes(files.mask[1]) };
    return window.kleinTest.send('generate', { params: full });
}"""


@pytest.fixture(scope="module")
def cpu_reference(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """cpu_reference(seed, width, height, images, mask=None, strength=None) -> uint8 [H, W, 3] from the fp32 repo."""
    folder = tmp_path_factory.mktemp("inputs")

    def stored(data: bytes) -> Path:
        path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.png"
        path.write_bytes(data)
        return path

    def make(
        *,
        seed: int,
        width: int,
        height: int,
        images: list[bytes],
        mask: bytes | None = None,
        strength: float | None = None,
        steps: int = STEPS,
    ) -> np.ndarray:
        extra: dict[str, Any] = {} if strength is None else {"strength": strength}
        image: np.ndarray = reference.generate(
            tiny_models["fp32"],
            prompt=PROMPT,
            seed=seed,
            width=width,
            height=height,
            steps=steps,
            log=lambda _msg: None,
            images=[stored(data) for data in images],
            mask=None if mask is None else stored(mask),
            **extra,
        ).image
        return image

    return make


def picture(width: int, height: int, seed: int) -> np.ndarray:
    """A test photo: smooth colour fields (upscaled noise) with fine noise and a hard edge, uint8 [H, W, 3]."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)).resize(
        (width, height), Image.Resampling.BICUBIC
    )
    pixels = np.asarray(coarse).astype(np.int16) + rng.integers(-20, 21, size=(height, width, 3))
    pixels[:, width // 3] = 255
    clipped: np.ndarray = np.clip(pixels, 0, 255).astype(np.uint8)
    return clipped


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def send(
    client: WorkerClient,
    *,
    seed: int,
    width: int,
    height: int,
    images: list[tuple[str, bytes]],
    mask: tuple[str, bytes] | None = None,
    strength: float | None = None,
    steps: int = STEPS,
) -> str:
    params: dict[str, Any] = {
        "prompt": PROMPT,
        "seed": seed,
        "width": width,
        "height": height,
        "steps": steps,
        "modelBase": client.model_base,
    }
    if strength is not None:
        params["strength"] = strength
    files: dict[str, Any] = {"images": [[name, base64.b64encode(data).decode()] for name, data in images]}
    if mask:
        files["mask"] = [mask[0], base64.b64encode(mask[1]).decode()]
    return str(client.page.evaluate(SEND_JS, [params, files]))


def generate(client: WorkerClient, timeout_s: float = 900, **kwargs: Any) -> Reply:
    return client.wait(send(client, **kwargs), timeout_s=timeout_s)


@pytest.fixture(scope="module")
def fp32_client(
    context: Any, dist_dir: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerClient]:
    """One worker on the tiny fp32 model for the module's editing runs, as one visit of a person editing several
    images: they share its sessions and PROMPT's embeddings. Each test's images are its own, so what one test
    finds cached (its second run of the same image) does not depend on another test."""
    server = start_server(dist_dir, tmp_path_factory.mktemp("editing-server"), models=tiny_models["fp32"])
    page = new_page(context)
    try:
        client = WorkerClient(page, server.url("/"))
        client.open()
        yield client
    finally:
        page.close()
        server.stop()


def served(page: Any, live_server_factory: Any, dist_dir: Path, repo: Path) -> WorkerClient:
    server = live_server_factory(dist_dir, models=repo)
    client = WorkerClient(page, server.url("/"))
    client.open()
    return client


def test_one_reference_matches_diffusers_and_is_encoded_once(fp32_client: WorkerClient, cpu_reference: Any) -> None:
    client = fp32_client
    fox = png(picture(90, 70, seed=1))  # used at 80x64: the centre cut
    reply = generate(client, seed=3, width=64, height=64, images=[("fox.png", fox)])
    result = reply.ok()
    assert [e["stage"] for e in reply.of_type("stage")] == [
        "check",
        "download",
        "load",
        "encode",
        "images",
        "latents",
        "timesteps",
        "denoise",
        "decode",
    ]
    assert [e["step"] for e in reply.of_type("step")] == [1, 2, 3, 4]
    assert result["graphs"]["vae_encoder"]["variant"] == "fp32" and result["graphs"]["vae_encoder"]["ep"] == "webgpu"
    info = {
        "name": "fox.png",
        "sha256": hashlib.sha256(fox).hexdigest(),
        "width": 90,
        "height": 70,
        "usedWidth": 80,
        "usedHeight": 64,
        "tokens": 20,
        "cached": False,
    }
    assert result["inputs"] == {
        "mode": "edit",
        "images": [info],
        "mask": None,
        "strength": None,
        "extension": None,
        "steps": 4,
        "referenceTokens": 20,
        "guidance": None,  # the tiny model is distilled: one call per step
    }
    expected = cpu_reference(seed=3, width=64, height=64, images=[fox])
    psnr = imaging.psnr(reply.rgb(), expected)
    without = imaging.psnr(expected, cpu_reference(seed=3, width=64, height=64, images=[]))
    print(f"1 reference: {psnr:.1f} dB vs the CPU reference (the reference without the image: {without:.1f} dB)")
    assert psnr >= PSNR_MIN and psnr >= without + OTHER_MARGIN

    # The same image again: its latents come from the first run, the encoder does not run.
    again = generate(client, seed=3, width=64, height=64, images=[("fox again.png", fox)])
    assert again.ok()["inputs"]["images"][0]["cached"] is True
    assert again.ok()["graphs"]["vae_encoder"]["loadMs"] == 0
    # The images stage says so (a batch's progress line shows it): encoded the first time, cached the second.
    details = [[e.get("detail", "") for e in r.of_type("stage") if e["stage"] == "images"] for r in (reply, again)]
    assert details == [["1 image(s), 20 tokens"], ["1 image(s), 20 tokens, cached"]], details
    assert np.array_equal(again.rgb(), reply.rgb())


def test_two_references_of_different_sizes(fp32_client: WorkerClient, cpu_reference: Any) -> None:
    client = fp32_client
    # 300x170 is cut to 288x160, 200x150 to 192x144: references of different sizes and token counts, each at its
    # own time coordinate. (An image above 1024^2 px is resized first: the same resample.js that inpainting's
    # resize runs here, held byte-exact to Pillow by tests/test_resample.py; on SwiftShader encoding one takes
    # about 10 minutes, so this test keeps to small images.)
    big = png(picture(300, 170, seed=2))
    small = png(picture(200, 150, seed=3))
    reply = generate(client, seed=5, width=80, height=64, images=[("big.png", big), ("small.png", small)])
    inputs = reply.ok()["inputs"]
    assert [(i["usedWidth"], i["usedHeight"], i["tokens"]) for i in inputs["images"]] == [
        (288, 160, 180),
        (192, 144, 108),
    ]
    assert inputs["referenceTokens"] == 288
    expected = cpu_reference(seed=5, width=80, height=64, images=[big, small])
    psnr = imaging.psnr(reply.rgb(), expected)
    swapped = imaging.psnr(expected, cpu_reference(seed=5, width=80, height=64, images=[small, big]))
    print(f"2 references: {psnr:.1f} dB vs the CPU reference (the reference with them swapped: {swapped:.1f} dB)")
    assert psnr >= PSNR_MIN and psnr >= swapped + OTHER_MARGIN


def test_inpainting_with_a_mask_of_another_size(fp32_client: WorkerClient, cpu_reference: Any) -> None:
    client = fp32_client
    room = png(picture(100, 75, seed=4))  # used at 96x64, LANCZOS-resized (inpainting resizes, it does not cut)
    mask_pixels = np.zeros((150, 200, 3), dtype=np.uint8)
    mask_pixels[30:110, 60:170] = 255
    mask_pixels[110:120, 60:170] = 130  # grey: thresholded at 50%
    mask = png(mask_pixels)
    reply = generate(
        client, seed=7, width=96, height=64, images=[("room.png", room)], mask=("mask.png", mask), strength=0.5
    )
    result = reply.ok()
    assert [e["step"] for e in reply.of_type("step")] == [1, 2]  # int(4 * 0.5) steps run
    assert result["inputs"]["mode"] == "inpaint" and result["inputs"]["strength"] == 0.5
    assert result["inputs"]["steps"] == 2 and result["inputs"]["referenceTokens"] == 24
    assert result["inputs"]["mask"]["usedWidth"] == 96 and result["inputs"]["mask"]["tokens"] == 0

    expected = cpu_reference(seed=7, width=96, height=64, images=[room], mask=mask, strength=0.5)
    psnr = imaging.psnr(reply.rgb(), expected)
    differ = int(np.abs(reply.rgb().astype(int) - expected.astype(int)).max())
    other = imaging.psnr(
        expected, cpu_reference(seed=7, width=96, height=64, images=[room], mask=png(255 - mask_pixels), strength=0.5)
    )
    print(
        f"inpainting: {psnr:.1f} dB vs the CPU reference, at most {differ} uint8 steps apart (the reference with "
        f"the mask inverted: {other:.1f} dB)"
    )
    assert psnr >= PSNR_MIN and psnr >= other + OTHER_MARGIN


CORPUS = Path(__file__).resolve().parent.parent / "data" / "input_images"


def test_inpainting_reads_a_transparent_mask_and_a_rotated_webp_as_the_cpu_reference(
    fp32_client: WorkerClient, cpu_reference: Any
) -> None:
    """The decoding contract end to end (tests/browser/test_decoding.py checks the decoded pixels): an LA mask whose
    transparent pixels are white repaints them, as diffusers reads it, and a WebP with EXIF orientation 6 is used
    upright (80x64, not 64x80). The reference with the mask read as a canvas would read it (transparent = black)
    must be far off."""
    from PIL import Image

    client = fp32_client
    room = png(picture(100, 75, seed=4))
    mask = (CORPUS / "mask_la_transparent_white.png").read_bytes()
    rotated = (CORPUS / "webp_lossy_exif6.webp").read_bytes()
    reply = generate(
        client,
        seed=5,
        width=96,
        height=64,
        images=[("room.png", room), ("rotated.webp", rotated)],
        mask=("mask.png", mask),
        strength=0.5,
    )
    result = reply.ok()
    assert [(i["usedWidth"], i["usedHeight"]) for i in result["inputs"]["images"]] == [(96, 64), (80, 64)]
    expected = cpu_reference(seed=5, width=96, height=64, images=[room, rotated], mask=mask, strength=0.5)
    psnr = imaging.psnr(reply.rgb(), expected)
    with Image.open(io.BytesIO(mask)) as opened:
        la = np.asarray(opened.convert("LA"))
    premultiplied = np.where(la[..., 1] == 0, 0, la[..., 0]).astype(np.uint8)
    other = imaging.psnr(
        expected,
        cpu_reference(seed=5, width=96, height=64, images=[room, rotated], mask=png(premultiplied), strength=0.5),
    )
    print(
        f"transparent mask, rotated WebP: {psnr:.1f} dB vs the CPU reference (transparent read as black: "
        f"{other:.1f} dB)"
    )
    assert psnr >= PSNR_MIN and psnr >= other + OTHER_MARGIN


def without_encoder(repo: Path, out: Path) -> Path:
    """A copy of a repo without its vae_encoder, like the seed repository."""
    shutil.copytree(repo, out)
    data = json.loads((out / manifest.MANIFEST_NAME).read_text())
    data["graphs"] = [g for g in data["graphs"] if g["component"] != "vae_encoder"]
    data["files"] = {path: entry for path, entry in data["files"].items() if not path.startswith("vae_encoder/")}
    (out / manifest.MANIFEST_NAME).write_text(json.dumps(data))
    shutil.rmtree(out / "vae_encoder")
    return out


def test_bad_requests_are_refused_before_any_download(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    fox = png(picture(90, 70, seed=1))
    client = served(page, live_server_factory, dist_dir, without_encoder(tiny_models["fp32"], tmp_path / "seedlike"))
    reply = generate(client, seed=0, width=64, height=64, images=[("fox.png", fox)])
    assert reply.type == "error" and reply.error is not None and reply.error["code"] == "model-file", reply.error
    assert "klein-web convert" in reply.error["message"] and "VAE encoder" in reply.error["message"]
    assert not reply.of_type("progress"), "nothing may be downloaded for a run that cannot finish"

    broken = png(picture(90, 70, seed=1))[:200]
    tiny = png(picture(40, 40, seed=1))
    for images, named in (
        ([("fox.png", fox), ("broken.png", broken)], "Reference 2 (broken.png)"),
        ([("tiny.png", tiny)], "Reference 1 (tiny.png) is 40x40"),
    ):
        bad = generate(client, seed=0, width=64, height=64, images=images)
        assert bad.type == "error" and bad.error is not None and bad.error["code"] == "input", bad.error
        assert named in bad.error["message"], bad.error["message"]
        assert not bad.of_type("progress")

    # Inpainting keeps the image's size: another output size is refused with the one to use.
    wrong = generate(client, seed=0, width=64, height=64, images=[("fox.png", fox)], mask=("m.png", fox))
    assert wrong.type == "error" and wrong.error is not None and wrong.error["code"] == "input", wrong.error
    assert "80 and 64" in wrong.error["message"]


def test_cancel_during_the_images_stage(fp32_client: WorkerClient) -> None:
    client = fp32_client
    images = [(f"photo{i}.png", png(picture(384, 384, seed=10 + i))) for i in range(4)]
    generate_id = send(client, seed=0, width=64, height=64, images=images)
    # Wait for the images stage itself, then cancel while its encoder runs.
    start = time.monotonic()
    while not [e for e in client.events(generate_id) if e["type"] == "stage" and e["stage"] == "images"]:
        assert time.monotonic() - start < 600, "no images stage"
        time.sleep(0.05)
    cancel = client.request("cancel", target=generate_id, timeout_s=30)
    assert cancel.ok() == {"cancelled": True}
    reply = client.wait(generate_id, timeout_s=600)
    assert reply.type == "error" and reply.error is not None and reply.error["code"] == "cancelled", reply.error
    # It stopped in the images stage: nothing after it ran.
    assert not reply.of_type("step")
    assert [e["stage"] for e in reply.of_type("stage")][-1] == "images"
    print(f"cancel in the images stage: answered {reply.answered_at - cancel.sent_at:.0f} ms after the cancel")
