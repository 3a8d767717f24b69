"""A profiled run (GenerateParams.profile, the page's ?profile=kernels): where each component's GPU time went, per
kernel program, from onnxruntime's own profiler, on the tiny q4 model in headless Chromium (SwiftShader)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import WorkerClient

pytestmark = pytest.mark.browser

PROMPT = "a red fox in the snow"


def op_counts(graph: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(graph, load_external_data=False).graph.node)


def test_a_profiled_run_reports_gpu_time_per_kernel_and_makes_the_same_image(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    repo = tiny_models["q4"]
    client = WorkerClient(page, live_server_factory(dist_dir, models=repo).url("/"))
    client.open()
    profiled_reply = client.generate(prompt=PROMPT, seed=3, width=64, height=64, steps=2, profile=True)
    profiled = profiled_reply.ok()
    # A profiled run times onnxruntime's kernels: the transformer runs on onnxruntime, not on ours.
    step = profiled["graphs"]["transformer"]["step"]
    assert step["runner"] == "onnxruntime" and "profiled" in step["why"], step
    kernels = profiled["kernels"]
    # Every component that ran is profiled; the transformer once per denoising step, and uncaptured (a captured
    # replay records no kernels).
    assert set(kernels) == {"text_encoder", "transformer", "vae_decoder"}
    assert kernels["transformer"]["runs"] == 2 and kernels["text_encoder"]["runs"] == 1
    assert "graph capture" not in profiled["graphs"]["transformer"]["detail"]
    for component, times in kernels.items():
        assert times["gpuMs"] > 0 and times["runMs"] > 0 and times["hostMs"] > 0, component
        # The nodes' CPU sides run inside the session's run: together they cannot exceed it.
        assert times["hostMs"] + times["cpuNodeMs"] <= times["runMs"], component
        assert sum(k["share"] for k in times["kernels"]) == pytest.approx(1, abs=1e-6), component
        assert sum(k["gpuMs"] for k in times["kernels"]) == pytest.approx(times["gpuMs"], rel=1e-6), component
        assert [k["gpuMs"] for k in times["kernels"][:-1]] == sorted(
            (k["gpuMs"] for k in times["kernels"][:-1]), reverse=True
        ), component
    # Each MatMulNBits node of the graph is one dispatch per step, under the program onnxruntime chose for it: at
    # accuracy_level 4 with `subgroups` (SwiftShader has them) DP4AMatMulNBits* where the shape allows (K a multiple
    # of 128), after a DP4AMatMulQuantize of its input; a MatMulNBits* program otherwise.
    transformer_graph = repo / "transformer" / "transformer_q4.onnx"
    programs: Counter[str] = Counter()
    for kernel in kernels["transformer"]["kernels"]:
        if kernel["op"] == "MatMulNBits":
            programs[kernel["program"]] += kernel["calls"]
    quantize = programs.pop("DP4AMatMulQuantize", 0)
    assert programs and all(p.startswith(("MatMulNBits", "DP4AMatMulNBits")) for p in programs), programs
    # Each DP4A program (the small-M one too: the time embedding and modulations run on one row) follows its own
    # quantisation of the input.
    assert quantize == sum(n for p, n in programs.items() if p.startswith("DP4AMatMulNBits")) > 0, programs
    assert sum(programs.values()) == op_counts(transformer_graph)["MatMulNBits"]
    # onnxruntime places the text encoder's int64 mask arithmetic on the CPU: it shows there. The 4-bit token
    # embedding is a WebGPU kernel on this adapter without shader-f16 (fp32 scales).
    assert kernels["text_encoder"]["cpuNodeMs"] > 0
    assert any(k["op"] == "GatherBlockQuantized" for k in kernels["text_encoder"]["kernels"]), kernels["text_encoder"]

    # Every GPU program of a run is one dispatch: the profile counts them.
    assert kernels["transformer"]["dispatches"] == sum(k["calls"] for k in kernels["transformer"]["kernels"])
    # The profiler only watches: the same request without it makes the same image, captured, with no kernel times.
    plain = client.generate(prompt=PROMPT, seed=3, width=64, height=64, steps=2, step_kernels=False)
    assert "graph capture" in plain.ok()["graphs"]["transformer"]["detail"]
    assert "kernels" not in plain.ok()
    assert np.array_equal(plain.rgb(), profiled_reply.rgb())


def test_profile_must_be_a_boolean(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    client = WorkerClient(page, live_server_factory(dist_dir, models=tiny_models["q4"]).url("/"))
    client.open()
    reply = client.request(
        "generate",
        params={
            "prompt": "x",
            "seed": 0,
            "width": 64,
            "height": 64,
            "steps": 4,
            "modelBase": client.model_base,
            "profile": "yes",
        },
    )
    assert reply.type == "error" and reply.error is not None
    error = reply.error
    assert error["code"] == "input" and "`profile` must be true or false" in error["message"]
