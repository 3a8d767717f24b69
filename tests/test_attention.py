"""Attention in query blocks (builder/convert/attention.py): exact, recorded in the manifest, and within the buffer limit.

The unsplit reference graphs are exported at test time from the same tiny diffusers modules with
`query_blocks=1`; buffer sizes are read from onnxruntime's own profile (each node's output_size).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from builder.convert.attention import (
    MAX_ATTENTION_BUFFER_BYTES,
    REFERENCE_TOKENS_MAX,
    chunk_attention,
    largest_score_bytes,
    max_attention_tokens,
    query_blocks_for,
    recorded_query_blocks,
    size_classes,
)
from builder.convert.tiny import TRANSFORMER_CONFIG
from builder.repo import manifest as repo

GIB = 1024**3


def session(model: onnx.ModelProto | Path, *, profile_dir: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the CI machine has 2 shared cores
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_dir / "profile")
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def largest_node_output(sess: ort.InferenceSession, feed: dict[str, np.ndarray]) -> tuple[int, str]:
    """(bytes, node) of the largest output any node produced in one run, from onnxruntime's profile."""
    sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    sizes = [
        (int(e["args"]["output_size"]), e["name"])
        for e in events
        if e.get("cat") == "Node" and "output_size" in e.get("args", {})
    ]
    return max(sizes)


@pytest.fixture(scope="module")
def unsplit_graphs(tiny_models: dict[str, Path]) -> dict[str, onnx.ModelProto]:
    """The tiny transformer and VAE exported with one query block (the plain MatMul-Softmax-MatMul)."""
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel

    from builder.convert.export_transformer import export_transformer
    from builder.convert.export_vae import export_vae

    src = tiny_models["diffusers"]
    transformer = Flux2Transformer2DModel.from_pretrained(src / "transformer", dtype=torch.float32)
    vae = AutoencoderKLFlux2.from_pretrained(src / "vae", dtype=torch.float32)
    return {
        "transformer": export_transformer(transformer, query_blocks=1),
        "vae_decoder": export_vae(vae, query_blocks=1),
    }


def transformer_feed(h: int, w: int, txt: int = 512) -> dict[str, np.ndarray]:
    generator = torch.Generator().manual_seed(h * 100 + w)
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(txt))
    return {
        "hidden_states": torch.randn(1, h * w, 128, generator=generator).numpy(),
        "encoder_hidden_states": torch.randn(1, txt, 96, generator=generator).numpy(),
        "timestep": np.array([0.75], dtype=np.float32),
        "img_ids": img_ids.numpy(),
        "txt_ids": txt_ids.numpy(),
    }


def vae_feed(h: int, w: int) -> dict[str, np.ndarray]:
    return {"latents": torch.randn(1, 128, h, w, generator=torch.Generator().manual_seed(h * 100 + w)).numpy()}


def test_block_count_bounds_the_score_buffer_at_2048() -> None:
    # klein-4B: 24 heads over 128^2 + 512 tokens; its VAE: one head over 256^2 tokens.
    for heads, component in ((24, "transformer"), (1, "vae_decoder"), (2, "transformer")):
        tokens = max_attention_tokens(component)
        blocks = query_blocks_for(heads=heads, tokens=tokens)
        assert largest_score_bytes(heads=heads, tokens=tokens, query_blocks=blocks) <= MAX_ATTENTION_BUFFER_BYTES
        # ... and it is the smallest such count.
        assert (
            blocks == 1
            or largest_score_bytes(heads=heads, tokens=tokens, query_blocks=blocks - 1) > MAX_ATTENTION_BUFFER_BYTES
        )


def test_manifest_and_graphs_record_the_blocks(tiny_models: dict[str, Path]) -> None:
    heads = TRANSFORMER_CONFIG["num_attention_heads"]
    expected = {
        "text_encoder": 1,
        "transformer": query_blocks_for(heads=heads, tokens=max_attention_tokens("transformer")),
        "vae_decoder": query_blocks_for(heads=1, tokens=max_attention_tokens("vae_decoder")),
        "vae_encoder": query_blocks_for(heads=1, tokens=max_attention_tokens("vae_encoder")),
    }
    assert expected["transformer"] > 1 and expected["vae_decoder"] > 1 and expected["vae_encoder"] > 1
    for name in ("q4", "fp32"):
        manifest = repo.load(tiny_models[name])
        for graph in manifest.graphs:
            model = onnx.load(str(tiny_models[name] / graph.path), load_external_data=False)
            assert recorded_query_blocks(model) == graph.attention_query_blocks
            softmaxes = sum(node.op_type == "Softmax" for node in model.graph.node)
            sites = {"text_encoder": 27, "transformer": 2, "vae_decoder": 1, "vae_encoder": 1}[graph.component]
            assert softmaxes == sites * graph.attention_query_blocks
        # The main graph of each component (the one a client reading only graph() gets) runs every size.
        for component, blocks in expected.items():
            for variant in manifest.variants(component):
                assert manifest.graph(component, variant).attention_query_blocks == blocks


def test_transformer_has_one_graph_per_size_class_on_shared_weights(tiny_models: dict[str, Path]) -> None:
    heads = TRANSFORMER_CONFIG["num_attention_heads"]
    manifest = repo.load(tiny_models["q4"])
    graphs = [g for g in manifest.graphs if g.component == "transformer"]
    assert [(g.attention_query_blocks, g.attention_max_tokens) for g in graphs] == size_classes(
        "transformer", heads=heads
    )
    assert len({tuple(g.external_data) for g in graphs}) == 1  # the weights are stored once
    assert len({g.path for g in graphs}) == len(graphs)
    assert {g.attention_heads for g in graphs} == {heads}
    for graph in graphs:
        limit = graph.attention_max_tokens
        assert limit is not None
        assert (
            largest_score_bytes(heads=heads, tokens=limit, query_blocks=graph.attention_query_blocks)
            <= MAX_ATTENTION_BUFFER_BYTES
        )
        assert (
            largest_score_bytes(heads=heads, tokens=limit + 1, query_blocks=graph.attention_query_blocks)
            > MAX_ATTENTION_BUFFER_BYTES
        )
    # klein-4B: unsplit up to 512^2, 4 blocks up to 1024^2, 17 up to 1536^2, 52 for 2048^2, 79 for a 1024^2 edit
    # with four 1024^2 references.
    classes = size_classes("transformer", heads=24)
    assert [blocks for blocks, _ in classes] == [79, 52, 17, 4, 1]
    assert classes[2][1] >= max_attention_tokens("transformer", side=1024)
    assert classes[0][1] >= max_attention_tokens("transformer") == 64 * 64 * 5 + 512


def test_the_longest_attention_covers_the_editing_limits() -> None:
    """builder.convert cannot import the pipeline's limits; this holds its copy of them equal."""
    from builder.pipeline import limits

    per_reference = limits.input_image_tokens(1024, 1024)
    assert (
        REFERENCE_TOKENS_MAX
        == limits.REFERENCES_MAX * per_reference
        == limits.REFERENCES_MAX * limits.IMAGE_AREA_MAX // 256
    )
    longest_edit = limits.input_image_tokens(1024, 1024) + REFERENCE_TOKENS_MAX + 512
    assert max_attention_tokens("transformer") == max(
        longest_edit, max_attention_tokens("transformer", side=limits.SIZE_MAX)
    )


def test_split_fp16_attention_with_casts_equals_unsplit(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The q4f16 graph runs Softmax in fp32 between Casts; splitting it keeps the Casts in every block."""
    from builder.convert.convert import convert

    convert(tiny_models["diffusers"], tmp_path / "q4f16", precision="q4f16", log=lambda _m: None)
    manifest = repo.load(tmp_path / "q4f16")
    outputs = []
    for graph in (g for g in manifest.graphs if g.component == "transformer" and g.variant == "q4f16"):
        model = onnx.load(str(tmp_path / "q4f16" / graph.path), load_external_data=False)
        casts = sum(node.op_type == "Cast" and "query_blocks/block_" in node.name for node in model.graph.node)
        assert casts == (2 * 2 * graph.attention_query_blocks if graph.attention_query_blocks > 1 else 0)
        outputs.append(session(tmp_path / "q4f16" / graph.path).run(None, transformer_feed(6, 5))[0])
    assert len(outputs) == len(size_classes("transformer", heads=TRANSFORMER_CONFIG["num_attention_heads"])) > 1
    for split in outputs[:-1]:  # the last one is unsplit
        np.testing.assert_allclose(split, outputs[-1], rtol=0, atol=1e-3 * np.abs(outputs[-1]).max())


@pytest.mark.parametrize(("h", "w"), [(4, 4), (3, 5), (32, 32)])
def test_split_transformer_equals_unsplit(
    tiny_models: dict[str, Path], unsplit_graphs: dict[str, Any], h: int, w: int
) -> None:
    feed = transformer_feed(h, w)
    split = session(tiny_models["fp32"] / repo.graph_path("transformer", "fp32")).run(None, feed)[0]
    plain = session(unsplit_graphs["transformer"]).run(None, feed)[0]
    np.testing.assert_allclose(split, plain, rtol=0, atol=1e-5 * np.abs(plain).max())


@pytest.mark.parametrize(("h", "w"), [(1, 1), (3, 5), (16, 24)])  # (1, 1): 4 tokens, fewer than the 32 blocks
def test_split_vae_equals_unsplit(tiny_models: dict[str, Path], unsplit_graphs: dict[str, Any], h: int, w: int) -> None:
    feed = vae_feed(h, w)
    split = session(tiny_models["fp32"] / repo.graph_path("vae_decoder", "fp32")).run(None, feed)[0]
    plain = session(unsplit_graphs["vae_decoder"]).run(None, feed)[0]
    np.testing.assert_allclose(split, plain, rtol=0, atol=1e-5)


def test_vae_at_1024_keeps_every_buffer_small(
    tiny_models: dict[str, Path], unsplit_graphs: dict[str, Any], tmp_path: Path
) -> None:
    """At 1024^2 px the unsplit VAE attention needs a 1 GiB score buffer (16384^2 fp32, SwiftShader's whole
    maxBufferSize); split, a score block is ceil(16384/32) x 16384 x 4 B = 32 MiB."""
    feed = vae_feed(64, 64)
    blocks = repo.load(tiny_models["fp32"]).graph("vae_decoder", "fp32").attention_query_blocks
    split_bytes, split_node = largest_node_output(
        session(tiny_models["fp32"] / repo.graph_path("vae_decoder", "fp32"), profile_dir=tmp_path), feed
    )
    assert largest_score_bytes(heads=1, tokens=16384, query_blocks=blocks) == 32 * 1024 * 1024
    # The largest output is now a decoder feature map (64 MiB, measured), not an attention score block.
    assert split_bytes <= 64 * 1024 * 1024, (split_bytes, split_node)
    plain = unsplit_graphs["vae_decoder"]
    plain_bytes, plain_node = largest_node_output(session(plain, profile_dir=tmp_path), feed)
    assert plain_bytes == 16384 * 16384 * 4, (plain_bytes, plain_node)


def test_chunk_attention_rejects_bad_counts_and_leaves_masked_sites() -> None:
    from onnx import TensorProto, helper

    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, "s", 4])
    k = helper.make_tensor_value_info("kt", TensorProto.FLOAT, [1, 2, 4, "s"])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 2, "s", 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, "s", "s"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, "s", 4])
    nodes = [
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Add", ["s0", "mask"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["out"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "masked", [q, k, v, mask], [out]))
    with pytest.raises(ValueError, match="query_blocks=0"):
        chunk_attention(model, query_blocks=0)
    assert chunk_attention(model, query_blocks=4) == 0  # a mask's query axis may broadcast: not split
