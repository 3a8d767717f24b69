"""What the transformer step on our kernels reads from a graph (web_src/src/models/step_graph.js) and the inputs it
computes on the CPU (web_src/src/step/step_tables.js), run under node on make-tiny's real transformer graphs and held
to the diffusers model they were exported from."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from builder import REPO_ROOT
from builder.convert.tiny import TRANSFORMER_CONFIG
from builder.node import find_node

SRC = REPO_ROOT / "web_src" / "src"
# Prints the StepGraph of each graph file given (its typed arrays as lists), or the refusal.
READ_SCRIPT = f"""
import fs from 'node:fs';
import {{ readStepGraph }} from '{(SRC / "models" / "step_graph.js").as_uri()}';
const out = {{}};
for (const path of process.argv.slice(1)) {{
    try {{
        const {{ config, linears, norms }} = readStepGraph(new Uint8Array(fs.readFileSync(path)));
        const plain = {{ ...config, timeFreqs: [...config.timeFreqs], ropeAxes: [...config.ropeAxes],
            ropeFreqs: [...config.ropeFreqs] }};
        const weights = Object.fromEntries([...linears].map(([path, ref]) => [path, {{ format: ref.format, n: ref.n,
            k: ref.k, tensors: [ref.packed, ref.scales, ref.matrix].filter(Boolean).map((t) => t.name) }}]));
        out[path] = {{ config: plain, linears: weights, norms: Object.fromEntries([...norms].map(([p, t]) => [p, t.name])) }};
    }} catch (err) {{
        out[path] = {{ refused: `${{err.name}}: ${{err.message}}` }};
    }}
}}
console.log(JSON.stringify(out));
"""
TABLES_SCRIPT = f"""
import {{ ropeTable, timestepEmbedding }} from '{(SRC / "step" / "step_tables.js").as_uri()}';
const [config, timestep, txt, img] = JSON.parse(process.argv[1]);
const c = {{ timeScale: config.timeScale, timeFreqs: Float32Array.from(config.timeFreqs),
    ropeAxes: Int32Array.from(config.ropeAxes), ropeFreqs: Float32Array.from(config.ropeFreqs) }};
const ids = (rows) => BigInt64Array.from(rows.flat().map(BigInt));
console.log(JSON.stringify({{ time: [...timestepEmbedding(timestep, c)], rope: [...ropeTable(ids(txt), ids(img), c)] }}));
"""


def node(script: str, *args: str) -> Any:
    result = subprocess.run(
        [str(find_node().node), "--input-type=module", "-e", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout)


def transformer_graph(repo: Path, variant: str) -> Path:
    return repo / "transformer" / f"transformer_{variant}.qb1.onnx"


@pytest.fixture(scope="module")
def read(tiny_models: dict[str, Path]) -> dict[str, Any]:
    paths = {
        "q4": transformer_graph(tiny_models["q4"], "q4"),
        "fp32": transformer_graph(tiny_models["fp32"], "fp32"),
        "text": next((tiny_models["q4"] / "text_encoder").glob("text_encoder_q4.onnx")),
    }
    out = node(READ_SCRIPT, *map(str, paths.values()))
    return {name: out[str(path)] for name, path in paths.items()}


def test_a_q4f16_transformer_is_refused_for_its_float16_constants(q4f16_repo: Path) -> None:
    # The q4f16 graph computes in float16 from its first op (the timestep's scale is a Constant cast to float16):
    # not the float32 graph the executor computes, so it runs on onnxruntime (models/step_session.js stepKernelsFor
    # reports the reason), while its q4 twin in the same repository runs on our kernels.
    out = node(READ_SCRIPT, *(str(transformer_graph(q4f16_repo, v)) for v in ("q4f16", "q4")))
    q4f16, q4 = (out[str(transformer_graph(q4f16_repo, v))] for v in ("q4f16", "q4"))
    assert q4f16["refused"] == "UnsupportedGraph: /m/Constant_2_output_0_as_fp16 is not a constant in the graph file."
    assert "refused" not in q4 and q4["config"]["doubleBlocks"] == 1, q4


def test_the_tiny_transformers_read_as_their_diffusers_config(read: dict[str, Any]) -> None:
    c = TRANSFORMER_CONFIG
    inner = c["num_attention_heads"] * c["attention_head_dim"]
    for variant in ("q4", "fp32"):
        config = read[variant]["config"]
        assert {k: config[k] for k in ("inner", "heads", "headDim", "mlp", "doubleBlocks", "singleBlocks")} == {
            "inner": inner,
            "heads": c["num_attention_heads"],
            "headDim": c["attention_head_dim"],
            "mlp": int(inner * c["mlp_ratio"]),
            "doubleBlocks": c["num_layers"],
            "singleBlocks": c["num_single_layers"],
        }
        assert config["inChannels"] == config["outChannels"] == c["in_channels"]
        assert config["jointDim"] == c["joint_attention_dim"]
        assert config["timeChannels"] == c["timestep_guidance_channels"] and config["timeScale"] == 1000
        assert config["eps"] == pytest.approx(c["eps"]) and config["normEps"] == pytest.approx(c["eps"])
        # RoPE: one frequency per rotated pair, theta^(-2j/dim) per axis, each pair on its axis.
        dims = c["axes_dims_rope"]
        freqs = np.concatenate([1 / c["rope_theta"] ** (np.arange(0, d, 2) / d) for d in dims]).astype(np.float32)
        assert config["ropeFreqs"] == freqs.tolist()
        assert config["ropeAxes"] == [axis for axis, d in enumerate(dims) for _ in range(d // 2)]
        # diffusers' get_timestep_embedding: exp(-ln(10000) k / half).
        half = c["timestep_guidance_channels"] // 2
        want = np.exp(-np.log(10000) * np.arange(half, dtype=np.float32) / half).astype(np.float32)
        assert np.allclose(config["timeFreqs"], want, rtol=1e-6)


def test_every_linear_and_norm_is_found_by_its_initializer_names(
    read: dict[str, Any], tiny_models: dict[str, Path]
) -> None:
    for variant, fmt in (("q4", "q4"), ("fp32", "f32")):
        graph = onnx.load(transformer_graph(tiny_models[variant], variant), load_external_data=False).graph
        initializers = {t.name for t in graph.initializer}
        weight_nodes = [n for n in graph.node if n.op_type in ("MatMulNBits", "MatMul") and n.input[1] in initializers]
        linears = read[variant]["linears"]
        assert len(linears) == len(weight_nodes) == 9 + 12 + 2
        assert {ref["format"] for ref in linears.values()} == {fmt}
        # The initializers each linear reads are exactly the node's weight inputs (a Cast's input for scales stored
        # in float16).
        producers = {out: n for n in graph.node for out in n.output}
        for n in weight_nodes:
            path = n.name.removeprefix("/m/").rsplit("/", 1)[0].replace("/", ".")
            inputs = [i if i in initializers else producers[i].input[0] for i in n.input[1 : 3 if fmt == "q4" else 2]]
            assert linears[path]["tensors"] == inputs, path
        assert linears["single_transformer_blocks.0.attn.to_qkv_mlp_proj"]["n"] == 3 * 32 + 2 * 96
        assert set(read[variant]["norms"].values()) == {f"m.{path}.weight" for path in read[variant]["norms"]}, read[
            variant
        ]["norms"]


def test_a_graph_of_another_kind_is_refused_with_the_reason(read: dict[str, Any]) -> None:
    assert read["text"]["refused"].startswith("UnsupportedGraph: no linear time_guidance_embed"), read["text"]


@pytest.mark.torch
def test_the_step_inputs_computed_on_the_cpu_are_diffusers(read: dict[str, Any]) -> None:
    import torch
    from diffusers.models.embeddings import get_timestep_embedding
    from diffusers.models.transformers.transformer_flux2 import Flux2PosEmbed

    c = TRANSFORMER_CONFIG
    config = read["q4"]["config"]
    txt = [[0, 0, 0, t] for t in range(5)]
    img = [[0, y, x, 0] for y in range(3) for x in range(2)]
    timestep = 0.9580854177474976  # a model timestep of the 512^2 schedule (float32(t / 1000))
    out = node(TABLES_SCRIPT, json.dumps([config, timestep, txt, img]))
    t = torch.tensor([timestep], dtype=torch.float32) * 1000
    want = get_timestep_embedding(t, c["timestep_guidance_channels"], flip_sin_to_cos=True, downscale_freq_shift=0)
    assert np.allclose(out["time"], want[0].numpy(), atol=2e-6)
    # diffusers' table, text tokens first, repeats each pair's cos and sin: ours has one per pair.
    pos = Flux2PosEmbed(theta=c["rope_theta"], axes_dim=list(c["axes_dims_rope"]))
    cos, sin = pos(torch.tensor(txt + img))
    rope = np.array(out["rope"]).reshape(len(txt) + len(img), -1, 2)
    assert np.allclose(rope[..., 0], cos[:, ::2].numpy(), atol=2e-5)  # float32 angles against diffusers' float64
    assert np.allclose(rope[..., 1], sin[:, ::2].numpy(), atol=2e-5)
