"""ONNX plumbing shared by the three exporters: torch -> ONNX, graph clean-up, saving with split external data.

Every graph of a web model repo follows the same rules (the seed model card and onnxruntime-web 1.30):
opset 18 (ai.onnx) plus com.microsoft, IR version 10 (onnxruntime-web refuses newer IR versions), no
float64 tensors, weights in external-data files named `{component}_{variant}.onnx_data`, `..._1`, ...
each under 2 GB, with the bare file name as `location` (it is the `path` of onnxruntime-web's
`externalData` entries).
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

from builder.errors import ConversionError
from builder.repo import paths
from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import CONTRACT, external_data_names

OPSET = 18
IR_VERSION = 10
MS_DOMAIN = "com.microsoft"

# How a graph's weights are stored as they are attached: given the weightless graph, returns the function
# that receives each weight (initializer name, float32/int numpy array) and adds it to the graph.
Placement = Callable[[onnx.ModelProto], Callable[[str, Any], None]]

# onnxruntime-web maps each external-data file into one ArrayBuffer; browsers and protobuf cap at 2 GiB.
HARD_FILE_LIMIT = 2**31 - 1
DEFAULT_DATA_FILE_CAP = 1_800_000_000  # the seed repo's largest file is 1.80 GB

# Tensors smaller than this stay inside the .onnx file (norm weights, small constants), like onnx's own default.
INLINE_TENSOR_BYTES = 1024

# Initializers up to this size may be folded into the constants computed from them (reshaped norm weights).
FOLD_INITIALIZER_BYTES = 64 * 1024

# Offsets of tensors inside a data file are aligned, so typed-array views and mmap stay aligned.
DATA_ALIGNMENT = 64

# The ops each graph may contain: the seed model card's lists plus the few basic ones this exporter emits
# (Sub: split sizes of the joint attention; Equal/ConstantOfShape: the dynamic Expand of grouped-query
# attention). The float ops all have kernels in onnxruntime-web 1.30's native WebGPU EP
# (onnxruntime/core/providers/webgpu/webgpu_execution_provider.cc, nn/layer_norm.cc for
# SimplifiedLayerNormalization; MatMulNBits, GatherBlockQuantized and RotaryEmbedding in contrib_ops/webgpu); the
# int64 shape/mask ops (Range, ConstantOfShape, And, ...) are placed on the CPU by onnxruntime, which is expected
# and cheap.
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Reciprocal", "Sigmoid", "Cast", "Clip"}
_SHAPE_OPS = {
    "Constant",
    "Shape",
    "Reshape",
    "Concat",
    "Gather",
    "Slice",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Expand",
}
ALLOWED_OPS: dict[str, frozenset[tuple[str, str]]] = {
    "transformer": frozenset(
        {
            ("", op)
            for op in _ELEMENTWISE
            | _SHAPE_OPS
            | {
                "Cos",
                "Sin",
                "Gemm",
                "LayerNormalization",
                "MatMul",
                "ReduceMean",
                "Softmax",
                "SimplifiedLayerNormalization",
            }
        }
        | {(MS_DOMAIN, "MatMulNBits"), (MS_DOMAIN, "RotaryEmbedding")}
    ),
    "text_encoder": frozenset(
        {
            ("", op)
            for op in _ELEMENTWISE
            | _SHAPE_OPS
            | {
                "Cos",
                "Sin",
                "Gemm",
                "MatMul",
                "ReduceMean",
                "Softmax",
                "GatherND",
                "Range",
                "Where",
                "LessOrEqual",
                "And",
                "Max",
                "Equal",
                "ConstantOfShape",
                "SimplifiedLayerNormalization",
            }
        }
        | {(MS_DOMAIN, "MatMulNBits"), (MS_DOMAIN, "RotaryEmbedding"), (MS_DOMAIN, "GatherBlockQuantized")}
    ),
    "vae_decoder": frozenset(
        {
            ("", op)
            for op in _ELEMENTWISE
            | _SHAPE_OPS
            | {"Conv", "InstanceNormalization", "Resize", "Softmax", "MatMul", "Gemm"}
        }
    ),
    # Pad: each downsampling pads the right and bottom edges by one pixel before its stride-2 Conv.
    "vae_encoder": frozenset(
        {
            ("", op)
            for op in _ELEMENTWISE | _SHAPE_OPS | {"Conv", "InstanceNormalization", "Pad", "Softmax", "MatMul", "Gemm"}
        }
    ),
}


# The exporter's C++ side warns, once per node, that it cannot infer an op it does not know; Flux's
# RotaryEmbedding output is left untyped on purpose (builder.repo.fused_ops says why), so for a user this is
# one unactionable line per attention layer.
_UNTYPED_OP_WARNING = "type is missing, so it may result in wrong shape inference"


@contextlib.contextmanager
def without_untyped_op_warnings() -> Any:
    """Hold the process's stderr in a file while the exporter runs and pass every line on afterwards except
    the untyped-op warnings (they come from C++, past Python's warnings filters)."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            for line in held.read().decode(errors="replace").splitlines(keepends=True):
                if _UNTYPED_OP_WARNING not in line:
                    sys.stderr.write(line)
            sys.stderr.flush()


def export_module(
    module: Any,
    args: tuple[Any, ...],
    *,
    component: str,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: dict[str, dict[int, str]],
    placement: Placement | None = None,
) -> onnx.ModelProto:
    """TorchScript-export `module` at opset 18 and return the graph with its weights attached in memory.

    The TorchScript exporter (`dynamo=False`) is used on purpose: it emits the plain ops the WebGPU EP runs
    (LayerNormalization, InstanceNormalization for GroupNorm, Softmax attention) and stable, scoped node
    names (`/m/transformer_blocks.0/attn/to_q/MatMul`) that the quantizer's exclusion rules match on.

    Memory: the graph is exported *without* parameters (they become graph inputs named like the module's
    parameters), so the module may be a skeleton whose parameters are placeholders (builder.repo.checkpoint).
    The weights are attached afterwards one tensor at a time: read (from the checkpoint, for placeholders),
    handed to `placement` (which stores it, quantises it, ...; default: an fp32 initializer) and dropped.
    Exporting with `export_params=True` instead costs about 4x the weights inside torch.onnx.export.
    """
    import torch

    with (
        tempfile.TemporaryDirectory(prefix="klein-export-") as tmp,
        warnings.catch_warnings(),
        without_untyped_op_warnings(),
    ):
        # TracerWarnings flag Python-side constants (head_dim, rotary tables) that are constant by design, and
        # the TorchScript exporter announces its own deprecation; neither is actionable for a user.
        warnings.simplefilter("ignore")
        path = Path(tmp) / "graph.onnx"
        with torch.no_grad():
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=False,
                opset_version=OPSET,
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_axes=dynamic_axes,
                export_params=False,
                do_constant_folding=False,  # folding would need the weights; fold_constant_nodes does the rest
            )
        model = onnx.load(str(path), load_external_data=False)
    bypass_identities(model)
    attach_weights(model, module, input_names=input_names, placement=placement or store_fp32)
    fold_constant_nodes(model)
    apply_contract_shapes(model, component)
    model.ir_version = IR_VERSION
    return model


def store_fp32(model: onnx.ModelProto) -> Callable[[str, Any], None]:
    """The default placement: every weight becomes a plain initializer of the graph, as it is."""
    return lambda name, array: add_initializer(model.graph, array, name)


def attach_weights(model: onnx.ModelProto, module: Any, *, input_names: Sequence[str], placement: Placement) -> None:
    """Turn the weight inputs of a graph exported with `export_params=False` into initializers.

    Each weight is read (builder.repo.checkpoint.weight_value), given to `placement(model)` and released before
    the next is read, so the peak is the finished graph plus one weight.

    A weight that only feeds a `Transpose(perm=[1, 0])` (every nn.Linear: y = x @ W^T) is stored already
    transposed and the Transpose is dropped, as the exporter's own constant folding would do; the stored
    name is the Transpose's output, so the MatMul that reads it is unchanged.
    """
    from builder.repo.checkpoint import weight_value

    place = placement(model)
    tensors: dict[str, Any] = dict(module.named_parameters())
    tensors.update(dict(module.named_buffers()))
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    real_inputs = set(input_names)
    dropped: set[int] = set()
    kept_inputs = []
    for value in model.graph.input:
        if value.name in real_inputs:
            kept_inputs.append(value)
            continue
        if value.name not in tensors:
            raise ConversionError(f"Exported graph input {value.name!r} is neither a model input nor a weight.")
        array = weight_value(tensors[value.name])
        users = consumers.get(value.name, [])
        name = value.name
        if array.ndim == 2 and users and all(_is_matrix_transpose(node) for node in users) and len(users) == 1:
            array, name = array.T, users[0].output[0]
            dropped.add(id(users[0]))
        # Hand the only reference over (the list is emptied by pop), so the placement can free the float32
        # array as soon as it has converted it (a 1.5 GB embedding table becomes 0.8 GB of fp16).
        handover = [array]
        del array
        place(name, handover.pop())
    model.graph.ClearField("input")
    model.graph.input.extend(kept_inputs)
    if dropped:
        kept = [node for node in model.graph.node if id(node) not in dropped]
        model.graph.ClearField("node")
        model.graph.node.extend(kept)


def _is_matrix_transpose(node: onnx.NodeProto) -> bool:
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
    return node.op_type == "Transpose" and perm == [1, 0]


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


def apply_contract_shapes(model: onnx.ModelProto, component: str) -> None:
    """Name the graph's I/O dims exactly as builder.repo.manifest.CONTRACT does.

    The tracer names some dims after internal values (`MatMulnoise_pred_dim_0`) or leaves a dim dynamic
    that the contract fixes (the transformer's batch of 1). Dims the contract calls `joint_dim` are the
    model's fixed text width and keep the exported number.
    """
    inputs, outputs = CONTRACT[component]
    for values, specs in ((model.graph.input, inputs), (model.graph.output, outputs)):
        if [v.name for v in values] != [s.name for s in specs]:
            raise ConversionError(f"The {component} graph's I/O {[v.name for v in values]} differs from the contract.")
        for value, spec in zip(values, specs, strict=False):
            dims = value.type.tensor_type.shape.dim
            if len(dims) != len(spec.shape):
                raise ConversionError(f"{component} {value.name} has rank {len(dims)}, the contract says {spec.shape}.")
            for dim, want in zip(dims, spec.shape, strict=False):
                if want == "joint_dim":
                    if not dim.HasField("dim_value"):
                        raise ConversionError(f"{component} {value.name}: the text width must be a fixed dim.")
                elif isinstance(want, int):
                    dim.Clear()
                    dim.dim_value = want
                else:
                    dim.Clear()
                    dim.dim_param = want


def fold_constant_nodes(model: onnx.ModelProto) -> None:
    """Evaluate nodes whose inputs are all constants (Constant nodes or small initializers).

    Replaces the exporter's own constant folding (off, see export_module): timestep-frequency tables,
    `Mod`s of constants, reshapes of norm weights. A deliberately small folder: onnxscript's optimizer
    does this too but takes minutes on a 28-layer graph. Large weights are never touched; onnxruntime
    folds the remaining shape arithmetic at load time.
    """
    import numpy as np
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    # Small initializers count as constants too (GroupNorm weight reshapes, rotary tables); weights do not.
    constants: dict[str, Any] = {
        t.name: numpy_helper.to_array(t) for t in model.graph.initializer if tensor_bytes(t) <= FOLD_INITIALIZER_BYTES
    }
    nodes: list[onnx.NodeProto] = []
    folded: list[TensorProto] = []
    opset = list(model.opset_import)
    for node in model.graph.node:
        if node.op_type == "Constant" and not node.domain:
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value.t)
            nodes.append(node)
            continue
        if node.domain or not node.input or not all(name in constants for name in node.input if name):
            nodes.append(node)
            continue
        outputs_info = [onnx.helper.make_tensor_value_info(o, 0, None) for o in node.output]
        single = onnx.helper.make_model(onnx.helper.make_graph([node], "fold", [], outputs_info), opset_imports=opset)
        inputs = {name: constants[name] for name in node.input if name}
        graph_inputs = [onnx.helper.make_tensor_value_info(name, 0, None) for name in inputs]
        single.graph.input.extend(graph_inputs)
        results = ReferenceEvaluator(single).run(None, inputs)
        for name, result in zip(node.output, results, strict=False):
            constants[name] = result
            folded.append(numpy_helper.from_array(np.asarray(result), name))
    outputs = {o.name for o in model.graph.output}
    model.graph.ClearField("node")
    model.graph.node.extend(_drop_unused(nodes, outputs))
    # Drop initializers nothing reads any more (in place: rebuilding the list would copy every weight),
    # then add the folded values that are still needed.
    used = outputs | {name for node in model.graph.node for name in node.input}
    for index in reversed(range(len(model.graph.initializer))):
        if model.graph.initializer[index].name not in used:
            del model.graph.initializer[index]
    model.graph.initializer.extend(t for t in folded if t.name in used)


def bypass_identities(model: onnx.ModelProto) -> None:
    """Rewire consumers of Identity nodes to the Identity's input.

    The TorchScript exporter de-duplicates equal initializers (e.g. norm weights that are all ones) by
    keeping one and feeding the others through Identity nodes; Identity is not in the allowed op sets.
    """
    graph_outputs = {o.name for o in model.graph.output}
    alias = {
        n.output[0]: n.input[0]
        for n in model.graph.node
        if n.op_type == "Identity" and n.output[0] not in graph_outputs
    }
    if not alias:
        return

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    kept = [n for n in model.graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    for node in kept:
        for index, name in enumerate(node.input):
            node.input[index] = resolve(name)
    model.graph.ClearField("node")
    model.graph.node.extend(kept)


def _drop_unused(nodes: list[onnx.NodeProto], graph_outputs: set[str]) -> list[onnx.NodeProto]:
    """Remove nodes none of whose outputs is consumed (repeat: removing one can orphan its producers)."""
    while True:
        used = set(graph_outputs) | {name for node in nodes for name in node.input}
        kept = [node for node in nodes if any(out in used for out in node.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


def initializer_map(model: onnx.ModelProto) -> dict[str, TensorProto]:
    return {init.name: init for init in model.graph.initializer}


def check_no_float64(model: onnx.ModelProto, *, what: str) -> None:
    """WebGPU has no f64: refuse a graph with a double initializer, constant, cast or value."""
    doubles = [t.name for t in model.graph.initializer if t.data_type == TensorProto.DOUBLE]
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i == TensorProto.DOUBLE:
                doubles.append(node.name)
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.DOUBLE:
                doubles.append(node.name)
    for value in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if value.type.tensor_type.elem_type == TensorProto.DOUBLE:
            doubles.append(value.name)
    if doubles:
        raise ConversionError(
            f"The exported {what} graph has float64 tensors ({', '.join(doubles[:5])}); "
            "WebGPU has no fp64. This is a converter bug: compute them in float32."
        )


def check_ops(model: onnx.ModelProto, component: str) -> None:
    """Every node's (domain, op) must be in ALLOWED_OPS[component]."""
    allowed = ALLOWED_OPS[component]
    found = {(node.domain if node.domain != "ai.onnx" else "", node.op_type) for node in model.graph.node}
    extra = sorted(found - allowed)
    if extra:
        raise ConversionError(
            f"The exported {component} graph uses ops outside the WebGPU-checked set: {extra}. "
            "This is a converter bug: rewrite that part of the export wrapper with supported ops."
        )


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


def register_onnxruntime_schemas() -> None:
    """Teach the onnx checker onnxruntime's SimplifiedLayerNormalization (its RMSNorm, the transformer's q/k
    norms): onnxruntime defines it in the default domain, where the onnx package knows no such op. The signature
    is onnxruntime's (contrib_ops/contrib_defs.cc). Registering twice is a no-op."""
    from onnx import defs

    if defs.has("SimplifiedLayerNormalization"):
        return
    param = defs.OpSchema.FormalParameter
    floats = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"]
    defs.register_schema(
        defs.OpSchema(
            "SimplifiedLayerNormalization",
            "",
            1,
            inputs=[param("X", "T"), param("scale", "V")],
            outputs=[
                param("Y", "V"),
                param("inv_std_var", "U", param_option=defs.OpSchema.FormalParameterOption.Optional),
            ],
            type_constraints=[("T", floats, ""), ("U", ["tensor(float)", "tensor(double)"], ""), ("V", floats, "")],
            attributes=[
                defs.OpSchema.Attribute("axis", defs.OpSchema.AttrType.INT, "", required=False),
                defs.OpSchema.Attribute("epsilon", defs.OpSchema.AttrType.FLOAT, "", required=False),
                defs.OpSchema.Attribute("stash_type", defs.OpSchema.AttrType.INT, "", required=False),
            ],
        )
    )


register_onnxruntime_schemas()


def verify_saved_graph(path: Path, component: str) -> None:
    """Re-read a saved graph: IR version, opset, ops, external-data files, onnx.checker and shape inference."""
    model = onnx.load(str(path), load_external_data=False)
    if model.ir_version > IR_VERSION:
        raise ConversionError(f"{path} was saved with IR version {model.ir_version}; onnxruntime-web needs <= 10.")
    opsets = {entry.domain or "": entry.version for entry in model.opset_import}
    if opsets.get("") != OPSET:
        raise ConversionError(f"{path} has ai.onnx opset {opsets.get('')}, expected {OPSET}.")
    check_ops(model, component)
    check_no_float64(model, what=component)
    for tensor in model.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            location = {e.key: e.value for e in tensor.external_data}["location"]
            if paths.unsafe_reason(location) is not None or "/" in location or not (path.parent / location).is_file():
                raise ConversionError(
                    f"{path}: tensor {tensor.name} points to {location!r}, not a bare file beside it."
                )
    # The checker reads external data by path, so this also proves every offset/length is in range.
    onnx.checker.check_model(str(path), full_check=True)
