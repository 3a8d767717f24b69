"""The checks of a graph against the rules of builder.convert.onnx_graph: the ops onnxruntime-web's WebGPU EP runs,
no float64, and a saved graph re-read whole (IR version, opset, external-data files, onnx.checker).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import onnx
from onnx import TensorProto

from builder.convert.onnx_graph import IR_VERSION, MS_DOMAIN, OPSET
from builder.errors import ConversionError
from builder.repo import paths

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
# What the text encoder and the transformer both run: their projections, attention, rotary tables and RMSNorm.
_TRANSFORMER_OPS = {"Cos", "Sin", "Gemm", "MatMul", "ReduceMean", "Softmax", "SimplifiedLayerNormalization"}
# What both halves of the VAE run: convolutions, GroupNorm (as InstanceNormalization) and the attention block.
_VAE_OPS = {"Conv", "InstanceNormalization", "Softmax", "MatMul", "Gemm"}


def _ops(default: set[str], microsoft: Collection[str] = ()) -> frozenset[tuple[str, str]]:
    """(domain, op) pairs: `default`'s ops and the elementwise and shape ops in ai.onnx, `microsoft`'s in com.microsoft."""
    return frozenset({("", op) for op in _ELEMENTWISE | _SHAPE_OPS | default} | {(MS_DOMAIN, op) for op in microsoft})


ALLOWED_OPS: dict[str, frozenset[tuple[str, str]]] = {
    "transformer": _ops(_TRANSFORMER_OPS | {"LayerNormalization"}, ("MatMulNBits", "RotaryEmbedding")),
    "text_encoder": _ops(
        _TRANSFORMER_OPS | {"GatherND", "Range", "Where", "LessOrEqual", "And", "Max", "Equal", "ConstantOfShape"},
        ("MatMulNBits", "RotaryEmbedding", "GatherBlockQuantized"),
    ),
    "vae_decoder": _ops(_VAE_OPS | {"Resize"}),
    # Pad: each downsampling pads the right and bottom edges by one pixel before its stride-2 Conv.
    "vae_encoder": _ops(_VAE_OPS | {"Pad"}),
}


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
