"""The VAE encoder graph on the tiny model: diffusers' own image latents, its manifest entry, and repos without it.

The reference is Flux2KleinPipeline's own code path for a reference image: image_processor.preprocess (the [0, 1]
tensor mapped to [-1, 1]) then _encode_vae_image (vae.encode, the posterior's mode, 2x2 patchify, BN normalisation).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from graph_helpers import with_fp16_stored_weights
from onnx import TensorProto

from builder.convert.attention import max_attention_tokens, query_blocks_for, recorded_query_blocks
from builder.convert.onnx_checks import ALLOWED_OPS
from builder.convert.onnx_graph import IR_VERSION
from builder.errors import ModelRepoError
from builder.repo import manifest as repo
from builder.repo import seed_layout, verify

# Measured on the seed-0 tiny model (onnxruntime 1.32 CPU): fp32 graph max |diff| 1.43e-6 (batch 2, 48x80 px);
# fp16 graph max |diff| / max |ref| 9.0e-4 (64x32 px). The fp16 bound is ~2x its measurement.
FP32_MAX_ABS = 1e-4
# The q4 repo's fp32 encoder, its weights stored in fp16: ~2.5x the measured 0.0008.
FP16_STORED_MAX_ABS = 2e-3
FP16_MAX_RELATIVE = 2e-3


@pytest.fixture(scope="module")
def pipe(tiny_models: dict[str, Path]) -> Any:
    from diffusers import Flux2KleinPipeline

    pipeline = Flux2KleinPipeline.from_pretrained(tiny_models["diffusers"], dtype=torch.float32)
    pipeline.vae.eval()
    return pipeline


def random_image(seed: int, *, batch: int = 2, height: int = 48, width: int = 80) -> np.ndarray:
    """RGB in [0, 1]; batch 2 and a non-square size: the batch and both spatial dims are dynamic."""
    return torch.rand(batch, 3, height, width, generator=torch.Generator().manual_seed(seed)).numpy()


def reference_latents(pipe: Any, image: np.ndarray) -> np.ndarray:
    """What Flux2KleinPipeline hands the transformer for a reference image, before packing it into tokens."""
    with torch.no_grad():
        processed = pipe.image_processor.preprocess(
            torch.from_numpy(image), height=image.shape[2], width=image.shape[3]
        )
        latents: np.ndarray = pipe._encode_vae_image(processed, generator=None).numpy()
    return latents


def encode(repo_dir: Path, variant: str, image: np.ndarray) -> np.ndarray:
    path = repo_dir / repo.graph_path("vae_encoder", variant)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    latents: np.ndarray = session.run(None, {"image": image})[0]
    return latents


def test_fp32_graph_equals_the_pipelines_image_latents(tiny_models: dict[str, Path], pipe: Any) -> None:
    image = random_image(seed=5)
    expected = reference_latents(pipe, image)
    assert expected.shape == (2, 128, 3, 5) and np.abs(expected).max() > 1  # BN-normalised, far from zero
    latents = encode(tiny_models["fp32"], "fp32", image)
    assert latents.shape == expected.shape and latents.dtype == np.float32
    diff = float(np.abs(latents - expected).max())
    print(f"vae_encoder fp32 (fp32 repo) vs Flux2KleinPipeline._encode_vae_image: max |diff| {diff:.3g}")
    assert diff < FP32_MAX_ABS
    # The q4 repo ships the fp32 encoder too, its weights stored in fp16 (the compact format): exactly the fp32
    # graph on fp16-rounded weights, and so within that rounding of the pipeline (measured max |diff| 0.0008).
    stored = with_fp16_stored_weights(tiny_models["fp32"] / repo.graph_path("vae_encoder", "fp32"))
    rounded = ort.InferenceSession(stored, providers=["CPUExecutionProvider"]).run(None, {"image": image})[0]
    q4_latents = encode(tiny_models["q4"], "fp32", image)
    np.testing.assert_allclose(q4_latents, rounded, rtol=1e-4, atol=1e-5)
    assert 0 < float(np.abs(q4_latents - expected).max()) < FP16_STORED_MAX_ABS


def test_fp16_graph_within_measured_tolerance(tiny_models: dict[str, Path], pipe: Any) -> None:
    image = random_image(seed=6, batch=1, height=64, width=32)
    expected = reference_latents(pipe, image)
    latents = encode(tiny_models["q4"], "fp16", image)
    error = float(np.abs(latents - expected).max() / np.abs(expected).max())
    print(f"vae_encoder fp16 vs Flux2KleinPipeline._encode_vae_image: max|err| / max|ref| {error:.3g}")
    assert 0 < error < FP16_MAX_RELATIVE


def test_graphs_follow_the_contract(tiny_models: dict[str, Path]) -> None:
    blocks = query_blocks_for(heads=1, tokens=max_attention_tokens("vae_encoder"))
    assert blocks > 1  # sized for 2048^2 px, like the decoder's
    for repo_name, variants in (("fp32", ["fp32"]), ("q4", ["fp32", "fp16"])):
        root = tiny_models[repo_name]
        manifest = repo.load(root)
        assert manifest.variants("vae_encoder") == variants
        for variant in variants:
            entry = manifest.graph("vae_encoder", variant)
            assert entry.path == f"vae_encoder/vae_encoder_{variant}.onnx"
            assert (entry.inputs, entry.outputs) == repo.CONTRACT["vae_encoder"]
            assert entry.requires_f16 == (variant == "fp16")
            for rel in entry.files():
                data = (root / rel).read_bytes()
                assert manifest.files[rel].size == len(data)
                assert manifest.files[rel].sha256 == hashlib.sha256(data).hexdigest(), rel

            model = onnx.load(str(root / entry.path), load_external_data=False)
            assert model.ir_version == IR_VERSION == 10
            dims = {
                v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
                for v in [*model.graph.input, *model.graph.output]
            }
            assert dims == {
                "image": ["batch", 3, "height", "width"],
                "image_latents": ["batch", 128, "latent_h", "latent_w"],
            }
            assert all(
                v.type.tensor_type.elem_type == TensorProto.FLOAT for v in [*model.graph.input, *model.graph.output]
            )
            ops = {(n.domain, n.op_type) for n in model.graph.node}
            assert ops <= ALLOWED_OPS["vae_encoder"], sorted(ops - ALLOWED_OPS["vae_encoder"])
            # The mid-block attention in query blocks, recorded in the graph and in the manifest.
            assert entry.attention_query_blocks == recorded_query_blocks(model) == blocks
            assert sum(n.op_type == "Softmax" for n in model.graph.node) == blocks
            if variant == "fp16":
                # As the fp16 decoder: GroupNorm statistics and the attention compute in fp32 between Casts.
                typed = onnx.shape_inference.infer_shapes(model)
                elem = {v.name: v.type.tensor_type.elem_type for v in [*typed.graph.value_info, *typed.graph.input]}
                sensitive = [
                    n
                    for n in model.graph.node
                    if n.op_type in ("InstanceNormalization", "Softmax")
                    or (n.op_type == "MatMul" and "/query_blocks/" in n.name)
                ]
                assert {"InstanceNormalization", "Softmax", "MatMul"} <= {n.op_type for n in sensitive}
                assert all(elem[n.input[0]] == TensorProto.FLOAT for n in sensitive)
                convs = [n for n in model.graph.node if n.op_type == "Conv"]
                assert convs and all(elem[n.output[0]] == TensorProto.FLOAT16 for n in convs)


def without_encoder(source: Path, dest: Path) -> Path:
    """A copy of a converted repo with the VAE encoder's graphs and manifest entries removed."""
    shutil.copytree(source, dest)
    shutil.rmtree(dest / "vae_encoder")
    data = json.loads((dest / repo.MANIFEST_NAME).read_text())
    data["graphs"] = [g for g in data["graphs"] if g["component"] != "vae_encoder"]
    data["files"] = {p: e for p, e in data["files"].items() if not p.startswith("vae_encoder/")}
    (dest / repo.MANIFEST_NAME).write_text(json.dumps(data))
    return dest


def test_a_repo_without_the_encoder_still_works(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    from builder.pipeline import reference

    plain = without_encoder(tiny_models["fp32"], tmp_path / "plain")
    manifest = repo.load(plain)
    verify.check_files(plain, manifest, log=lambda _m: None)
    assert manifest.variants("vae_encoder") == [] and all(
        g.component != "vae_encoder" for g in seed_layout.seed_graphs()
    )

    def image(folder: Path) -> np.ndarray:
        result = reference.generate(
            folder, prompt="a lighthouse", seed=3, width=64, height=64, steps=2, log=lambda _m: None
        )
        assert set(result.variants) == set(repo.COMPONENTS)
        return result.image

    # Text-to-image neither needs nor reads the encoder: the same image with and without it.
    assert np.array_equal(image(plain), image(tiny_models["fp32"]))


def test_a_manifest_with_an_unknown_component_is_refused(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    data = json.loads((tiny_models["fp32"] / repo.MANIFEST_NAME).read_text())
    data["graphs"][0]["component"] = "vae_encoderr"
    (folder / repo.MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ModelRepoError, match=r"component must be one of .*got [\"']vae_encoderr[\"']"):
        repo.load(folder)
