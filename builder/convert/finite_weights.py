"""A saved graph's float weights read back from disk and checked to be finite numbers, a block at a time.

`klein-web convert --lora` runs it on the transformer graphs it wrote before they replace anything at OUT: the
merge checks every weight as it adds a LoRA's update, and this proves the stored graph (after quantisation and
the float16 cast of the q4f16 variant) holds no NaN or infinity either. Packed q4 weights are integers and
cannot be non-finite; their scales are checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from builder.errors import ConversionError

FLOAT_TYPES: dict[int, type[np.floating]] = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
# Values checked at a time: the memory of a check stays bounded whatever the graph's size.
BLOCK_VALUES = 1 << 24


def non_finite_tensors(path: Path) -> list[str]:
    """Names of the float initializers of the graph at `path` holding a NaN or an infinity."""
    model = onnx.load(str(path), load_external_data=False)
    bad = []
    for tensor in model.graph.initializer:
        dtype = FLOAT_TYPES.get(tensor.data_type)
        if dtype is None:
            continue
        if tensor.data_location == TensorProto.EXTERNAL:
            info = {entry.key: entry.value for entry in tensor.external_data}
            count = int(info.get("length", "0")) // np.dtype(dtype).itemsize
            values: np.ndarray = np.memmap(
                path.parent / info["location"],
                dtype=dtype,
                mode="r",
                offset=int(info.get("offset", "0")),
                shape=(count,),
            )
        else:
            values = onnx.numpy_helper.to_array(tensor).reshape(-1)
        if any(
            not np.isfinite(values[start : start + BLOCK_VALUES]).all() for start in range(0, values.size, BLOCK_VALUES)
        ):
            bad.append(tensor.name)
        del values
    return bad


def check_finite_graph(path: Path, *, what: str) -> None:
    """ConversionError naming the first tensors of `path` that hold a NaN or an infinity."""
    bad = non_finite_tensors(path)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ConversionError(
            f"{what}: the graph {path.name} holds NaN or infinite weights ({shown}); nothing was "
            "replaced. Give the LoRA(s) a smaller scale, or use other files."
        )
