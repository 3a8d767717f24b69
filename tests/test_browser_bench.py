"""`klein-web browser-bench` without a browser: what it counts, how it reads the app's figures, its tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from builder.check.bench.browser import ImageRun
from builder.check.bench.browser_report import markdown, native_ratios
from builder.check.driver.memory import process_kind
from builder.check.driver.serving import ByteCounter


def test_process_kind_reads_chromiums_type_switch() -> None:
    assert process_kind(["/usr/lib/chromium/chromium", "--type=renderer", "--lang=en"]) == "renderer"
    assert process_kind(["chromium", "--type=gpu-process"]) == "gpu-process"
    assert process_kind(["chromium", "--headless", "--user-data-dir=/tmp/p"]) == "browser"


@pytest.mark.anyio
async def test_byte_counter_counts_model_files_but_not_the_manifest_or_the_app() -> None:
    async def body(request: object) -> Response:
        return Response(b"x" * 1000)

    app = Starlette(routes=[Route("/models/{path:path}", body), Route("/{path:path}", body)])
    counter = ByteCounter()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=counter.wrap(app)), base_url="http://t") as client:
        for path in ("/models/transformer/transformer_q4.onnx_data", "/models/manifest.json", "/index.html"):
            assert (await client.get(path)).status_code == 200
    assert counter.bytes == 1000 and counter.requests == 1


def run(phase: str, *, steps: list[float], fetched: int = 0, preview: dict[str, Any] | None = None) -> ImageRun:
    return ImageRun(
        phase=phase,
        variant="q4f16",
        size="512x512",
        seconds=9.5,
        bytes_fetched=fetched,
        timings={
            "download": 2000.0,
            "encode": 70.0,
            "latents": 2.0,
            "timesteps": 1.0,
            "denoise": sum(steps),
            "decode": 150.0,
            "total": 9000.0,
        },
        step_ms=steps,
        graphs={
            "text_encoder": {"variant": "q4f16", "ep": "webgpu", "detail": "", "loadMs": 4000.0},
            "transformer": {
                "variant": "q4f16",
                "ep": "webgpu",
                "detail": "attention unsplit, graph capture",
                "loadMs": 3000.0,
            },
            "vae_decoder": {"variant": "fp16", "ep": "webgpu", "detail": "", "loadMs": 500.0},
        },
        memory={"gpu_gib": 7.5, "rss_gib": {"renderer": 5.0, "gpu-process": 1.5}},
        wasm_heap_bytes=2**26,
        preview=preview,
    )


def test_a_run_row_separates_the_first_step_from_the_steady_ones() -> None:
    row = run("cold", steps=[1100.0, 150.0, 160.0, 155.0], fetched=5_000_000_000).row()
    assert row["first_step_ms"] == 1100.0 and row["step_ms"] == 155.0  # median of the replayed steps
    assert row["image_s"] == pytest.approx((70 + 2 + 1 + 1565 + 150) / 1000)
    assert row["store_gb_per_s"] == pytest.approx(2.5)  # 5 GB in the 2 s download stage
    assert row["load_s"] == {"text_encoder": 4.0, "transformer": 3.0, "vae_decoder": 0.5}
    assert row["variants"]["vae_decoder"] == "fp16" and row["wasm_heap_gib"] == pytest.approx(1 / 16)
    # Nothing fetched (a warm reload): no store rate to report.
    assert run("warm reload", steps=[150.0]).row()["store_gb_per_s"] is None
    # A job run again after a failed attempt (a GPU feature dropped) fetched in that attempt: its own download stage
    # did not, so no rate (the click-to-image time, 60 s, is far more than the job's 9 s).
    retried = run("cold", steps=[150.0] * 4, fetched=5_000_000_000)
    retried.seconds = 60.0
    assert retried.row()["store_gb_per_s"] is None
    # The step previews' time per step, when the image showed them.
    assert row["preview_ms"] is None
    shown = run("hot", steps=[150.0] * 4, preview={"map": "repository", "frames": 4, "ms": 6.0}).row()
    assert shown["preview_ms"] == pytest.approx(1.5)


def test_native_ratios_pair_each_hot_figure_with_the_graph_the_app_ran(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps(
            {
                "rows": [
                    # Rows as builder.check.bench.native writes them: the app's graph is the one marked app_path.
                    {
                        "component": "transformer",
                        "size": "512x512",
                        "variant": "q4f16, attention in 79 query blocks",
                        "ort_ms": 248,
                        "torch_ms": 36,
                    },
                    {
                        "component": "transformer",
                        "size": "512x512",
                        "variant": "q4f16, attention unsplit, graph capture",
                        "ort_ms": 154,
                        "torch_ms": 36,
                        "app_path": True,
                    },
                    {
                        "component": "transformer",
                        "size": "512x512",
                        "variant": "q4f16, attention in 4 query blocks, graph capture",
                        "ort_ms": 160,
                        "torch_ms": 36,
                    },
                    {
                        "component": "text_encoder",
                        "size": "512 tokens",
                        "variant": "q4f16",
                        "ort_ms": 70,
                        "torch_ms": 23,
                    },
                    {"component": "vae_decoder", "size": "512x512", "variant": "fp16", "ort_ms": 149, "torch_ms": 22},
                ]
            }
        )
    )
    rows = [run("cold", steps=[900.0, 400.0]).row(), run("hot", steps=[310.0, 308.0, 312.0]).row()]
    ratios = native_ratios(rows, bench)
    step = ratios["q4f16 512x512 transformer step"]
    assert step["native_ms"] == 154 and step["browser_over_native"] == pytest.approx(310 / 154)
    assert ratios["q4f16 512x512 text encoder"]["browser_over_torch"] == pytest.approx(70 / 23)
    assert ratios["q4f16 512x512 VAE decoder"]["native_ms"] == 149
    assert len(ratios) == 3  # only the hot run is compared
    table = markdown(
        {"adapter": "nvidia", "browser": "chromium 156", "onnxruntime_web": "1.30.0", "date": "d"}, rows, ratios
    )
    assert sum(line.startswith("| q4f16 | 512x512 |") for line in table) == 2
    assert any(line.startswith("| q4f16 512x512 transformer step | 310 | 154 |") for line in table)
