"""Flash attention (web_src/src/kernels/flash_attention.js): its cases, its float64 reference, and onnxruntime's
equivalent, the decomposed attention as the converter exports it (MatMul, scale, fp32 Softmax, MatMul), split
into query blocks as the app's graphs are (builder.convert.attention)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from builder.check.kernel_lab import shapes
from builder.check.kernel_lab.cases import Case, OrtGraph, Tensor, sample_rows, timing

NAME = "flash_attention"
# q spans [-4, 4): scores up to a few units after scaling, so the softmax has real peaks to track.
Q_SCALE = 4.0


def _shapes(shape_set: str) -> list[tuple[int, int, int]]:
    """(heads, tokens, head dim) of each case."""
    if shape_set == "real":
        return [(shapes.HEADS, tokens, shapes.HEAD_DIM) for tokens in shapes.ATTENTION_TOKENS.values()]
    # Short and odd: a partial last block of keys and of query rows; one case at another head size.
    return [(2, 77, shapes.HEAD_DIM), (2, 150, shapes.HEAD_DIM), (3, 40, 64)]


def query_blocks(heads: int, tokens: int) -> int:
    from builder.convert.attention import query_blocks_for

    return query_blocks_for(heads=heads, tokens=tokens)


def graph_path(case_id: str, dtype: str) -> str:
    """A graph per case (a few hundred bytes), so that making the cases needs no onnx: the lab's build writes them."""
    return f"graphs/{case_id.replace('/', '-')}-{dtype}.onnx"


def cases(shape_set: str, *, seed: int = 1) -> list[Case]:
    out = []
    for index, (heads, tokens, dim) in enumerate(_shapes(shape_set)):
        dims = (heads, tokens, dim)
        case_id = f"{NAME}/h{heads}xs{tokens}xd{dim}"
        out.append(
            Case(
                id=case_id,
                kernel=NAME,
                shape={"heads": heads, "tokens": tokens, "headDim": dim},
                inputs=(
                    Tensor("q", dims, seed=seed + 3 * index, scale=Q_SCALE),
                    Tensor("k", dims, seed=seed + 3 * index + 1),
                    Tensor("v", dims, seed=seed + 3 * index + 2),
                ),
                output=Tensor("out", dims),
                rows=sample_rows(heads * tokens, limit=48 if shape_set == "real" else 1024, seed=seed + index),
                timing=timing(shape_set),
                ort=OrtGraph(
                    graphs={dtype: graph_path(case_id, dtype) for dtype in ("f16", "f32")},
                    feeds=dict.fromkeys(("q", "k", "v"), (1, *dims)),
                    output="out",
                    runs=3 if shape_set == "real" else 1,
                ),
                flops=4.0 * heads * tokens * tokens * dim,
            )
        )
    return out


def reference(case: Case, dtype: str) -> np.ndarray:
    """The case's output rows in float64, from the inputs as uploaded in `dtype`."""
    tokens, dim = case.shape["tokens"], case.shape["headDim"]
    scale = float(case.expect.get("scale", 1 / math.sqrt(dim)))
    q, k, v = (case.input(name).values(dtype) for name in ("q", "k", "v"))
    rows = np.asarray(case.rows)
    out = np.empty((len(rows), dim))
    for head in np.unique(rows // tokens):
        picked = rows // tokens == head
        scores = q[head, rows[picked] % tokens] @ k[head].T * scale
        scores -= scores.max(axis=1, keepdims=True)
        weights = np.exp(scores)
        out[picked] = (weights / weights.sum(axis=1, keepdims=True)) @ v[head]
    return out


def graphs(case: Case) -> dict[str, Any]:
    """{site path: onnx ModelProto} of the case's onnxruntime graphs."""
    heads, tokens, dim = case.shape["heads"], case.shape["tokens"], case.shape["headDim"]
    blocks = query_blocks(heads, tokens)
    return {graph_path(case.id, dtype): decomposed_graph(dtype, dim, blocks) for dtype in ("f16", "f32")}


def decomposed_graph(dtype: str, head_dim: int, blocks: int) -> Any:
    """q, k, v [1, heads, tokens, head dim] -> out: MatMul(q, kᵀ) -> Mul(scale) -> [Cast fp32] -> Softmax ->
    [Cast fp16] -> MatMul(., v), the exported form (fp16 graphs run their Softmax in fp32), in `blocks` query
    blocks."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from builder.convert.attention import chunk_attention

    elem = TensorProto.FLOAT16 if dtype == "f16" else TensorProto.FLOAT
    np_type = np.float16 if dtype == "f16" else np.float32
    dims: list[str | int | None] = [1, "heads", "tokens", head_dim]
    scale = numpy_helper.from_array(np.array(1 / math.sqrt(head_dim), dtype=np_type), "scale")
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
    ]
    if dtype == "f16":
        nodes += [
            helper.make_node("Cast", ["scaled"], ["scaled32"], to=TensorProto.FLOAT),
            helper.make_node("Softmax", ["scaled32"], ["probs32"], axis=-1),
            helper.make_node("Cast", ["probs32"], ["probs"], to=TensorProto.FLOAT16),
        ]
    else:
        nodes.append(helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["probs", "v"], ["out"]))
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info(name, elem, dims) for name in ("q", "k", "v")],
        [helper.make_tensor_value_info("out", elem, dims)],
        initializer=[scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10  # onnxruntime-web 1.30 refuses newer IRs
    if blocks > 1:
        chunk_attention(model, query_blocks=blocks)
    onnx.checker.check_model(model)
    return model
