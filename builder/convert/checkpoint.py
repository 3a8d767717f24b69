"""Weights straight from a diffusers component's safetensors files, one tensor at a time.

The converter never holds a whole checkpoint in memory. It builds each component as a *skeleton*: the
real module classes and config, but every parameter a zero-byte placeholder of the right shape (a
stride-0 view of one float) that remembers its checkpoint key. The TorchScript tracer only needs shapes
to export a graph without parameters; when the weights are attached to the graph, each placeholder is
read from disk, converted (bf16/fp16 -> fp32), quantised or stored, and dropped before the next one.

The safetensors format is read directly (8-byte header length, JSON header, raw little-endian data) with
plain file reads, not mmap: a memory map keeps every touched page of a multi-GB file resident in this
process, which is exactly what streaming is meant to avoid.
"""

from __future__ import annotations

import contextlib
import functools
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import ConversionError

# safetensors dtype -> (numpy dtype of the stored bytes, itemsize)
_STORED: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # no numpy bfloat16: read as uint16, widened to float32 bit-exactly
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "BOOL": np.dtype("?"),
}

# A header larger than this is not a safetensors file (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class StoredTensor:
    path: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute file offset of the first byte
    length: int


class Checkpoint:
    """The tensors of every `*.safetensors` file in one component folder (sharded checkpoints included)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        files = weight_files(self.folder)
        if not files:
            found = sorted(p.name for p in self.folder.glob("*.bin")) if self.folder.is_dir() else []
            hint = (
                (
                    f" It holds {', '.join(found)} (pickled PyTorch weights): load it with diffusers and save it "
                    "again with save_pretrained(..., safe_serialization=True)."
                )
                if found
                else ""
            )
            raise ConversionError(f"{self.folder} has no .safetensors weights.{hint}")
        self.tensors: dict[str, StoredTensor] = {}
        for path in files:
            for key, tensor in read_header(path).items():
                if key in self.tensors:
                    raise ConversionError(f"{key} is stored twice ({self.tensors[key].path.name}, {path.name}).")
                self.tensors[key] = tensor

    def shape(self, key: str) -> tuple[int, ...]:
        return self._get(key).shape

    def check_shape(self, key: str, shape: tuple[int, ...]) -> None:
        """The stored tensor must have the shape the module's config builds."""
        stored = self._get(key).shape
        if tuple(shape) != stored:
            raise ConversionError(
                f"{self.folder}: {key} has shape {list(stored)}, but the config builds {list(shape)}. "
                "The checkpoint does not match its config.json."
            )

    def read(self, key: str, *, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """One tensor as a fresh numpy array: floats widened to float32 (exactly), integers as stored."""
        tensor = self._get(key)
        if shape is not None:
            self.check_shape(key, shape)
        stored = _STORED[tensor.dtype]
        raw = np.empty(tensor.length // stored.itemsize, dtype=stored)
        with open(tensor.path, "rb") as handle:
            handle.seek(tensor.start)
            if handle.readinto(raw.data.cast("B")) != tensor.length:
                raise ConversionError(f"{tensor.path} is truncated: {key} runs past the end of the file.")
        if tensor.dtype == "BF16":  # bf16 is the top half of a float32; widen in place (no third copy)
            wide = raw.astype(np.uint32)
            del raw
            wide <<= 16
            raw = wide.view(np.float32)
        elif tensor.dtype == "F16":
            raw = raw.astype(np.float32)
        return raw.reshape(tensor.shape)

    def _get(self, key: str) -> StoredTensor:
        if key not in self.tensors:
            raise ConversionError(
                f"{self.folder}: the weight {key!r} is missing from the checkpoint. Is this a complete "
                "FLUX.2 [klein] component in diffusers format?"
            )
        return self.tensors[key]


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of the checkpoint: those a `*.safetensors.index.json` names (sharded), else
    the one standard file when present (a folder may also hold variants such as `*.fp16.safetensors`),
    else every `*.safetensors` file."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        try:
            weight_map = json.loads(indexes[0].read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError) as exc:
            raise ConversionError(f"{indexes[0]} is not a readable safetensors index ({exc}).") from None
        names = sorted(set(weight_map.values()))
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise ConversionError(f"{folder} lacks the shard(s) {', '.join(missing)} that {indexes[0].name} lists.")
        return [folder / name for name in names]
    for standard in ("diffusion_pytorch_model.safetensors", "model.safetensors"):
        if (folder / standard).is_file():
            return [folder / standard]
    return sorted(folder.glob("*.safetensors"))


def _entry_problem(info: object) -> str | None:
    """What is wrong with one tensor entry of a safetensors header, or None."""
    if not isinstance(info, dict):
        return f"is a JSON {type(info).__name__}, not an object"
    if not isinstance(info.get("dtype"), str):
        return "has no dtype string"
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return "has no shape of non-negative integers"
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        return "has no data_offsets [begin, end] of integers"
    return None


def read_header(path: Path) -> dict[str, StoredTensor]:
    """Parse one safetensors header; every tensor's byte range is checked against the file size."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise ConversionError(f"{path} is not a safetensors file (shorter than 8 bytes).")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(MAX_HEADER_BYTES, size - 8):
            raise ConversionError(f"{path} is not a safetensors file (header length {header_len}).")
        try:
            header = json.loads(handle.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConversionError(f"{path} has an unreadable safetensors header ({exc}).") from None
    data_start = 8 + header_len
    if not isinstance(header, dict):
        raise ConversionError(
            f"{path} is damaged: its safetensors header is a JSON {type(header).__name__}, not an object of tensors."
        )
    tensors: dict[str, StoredTensor] = {}
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ConversionError(f"{path} is damaged: its __metadata__ is not a map of strings.")
            continue
        problem = _entry_problem(info)
        if problem is not None:
            raise ConversionError(f"{path} is damaged: the header entry of {key} {problem}.")
        dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        if dtype not in _STORED:
            raise ConversionError(f"{path}: {key} has dtype {dtype}, which the converter does not read.")
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * _STORED[dtype].itemsize or data_start + end > size:
            raise ConversionError(f"{path} is damaged: {key}'s byte range does not match its shape or the file.")
        tensors[key] = StoredTensor(path, dtype, shape, data_start + begin, end - begin)
    return tensors


# --------------------------------------------------------------------------------------------------------
# Skeleton modules: real classes and configs, placeholder parameters.


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """While constructing modules, move every parameter to the meta device as it is registered.

    nn.Linear etc. allocate their weight with torch.empty first (untouched pages, not resident), then
    register it; it is swapped for a meta tensor right there, so no weight memory is ever used. Buffers stay
    real: the small non-persistent ones (rotary frequencies) are computed in __init__ and needed as values.
    """
    import torch
    from torch import nn

    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        stored = module._parameters[name]
        if stored is not None:
            module._parameters[name] = nn.Parameter(stored.to("meta"), requires_grad=False)

    # A patch for the duration of the block: mypy forbids assigning to a method, and reads the class attribute's
    # type with an extra `self`.
    nn.Module.register_parameter = register  # type: ignore[method-assign, assignment]
    try:
        with torch.no_grad():
            yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]  # restores the patch above


def build_skeleton(factory: Callable[[], Any], checkpoint: Checkpoint) -> Any:
    """`factory()` under parameters_on_meta, then: every parameter a placeholder bound to its checkpoint
    key (read lazily by `weight_value`), every persistent buffer loaded from the checkpoint."""
    import torch
    from torch import nn

    with parameters_on_meta():
        module = factory()
    count = 0
    for owner_name, owner in module.named_modules():
        prefix = f"{owner_name}." if owner_name else ""
        for name, param in list(owner._parameters.items()):
            if param is None:
                continue
            key = prefix + name
            shape = tuple(param.shape)
            # A shape mismatch fails now, not deep inside the export. A key the checkpoint lacks fails only
            # if the graph reads it (lm_head: tied to the embedding, and not part of any graph).
            if key in checkpoint.tensors:
                checkpoint.check_shape(key, shape)
            # One float with stride 0 in every dim: the right shape for tracing, 4 bytes of memory. Each holds a
            # different value: the exporter merges parameters with equal values into one graph input.
            count += 1
            value = torch.tensor(count * 1e-6, dtype=torch.float32)
            placeholder = nn.Parameter(value.expand(shape), requires_grad=False)
            placeholder.klein_load = functools.partial(checkpoint.read, key, shape=shape)  # type: ignore[attr-defined]  # a mark read by weight_value
            owner._parameters[name] = placeholder
        persistent = [n for n in owner._buffers if n not in owner._non_persistent_buffers_set]
        for name in persistent:
            buffer = owner._buffers[name]
            if buffer is not None and prefix + name in checkpoint.tensors:
                loaded = checkpoint.read(prefix + name, shape=tuple(buffer.shape))
                owner._buffers[name] = torch.from_numpy(loaded).to(buffer.dtype, copy=True)
                del loaded
    return module.eval()


def weight_value(tensor: Any) -> np.ndarray:
    """A parameter or buffer as a numpy array: placeholders are read from the checkpoint now, real tensors
    (modules built in memory, export-only buffers) are copied; floats as float32."""
    import torch

    load = getattr(tensor, "klein_load", None)
    if load is not None:
        loaded: np.ndarray = load()
        return loaded
    tensor = tensor.detach()
    copied: np.ndarray = (tensor.to(torch.float32) if tensor.is_floating_point() else tensor).cpu().numpy()
    return copied
