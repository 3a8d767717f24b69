"""Helpers for tests that run saved graphs on onnxruntime's CPU EP."""

from __future__ import annotations

from pathlib import Path

import onnx


def at_accuracy_level(graph: Path, level: int) -> bytes:
    """The saved graph (weights loaded) with every MatMulNBits at `level`: 0 runs the q4 weights on fp32
    activations, the plain computation a q4 graph's other variants are checked against; 4 (how `convert` saves
    the q4 graphs) quantises the activations to int8 per block."""
    model = onnx.load(str(graph))
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend([*kept, onnx.helper.make_attribute("accuracy_level", level)])
    return model.SerializeToString()
