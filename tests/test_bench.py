"""`klein-web bench` (builder/check/bench/native.py and the modules it uses): its statistics and table code, and a CPU smoke run
of the whole bench path on make-tiny's configs.

The real benchmark needs an NVIDIA GPU with Vulkan (the WebGPU plugin EP); here the bench must say so and
still run onnxruntime's CPU EP and torch on the CPU end to end.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from builder.check.bench import graphs as bench_graphs
from builder.check.bench import models as bench_models
from builder.check.bench import native as bench
from builder.check.bench import ort_timing, overhead
from builder.check.bench import report as bench_report
from builder.check.bench import stats as bench_stats
from builder.convert.attention import size_classes
from builder.errors import BenchError, InputError


def test_median_of_odd_and_even_samples_and_empty_is_an_error() -> None:
    samples = [random.uniform(1, 100) for _ in range(7)]
    assert bench_stats.median_ms(samples) == sorted(samples)[3]
    assert bench_stats.median_ms([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(BenchError, match="No timing samples"):
        bench_stats.median_ms([])


def test_ratio_handles_missing_and_zero_denominators() -> None:
    assert bench_stats.ratio(30.0, 6.0) == pytest.approx(5.0)
    assert bench_stats.ratio(None, 6.0) is None
    assert bench_stats.ratio(3.0, None) is None
    assert bench_stats.ratio(3.0, 0.0) is None


def test_extrapolate_recovers_fixed_and_per_layer_time_from_chains() -> None:
    rng = random.Random(3)
    fixed, per_double, per_single = rng.uniform(1, 50), rng.uniform(1, 20), rng.uniform(1, 10)

    def timed(double: int, single: int) -> float:
        return fixed + double * per_double + single * per_single

    chains: dict[tuple[int, ...], float] = {(0, 1): timed(0, 1), (1, 1): timed(1, 1), (0, 2): timed(0, 2)}
    total, coef = bench_stats.extrapolate(chains, (5, 20))
    assert total == pytest.approx(timed(5, 20))
    assert coef == pytest.approx([fixed, per_double, per_single])
    # One layer kind (the text encoder): two chain lengths suffice.
    total, _ = bench_stats.extrapolate({(3,): fixed + 3 * per_double, (6,): fixed + 6 * per_double}, (27,))
    assert total == pytest.approx(fixed + 27 * per_double)


def test_extrapolate_refuses_chains_that_cannot_separate_the_layer_kinds() -> None:
    with pytest.raises(BenchError, match="vary each layer kind"):
        bench_stats.extrapolate({(1, 1): 3.0, (2, 2): 5.0, (3, 3): 7.0}, (5, 20))
    with pytest.raises(BenchError, match="do not match"):
        bench_stats.extrapolate({(1,): 3.0, (2,): 5.0}, (5, 20))


# Samples as `klein-web bench` records them (ms per run, 5 repeats), from its H200 runs: the q4f16 text encoder's
# 3- and 6-layer chains (the 6-layer chain timed faster), and the q4f16 transformer's chains at 1024x1024 without
# graph capture and at 512x512 with it (docs/gpu-runs/2026-12-01-h200-fused/native/bench.json).
Samples = dict[tuple[int, ...], list[float]]  # layers per kind of each chain -> its times, ms

TEXT_CHAINS_H200: Samples = {(3,): [27.5, 43.0, 21.4, 25.3, 30.1], (6,): [20.6, 20.0, 22.4, 41.0, 20.3]}
TRANSFORMER_1024_H200: Samples = {
    (0, 1): [288.63, 307.91, 308.15, 323.74, 325.22],
    (1, 1): [608.38, 630.00, 668.59, 709.73, 754.48],
    (0, 2): [581.45, 588.77, 577.64, 655.47, 713.76],
}
TRANSFORMER_512_CAPTURE_H200: Samples = {
    (0, 1): [6.475, 6.573, 6.478, 6.492, 6.508],
    (1, 1): [13.208, 13.162, 13.336, 13.168, 13.190],
    (0, 2): [11.389, 11.417, 11.372, 11.382, 11.462],
}
BLOCKS = ("double block", "single block")


@pytest.mark.parametrize("samples", [TRANSFORMER_1024_H200, TRANSFORMER_512_CAPTURE_H200])
def test_a_chain_fit_whose_blocks_stand_above_the_noise_is_accepted(samples: Samples) -> None:
    fit = bench_stats.fit_chains(samples, (5, 20), kinds=BLOCKS)
    medians = {chain: statistics.median(values) for chain, values in samples.items()}
    assert fit.refused is None
    assert (fit.total_ms, fit.coef) == bench_stats.extrapolate(medians, (5, 20))
    assert all(per_block > 0 for per_block in fit.coef[1:])
    assert fit.total_ms > max(medians.values())


@pytest.mark.parametrize(
    ("samples", "full", "kinds", "reason"),
    [
        # The 6-layer chain timed faster than the 3-layer one: a negative slope, 27 layers of it below zero.
        (TEXT_CHAINS_H200, (27,), ("layer",), "per-layer time -2.30 ms is not positive"),
        # A positive slope, but the layers add 2 ms between the chains while one chain's samples spread over 20 ms.
        (
            {(3,): [10.0, 14.0, 30.0], (6,): [12.0, 16.0, 29.0]},
            (27,),
            ("layer",),
            "the layers add 2.00 ms between the chains, within the samples' spread of 20.00 ms",
        ),
        # The transformer's single blocks lost in one noisy chain; the double blocks are fine and not named.
        (
            {(0, 1): [30.0, 31.0, 32.0], (1, 1): [60.0, 61.0, 62.0], (0, 2): [33.0, 20.0, 45.0]},
            (5, 20),
            BLOCKS,
            "the single blocks add 2.00 ms between the chains, within the samples' spread of 25.00 ms",
        ),
    ],
)
def test_a_chain_fit_lost_in_its_own_noise_is_refused(
    samples: Samples, full: tuple[int, ...], kinds: tuple[str, ...], reason: str
) -> None:
    fit = bench_stats.fit_chains(samples, full, kinds=kinds)
    assert fit.refused == reason


def test_a_refused_fit_prints_no_figure_and_says_why() -> None:
    figures = bench.chain_figures(
        TEXT_CHAINS_H200, {(3,): [4.0, 4.1], (6,): [7.0, 7.2]}, (27,), kinds=("layer",), torch_ms=31.0
    )
    assert figures["ort_ms"] is None and "per_layer_ms" not in figures
    assert figures["fit_refused"] == "per-layer time -2.30 ms is not positive"
    method = figures["method"]
    assert method.startswith("chain 3/6 -> 27 layers: **fit refused**, per-layer time -2.30 ms is not positive")
    assert "3: 27.5 ms, 6: 20.6 ms" in method  # the chains' medians, as measured
    torch_27 = 4.05 + (27 - 3) * (7.1 - 4.05) / 3  # torch's own fit is sound: 3-layer median + 24 layers of slope
    assert f"PyTorch extrapolated the same way: {torch_27:.1f} ms vs measured 31.0" in method
    row: dict[str, Any] = {
        "component": "text_encoder",
        "size": "512 tokens",
        "variant": "q4f16",
        "torch_ms": 31.0,
        **figures,
    }
    assert "| text_encoder | 512 tokens | q4f16 | n/a | 31.0 | n/a |" in bench_report.table_rows([row])[2]
    sound = bench.chain_figures(TRANSFORMER_1024_H200, TRANSFORMER_1024_H200, (5, 20), kinds=BLOCKS, torch_ms=1.0)
    assert sound["ort_ms"] == bench_stats.fit_chains(TRANSFORMER_1024_H200, (5, 20)).total_ms
    assert "fit refused" not in sound["method"] and len(sound["per_layer_ms"]) == 2


def test_table_ratio_column_is_computed_from_the_two_times() -> None:
    rows: list[dict[str, Any]] = [
        {
            "component": "transformer",
            "size": "512x512",
            "variant": "q4",
            "ort_ms": 540.0,
            "torch_ms": 27.0,
            "ort_peak_gib": 8.5,
            "torch_peak_gib": 15.25,
            "method": "chain",
        },
        {
            "component": "vae_decoder",
            "size": "512x512",
            "variant": "fp16",
            "ort_ms": None,
            "torch_ms": 20.0,
            "method": "full graph",
        },
    ]
    lines = bench_report.table_rows(rows)
    assert lines[0].startswith("| component |") and "WebGPU EP ms" in lines[0]
    assert len(lines) == 4 and all(line.count("|") == lines[0].count("|") for line in lines)
    cells = [c.strip() for c in lines[2].split("|")]
    assert cells[4:9] == ["540.0", "27.0", f"{540 / 27:.1f}x", "8.50", "15.25"]
    assert "| n/a | 20.0 | n/a |" in lines[3]
    cpu = bench_report.table_rows(
        rows, **bench_report.table_labels({"ort provider": "cpu", "gpu": "none (CPU smoke run)"})
    )
    assert "ORT CPU EP ms" in cpu[0] and "PyTorch CPU fp32 ms" in cpu[0] and "WebGPU" not in cpu[0]


def test_overhead_share_is_time_outside_session_run_over_the_generation() -> None:
    timings = {
        "download": 1200.0,
        "load": 800.0,
        "encode": 300.0,
        "denoise": 2500.0,
        "decode": 700.0,
        "sessionRun": 3300.0,
    }
    timings["total"] = sum(timings[k] for k in ("download", "load", "encode", "denoise", "decode")) + 20.0
    figures = overhead.overhead_figures(timings)
    generation = timings["total"] - timings["download"] - timings["load"]
    assert figures["generation_ms"] == pytest.approx(generation)
    assert figures["outside_ms"] == pytest.approx(generation - 3300.0)
    assert figures["overhead_share"] == pytest.approx((generation - 3300.0) / generation)
    with pytest.raises(BenchError, match="sessionRun"):
        overhead.overhead_figures({"total": 10.0})


def test_placement_summary_counts_nodes_per_provider() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "dur": 999, "args": {}},
        {
            "cat": "Node",
            "name": "a_kernel_time",
            "dur": 1500,
            "args": {"op_name": "Shape", "provider": "CPUExecutionProvider"},
        },
        {
            "cat": "Node",
            "name": "b_kernel_time",
            "dur": 500,
            "args": {"op_name": "Shape", "provider": "CPUExecutionProvider"},
        },
        {
            "cat": "Node",
            "name": "c_kernel_time",
            "dur": 70,
            "args": {"op_name": "MatMulNBits", "provider": "WebGpuExecutionProvider"},
        },
        {
            "cat": "Node",
            "name": "c_fence_before",
            "dur": 5,
            "args": {"op_name": "MatMulNBits", "provider": "WebGpuExecutionProvider"},
        },
    ]
    summary = ort_timing.summarize_placement(events)
    assert summary["CPUExecutionProvider"] == {"nodes": 2, "ms": pytest.approx(2.0), "ops": {"Shape": 2}}
    assert summary["WebGpuExecutionProvider"]["nodes"] == 1
    assert bench_report.placement_text(summary) == "CPU EP: 2 nodes (Shape x2), 2.0 ms"
    assert (
        bench_report.placement_text({"WebGpuExecutionProvider": summary["WebGpuExecutionProvider"]})
        == "all nodes on the GPU EP"
    )


def test_inputs_follow_the_graph_contract_shapes() -> None:
    scale = bench_models.tiny_scale()
    step = bench_models.make_inputs(scale, "transformer", 256)
    assert step["hidden_states"].shape == (1, (256 // 16) ** 2, 128)
    assert step["img_ids"].shape == (256, 4) and step["txt_ids"].shape == (scale.txt_seq, 4)
    assert step["encoder_hidden_states"].shape[2] == scale.transformer["joint_attention_dim"]
    assert statistics.pstdev(step["hidden_states"].ravel().tolist()) > 0.5  # random, never zeros
    assert bench_models.make_inputs(scale, "vae_decoder", 128)["latents"].shape == (1, 128, 8, 8)
    assert bench_models.make_inputs(scale, "text_encoder", None)["input_ids"].shape == (1, scale.txt_seq)
    assert bench_models.out_layers(27) == (9, 18, 27)


@pytest.mark.torch  # bench.main imports torch before it checks the options
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("scale", "huge", "--scale 'huge'"),
        ("components", ["unet"], "--components unet"),
        ("provider", "cuda", "--provider 'cuda'"),
        ("repeats", 0, "--repeats 0"),
    ],
)
def test_bad_options_name_the_option_and_write_nothing(tmp_path: Path, option: str, value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        bench.main(tmp_path / "out", log=lambda _m: None, **{option: value})
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # builds, exports and times every component in torch and onnxruntime
def test_cpu_smoke_run_writes_the_table_and_every_sample(tmp_path: Path) -> None:
    """No WebGPU adapter here: the bench says so, then times ORT's CPU EP and torch on the CPU end to end."""
    messages: list[str] = []
    rows = bench.main(
        tmp_path / "out",
        log=messages.append,
        scale="tiny",
        components=["text_encoder", "vae_decoder", "transformer"],
        provider="auto",
        warmup=0,
        repeats=2,
        workdir=tmp_path,
    )
    if ort_timing.webgpu_status() is not None:
        assert any("no WebGPU EP" in m and "smoke test" in m for m in messages)
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows, default=str))
    assert not any(key.startswith("error") for key in data["raw"]), data["raw"]
    by_key = {(r["component"], r["size"], r["variant"]): r for r in rows}
    # The text encoder: exported as the converter does (its fused ops too), timed whole against transformers.
    text_rows = [r for r in rows if r["component"] == "text_encoder"]
    assert text_rows and all(r["ort_ms"] > 0 and r["torch_ms"] > 0 for r in text_rows), text_rows
    assert all(r["method"].startswith("full graph (27 layers)") for r in text_rows), text_rows
    # The VAE: both graphs of the repo, timed whole; the transformer: the q4 graph at both sizes, extrapolated.
    for variant in ("fp16", "fp32"):
        row = by_key[("vae_decoder", "128x128", variant)]
        assert row["ort_ms"] > 0 and row["torch_ms"] > 0 and row["method"].startswith("full graph")
    # The transformer: the converter's main graph (most query blocks) and the app's graph at each size.
    scale = bench_models.tiny_scale()
    most_split = size_classes("transformer", heads=int(scale.transformer["num_attention_heads"]))[0][0]
    main = "q4" + bench_graphs.blocks_label(most_split)
    for size in ("128x128", "256x256"):
        app = bench_graphs.app_choice(scale, int(size.split("x")[0]), "q4")
        assert app == "q4, attention unsplit"  # the tiny model's 2 heads fit 256^2 unsplit
        for variant in (main, app):
            row = by_key[("transformer", size, variant)]
            assert row["method"].startswith("chain 0+1/1+1/0+2 -> 5+20 layers")
            # Tiny blocks on a shared CPU may time below the noise: then the row says so and gives no figure.
            if "fit_refused" in row:
                assert row["ort_ms"] is None and "**fit refused**" in row["method"], row
            else:
                assert row["ort_ms"] > 0 and len(row["per_layer_ms"]) == 2 and min(row["per_layer_ms"]) > 0, row
        samples = data["raw"][f"torch transformer {size.split('x')[0]} (5, 20)"]["samples_ms"]
        assert len(samples) == 2 and row["torch_ms"] == pytest.approx(statistics.median(samples))
        # The q4f16 graph is checked against the q4 graph of the same split.
        assert 0 < by_key[("transformer", size, "q4f16, attention unsplit")]["rel_err_vs_plain"] < 5e-2
    # The fast variant is compared with the plain one on the same inputs: close, but not the same graph.
    fp16_error = by_key[("vae_decoder", "128x128", "fp16")]["rel_err_vs_plain"]
    assert 0 < fp16_error < 1e-2
    table = (tmp_path / "out" / "bench.md").read_text()
    assert "| vae_decoder | 128x128 | fp16 |" in table and "Method:" in table
    assert f"vae_decoder 128x128: fp16 vs fp32 {fp16_error:.2e}" in table
    assert not list(tmp_path.glob("klein-bench-*")), "the work folder is removed"


def test_a_graph_onnxruntime_cannot_load_costs_one_row_not_the_bench(tmp_path: Path) -> None:
    """time_ort runs the worker in a subprocess: a graph that crashes it comes back as {"error": ...}."""
    import numpy as np

    graph = tmp_path / "broken.onnx"
    graph.write_bytes(b"not an onnx graph")
    np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 4), dtype=np.float32))
    result = ort_timing.time_ort(
        graph, {"4": tmp_path / "inputs.npz"}, provider="cpu", warmup=0, repeats=1, timeout_s=120, workdir=tmp_path
    )
    assert set(result) == {"error"} and result["error"].startswith("exit 1: "), result
