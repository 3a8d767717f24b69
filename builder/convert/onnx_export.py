"""torch -> ONNX for the three exporters: the TorchScript export, the weights attached one at a time, and the
clean-up that leaves a graph by the rules of builder.convert.onnx_graph (no Identity nodes, constants folded, the
contract's I/O dims).
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

from builder.convert.onnx_graph import IR_VERSION, OPSET, add_initializer, tensor_bytes
from builder.errors import ConversionError
from builder.repo.manifest import CONTRACT

# How a graph's weights are stored as they are attached: given the weightless graph, returns the function
# that receives each weight (initializer name, float32/int numpy array) and adds it to the graph.
Placement = Callable[[onnx.ModelProto], Callable[[str, Any], None]]
# Initializers up to this size may be folded into the constants computed from them (reshaped norm weights).
FOLD_INITIALIZER_BYTES = 64 * 1024

# The exporter's C++ side warns, once per node, that it cannot infer an op it does not know; Flux's
# RotaryEmbedding output is left untyped on purpose (builder.convert.fused_ops says why), so for a user this is
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
    parameters), so the module may be a skeleton whose parameters are placeholders (builder.convert.checkpoint).
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

    Each weight is read (builder.convert.checkpoint.weight_value), given to `placement(model)` and released before
    the next is read, so the peak is the finished graph plus one weight.

    A weight that only feeds a `Transpose(perm=[1, 0])` (every nn.Linear: y = x @ W^T) is stored already
    transposed and the Transpose is dropped, as the exporter's own constant folding would do; the stored
    name is the Transpose's output, so the MatMul that reads it is unchanged.
    """
    from builder.convert.checkpoint import weight_value

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
