"""The app on a real Chromium adapter that has no `subgroups` feature: the path Safari 26 takes (no DP4A, no subgroup
kernels, plain kernels for the 4-bit layers).

No Chromium 150 or 156 switch hides `subgroups` from the Vulkan adapter (SwiftShader here): Dawn's Vulkan backend
offers it whenever the driver has the subgroup operations and VK_EXT_subgroup_size_control, and its only toggle on
the feature, `enable_subgroups_intel_gen9`, adds it on Intel Gen-9 GPUs (docs/machines.md, "Browsers"). What does
give a real adapter without it is Dawn's OpenGL ES backend, reached with `--use-webgpu-adapter=opengles
--force-webgpu-compat` (ANGLE on SwiftShader): a compatibility-level adapter with neither subgroups nor shader-f16,
the same 1 GiB buffer limits, and onnxruntime's WebGPU kernels compiled to GLSL instead of SPIR-V. The tiny q4 model
runs there through the worker exactly as the page drives it and must match the CPU reference as closely as on the
Vulkan adapter (tests/browser/test_worker.py test_q4_against_reference).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (  # tests/browser is on sys.path (rootdir-relative import mode)
    WorkerClient,
    browser_context,
)

from builder.pipeline import imaging, reference

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
# Dawn's OpenGL ES adapter instead of its Vulkan one (the last --use-webgpu-adapter wins); it is offered only at the
# compatibility feature level, which --force-webgpu-compat makes every requestAdapter() ask for.
WITHOUT_SUBGROUPS = ("--use-webgpu-adapter=opengles", "--force-webgpu-compat")


@pytest.fixture(scope="module")
def context(profile_dir: Path, chromium_path: Path) -> Iterator[Any]:
    """A persistent profile (OPFS) of the software-GPU browser the suite uses, on the OpenGL ES adapter (the `page`
    fixture of tests/worker_page.py opens its pages in it)."""
    with browser_context(profile_dir, chromium_path, extra_args=WITHOUT_SUBGROUPS) as ctx:
        yield ctx


ADAPTER_FEATURES_JS = """async () => {
    const adapter = await navigator.gpu.requestAdapter();
    return adapter ? [...adapter.features].sort() : null;
}"""


def test_q4_image_on_an_adapter_without_subgroups_matches_the_reference(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    features = page.evaluate(ADAPTER_FEATURES_JS)
    assert features is not None, "no WebGPU adapter with the OpenGL ES switches"
    assert "subgroups" not in features and "subgroup-size-control" not in features, features

    probe = client.request("probe").ok()
    assert probe["webgpu"] and not probe["subgroups"] and not probe["subgroupMatrix"], probe
    assert probe["opfs"]["syncAccessHandle"] and probe["gpuApi"], probe

    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=2)
    result = reply.ok()
    # The device was made without the feature because the adapter has none, not because it failed.
    assert "subgroups" not in result["device"]["features"] and result["device"]["off"] == [], result["device"]
    assert not any("again without" in event.get("detail", "") for event in reply.of_type("stage"))
    variants = {component: graph["variant"] for component, graph in result["graphs"].items()}
    # No shader-f16 either: the q4 graphs and the fp32 VAE, all on WebGPU.
    assert {c: (g["variant"], g["ep"]) for c, g in result["graphs"].items()} == {
        "text_encoder": ("q4", "webgpu"),
        "transformer": ("q4", "webgpu"),
        "vae_decoder": ("fp32", "webgpu"),
    }
    expected = reference.generate(
        tiny_models["q4"], prompt=PROMPT, seed=0, width=64, height=64, steps=2, variants=variants, log=lambda _msg: None
    ).image
    psnr = imaging.psnr(reply.rgb(), expected)
    print(f"q4 64x64 seed 0 on the OpenGL ES adapter (no subgroups): PSNR {psnr:.1f} dB vs CPU reference")
    assert psnr >= 45.0  # the bound of the q4 image on the Vulkan adapter (test_worker.py); measured 54 dB here
