"""The transformer step on our WGSL kernels (web_src/src/step/), in headless Chromium on SwiftShader with the tiny
model: its first step's prediction against onnxruntime's session on the very same inputs (GenerateParams.stepCheck),
and the image against the CPU reference within the bounds the suite holds onnxruntime's path to; and, when our
kernels fail (`?gpu-fault=step-kernels` breaks their shaders), the job runs again on onnxruntime and still makes the
image, and the browser remembers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

from builder.pipeline import imaging, reference

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
STEPS = 2
# A first run compiles every kernel of ours and onnxruntime's on SwiftShader, and runs the step on both: minutes on a
# busy 2-core machine.
TIMEOUT_S = 900
# The image bounds of test_worker.py for the same precision: fp32 against the CPU reference, and q4, whose linears
# quantise activations to int8 on both sides in different blocks.
PSNR_MIN = {"fp32": 40.0, "q4": 45.0}
# How far our first step's prediction may be from onnxruntime's, relative to the prediction's RMS. fp32: float32
# summation order only (measured ~1e-7); q4: our int8 path quantises each row of activations with one scale where
# onnxruntime's accuracy_level 4 takes one per block of 32 (docs/kernels.md; measured ~1e-2 on this model).
STEP_RMS_MAX = {"fp32": 1e-5, "q4": 5e-2}


def reference_image(repo: Path, reply: Reply, *, seed: int) -> Any:
    variants = {component: graph["variant"] for component, graph in reply.ok()["graphs"].items()}
    return reference.generate(
        repo, prompt=PROMPT, seed=seed, width=64, height=64, steps=STEPS, variants=variants, log=lambda _msg: None
    ).image


@pytest.mark.parametrize("precision", ["fp32", "q4"])
def test_the_step_on_our_kernels_matches_onnxruntime_and_the_reference(
    precision: str, page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    repo = tiny_models[precision]
    client = WorkerClient(page, live_server_factory(dist_dir, models=repo).url("/"))
    client.open()
    reply = client.generate(
        prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS, step_check=True, timeout_s=TIMEOUT_S
    )
    result = reply.ok()
    transformer = result["graphs"]["transformer"]
    step = transformer["step"]
    print(f"{precision}: {json.dumps(step)}; step check {json.dumps(result['stepCheck'])}")
    assert step["runner"] == "kernels", step
    # SwiftShader has subgroups and packed int8 dot products, no subgroup matrices: the q4 linears over tokens take
    # the DP4A path, the fp32 graph's dense weights the simple one; attention the subgroup variant.
    assert step["kernels"] == ("int8-dp4a" if precision == "q4" else "simple") + ", flash-attention-subgroups"
    assert transformer["detail"].startswith(f"our kernels ({step['kernels']})"), transformer["detail"]
    assert f"{step['dispatches']} dispatches a step" in transformer["detail"]
    # 1 double and 1 single block: 8 time, modulation and embedding dispatches, 16 per double block, 6 per single
    # block, 2 at the end; the int8 path adds a quantiser before each group of linears over the same input (the
    # embedders and the output projection: 3; per double block 8; per single block 2).
    quantisers = 3 + 8 + 2 if precision == "q4" else 0
    assert step["dispatches"] == 8 + 16 + 6 + 2 + quantisers
    assert transformer["streamedBytes"] > 0
    check = result["stepCheck"]
    assert check["values"] == 16 * 128 and check["scale"] > 0.1
    assert check["rms"] <= STEP_RMS_MAX[precision] * check["scale"], check
    psnr = imaging.psnr(reply.rgb(), reference_image(repo, reply, seed=0))
    print(f"{precision} 64x64 on our kernels: PSNR {psnr:.1f} dB vs CPU reference")
    assert psnr >= PSNR_MIN[precision]


def test_failing_kernels_fall_back_to_onnxruntime_and_the_browser_remembers(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    repo = tiny_models["q4"]
    server = live_server_factory(dist_dir, models=repo)
    client = WorkerClient(page, server.url("/"), worker_query="gpu-fault=step-kernels")
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS, timeout_s=TIMEOUT_S)
    result = reply.ok()
    # Our kernels' shaders failed to compile: the job ran again with onnxruntime's transformer, on a device that
    # kept every GPU feature.
    retries = [e["detail"] for e in reply.of_type("stage") if "again without" in e.get("detail", "")]
    assert retries == ["again without step-kernels, which failed in this browser"]
    assert [(off["feature"], off["remembered"]) for off in result["device"]["off"]] == [("step-kernels", False)]
    assert "failed to compile" in result["device"]["off"][0]["reason"], result["device"]["off"]
    assert "subgroups" in result["device"]["features"]
    step = result["graphs"]["transformer"]["step"]
    assert step["runner"] == "onnxruntime" and "failed in this browser" in step["why"], step
    assert step["graphNodes"] > 0
    assert "graph capture" in result["graphs"]["transformer"]["detail"]
    psnr = imaging.psnr(reply.rgb(), reference_image(repo, reply, seed=0))
    assert psnr >= PSNR_MIN["q4"]

    # The next worker of this browser starts on onnxruntime at once: no failure, no retry.
    client.start_worker()
    again = client.generate(prompt=PROMPT, seed=1, width=64, height=64, steps=STEPS, timeout_s=TIMEOUT_S)
    assert [e for e in again.of_type("stage") if "again without" in e.get("detail", "")] == []
    assert [(off["feature"], off["remembered"]) for off in again.ok()["device"]["off"]] == [("step-kernels", True)]
    assert again.ok()["graphs"]["transformer"]["step"]["runner"] == "onnxruntime"
