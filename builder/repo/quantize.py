"""Precision rewrites of an exported fp32 ONNX graph: q4 MatMulNBits, a 4-bit or fp16 token embedding, weights
stored in fp16, an fp16 VAE.

The MatMul weights go through onnxruntime's own quantiser (MatMulNBitsQuantizer), so the packed q4 layout is
exactly what the MatMulNBits kernels of onnxruntime and onnxruntime-web expect; the token embedding's
GatherBlockQuantized blocks follow the same rule (symmetric, zero point 8, low nibble first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.errors import ConversionError
from builder.repo.onnx_export import Placement
from builder.repo.onnx_graph import INLINE_TENSOR_BYTES, MS_DOMAIN, add_initializer, tensor_bytes

Q4_BLOCK_SIZE = 32


def q4_placement(
    *,
    accuracy_level: int,
    block_size: int = Q4_BLOCK_SIZE,
    table_block_size: int = Q4_BLOCK_SIZE,
    bits: Callable[[str], int] = lambda _name: 4,
    exclude: Callable[[onnx.ModelProto], Iterable[str]] = lambda _m: (),
    fp16_tables: Callable[[onnx.ModelProto], Iterable[str]] = lambda _m: (),
    q4_tables: Callable[[onnx.ModelProto], Iterable[str]] = lambda _m: (),
) -> Placement:
    """Weights for a q4 graph, quantised one at a time as they are attached (builder.repo.onnx_export.attach_weights).

    Every MatMul whose weight is constant becomes com.microsoft.MatMulNBits (`bits(node name)` bits, 4 unless
    said otherwise; `block_size`, symmetric), except the nodes `exclude(graph)` names (they stay fp32). Tables
    named by `fp16_tables(graph)` are stored in fp16; the Gather reading a table named by `q4_tables(graph)`
    becomes a GatherBlockQuantized of 4-bit blocks of `table_block_size` (quantize_gather). `accuracy_level` 4
    lets the kernel quantise activations to int8 (convert's q4 graphs: DP4A kernels on WebGPU adapters without
    shader-f16); 0 keeps them fp32. Only the packed weights are ever kept: the float32 matrix is dropped as soon
    as its node is rewritten.
    """

    def bind(model: onnx.ModelProto) -> Callable[[str, np.ndarray], None]:
        excluded = set(exclude(model))
        halves = set(fp16_tables(model))
        blocked = set(q4_tables(model))
        readers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                readers.setdefault(name, []).append(node)
        if not any(entry.domain == MS_DOMAIN for entry in model.opset_import):
            model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))

        def place(name: str, array: np.ndarray) -> None:
            users = readers.get(name, [])
            node = users[0] if len(users) == 1 else None
            if (
                node is not None
                and node.op_type == "MatMul"
                and node.input[1] == name
                and node.name not in excluded
                and array.ndim == 2
                and array.dtype == np.float32
            ):
                quantize_matmul(
                    model.graph, node, array, accuracy_level=accuracy_level, block_size=block_size, bits=bits(node.name)
                )
            elif name in blocked:
                if node is None or node.op_type != "Gather" or node.input[0] != name:
                    raise ConversionError(f"{name} is not read by one Gather; it cannot be stored as 4-bit blocks.")
                quantize_gather(model.graph, node, array, block_size=table_block_size)
            elif name in halves:
                half = to_fp16_array(array, name)
                del array  # the caller handed over its reference: free the float32 copy before storing
                add_initializer(model.graph, half, name)
            else:
                add_initializer(model.graph, array, name)

        return place

    return bind


def quantize_matmul(
    graph: onnx.GraphProto,
    node: onnx.NodeProto,
    weight: np.ndarray,
    *,
    accuracy_level: int,
    block_size: int = Q4_BLOCK_SIZE,
    bits: int = 4,
) -> None:
    """Rewrite MatMul `node` (A @ weight) in place as MatMulNBits, with onnxruntime's own quantizer.

    The quantizer runs on a one-node model holding just this weight, so the packed layout is exactly what
    onnxruntime and onnxruntime-web expect, and memory stays at one matrix.
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # one INFO line per node otherwise
    single = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", [node.input[0], node.input[1]], list(node.output), name=node.name)],
            "one_matmul",
            [helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
            [numpy_helper.from_array(weight, node.input[1])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    quantizer = MatMulNBitsQuantizer(
        single,
        bits=bits,
        block_size=block_size,
        is_symmetric=True,
        accuracy_level=accuracy_level,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    result = quantizer.model.model.graph
    new_nodes = [n for n in result.node if n.op_type == "MatMulNBits"]
    if len(result.node) != 1 or len(new_nodes) != 1:
        raise ConversionError(f"q4: onnxruntime did not turn {node.name} into one MatMulNBits node.")
    node.CopyFrom(new_nodes[0])
    graph.initializer.extend(result.initializer)


def quantize_gather(graph: onnx.GraphProto, node: onnx.NodeProto, table: np.ndarray, *, block_size: int) -> None:
    """Rewrite `node` (Gather(table, ids) on axis 0) in place as com.microsoft.GatherBlockQuantized reading `table`
    as 4-bit blocks of `block_size` values along each row (quantize_blocks) with float32 scales.

    The packed data is uint8 with two values a byte and no zero-point input (the kernel's default, 8, for 4-bit
    uint8 data): the layout onnxruntime's WebGPU and CPU kernels both read. float32 scales keep the node free of
    fp16, so it runs on WebGPU adapters without shader-f16.
    """
    if table.ndim != 2 or table.dtype != np.float32:
        raise ConversionError(f"{node.name}: the embedding table is {table.dtype} {table.shape}, expected 2-D float32.")
    if any(a.name == "axis" and a.i != 0 for a in node.attribute):
        raise ConversionError(f"{node.name} gathers along another axis than the rows; it cannot be blocked.")
    packed, scales = quantize_blocks(table, block_size)
    name = node.input[0]
    add_initializer(graph, packed, f"{name}_Q4")
    add_initializer(graph, scales, f"{name}_scales")
    blocked = helper.make_node(
        "GatherBlockQuantized",
        [f"{name}_Q4", node.input[1], f"{name}_scales"],
        list(node.output),
        name=node.name.rsplit("/", 1)[0] + "/GatherBlockQuantized",
        domain=MS_DOMAIN,
        gather_axis=0,
        quantize_axis=1,
        block_size=block_size,
        bits=4,
    )
    node.CopyFrom(blocked)


# Rows quantised per pass: bounds the float temporaries of a 151,936-row table to a few tens of MB.
_ROWS_PER_PASS = 8192


def quantize_blocks(values: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 4-bit blocks of `block_size` consecutive values of each row of a 2-D float32 array (the last
    block of a row may be shorter), by onnxruntime's rule: scale = the block's value of largest magnitude / -8,
    q = clip(round(x / scale), -8, 7) + 8. Returns (packed uint8 [rows, cols / 2], two values a byte, low nibble
    first; float32 scales [rows, blocks])."""
    rows, cols = values.shape
    if block_size < 16 or block_size & (block_size - 1) or cols % 2:
        raise ConversionError(
            f"4-bit blocks of {block_size} values of rows of {cols}: the block must be a power of "
            "2 of at least 16, the row even."
        )
    blocks = -(-cols // block_size)
    packed = np.empty((rows, cols // 2), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    for start in range(0, rows, _ROWS_PER_PASS):
        chunk = values[start : start + _ROWS_PER_PASS]
        count = len(chunk)
        chunk = np.pad(chunk, ((0, 0), (0, blocks * block_size - cols))).reshape(count, blocks, block_size)
        low, high = chunk.min(axis=2, keepdims=True), chunk.max(axis=2, keepdims=True)
        scale = np.where(np.abs(high) > np.abs(low), high, low) / np.float32(-8)
        safe = np.where(scale == 0, np.float32(1), scale)
        q = (np.clip(np.round(chunk / safe), -8, 7) + 8).astype(np.uint8).reshape(count, -1)[:, :cols]
        packed[start : start + count] = q[:, 0::2] | (q[:, 1::2] << 4)
        scales[start : start + count] = scale.reshape(count, blocks)
    return packed, scales


def dequantize_blocks(packed: np.ndarray, scales: np.ndarray, block_size: int) -> np.ndarray:
    """The float32 values quantize_blocks' output stands for (what GatherBlockQuantized returns per row)."""
    cols = packed.shape[1] * 2
    q = np.empty((packed.shape[0], cols), dtype=np.float32)
    q[:, 0::2] = packed & 0x0F
    q[:, 1::2] = packed >> 4
    values: np.ndarray = (q - 8) * np.repeat(scales, block_size, axis=1)[:, :cols]
    return values


# Suffix of an initializer stored in fp16 for a graph that computes in fp32 (store_fp16).
STORED_FP16 = "_fp16"


def store_fp16(model: onnx.ModelProto, *, min_bytes: int = INLINE_TENSOR_BYTES) -> list[str]:
    """Store every float32 initializer of at least `min_bytes` in fp16, read through a Cast to float32: half the
    download for what an fp32-computing graph keeps in float (MatMulNBits and GatherBlockQuantized scales, norm
    weights, the fp32 VAE's weights), the same float32 compute.

    onnxruntime folds each Cast of a constant when it creates the session (graph optimisation level 1, before
    the graph is split between execution providers), so the kernels see float32 initializers and no fp16 op
    runs: adapters without shader-f16 run the graph as before. Values fp16 cannot hold stay float32. Returns the
    names stored in fp16 (restore_fp32 undoes it).
    """
    graph = model.graph
    names = []
    for index in range(len(graph.initializer)):
        tensor = graph.initializer[index]
        if tensor.data_type != TensorProto.FLOAT or tensor_bytes(tensor) < min_bytes:
            continue
        values = numpy_helper.to_array(tensor)
        if not np.isfinite(values).all() or np.abs(values).max(initial=0) > 65504:
            continue
        name = tensor.name
        graph.initializer[index].CopyFrom(numpy_helper.from_array(values.astype(np.float16), name + STORED_FP16))
        names.append(name)
    casts = [
        helper.make_node(
            "Cast", [name + STORED_FP16], [name], name=name + STORED_FP16 + "_to_fp32", to=TensorProto.FLOAT
        )
        for name in names
    ]
    nodes = list(graph.node)
    graph.ClearField("node")
    graph.node.extend([*casts, *nodes])
    return names


def restore_fp32(model: onnx.ModelProto) -> None:
    """Undo store_fp16 in place: each Cast of an fp16 initializer becomes the float32 initializer it folds into
    (exactly: every fp16 value is a float32 value)."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    folded = {}
    for node in graph.node:
        source = inits.get(node.input[0]) if node.op_type == "Cast" and node.input else None
        if (
            source is not None
            and source.data_type == TensorProto.FLOAT16
            and node.input[0] == node.output[0] + STORED_FP16
        ):
            folded[node.name] = node.output[0]
    if not folded:
        return
    kept = [node for node in graph.node if node.name not in folded]
    graph.ClearField("node")
    graph.node.extend(kept)
    wanted = {name + STORED_FP16: name for name in folded.values()}
    for tensor in graph.initializer:
        if tensor.name in wanted:
            tensor.CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), wanted[tensor.name])
            )


def to_fp16_array(values: np.ndarray, name: str) -> np.ndarray:
    """float32 -> float16, refusing values fp16 cannot hold (they would become inf)."""
    if values.dtype != np.float32:
        raise ConversionError(f"{name} is {values.dtype}, expected float32.")
    if values.size and np.abs(values).max() > 65504:
        raise ConversionError(f"{name} has values beyond the fp16 range; keep it fp32.")
    return values.astype(np.float16)


def cast_fp16_embedding(model: onnx.ModelProto, *, gather_name: str, table_name: str) -> list[str]:
    """Cast the rows gathered from the fp16 token-embedding table (stored in fp16 by
    q4_placement(fp16_tables=...): half the bytes) back to fp32 for the rest of the graph.

    Returns the names of the two nodes that touch fp16 (the Gather and the Cast): on an adapter without
    shader-f16 the app places them on the CPU (WebGPU EP forceCpuNodeNames) and the rest stays on WebGPU.
    """
    table = next((t for t in model.graph.initializer if t.name == table_name), None)
    gather = next((n for n in model.graph.node if n.name == gather_name), None)
    if table is None or gather is None:
        raise ConversionError(f"Embedding {gather_name}/{table_name} not found in the text-encoder graph.")
    if table.data_type != TensorProto.FLOAT16:
        raise ConversionError(f"Embedding table {table_name} is not fp16; this is a converter bug.")

    rows = gather.output[0]
    gather.output[0] = rows + "_fp16"
    cast_name = gather_name.rsplit("/", 1)[0] + "/Cast_fp16_to_fp32"
    cast = helper.make_node("Cast", [gather.output[0]], [rows], name=cast_name, to=TensorProto.FLOAT)
    # Insert the Cast right after the Gather, keeping the node list topologically sorted.
    nodes = list(model.graph.node)
    index = nodes.index(gather)
    model.graph.ClearField("node")
    model.graph.node.extend([*nodes[: index + 1], cast, *nodes[index + 1 :]])
    return [gather_name, cast_name]


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


def infer_value_types(model: onnx.ModelProto) -> None:
    """Fill graph.value_info with every intermediate tensor's type (the fp16 converter needs them).

    onnx shape inference serialises the model, which fails over 2 GB, so it runs on a weightless copy:
    the same nodes, with each initializer declared as a typed graph input instead.
    """
    skeleton = onnx.ModelProto()
    # Never CopyFrom(model): that would copy the weights. The skeleton is built field by field.
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    graph = skeleton.graph
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    for tensor in model.graph.initializer:
        graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    inferred = onnx.shape_inference.infer_shapes(skeleton)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)


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
