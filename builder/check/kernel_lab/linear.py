"""The linear layers (web_src/src/kernels/linear.js): y = x·Wᵀ over MatMulNBits 4-bit weights with the fused
epilogues, their cases at klein-4B's shapes, the float64 reference, each path's exact check against the numpy model
(linear_model), and onnxruntime's equivalent: com.microsoft.MatMulNBits as the converter writes it (accuracy_level 4
in the fp32 run, as the q4 graphs; 0 in the fp16 run, as the q4f16 graphs) and the epilogue as plain ops."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from builder.check.kernel_lab import linear_model as lm
from builder.check.kernel_lab import shapes
from builder.check.kernel_lab.cases import Case, OrtGraph, Tensor, sample_rows, timing

NAME = "linear"
# x in [-1, 1); block scales in [-1/32, 1/32): outputs of a few units at K = 3072, like a transformer's.
SCALE_RANGE = 1 / 32
# x = odd multiples of 1/1024 (exact in fp16): x·127/max|x| is then never a half-integer nor near one (odd over
# odd), so how a GPU rounds its division cannot flip an int8 activation, and the int8 paths are checked exactly.
X_OFFSET = 1 / 1024
FLOAT_PATHS = ("tiled", "simple", "f16-matrix")


def _layers(shape_set: str) -> list[dict[str, Any]]:
    """Each case's layer: weight rows n, k, the epilogue and the binding's columns (klein-4B's linears at `real`)."""
    h, mlp = shapes.HIDDEN, shapes.MLP_HIDDEN
    if shape_set == "real":
        layers = [
            # A double block's q/k/v, the single blocks' fused q,k,v part of to_qkv_mlp_proj.
            {"name": "qkv", "n": 3 * h, "k": h, "epilogue": "store"},
            # The MLP's linear_in with silu(a)·b fused: 2·9216 weight rows, 9216 outputs.
            {"name": "mlp_in", "n": 2 * mlp, "k": h, "epilogue": "swiglu"},
            # to_out, linear_out and the single blocks' to_out, each with h += gate·(...) fused.
            {"name": "attn_out", "n": h, "k": h, "epilogue": "gate_residual"},
            {"name": "mlp_out", "n": h, "k": mlp, "epilogue": "gate_residual"},
            {"name": "single_out", "n": h, "k": h + mlp, "epilogue": "gate_residual"},
        ]
        return [{**layer, "m": m} for m in shapes.ATTENTION_TOKENS.values() for layer in layers]
    # Short and odd: partial tiles in m and n; a bias; a slice of the weight rows written into a wider output; two
    # batch items' gates.
    return [
        {"name": "store", "m": 70, "n": 96, "k": 128, "epilogue": "store", "bias": True},
        {"name": "swiglu", "m": 37, "n": 2 * 72, "k": 96, "epilogue": "swiglu"},
        {"name": "gate", "m": 50, "n": 40, "k": 64, "epilogue": "gate_residual", "rowsPerBatch": 25},
        {
            "name": "slice",
            "m": 20,
            "n": 160,
            "k": 64,
            "epilogue": "swiglu",
            "rowA": 32,
            "rowB": 96,
            "columns": 48,
            "outStride": 80,
            "outOffset": 16,
        },
    ]


def _binding(layer: dict[str, Any]) -> dict[str, int]:
    """The shape dict the page's registry reads: m, n, k and the binding's columns, rows, strides."""
    n, swiglu = layer["n"], layer["epilogue"] == "swiglu"
    columns = layer.get("columns", n // 2 if swiglu else n)
    return {
        "m": layer["m"],
        "n": n,
        "k": layer["k"],
        "columns": columns,
        "rowA": layer.get("rowA", 0),
        "rowB": layer.get("rowB", n // 2 if swiglu else 0),
        "outStride": layer.get("outStride", columns),
        "outOffset": layer.get("outOffset", 0),
        "rowsPerBatch": layer.get("rowsPerBatch", layer["m"]),
    }


def graph_path(case: Case, dtype: str) -> str:
    return f"graphs/{case.id.replace('/', '-')}-{dtype}.onnx"


def cases(shape_set: str, *, seed: int = 101) -> list[Case]:
    out = []
    for index, layer in enumerate(_layers(shape_set)):
        shape = _binding(layer)
        m, n, k, columns, stride = shape["m"], shape["n"], shape["k"], shape["columns"], shape["outStride"]
        kind = layer["epilogue"]
        base = seed + 10 * index
        inputs = [
            Tensor("x", (m, k), seed=base, offset=X_OFFSET),
            Tensor("packed", (n, k // 8), type="u32", seed=base + 1),
            Tensor("scales", (n, k // 32), seed=base + 2, scale=SCALE_RANGE),
        ]
        if layer.get("bias"):
            inputs.append(Tensor("bias", (n,), seed=base + 3))
        if kind == "gate_residual":
            items = -(-m // shape["rowsPerBatch"])
            inputs += [
                Tensor("gate", (items, columns), seed=base + 4),
                Tensor("residual", (m, stride), type="f32", seed=base + 5, scale=4.0),
            ]
        # The residual stream is float32 in the app's fast path too (builder.repo.fp16_compute.residual_adds).
        output = Tensor("out", (m, stride), type="f32" if kind == "gate_residual" else "act")
        plain = stride == columns and shape["rowA"] == 0 and shape["rowsPerBatch"] == m
        case = Case(
            id=f"{NAME}/{layer['name']}-m{m}xn{n}xk{k}",
            kernel=NAME,
            shape=shape,
            spec={"epilogue": kind, "bias": bool(layer.get("bias"))},
            inputs=tuple(inputs),
            output=output,
            rows=sample_rows(m, limit=48 if shape_set == "real" else 1024, seed=base),
            timing=timing(shape_set),
            flops=2.0 * m * k * columns * (2 if kind == "swiglu" else 1),
        )
        ort = None
        if plain:
            feeds = {t.name: t.dims for t in inputs}
            feeds["packed"] = (n, k // 32, 16)  # the same words, as MatMulNBits' uint8 blocks
            graphs = {dtype: graph_path(case, dtype) for dtype in ("f16", "f32")}
            ort = OrtGraph(graphs=graphs, feeds=feeds, output="out", runs=3 if shape_set == "real" else 1)
        out.append(dataclasses.replace(case, ort=ort))
    return out


def _inputs(case: Case, dtype: str) -> tuple[np.ndarray, lm.Q4Weight, dict[str, np.ndarray]]:
    """x [rows, k] float32 (the case's sampled rows), the weight, and the epilogue's other inputs, as uploaded."""
    n, k = case.shape["n"], case.shape["k"]
    rows = np.asarray(case.rows)
    x = case.input("x").values(dtype)[rows].astype(np.float32)
    words = case.input("packed").values(dtype).astype(np.uint32)
    scales = case.input("scales").values(dtype).astype(np.float16 if dtype == "f16" else np.float32)
    weight = lm.Q4Weight(words.view(np.uint8).reshape(n, k // 32, 16), scales)
    names = {t.name for t in case.inputs}
    extra: dict[str, np.ndarray] = {
        name: case.input(name).values(dtype) for name in ("bias", "gate", "residual") if name in names
    }
    return x, weight, extra


def _expected(case: Case) -> dict[str, Any]:
    """The binding the check expects: the case's, where `expect` overrides none of it (a test makes them differ
    to see every variant fail)."""
    return {**case.shape, **case.expect}


def _epilogue(case: Case, extra: dict[str, np.ndarray]) -> lm.Epilogue:
    """The case's epilogue over its sampled rows (one gate row per sampled row)."""
    shape, rows = _expected(case), np.asarray(case.rows)
    gate = residual = None
    if "gate" in extra:
        gate = extra["gate"][rows // shape["rowsPerBatch"]]
        at = shape["outOffset"]
        residual = extra["residual"][rows][:, at : at + shape["columns"]]
    return lm.Epilogue(
        kind=str(case.spec["epilogue"]),
        bias=extra.get("bias"),
        gate=gate,
        residual=residual,
        rows_per_batch=1,
        row_a=shape["rowA"],
        row_b=shape["rowB"],
        columns=shape["columns"],
    )


def _place(case: Case, values: np.ndarray, extra: dict[str, np.ndarray]) -> np.ndarray:
    """The output rows as the page returns them: the binding's columns at outOffset of rows of outStride, the
    rest as the buffer held it (the residual, else zeros)."""
    rows = np.asarray(case.rows)
    full = extra["residual"][rows].copy() if "residual" in extra else np.zeros((len(rows), case.shape["outStride"]))
    at, columns = _expected(case)["outOffset"], _expected(case)["columns"]
    full[:, at : at + columns] = values
    return full


def reference(case: Case, dtype: str) -> np.ndarray:
    """The output rows in float64: x·W_qᵀ in exact arithmetic, then the epilogue."""
    x, weight, extra = _inputs(case, dtype)
    return _place(case, lm.float_linear(x, weight, _epilogue(case, extra)).astype(np.float64), extra)


def verdict(case: Case, dtype: str, variant: str, got: np.ndarray) -> str | None:
    """None when `got` is what `variant` computes (linear_model): within the float32 summation bound for the float
    paths, the epilogue's roundings for the int8 paths; else what is wrong."""
    x, weight, extra = _inputs(case, dtype)
    epilogue = _epilogue(case, extra)
    if variant in FLOAT_PATHS:
        f16_weights = variant == "f16-matrix"
        want = lm.float_linear(x, weight, epilogue, f16_weights=f16_weights)
        bound = lm.float_tolerance(x, weight, epilogue, f16_weights=f16_weights)
    else:
        want = lm.int8_linear(x, weight, epilogue).astype(np.float64)
        bound = lm.int8_tolerance(x, weight, epilogue)
    if case.output.type == "act" and dtype == "f16":
        bound = bound + 2.0**-11 * np.abs(want)  # the output's one rounding to fp16
    want_full = _place(case, want, extra)
    bound_full = _place(case, bound, {})
    if not np.isfinite(got).all():
        return "NaN or infinity in the output"
    over = np.abs(got - want_full) - bound_full
    if (over <= 0).all():
        return None
    row, column = np.unravel_index(int(np.argmax(over)), over.shape)
    return (
        f"row {case.rows[row]} column {column}: {got[row, column]:.9g}, the {variant} model gives "
        f"{want_full[row, column]:.9g} (bound {bound_full[row, column]:.3g})"
    )


def graphs(case: Case) -> dict[str, Any]:
    """{site path: onnx ModelProto} of the case's onnxruntime graphs (none for the cases writing a slice)."""
    if case.ort is None:
        return {}
    return {graph_path(case, dtype): ort_graph(case, dtype) for dtype in ("f16", "f32")}


def ort_graph(case: Case, dtype: str) -> Any:
    """MatMulNBits(x, packed, scales) and the epilogue as separate ops, the way the converter's graphs compute it."""
    import onnx
    from onnx import TensorProto, helper

    shape, kind = case.shape, str(case.spec["epilogue"])
    m, n, k, columns = shape["m"], shape["n"], shape["k"], shape["columns"]
    act = TensorProto.FLOAT16 if dtype == "f16" else TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("x", act, [m, k]),
        helper.make_tensor_value_info("packed", TensorProto.UINT8, [n, k // 32, 16]),
        helper.make_tensor_value_info("scales", act, [n, k // 32]),
    ]
    level = 0 if dtype == "f16" else 4
    matmul = helper.make_node("MatMulNBits", ["x", "packed", "scales"], ["y"], domain="com.microsoft")
    matmul.attribute.extend(
        helper.make_attribute(name, value)
        for name, value in {"K": k, "N": n, "bits": 4, "block_size": 32, "accuracy_level": level}.items()
    )
    nodes = [matmul]
    if case.spec.get("bias"):
        inputs.append(helper.make_tensor_value_info("bias", act, [n]))
        nodes.append(helper.make_node("Add", ["y", "bias"], ["y_biased"]))
    y = "y_biased" if case.spec.get("bias") else "y"
    if kind == "swiglu":
        nodes += [
            helper.make_node("Split", [y], ["a", "b"], axis=-1, num_outputs=2),
            helper.make_node("Sigmoid", ["a"], ["gate_a"]),
            helper.make_node("Mul", ["a", "gate_a"], ["silu"]),
            helper.make_node("Mul", ["silu", "b"], ["out"]),
        ]
    elif kind == "gate_residual":
        inputs += [
            helper.make_tensor_value_info("gate", act, [1, columns]),
            helper.make_tensor_value_info("residual", TensorProto.FLOAT, [m, columns]),
        ]
        nodes.append(helper.make_node("Mul", [y, "gate"], ["gated"]))
        if dtype == "f16":
            nodes.append(helper.make_node("Cast", ["gated"], ["gated32"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Add", ["residual", "gated32" if dtype == "f16" else "gated"], ["out"]))
    else:
        nodes.append(helper.make_node("Identity", [y], ["out"]))
    out_type = TensorProto.FLOAT if kind == "gate_residual" else act
    graph = helper.make_graph(nodes, "linear", inputs, [helper.make_tensor_value_info("out", out_type, [m, columns])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10  # onnxruntime-web 1.30 refuses newer IRs
    onnx.checker.check_model(model)
    return model
