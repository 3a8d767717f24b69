"""models/graph_weights.js, the app's ONNX rewrite that streams quantized weights to the GPU: run under node on a
graph saved by onnx, then checked with onnx and onnxruntime (the rewritten graph, fed the lifted weights, computes
what the original computes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder import REPO_ROOT
from builder.node import find_node

MODULE = (REPO_ROOT / "web_src" / "src" / "models" / "graph_weights.js").as_uri()
K, N, BLOCK = 64, 48, 32
# Reads the graph and its data file, plans and rewrites as the app does, writes the graph and the plan.
SCRIPT = f"""
import fs from 'node:fs';
import {{ planWeights, rewriteGraph }} from '{MODULE}';
const [graphPath, dataDir, forceCpu, outGraph, outPlan] = process.argv.slice(1);
const graph = new Uint8Array(fs.readFileSync(graphPath));
const plan = planWeights(graph, {{ forceCpuNodeNames: JSON.parse(forceCpu) }});
const read = (ref) => {{
    const file = fs.readFileSync(dataDir + '/' + ref.location);
    return new Uint8Array(file.subarray(ref.offset, ref.length === null ? undefined : ref.offset + ref.length));
}};
const inline = new Map(plan.inlined.map((ref) => [ref.name, read(ref)]));
fs.writeFileSync(outGraph, rewriteGraph(graph, plan, inline));
fs.writeFileSync(outPlan, JSON.stringify(plan));
"""


def quantized(rng: np.random.Generator, name: str) -> list[TensorProto]:
    """MatMulNBits weights [N, K/BLOCK, BLOCK/2] uint8 and their float scales."""
    packed = rng.integers(0, 256, size=(N, K // BLOCK, BLOCK // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, size=(N * (K // BLOCK),)).astype(np.float32)
    return [numpy_helper.from_array(packed, f"{name}_B"), numpy_helper.from_array(scales, f"{name}_scales")]


def matmul_nbits(inputs: list[str], outputs: list[str], name: str) -> onnx.NodeProto:
    return helper.make_node(
        "MatMulNBits", inputs, outputs, name=name, domain="com.microsoft", K=K, N=N, bits=4, block_size=BLOCK
    )


def build(folder: Path) -> Path:
    """y = MatMulNBits(x, w1) + bias -> MatMulNBits(., w2) * shared, where `shared` also feeds MatMulNBits as scales
    of a third one; plus an embedding Gather. All weights external, in one data file."""
    rng = np.random.default_rng(0)
    w1, w2 = quantized(rng, "w1"), quantized(rng, "w2")
    shared = numpy_helper.from_array(rng.uniform(0.01, 0.1, size=(N * (K // BLOCK),)).astype(np.float32), "shared")
    w3 = numpy_helper.from_array(rng.integers(0, 256, size=(N, K // BLOCK, BLOCK // 2), dtype=np.uint8), "w3_B")
    bias = numpy_helper.from_array(rng.normal(size=(N,)).astype(np.float32), "bias")
    table = numpy_helper.from_array(rng.normal(size=(10, K)).astype(np.float32), "table")
    proj = numpy_helper.from_array(rng.normal(size=(N, K)).astype(np.float32), "proj")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["x"], name="embed"),
        matmul_nbits(["x", "w1_B", "w1_scales"], ["h1"], "mm1"),
        helper.make_node("Add", ["h1", "bias"], ["h2"], name="add"),
        helper.make_node("MatMul", ["h2", "proj"], ["h3"], name="mm_proj"),
        matmul_nbits(["h3", "w2_B", "w2_scales"], ["h4"], "mm2"),
        matmul_nbits(["h3", "w3_B", "shared"], ["h5"], "mm3"),
        helper.make_node("Slice", ["shared", "zero", "n"], ["shared_n"], name="take_n"),
        helper.make_node("Mul", ["h4", "shared_n"], ["h6"], name="scale"),
        helper.make_node("Add", ["h6", "h5"], ["y"], name="sum"),
    ]
    small = [
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([N], dtype=np.int64), "n"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, N])],
        [*w1, *w2, shared, w3, bias, table, proj, *small],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    path = folder / "g.onnx"
    onnx.save(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="g.onnx_data", size_threshold=64
    )
    return path


def rewrite(node: str, graph: Path, force_cpu: list[str], out: Path) -> dict[str, list[dict[str, object]]]:
    plan = out.with_suffix(".json")
    result = subprocess.run(
        [
            node,
            "--input-type=module",
            "-e",
            SCRIPT,
            str(graph),
            str(graph.parent),
            json.dumps(force_cpu),
            str(out),
            str(plan),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, list[dict[str, object]]] = json.loads(plan.read_text())
    return parsed


@pytest.fixture(scope="module")
def node() -> str:
    return str(find_node().node)


@pytest.mark.parametrize(
    ("force_cpu", "lifted"),
    [
        ([], {"w1_B", "w1_scales", "w2_B", "w2_scales", "w3_B"}),
        # A node kept on the CPU keeps its weights in the graph.
        (["mm2"], {"w1_B", "w1_scales", "w3_B"}),
    ],
)
def test_lifted_weights_become_inputs_and_the_graph_computes_the_same(
    tmp_path: Path, node: str, force_cpu: list[str], lifted: set[str]
) -> None:
    original_path = build(tmp_path)
    original = onnx.load(original_path)  # with its external data
    weights = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    out = tmp_path / "rewritten.onnx"
    plan = rewrite(node, original_path, force_cpu, out)

    # Lifted: the external initializers read only by MatMulNBits nodes on the GPU ("shared" also feeds a Slice).
    assert {w["name"] for w in plan["lifted"]} == lifted
    for weight in plan["lifted"]:
        assert weight["dims"] == list(weights[str(weight["name"])].shape)
        expected_type = "uint8" if str(weight["name"]).endswith("_B") else "float32"
        assert weight["gpuType"] == expected_type

    rewritten = onnx.load(out)
    onnx.checker.check_model(rewritten)
    # Nothing external is left: the rest is inlined with the stored bytes.
    assert not any(t.data_location == TensorProto.EXTERNAL for t in rewritten.graph.initializer)
    kept = {t.name: numpy_helper.to_array(t) for t in rewritten.graph.initializer}
    assert set(kept) == set(weights) - lifted
    for name, array in kept.items():
        np.testing.assert_array_equal(array, weights[name])
    inputs = {i.name: i.type.tensor_type for i in rewritten.graph.input}
    assert set(inputs) == {"ids"} | lifted
    for name in lifted:
        assert inputs[name].elem_type == helper.np_dtype_to_tensor_dtype(weights[name].dtype)
        assert [d.dim_value for d in inputs[name].shape.dim] == list(weights[name].shape)
    # Every other part of the model is as it was.
    assert [n.SerializeToString() for n in rewritten.graph.node] == [n.SerializeToString() for n in original.graph.node]
    assert rewritten.ir_version == original.ir_version and rewritten.opset_import == original.opset_import

    ids = np.array([3, 0, 9], dtype=np.int64)
    expected = ort.InferenceSession(str(original_path), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    session = ort.InferenceSession(out.read_bytes(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"ids": ids, **{name: weights[name] for name in lifted}})[0]
    np.testing.assert_array_equal(got, expected)


def test_a_file_that_is_not_an_onnx_model_is_refused(tmp_path: Path, node: str) -> None:
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"\x0f\xff\xff")
    result = subprocess.run(
        [
            node,
            "--input-type=module",
            "-e",
            SCRIPT,
            str(bogus),
            str(tmp_path),
            "[]",
            str(tmp_path / "o"),
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "not an ONNX model" in result.stderr or "cut short" in result.stderr
