"""The weight formats of the q4 / q4f16 graphs (builder.convert.weight_format): the compact layout `convert` writes,
the seed repository's layout `--weights seed` keeps, the pieces both are made of, and `convert --jobs`.

The quantiser and storage tests build one-node graphs and run them on onnxruntime's CPU kernels; the repository
tests read make-tiny's converted model (compact) and the seed-layout conversion of the same model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.convert.convert_jobs import default_jobs
from builder.convert.fp16_storage import STORED_FP16, restore_fp32, store_fp16
from builder.convert.onnx_checks import verify_saved_graph
from builder.convert.onnx_graph import IR_VERSION, MS_DOMAIN, tensor_bytes
from builder.convert.quantize import dequantize_blocks, quantize_blocks, quantize_gather
from builder.errors import ConversionError
from builder.repo import manifest as repo

GB = 10**9


def one_node_model(
    node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
) -> onnx.ModelProto:
    graph = helper.make_graph([node], "one_node", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = IR_VERSION
    return model


def embedding_model(table: np.ndarray) -> onnx.ModelProto:
    """Gather(table, ids) -> rows, with the table quantised into 4-bit blocks by the converter's rewrite."""
    model = one_node_model(
        helper.make_node("Gather", ["table", "ids"], ["rows"], name="/embed_tokens/Gather"),
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["batch", "seq", table.shape[1]])],
    )
    quantize_gather(model.graph, model.graph.node[0], table, block_size=32)
    return model


def test_blocks_are_onnxruntimes_symmetric_4_bit_codes() -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantizer

    rng = np.random.default_rng(0)
    table = rng.standard_normal((300, 128)).astype(np.float32)
    table[7] = 0  # an all-zero block: scale 0, every code 8, dequantised to 0
    packed, scales = quantize_blocks(table, 32)
    with np.errstate(invalid="ignore"):  # onnxruntime's own code divides the zero block by its zero scale
        codes, ort_scales = DefaultWeightOnlyQuantizer.quant_slice_symmetric(table.reshape(-1, 32))
    ours = np.empty((300, 128), dtype=np.int16)
    ours[:, 0::2], ours[:, 1::2] = packed & 0x0F, packed >> 4
    np.testing.assert_array_equal(ours - 8, codes.reshape(300, 128))
    np.testing.assert_array_equal(np.nan_to_num(scales), np.nan_to_num(ort_scales.reshape(300, 4)))
    restored = dequantize_blocks(packed, scales, 32)
    assert np.all(restored[7] == 0)
    # Each value within half a step, except the opposite extreme clipped from +8 to +7: one step at most.
    step = np.repeat(np.abs(scales), 32, axis=1)
    error = np.abs(restored - table)
    assert np.all(error <= step + 1e-7)
    assert np.mean(error <= step / 2 + 1e-7) > 0.99
    with pytest.raises(ConversionError, match="blocks of 48"):
        quantize_blocks(table, 48)
    # Rows shorter than a block (the tiny model's 32-wide embedding with blocks of 128): one short block a row.
    short = table[:, :96]
    packed, scales = quantize_blocks(short, 128)
    assert packed.shape == (300, 48) and scales.shape == (300, 1)
    extreme = np.where(short.max(axis=1) > -short.min(axis=1), short.max(axis=1), short.min(axis=1))
    np.testing.assert_array_equal(scales[:, 0], extreme / np.float32(-8))
    assert np.all(np.abs(dequantize_blocks(packed, scales, 128) - short) <= np.abs(scales) + 1e-7)


def test_gather_block_quantized_returns_the_dequantised_rows_on_onnxruntime() -> None:
    rng = np.random.default_rng(1)
    table = (rng.standard_normal((1000, 64)) * 0.02).astype(np.float32)
    model = embedding_model(table)
    node = model.graph.node[0]
    assert (node.domain, node.op_type) == (MS_DOMAIN, "GatherBlockQuantized")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    data, scales = inits[node.input[0]], inits[node.input[2]]
    assert data.dtype == np.uint8 and data.shape == (1000, 32) and scales.dtype == np.float32
    ids = rng.integers(0, 1000, (2, 9)).astype(np.int64)
    rows = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[
        0
    ]
    np.testing.assert_array_equal(rows, dequantize_blocks(data, scales, 32)[ids])
    relative = np.linalg.norm(rows - table[ids]) / np.linalg.norm(table[ids])
    assert 0 < relative < 0.12, relative  # 4-bit blocks of 32 normal values: about 0.09


def test_weights_stored_in_fp16_are_cast_up_and_folded_when_onnxruntime_loads_the_graph(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    table = rng.standard_normal((512, 64)).astype(np.float32)
    model = embedding_model(table)
    stored = store_fp16(model)
    scales_name = model.graph.node[1].input[2]
    assert stored == [scales_name]  # the packed data is uint8: only the float scales are halved
    assert model.graph.node[0].op_type == "Cast"
    assert {t.name: t.data_type for t in model.graph.initializer}[scales_name + STORED_FP16] == TensorProto.FLOAT16
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3  # not the warning that an optimised model is machine-specific
    session = ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    # No Cast is left to run: the kernels get float32 scales, and no node needs fp16 (shader-f16 on WebGPU).
    assert [node.op_type for node in optimized.graph.node] == ["GatherBlockQuantized"]
    ids = np.arange(512, dtype=np.int64)[None]
    rows = session.run(None, {"ids": ids})[0][0]
    restored = onnx.ModelProto()
    restored.CopyFrom(model)
    restore_fp32(restored)
    assert [node.op_type for node in restored.graph.node] == ["GatherBlockQuantized"]
    inits = {t.name: numpy_helper.to_array(t) for t in restored.graph.initializer}
    assert inits[scales_name].dtype == np.float32
    np.testing.assert_array_equal(
        rows, dequantize_blocks(inits[restored.graph.node[0].input[0]], inits[scales_name], 32)
    )


def test_values_fp16_cannot_hold_stay_float32() -> None:
    node = helper.make_node("Mul", ["x", "w"], ["y"], name="/scale/Mul")
    model = one_node_model(
        node,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])],
    )
    model.graph.initializer.append(numpy_helper.from_array(np.full(1024, 1e5, dtype=np.float32), "w"))
    assert store_fp16(model) == []
    assert model.graph.initializer[0].data_type == TensorProto.FLOAT


# ---------------------------------------------------------------------------------------------------------------
# The repositories


def initializers_of(path: Path) -> tuple[onnx.ModelProto, dict[str, TensorProto]]:
    model = onnx.load(str(path), load_external_data=False)
    return model, {t.name: t for t in model.graph.initializer}


def test_make_tiny_writes_the_compact_layout(tiny_models: dict[str, Path]) -> None:
    manifest = repo.load(tiny_models["q4"])
    text_encoder = manifest.graph("text_encoder", "q4")
    # No fp16 anywhere in the q4 text encoder: it runs wholly on WebGPU without shader-f16.
    assert not text_encoder.requires_f16 and text_encoder.cpu_nodes_without_f16 == []
    assert "GatherBlockQuantized" in text_encoder.precision
    model, inits = initializers_of(tiny_models["q4"] / text_encoder.path)
    (embedding,) = [
        n for n in model.graph.node if n.op_type in ("Gather", "GatherBlockQuantized") and n.input[1] == "input_ids"
    ]
    assert embedding.op_type == "GatherBlockQuantized"
    assert inits[embedding.input[0]].data_type == TensorProto.UINT8
    assert list(inits[embedding.input[0]].dims) == [151936, 16]  # the tiny text encoder is 32 wide
    for graph in ("text_encoder", "transformer", "vae_decoder", "vae_encoder"):
        variant = "fp32" if graph.startswith("vae") else "q4"
        path = tiny_models["q4"] / repo.graph_path(graph, variant)
        model, inits = initializers_of(path)
        verify_saved_graph(path, graph)  # IR version 10, opset 18, allowed ops, files beside it
        assert model.ir_version == IR_VERSION
        readers = {name for node in model.graph.node for name in node.input}
        # Every MatMul weight of the text encoder and transformer is 4-bit (the VAE's are not quantised); every
        # float kept for fp32 compute is stored fp16 (small ones stay inline).
        if variant == "q4":
            assert not [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits], graph
        wide = [t.name for t in inits.values() if t.data_type == TensorProto.FLOAT and tensor_bytes(t) >= 1024]
        assert wide == [], (graph, wide)
        stored = [t.name for t in inits.values() if t.name.endswith(STORED_FP16)]
        assert stored and all(name in readers for name in stored), graph


def test_seed_layout_keeps_the_fp16_embedding_and_fp32_adaln(seed_layout_q4: Path) -> None:
    manifest = repo.load(seed_layout_q4)
    text_encoder = manifest.graph("text_encoder", "q4")
    assert text_encoder.requires_f16 and len(text_encoder.cpu_nodes_without_f16) == 2
    assert "--weights seed" in manifest.converter
    model, inits = initializers_of(seed_layout_q4 / text_encoder.path)
    gather = next(n for n in model.graph.node if n.name == text_encoder.cpu_nodes_without_f16[0])
    assert gather.op_type == "Gather" and inits[gather.input[0]].data_type == TensorProto.FLOAT16
    model, inits = initializers_of(seed_layout_q4 / repo.graph_path("transformer", "q4"))
    fp32_matmuls = {n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits}
    assert any("_modulation" in name for name in fp32_matmuls) and any("/norm_out/" in name for name in fp32_matmuls)
    assert not any(t.name.endswith(STORED_FP16) for t in inits.values())


# Measured on make-tiny seed 0 (scripts/weight_format_study.py tiny, 2026-12-03), 64x64 and 128x128, 3 prompts:
# compact q4 / q4f16 images 53.1-56.8 dB from the seed layout's q4f16 image (the seed's own q4 is 55.0-55.9 dB
# from it), and 34.2 / 38.4 dB from the fp32 image against the seed's 34.3 / 38.3.
COMPACT_VS_SEED_MIN_DB = 50.0
FP32_PSNR_MAX_LOSS_DB = 0.5


def test_compact_layout_is_smaller_and_keeps_the_images(tiny_models: dict[str, Path], seed_layout_q4: Path) -> None:
    """The fidelity rule of docs/model-repository.md on the tiny model: the compact q4 images within rounding of the
    seed layout's (>= 50 dB, the bound q4f16 is held to against q4), and no further from the fp32 images than the
    seed layout's less 0.5 dB; the compact files are smaller."""
    from builder.pipeline.imaging import psnr
    from builder.pipeline.reference import generate

    def size(root: Path, component: str) -> int:
        manifest = repo.load(root)
        return sum(manifest.files[name].size or 0 for name in manifest.graph(component, "q4").files())

    for component in ("text_encoder", "transformer"):
        assert size(tiny_models["q4"], component) < size(seed_layout_q4, component), component
    q4 = {"text_encoder": "q4", "transformer": "q4", "vae_decoder": "fp32"}
    for prompt in ("a red fox sitting in the snow", "an astronaut riding a horse on the moon, 35mm photo"):

        def image(root: Path, variants: dict[str, str] | None, prompt: str = prompt) -> np.ndarray:
            return generate(
                root, prompt=prompt, seed=1, width=64, height=64, steps=4, log=lambda _m: None, variants=variants
            ).image

        compact, seed, fp32 = image(tiny_models["q4"], q4), image(seed_layout_q4, q4), image(tiny_models["fp32"], None)
        print(
            f"{prompt!r}: compact vs seed {psnr(compact, seed):.1f} dB; vs fp32 compact {psnr(compact, fp32):.1f}, "
            f"seed {psnr(seed, fp32):.1f} dB"
        )
        assert psnr(compact, seed) >= COMPACT_VS_SEED_MIN_DB, prompt
        assert psnr(compact, fp32) >= psnr(seed, fp32) - FP32_PSNR_MAX_LOSS_DB, prompt


def test_jobs_write_the_same_bytes(tiny_models: dict[str, Path], q4f16_repo: Path, tmp_path: Path) -> None:
    """`convert --jobs 3` writes what one process writes (the q4f16_repo fixture: `--jobs 1`), byte for byte."""
    from builder.convert.convert import convert
    from builder.convert.tiny import TINY_DATA_FILE_CAPS

    lines: list[str] = []
    convert(
        tiny_models["diffusers"],
        tmp_path / "jobs3",
        precision="q4f16",
        log=lines.append,
        max_data_file_bytes=TINY_DATA_FILE_CAPS,
        jobs=3,
    )
    folders = {"jobs1": q4f16_repo, "jobs3": tmp_path / "jobs3"}
    one, three = (json.loads((folders[name] / repo.MANIFEST_NAME).read_text()) for name in ("jobs1", "jobs3"))
    assert one == three
    for name in one["files"]:
        digests = {hashlib.sha256((folder / name).read_bytes()).hexdigest() for folder in folders.values()}
        assert len(digests) == 1, name
    # The parts' log lines reach the caller, each prefixed with its part, and the peak together is reported.
    assert any(line.startswith("[transformer] ") for line in lines) and any(line.startswith("[vae] ") for line in lines)
    assert any("3 parts in 3 processes" in line for line in lines)


def test_default_jobs_follow_the_free_memory_and_the_cpus() -> None:
    peaks = [5 * GB, 5 * GB, 1 * GB]
    assert default_jobs(peaks, available=32 * GB, cpus=16) == 3
    assert default_jobs(peaks, available=13 * GB, cpus=16) == 2  # 5 + 5 fits in 80 % of 13; 5 + 5 + 1 does not
    assert default_jobs(peaks, available=8 * GB, cpus=16) == 1
    assert default_jobs(peaks, available=64 * GB, cpus=2) == 2
    assert default_jobs(peaks, available=None, cpus=16) == 1
