"""The rules every graph of a web model repo follows, and saving a graph with its weights in external-data files.

Every graph of a web model repo follows the same rules (the seed model card and onnxruntime-web 1.30):
opset 18 (ai.onnx) plus com.microsoft, IR version 10 (onnxruntime-web refuses newer IR versions), no
float64 tensors, weights in external-data files named `{component}_{variant}.onnx_data`, `..._1`, ...
each under 2 GB, with the bare file name as `location` (it is the `path` of onnxruntime-web's
`externalData` entries).

Exporting a torch module to such a graph is builder.convert.onnx_export; checking a graph against the rules,
builder.convert.onnx_checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

from builder.errors import ConversionError
from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import external_data_names

OPSET = 18
IR_VERSION = 10
MS_DOMAIN = "com.microsoft"

# onnxruntime-web maps each external-data file into one ArrayBuffer; browsers and protobuf cap at 2 GiB.
HARD_FILE_LIMIT = 2**31 - 1
DEFAULT_DATA_FILE_CAP = 1_800_000_000  # the seed repo's largest file is 1.80 GB

# Tensors smaller than this stay inside the .onnx file (norm weights, small constants), like onnx's own default.
INLINE_TENSOR_BYTES = 1024

# Offsets of tensors inside a data file are aligned, so typed-array views and mmap stay aligned.
DATA_ALIGNMENT = 64


def tensor_bytes(tensor: TensorProto) -> int:
    """Size from the header alone (reading `raw_data` in Python would copy the whole tensor)."""
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def add_initializer(graph: onnx.GraphProto, array: Any, name: str) -> None:
    """Append numpy `array` as a raw little-endian initializer, filled in place (no second copy of the proto)."""
    import numpy as np

    tensor = graph.initializer.add()
    tensor.name = name
    tensor.dims.extend(array.shape)
    tensor.data_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    tensor.raw_data = np.ascontiguousarray(array).tobytes()


def save_graph(
    model: onnx.ModelProto,
    folder: Path,
    component: str,
    variant: str,
    *,
    max_data_file_bytes: int = DEFAULT_DATA_FILE_CAP,
    log: Callable[[str], None],
) -> list[str]:
    """Write `folder/{component}_{variant}.onnx` plus its data files; return the data file names.

    Tensors go, in initializer order, into `.onnx_data`; a new file `.onnx_data_1`, ... starts whenever
    the next tensor would push the current one past `max_data_file_bytes`. The model's initializers are
    emptied as they are written, so the weights are not held twice.
    """
    if max_data_file_bytes <= 0 or max_data_file_bytes > HARD_FILE_LIMIT:
        raise ConversionError(f"max_data_file_bytes={max_data_file_bytes} must be in 1..{HARD_FILE_LIMIT} (2 GiB).")
    folder.mkdir(parents=True, exist_ok=True)
    model.ir_version = IR_VERSION

    # 1. Assign each large tensor to a file and offset, streaming the bytes out as we go.
    data_files: list[Path] = []
    used = 0
    with contextlib.ExitStack() as files:
        handle = None
        for tensor in model.graph.initializer:
            if tensor.data_location == TensorProto.EXTERNAL:
                raise ConversionError(f"Tensor {tensor.name} still points to external data; load it first.")
            raw = _raw_bytes(tensor)
            if len(raw) < INLINE_TENSOR_BYTES:
                continue
            if len(raw) > HARD_FILE_LIMIT:
                raise ConversionError(f"Tensor {tensor.name} has {len(raw)} bytes; no single file may exceed 2 GiB.")
            offset = -(-used // DATA_ALIGNMENT) * DATA_ALIGNMENT
            if handle is None or (used > 0 and offset + len(raw) > max_data_file_bytes):
                if handle is not None:
                    handle.close()
                name = external_data_names(component, variant, len(data_files) + 1)[-1]
                data_files.append(folder / name)
                handle = files.enter_context(open(folder / name, "wb"))
                used = offset = 0
            handle.write(b"\0" * (offset - used))
            handle.write(raw)
            used = offset + len(raw)
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in (("location", data_files[-1].name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value

    # 2. The graph itself (now small); written to a temp name and renamed, never half-written.
    graph_file = folder / f"{component}_{variant}.onnx"
    atomic_write_bytes(graph_file, model.SerializeToString())
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.2f} MB" for p in [graph_file, *data_files])
    log(f"  wrote {sizes}")
    return [p.name for p in data_files]


def _raw_bytes(tensor: TensorProto) -> bytes:
    """A tensor's bytes in raw little-endian layout, whichever field the exporter filled."""
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    from onnx import numpy_helper

    array = numpy_helper.to_array(tensor)
    fresh = numpy_helper.from_array(array, tensor.name)
    tensor.CopyFrom(fresh)
    return tensor.raw_data
