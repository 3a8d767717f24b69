"""Precision rewrites of an exported fp32 ONNX graph: q4 MatMulNBits, an fp16 token embedding, an fp16 VAE.

All three use onnxruntime's own tools where one exists (MatMulNBitsQuantizer, float16 conversion), so the
packed q4 layout is exactly what the MatMulNBits kernels of onnxruntime and onnxruntime-web expect.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.errors import ConversionError

Q4_BLOCK_SIZE = 32


def quantize_q4(model: onnx.ModelProto, *, accuracy_level: int | None, exclude: list[str]) -> onnx.ModelProto:
    """Replace every MatMul with a constant weight by com.microsoft.MatMulNBits (4 bits, block 32, symmetric).

    `exclude` names MatMul nodes that stay fp32. `accuracy_level` 4 lets the kernel quantise activations to
    int8 (the seed's text encoder); None leaves the attribute out (fp32 activations).
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # The quantizer logs one INFO line per node; keep the converter's own progress readable.
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=4,
        block_size=Q4_BLOCK_SIZE,
        is_symmetric=True,
        accuracy_level=accuracy_level,
        nodes_to_exclude=exclude,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    quantized = quantizer.model.model
    if not any(node.op_type == "MatMulNBits" for node in quantized.graph.node):
        raise ConversionError("q4 quantisation found no MatMul with a constant weight; the export is wrong.")
    return quantized


def embedding_to_fp16(model: onnx.ModelProto, *, gather_name: str, table_name: str) -> list[str]:
    """Store the token-embedding table in fp16 (half the bytes) and Cast the gathered rows back to fp32.

    Returns the names of the two nodes that touch fp16 (the Gather and the Cast): on an adapter without
    shader-f16 the app places them on the CPU (WebGPU EP forceCpuNodeNames) and the rest stays on WebGPU.
    """
    table = next((t for t in model.graph.initializer if t.name == table_name), None)
    gather = next((n for n in model.graph.node if n.name == gather_name), None)
    if table is None or gather is None:
        raise ConversionError(f"Embedding {gather_name}/{table_name} not found in the text-encoder graph.")
    values = numpy_helper.to_array(table)
    if values.dtype != np.float32:
        raise ConversionError(f"Embedding table {table_name} is {values.dtype}, expected float32.")
    if np.abs(values).max() > 65504:
        raise ConversionError(f"Embedding table {table_name} has values beyond the fp16 range; keep it fp32.")
    table.CopyFrom(numpy_helper.from_array(values.astype(np.float16), table_name))
    del values

    rows = gather.output[0]
    gather.output[0] = rows + "_fp16"
    cast_name = gather_name.rsplit("/", 1)[0] + "/Cast_fp16_to_fp32"
    cast = helper.make_node("Cast", [gather.output[0]], [rows], name=cast_name, to=TensorProto.FLOAT)
    # Insert the Cast right after the Gather, keeping the node list topologically sorted.
    nodes = list(model.graph.node)
    index = nodes.index(gather)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes[: index + 1] + [cast] + nodes[index + 1 :])
    return [gather_name, cast_name]


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp16 weights and compute with fp32 graph inputs/outputs (Casts at the edges), via onnxruntime's converter."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    half = convert_float_to_float16(model, keep_io_types=True)
    # The converter appends its input Casts at the end of the node list; ONNX requires topological order.
    sort_topologically(half.graph)
    return half


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
