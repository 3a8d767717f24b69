"""Weights stored in fp16 for graphs that compute in float32: half the download, the same float32 compute.

store_fp16 stores large float32 initializers in fp16, each read through a Cast that onnxruntime folds when it loads
the graph (restore_fp32 undoes it); to_fp16_array is the checked float32 -> fp16 conversion of one weight; the
text encoder's fp16 token-embedding table gets its rows cast back to float32 (cast_fp16_embedding).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.convert.onnx_graph import INLINE_TENSOR_BYTES, tensor_bytes
from builder.errors import ConversionError

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
