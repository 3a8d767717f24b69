"""Time one joint-attention layer of klein (24 heads x 128, fp16) on the WebGPU EP, three ways.

    python scripts/attention_kernels.py [--tokens 1536,4608] [--blocks 16]

  decomposed   what the converter emits: Mul(q, scale), MatMul(q, k^T), Cast fp32, Softmax, Cast fp16,
               MatMul(p, v), with the queries in --blocks blocks
  mha          one com.microsoft.MultiHeadAttention node with present_key/present_value outputs (the
               condition under which onnxruntime's WebGPU EP may take its flash-attention path)
A development aid for builder/convert/attention.py: it prints the median time of each (graph capture on, inputs on
the GPU, outputs read back), the max |error| against float64 numpy, and the WebGPU programs each ran.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

HEADS, HEAD = 24, 128
HIDDEN = HEADS * HEAD
LAYERS = 6  # per-layer time = (time of 6 layers - time of 1) / 5: cancels upload and read-back


def decomposed(tokens: int, blocks: int, layers: int) -> onnx.ModelProto:
    """q, k, v [1, S, 3072] fp16 -> out [1, S, 3072]; `layers` attentions in a row (each one's output is the
    next one's query), each in `blocks` query blocks."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for layer in range(layers):
        _decomposed_layer(
            nodes,
            inits,
            tokens,
            blocks,
            "q" if layer == 0 else f"out{layer - 1}",
            "out" if layer == layers - 1 else f"out{layer}",
            f"l{layer}_",
        )
    return _model(nodes, inits, tokens)


def _decomposed_layer(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    tokens: int,
    blocks: int,
    query: str,
    result: str,
    p: str,
) -> None:

    def const(name: str, values: Any, dtype: Any = np.int64) -> str:
        inits.append(onnx.numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    if not inits:
        const("shape4", [1, tokens, HEADS, HEAD])
        const("shape3", [1, tokens, HIDDEN])
        const("scale", 1 / np.sqrt(HEAD), dtype=np.float16)
        const("ax2", [2])
    for t, source in (("q", query), ("k", "k"), ("v", "v")):
        nodes.append(helper.make_node("Reshape", [source, "shape4"], [f"{p}{t}4"]))
        nodes.append(helper.make_node("Transpose", [f"{p}{t}4"], [f"{p}{t}h"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Transpose", [f"{p}kh"], [f"{p}kt"], perm=[0, 1, 3, 2]))
    rows = -(-tokens // blocks)
    outs = []
    for b in range(blocks):
        start, end = b * rows, min(tokens, (b + 1) * rows)
        if f"s{b}" not in {i.name for i in inits}:
            const(f"s{b}", [start]), const(f"e{b}", [end])
        nodes.append(helper.make_node("Slice", [f"{p}qh", f"s{b}", f"e{b}", "ax2"], [f"{p}qb{b}"]))
        nodes.append(helper.make_node("Mul", [f"{p}qb{b}", "scale"], [f"{p}qs{b}"]))
        nodes.append(helper.make_node("MatMul", [f"{p}qs{b}", f"{p}kt"], [f"{p}sc{b}"]))
        nodes.append(helper.make_node("Cast", [f"{p}sc{b}"], [f"{p}sf{b}"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Softmax", [f"{p}sf{b}"], [f"{p}pf{b}"], axis=-1))
        nodes.append(helper.make_node("Cast", [f"{p}pf{b}"], [f"{p}p{b}"], to=TensorProto.FLOAT16))
        nodes.append(helper.make_node("MatMul", [f"{p}p{b}", f"{p}vh"], [f"{p}o{b}"]))
        outs.append(f"{p}o{b}")
    if blocks > 1:
        nodes.append(helper.make_node("Concat", outs, [f"{p}oh"], axis=2))
    else:
        nodes.append(helper.make_node("Identity", outs, [f"{p}oh"]))
    nodes.append(helper.make_node("Transpose", [f"{p}oh"], [f"{p}ot"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Reshape", [f"{p}ot", "shape3"], [result]))


def mha(tokens: int, layers: int) -> onnx.ModelProto:
    nodes = []
    for layer in range(layers):
        query, result = ("q" if layer == 0 else f"out{layer - 1}"), ("out" if layer == layers - 1 else f"out{layer}")
        nodes.append(
            helper.make_node(
                "MultiHeadAttention",
                [query, "k", "v"],
                [result, f"pk{layer}", f"pv{layer}"],
                domain="com.microsoft",
                num_heads=HEADS,
                scale=float(1 / np.sqrt(HEAD)),
            )
        )
    return _model(nodes, [], tokens)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], tokens: int) -> onnx.ModelProto:
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [1, tokens, HIDDEN]) for n in ("q", "k", "v")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [1, tokens, HIDDEN])]
    graph = helper.make_graph(nodes, "attention", io, outputs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    return model


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    tokens = q.shape[1]
    qh, kh, vh = (x.astype(np.float64).reshape(tokens, HEADS, HEAD).transpose(1, 0, 2) for x in (q, k, v))
    scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(HEAD)
    scores -= scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(-1, keepdims=True)
    out: np.ndarray = (p @ vh).transpose(1, 0, 2).reshape(1, tokens, HIDDEN)
    return out


def programs(path: str, feeds: dict[str, np.ndarray]) -> list[str]:
    """WebGPU program names of one profiled (uncaptured) run."""
    import onnxruntime as ort

    from builder.check.bench.ort_timing import session_options

    options = session_options("webgpu", cpu_fallback=True)
    options.enable_profiling = True
    session = ort.InferenceSession(path, sess_options=options)
    session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    names = [
        e.get("name", "") for e in events if e.get("cat") in ("Api", "Node") and "kernel_time" not in e.get("name", "")
    ]
    return sorted(set(names))[:12]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1536,4608")
    parser.add_argument("--blocks", default="16")
    args = parser.parse_args()
    import onnxruntime as ort

    from builder.check.bench.ort_timing import session_options, time_captured

    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="attn-"))
    for tokens in (int(t) for t in args.tokens.split(",")):
        # Post-RMSNorm, post-RoPE activations: unit scale, as in the model.
        feeds = {n: rng.standard_normal((1, tokens, HIDDEN)).astype(np.float16) for n in ("q", "k", "v")}
        expected = reference(feeds["q"], feeds["k"], feeds["v"])
        # label -> model of that many layers
        kinds: dict[str, Callable[[int], onnx.ModelProto]] = {
            f"decomposed {b} blocks": functools.partial(decomposed, tokens, int(b)) for b in args.blocks.split(",")
        }
        kinds["MultiHeadAttention"] = functools.partial(mha, tokens)
        for label, build in kinds.items():
            try:
                times = {}
                for layers in (1, LAYERS):
                    path = str(work / f"{label.replace(' ', '_')}-{tokens}-{layers}.onnx")
                    onnx.save(build(layers), path)
                    session = ort.InferenceSession(path, sess_options=session_options("webgpu", cpu_fallback=True))
                    plain = session.run(None, feeds)
                    if layers == 1:
                        error = float(np.max(np.abs(plain[0].astype(np.float64) - expected)))
                        names = programs(path, feeds)
                    samples = []
                    for _ in range(8):
                        began = time.perf_counter()
                        session.run(None, feeds)
                        samples.append((time.perf_counter() - began) * 1000)
                    times[layers] = (
                        time_captured(path, feeds, plain, warmup=3, repeats=10)["median_ms"],
                        statistics.median(samples),
                    )
                per = [(times[LAYERS][i] - times[1][i]) / (LAYERS - 1) for i in (0, 1)]
                print(
                    f"{tokens:5d} tokens  {label:22s} per layer: capture {per[0]:6.2f} ms, plain {per[1]:6.2f} ms;"
                    f"  max|err| {error:.3e} (fp64 ref)  programs {names}",
                    flush=True,
                )
            except Exception as exc:  # noqa: BLE001
                print(f"{tokens:5d} tokens  {label:22s} failed: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
