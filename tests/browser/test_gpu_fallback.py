"""An optional GPU feature that fails at its first use never ends the image (runtime/gpu.js, worker/recovery.js).

The worker's `?gpu-fault=FEATURE` makes every shader that enables the feature fail to compile on SwiftShader's real
WebGPU device, as Chromium 150's subgroup-matrix shaders fail on NVIDIA: the request must finish without the feature,
match the CPU reference, say which feature is off and why, and a later worker of the same browser must start without
it (remembered in OPFS) instead of failing again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

from builder.pipeline import imaging, reference

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
# The fault strikes at the first shader with the feature, whatever the number of steps.
STEPS = 2


def retries(reply: Any) -> list[str]:
    return [event.get("detail", "") for event in reply.of_type("stage") if "again without" in event.get("detail", "")]


def test_failing_subgroup_shaders_are_dropped_the_image_finishes_and_the_browser_remembers(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"), worker_query="gpu-fault=subgroups")
    client.open()
    if not client.request("probe").ok()["subgroups"]:
        pytest.skip("this Chromium's software adapter offers no subgroups feature to break")

    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    result = reply.ok()
    device = result["device"]
    # The q4 transformer's int8 (DP4A) kernels need subgroups: their shaders failed, the device was made anew
    # without the feature, and the whole request ran again on it.
    assert "subgroups" not in device["features"]
    assert [(off["feature"], off["remembered"]) for off in device["off"]] == [("subgroups", False)]
    assert "ShaderModule" in device["off"][0]["reason"] or "pipeline" in device["off"][0]["reason"], device["off"]
    assert retries(reply) == ["again without subgroups, which failed in this browser"]
    assert any("without subgroups" in note and "remembered" in note for note in result["notes"]), result["notes"]
    variants = {component: graph["variant"] for component, graph in result["graphs"].items()}
    expected = reference.generate(
        tiny_models["q4"],
        prompt=PROMPT,
        seed=0,
        width=64,
        height=64,
        steps=STEPS,
        variants=variants,
        log=lambda _msg: None,
    ).image
    psnr = imaging.psnr(reply.rgb(), expected)
    print(f"q4 64x64 without subgroups after the injected fault: PSNR {psnr:.1f} dB vs CPU reference")
    assert psnr >= 45.0  # the same bound as the q4 image with subgroups (test_worker.py)

    # The next visit of this browser (a new worker, the fault still injected) starts without the feature: no
    # failure, no retry, and the panel says it was remembered.
    client.start_worker()
    again = client.generate(prompt=PROMPT, seed=1, width=64, height=64, steps=STEPS)
    assert retries(again) == []
    assert [(off["feature"], off["remembered"]) for off in again.ok()["device"]["off"]] == [("subgroups", True)]
    assert "subgroups" not in again.ok()["device"]["features"]
