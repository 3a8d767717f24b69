"""Helpers for tests that run saved graphs on onnxruntime's CPU EP."""

from __future__ import annotations

from pathlib import Path

import onnx

from builder.convert.fp16_compute import set_accuracy_level
from builder.convert.fp16_storage import store_fp16


def at_accuracy_level(graph: Path, level: int) -> bytes:
    """The saved graph (weights loaded) with every MatMulNBits at `level`: 0 runs the q4 weights on fp32
    activations, the plain computation a q4 graph's other variants are checked against; 4 (how `convert` saves
    the q4 graphs) quantises the activations to int8 per block."""
    model = onnx.load(str(graph))
    set_accuracy_level(model, level)
    return bytes(model.SerializeToString())


def with_fp16_stored_weights(graph: Path) -> bytes:
    """The saved fp32 graph (weights loaded) with its weights stored as the compact format stores an fp32-computing
    graph's (builder.convert.fp16_storage.store_fp16: large float32 initializers rounded to fp16, cast back up): what a q4
    repo's fp32 VAE must compute exactly, up to kernel rounding."""
    model = onnx.load(str(graph))
    store_fp16(model)
    return bytes(model.SerializeToString())
