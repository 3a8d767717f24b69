"""scripts/vae_group_norm.py's repository on WebGPU: its VAE decoder's GroupNorms run as onnxruntime-web's GroupNorm
kernel (onnxruntime-web >= 1.31), on our channels-first graph, and the image is the CPU reference's.

The tiny fp32 model in headless Chromium (SwiftShader); the reference is the repository before the rewrite, run by
onnxruntime on the CPU (builder.pipeline.reference), which has no GroupNorm kernel of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import WorkerClient

from builder import REPO_ROOT
from builder.pipeline import imaging, reference
from builder.repo import manifest, verify

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
SCRIPT = REPO_ROOT / "scripts" / "vae_group_norm.py"
# fp32 graphs on WebGPU against onnxruntime on the CPU (test_worker.py's bound).
FP32_PSNR_MIN = 40.0


def test_fused_group_norms_run_as_one_kernel_on_webgpu_and_match_the_reference(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    repo, out = tiny_models["fp32"], tmp_path / "group-norm"
    printed = subprocess.run(
        [sys.executable, str(SCRIPT), str(repo), str(out)], capture_output=True, text=True, check=True
    ).stdout
    assert "vae_decoder/vae_decoder_fp32.onnx: 22 GroupNorms fused" in printed, printed
    # The manifest vouches for the rewritten graphs, and only those files differ.
    verify.check_files(out, manifest.load(out), log=lambda _msg: None)
    before, after = manifest.load(repo).files, manifest.load(out).files
    assert {p for p in before if before[p] != after[p]} == {
        "vae_decoder/vae_decoder_fp32.onnx",
        "vae_encoder/vae_encoder_fp32.onnx",
    }

    client = WorkerClient(page, live_server_factory(dist_dir, models=out).url("/"))
    client.open()
    reply = client.generate(prompt=PROMPT, seed=5, width=64, height=64, profile=True)
    result = reply.ok()
    assert result["graphs"]["vae_decoder"]["ep"] == "webgpu", result["graphs"]["vae_decoder"]
    programs = {kernel["program"] for kernel in result["kernels"]["vae_decoder"]["kernels"]}
    assert {"GroupNormStats", "GroupNormApply"} <= programs, sorted(programs)
    assert not [p for p in programs if p.startswith("InstanceNorm")], sorted(programs)
    expected = reference.generate(
        repo, prompt=PROMPT, seed=5, width=64, height=64, steps=4, log=lambda _msg: None
    ).image
    psnr = imaging.psnr(reply.rgb(), expected)
    assert psnr >= FP32_PSNR_MIN, json.dumps({"psnr": psnr})
