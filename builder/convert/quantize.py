"""4-bit weights: MatMul weights as com.microsoft.MatMulNBits, the token embedding as GatherBlockQuantized, each
quantised as it is attached to the exported graph (q4_placement), and the 4-bit block rule itself.

The MatMul weights go through onnxruntime's own quantiser (MatMulNBitsQuantizer), so the packed q4 layout is
exactly what the MatMulNBits kernels of onnxruntime and onnxruntime-web expect; the token embedding's
GatherBlockQuantized blocks follow the same rule (symmetric, zero point 8, low nibble first). Weights kept in fp16
are builder.convert.fp16_storage; graphs that compute in fp16 (the q4f16 fast path, the fp16 VAE),
builder.convert.fp16_compute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.convert.fp16_storage import to_fp16_array
from builder.convert.onnx_export import Placement
from builder.convert.onnx_graph import MS_DOMAIN, add_initializer
from builder.errors import ConversionError

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
    """Weights for a q4 graph, quantised one at a time as they are attached (builder.convert.onnx_export.attach_weights).

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
