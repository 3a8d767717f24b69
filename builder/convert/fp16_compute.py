"""Graphs that compute in fp16: the q4f16 fast path (to_q4f16) and the fp16 VAE (to_fp16), rewritten from the
q4 and fp32 graphs, with the ops and scopes that fp16 would break kept in fp32 (compute_in_fp16).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.convert.fp16_storage import restore_fp32
from builder.errors import ConversionError

# What of the fp16 VAE stays fp32. The attention (scores, softmax and the weighted sum, which adds up one value
# per latent pixel): in fp16 its error grows with the image, and an all-fp16 VAE fails against the CPU at
# 1024x1024 where this one matches it as at 256x256 (figures in docs/performance.md). The GroupNorm statistics
# (InstanceNormalization): a variance of activations past |x| = 256 overflows fp16, the reason the q4f16 graphs
# keep their norms in fp32 too.
VAE_FP32_OPS = ("InstanceNormalization", "Softmax")
VAE_FP32_SCOPES = ("/query_blocks/",)


def to_fp16(
    model: onnx.ModelProto, *, fp32_ops: tuple[str, ...] = VAE_FP32_OPS, fp32_scopes: tuple[str, ...] = VAE_FP32_SCOPES
) -> onnx.ModelProto:
    """fp16 weights and compute with fp32 graph inputs/outputs, except `fp32_ops` and the nodes whose name contains
    one of `fp32_scopes` (inputs cast up, outputs down).

    Rewrites `model` in place (compute_in_fp16; weights it stores in fp16 for fp32 compute are read back first)
    and returns it.
    """
    restore_fp32(model)
    unnamed = [node.op_type for node in model.graph.node if not node.name]
    if unnamed:
        raise ConversionError(f"{len(unnamed)} nodes have no name ({unnamed[:3]}...); the fp16 rewrite keys on names.")
    compute_in_fp16(
        model,
        keep_fp32={
            node.name
            for node in model.graph.node
            if node.op_type in fp32_ops or any(s in node.name for s in fp32_scopes)
        },
    )
    return model


# Ops that stay fp32 in a q4f16 graph (inputs cast up, outputs cast down): norms (x^2 overflows fp16 once
# |x| > 256; SimplifiedLayerNormalization is the RMSNorm), softmax, RoPE (angles of positions up to 4096 rad
# need fp32, and the rotation runs on the fp32 norm output it follows), the 4-bit token embedding (its rows
# start the fp32 residual stream), plus onnxruntime's own list of ops without fp16 kernels.
Q4F16_FP32_OPS = (
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RotaryEmbedding",
    "Softmax",
    "Pow",
    "ReduceMean",
    "Sqrt",
    "Reciprocal",
    "Sin",
    "Cos",
    "GatherBlockQuantized",
)

# Node-name scopes that stay fp32 in a q4f16 graph: every normalisation and what its module computes around
# it, the RoPE tables, the time embedding and the AdaLN modulation (tiny, shared by every block,
# precision-sensitive), the output norm.
Q4F16_FP32_SCOPES = ("norm", "/pos_embed", "/time_guidance_embed/", "_modulation", "/rotary_emb/")


def to_q4f16(
    q4_model: onnx.ModelProto,
    *,
    fp32_scopes: tuple[str, ...] = Q4F16_FP32_SCOPES,
    fp32_ops: tuple[str, ...] = Q4F16_FP32_OPS,
) -> onnx.ModelProto:
    """The fast path: a q4 graph with fp16 activations and fp16 MatMulNBits scales, fp32 graph I/O.

    Takes a q4 graph (consumed: its fp32 scales become fp16 in place; weights it stores in fp16 for fp32
    compute (store_fp16) are read back as fp32 first) and returns the rewritten graph:
    every MatMulNBits runs with accuracy_level 0 on fp16 inputs (the kernel the WebGPU EP runs fastest
    with shader-f16, several times its throughput on fp32 activations; see docs/performance.md), everything else
    in fp16 except `fp32_ops` and the nodes whose name contains one of `fp32_scopes`. The attention keeps the exporter's
    q * d^-1/4, k * d^-1/4 scaling before QK^T (see scale_query_before_scores), so the fp16 scores cannot
    overflow before the fp32 Softmax.
    """
    restore_fp32(q4_model)
    set_accuracy_level(q4_model, 0)
    scale_query_before_scores(q4_model)
    keep_fp32 = {
        n.name for n in q4_model.graph.node if n.op_type in fp32_ops or any(scope in n.name for scope in fp32_scopes)
    }
    keep_fp32 |= residual_adds(q4_model.graph)
    compute_in_fp16(q4_model, keep_fp32=keep_fp32)
    return q4_model


def set_accuracy_level(model: onnx.ModelProto, level: int) -> None:
    """Every MatMulNBits of `model` at accuracy_level `level`, in place. The packed weights are the same at
    every level: 0 computes in the input's type, 4 quantises the activations to int8 per block."""
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            node.ClearField("attribute")
            node.attribute.extend([*kept, helper.make_attribute("accuracy_level", level)])


def residual_adds(graph: onnx.GraphProto) -> set[str]:
    """Names of the Adds of two activations: the residual stream (`x + gate * branch`) and its kin.

    Real FLUX and Qwen3 checkpoints carry "massive activations" in the residual stream, far past what
    random test weights show and past fp16's 65504: the stream is accumulated in fp32 (the branches
    stay fp16 and are cast up once per block), so the fast path cannot saturate to inf/NaN there.
    """
    constants = {t.name for t in graph.initializer}
    constants |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    return {
        node.name for node in graph.node if node.op_type == "Add" and all(name not in constants for name in node.input)
    }


# Ops whose output has the type of their first input and that only move or select values: they run in
# whichever float type their data arrives in (no Cast is inserted before them). Shape reads no values at
# all (its int64 output is typed by _output_type), so it never needs a Cast either.
_PASS_THROUGH = {
    "Reshape",
    "Transpose",
    "Slice",
    "Gather",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Expand",
    "Concat",
    "Shape",
}
_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16}
# Inputs that are parameters rather than data, float32 whatever the data's type (ONNX types them so).
_FP32_PARAMETER_INPUTS = {"Resize": (1, 2)}  # roi, scales


def compute_in_fp16(model: onnx.ModelProto, *, keep_fp32: set[str]) -> None:
    """Rewrite an fp32 graph in place so that float math runs in fp16, except the nodes named in `keep_fp32`.

    One forward pass in topological order tracks the float type of every tensor. An fp16 node gets fp16
    inputs (float initializers used only by fp16 nodes are converted in place, clipped to the fp16 range;
    any other fp32 value gets one shared Cast); an fp32 node gets fp32 inputs (one shared Cast up per fp16
    tensor); data-movement ops follow their input. Graph inputs and outputs stay fp32. A small, explicit
    replacement for onnxruntime's float16 converter, which duplicates Casts and mistypes blocked nodes.
    """
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    dtype: dict[str, int] = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    dtype.update({t.name: t.data_type for t in graph.initializer})
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)

    def runs_fp16(node: onnx.NodeProto) -> bool:
        return node.name not in keep_fp32

    casts: dict[tuple[str, int], str] = {}
    new_nodes: list[onnx.NodeProto] = []

    def as_type(name: str, want: int) -> str:
        if not name or dtype.get(name) not in _FLOATS or dtype[name] == want:
            return name
        tensor = inits.get(name)
        if tensor is not None and want == TensorProto.FLOAT16 and all(runs_fp16(u) for u in users.get(name, [])):
            values = numpy_helper.to_array(tensor)
            tensor.CopyFrom(numpy_helper.from_array(np.clip(values, -65504, 65504).astype(np.float16), name))
            dtype[name] = TensorProto.FLOAT16
            return name
        key = (name, want)
        if key not in casts:
            casts[key] = f"{name}_as_{'fp16' if want == TensorProto.FLOAT16 else 'fp32'}"
            new_nodes.append(helper.make_node("Cast", [name], [casts[key]], name=casts[key], to=want))
            dtype[casts[key]] = want
        return casts[key]

    for node in graph.node:
        floats = [dtype.get(i) for i in node.input if i and dtype.get(i) in _FLOATS]
        if node.op_type in _PASS_THROUGH:
            # Follow the data: fp16 if any float input is fp16 (Concat must agree across its inputs).
            want = TensorProto.FLOAT16 if TensorProto.FLOAT16 in floats else TensorProto.FLOAT
        else:
            want = TensorProto.FLOAT16 if runs_fp16(node) else TensorProto.FLOAT
        if node.op_type == "Cast":
            to = next(a for a in node.attribute if a.name == "to")
            if to.i in _FLOATS and node.name not in keep_fp32:
                to.i = TensorProto.FLOAT16
            elif to.i == TensorProto.FLOAT16:
                to.i = TensorProto.FLOAT  # a blocked Cast to fp16 (the token embedding's) stays fp32
        elif node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and value.data_type == TensorProto.DOUBLE:
                raise ConversionError(f"{node.name} is a float64 constant; WebGPU has no fp64.")
        else:
            fixed = _FP32_PARAMETER_INPUTS.get(node.op_type, ())
            for index, name in enumerate(node.input):
                node.input[index] = as_type(name, TensorProto.FLOAT if index in fixed else want)
        new_nodes.append(node)
        for out in node.output:
            dtype[out] = _output_type(node, dtype)

    # Graph outputs stay fp32: rename an fp16 producer's output and Cast it back under the output's name.
    for output in graph.output:
        if dtype.get(output.name) == TensorProto.FLOAT16:
            inner = output.name + "_fp16"
            for node in new_nodes:
                for index, name in enumerate(node.output):
                    if name == output.name:
                        node.output[index] = inner
                for index, name in enumerate(node.input):
                    if name == output.name:
                        node.input[index] = inner
            new_nodes.append(
                helper.make_node("Cast", [inner], [output.name], name=inner + "_to_fp32", to=TensorProto.FLOAT)
            )
    graph.ClearField("node")
    graph.node.extend(new_nodes)
    del graph.value_info[:]
    sort_topologically(graph)


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor of a rewritten graph, by the same forward pass compute_in_fp16 makes
    (onnx shape inference cannot type the outputs of onnxruntime's ops, nor anything after them)."""
    dtype: dict[str, int] = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    dtype.update({t.name: t.data_type for t in model.graph.initializer})
    for node in model.graph.node:
        for out in node.output:
            dtype[out] = _output_type(node, dtype)
    return dtype


def _output_type(node: onnx.NodeProto, dtype: dict[str, int]) -> int:
    """Element type of `node`'s outputs after the rewrite (the ops the exporters emit)."""
    op = node.op_type
    if op == "Cast":
        return int(next(a.i for a in node.attribute if a.name == "to"))
    if op == "Constant" or op == "ConstantOfShape":
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        return value.data_type if value is not None else TensorProto.FLOAT
    if op == "Shape":
        return TensorProto.INT64
    if op in ("Equal", "LessOrEqual", "Less", "Greater", "And", "Not", "Or"):
        return TensorProto.BOOL
    if op == "Where":
        return dtype.get(node.input[1], TensorProto.FLOAT)
    if op == "GatherBlockQuantized":  # values of its scales' type
        return dtype.get(node.input[2], TensorProto.FLOAT)
    first = dtype.get(node.input[0], TensorProto.FLOAT) if node.input else TensorProto.FLOAT
    return first


def scale_query_before_scores(model: onnx.ModelProto) -> int:
    """Move a constant scale applied to attention scores, `Mul(MatMul(q, k^T), s)`, onto q: `MatMul(Mul(q, s), k^T)`.

    Mathematically the same; in fp16 it keeps q.k^T within range (transformers' eager attention, the
    text encoder's, scales after the MatMul). Returns the number of sites moved.
    """
    producers = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    # Only a scalar scale commutes with the MatMul (a per-channel one would not).
    scalars = {t.name for t in model.graph.initializer if int(np.prod(t.dims)) == 1}
    for node in model.graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None) if node.op_type == "Constant" else None
        if value is not None and int(np.prod(value.dims)) == 1:
            scalars.add(node.output[0])
    constants = {t.name for t in model.graph.initializer} | {
        n.output[0] for n in model.graph.node if n.op_type == "Constant"
    }
    moved = 0
    for node in model.graph.node:
        if node.op_type != "Mul" or node.input[1] not in scalars:
            continue
        scores = producers.get(node.input[0])
        if scores is None or scores.op_type != "MatMul" or consumers.get(scores.output[0]) != 1:
            continue
        if scores.input[1] in constants:  # a weight MatMul, not q.k^T
            continue
        # Mul(MatMul(q, kT), s) -> MatMul(Mul(q, s), kT): swap the two nodes' roles, names unchanged.
        query, keys_t, scale, out = scores.input[0], scores.input[1], node.input[1], node.output[0]
        scaled_query = node.name + "_query"
        node.ClearField("input")
        node.input.extend([query, scale])
        node.ClearField("output")
        node.output.append(scaled_query)
        scores.ClearField("input")
        scores.input.extend([scaled_query, keys_t])
        scores.ClearField("output")
        scores.output.append(out)
        moved += 1
    if moved:
        sort_topologically(model.graph)
    return moved


def sort_topologically(graph: onnx.GraphProto) -> None:
    """Reorder graph.node so every node comes after the producers of its inputs (stable otherwise)."""
    available = {value.name for value in graph.input} | {init.name for init in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        remaining = []
        for node in pending:
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                remaining.append(node)
        if len(remaining) == len(pending):
            raise ConversionError(f"The graph has a cycle or a dangling input at node {remaining[0].name}.")
        pending = remaining
    graph.ClearField("node")
    graph.node.extend(ordered)
