"""`klein-web browser-bench --kernels` end to end, in headless Chromium on SwiftShader, on the tiny q4 model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.check.bench import browser as browser_bench
from builder.check.bench import browser_report

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_browser_bench_times_each_phase_and_profiles_the_kernels(
    tmp_path: Path, tiny_models: dict[str, Path], dist_dir: Path, chromium_path: Path
) -> None:
    out = tmp_path / "out"
    messages: list[str] = []
    rows = browser_bench.main(
        out,
        models_dir=tiny_models["q4"],
        log=messages.append,
        precisions=("q4",),
        sizes=("64x64",),
        steps=2,
        gpu=False,
        browser_path=chromium_path,
        dist_dir=dist_dir,
        timeout_s=600,
        kernels=True,
    )
    assert [r["phase"] for r in rows] == ["cold", "warm reload", "hot", "hot, no preview", "profiled"]
    cold, warm, hot, no_preview, profiled = rows
    assert cold["bytes_fetched"] > 0 and warm["bytes_fetched"] == 0 and hot["step_ms"] > 0
    # The step previews' time per step, and an image without them.
    assert hot["preview_ms"] is not None and hot["preview_ms"] >= 0 and no_preview["preview_ms"] is None
    assert no_preview["step_ms"] > 0
    # The warm reload's timeline: the app's stages, each session's files read and the session created, and the runs,
    # each within the request; the report prints it as its own table.
    what = [event["what"] for event in warm["timeline"]]
    # The transformer is made on our kernels (its weights uploaded, its kernels compiled) or as a session.
    made = ("create transformer", "upload transformer weights and compile our kernels")
    assert any(w.startswith(made) for w in what) and any(w.startswith("read ") for w in what), what
    assert all(0 <= e["startMs"] <= e["endMs"] <= warm["total_s"] * 1000 + 1 for e in warm["timeline"])
    # Chromium's workers read the stored weights through read-only sync access handles (store/stored_file.js).
    assert any(w.startswith("upload ") and "read-only file handles" in w for w in what), what
    # Only the profiled image carries kernel times; its transformer was profiled once per step, uncaptured.
    assert all("kernels" not in r for r in (cold, warm, hot))
    transformer = profiled["kernels"]["transformer"]
    assert transformer["runs"] == 2 and transformer["gpuMs"] > 0
    # The transformer's steps ran on our kernels, except in the profiled image (onnxruntime's profiler times its own).
    assert hot["how"]["transformer"].startswith("q4/webgpu, our kernels (int8-dp4a, "), hot["how"]["transformer"]
    assert hot["step"]["runner"] == "kernels" and hot["step"]["dispatches"] > 0
    assert profiled["step"]["runner"] == "onnxruntime" and "graph capture" not in profiled["how"]["transformer"]
    assert any(k["op"] == "MatMulNBits" and k["program"].startswith("MatMulNBits") for k in transformer["kernels"])
    # The report carries them: JSON as the app reported them, markdown as one table per component.
    saved = json.loads((out / browser_report.JSON_NAME).read_text())
    assert saved["rows"][-1]["kernels"] == profiled["kernels"]
    report = (out / browser_report.MARKDOWN_NAME).read_text()
    assert "## Warm reload: q4 64x64" in report and any(f"| {m}" in report for m in made)
    assert "## Kernels: q4 64x64" in report and "| MatMulNBits | MatMulNBits" in report
    assert report.count("| op | program | calls | GPU ms | share |") == 3  # text encoder, transformer, VAE decoder
