"""Classifier-free guidance, as diffusers' Flux2KleinPipeline and Flux2KleinInpaintPipeline run it.

A base model (manifest.json `pipeline.is_distilled` false) is guided when the scale is above 1: every step runs the
transformer a second time, on the negative prompt's embeddings (`""` unless one is given, encoded through the same
chat template and padding), and the two predictions are combined as `neg + scale * (pos - neg)` in float32. A
distilled model (klein-4B, klein-9B) runs one call a step whatever the scale: diffusers logs that the scale is
ignored, and so do we. web_src/src/pipeline/guidance.js is the app's twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from builder.pipeline import limits
from builder.repo.manifest import PipelineDefaults


@dataclass(frozen=True)
class Guidance:
    """Guidance that runs: a scale above 1 and the negative prompt."""

    scale: float
    negative_prompt: str


def resolve_guidance(
    defaults: PipelineDefaults,
    *,
    mode: str,
    scale: float | None,
    negative_prompt: str | None,
    log: Callable[[str], None],
) -> Guidance | None:
    """The guidance a request runs with on this model (None: one transformer call a step). `scale` None takes the
    model's default for the mode (Flux2KleinPipeline's 4.0, Flux2KleinInpaintPipeline's 8.0 for base models)."""
    if scale is not None:
        limits.check_guidance(scale)
    if negative_prompt is not None:
        limits.check_prompt(negative_prompt, name="the negative prompt")
    if defaults.is_distilled:
        if scale is not None and scale > 1:
            log(f"reference: guidance scale {scale:g} is ignored for step-wise distilled models (as in diffusers)")
        if negative_prompt:
            log("reference: the negative prompt is ignored: this model is distilled and runs no guidance")
        return None
    default = defaults.inpaint_guidance_scale if mode == "inpaint" else defaults.guidance_scale
    chosen = scale if scale is not None else default
    if chosen is None or chosen <= 1:
        return None
    return Guidance(scale=float(chosen), negative_prompt=negative_prompt or "")


def guided(positive: np.ndarray, negative: np.ndarray, scale: float) -> np.ndarray:
    """`neg + scale * (pos - neg)` in float32, one rounding per operation, as torch computes it on the CPU (the
    Python float scale is cast to the tensors' float32)."""
    difference = np.subtract(positive, negative, dtype=np.float32)
    scaled = np.multiply(np.float32(scale), difference, dtype=np.float32)
    result: np.ndarray = np.add(negative, scaled, dtype=np.float32)
    return result
