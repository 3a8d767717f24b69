"""Which kind of FLUX.2 [klein] model a checkpoint is, and the defaults diffusers runs that kind with.

`model_index.json`'s `is_distilled` says it: Flux2KleinPipeline registers it in its config (False when the key is
missing, as diffusers' own constructor defaults it) and runs classifier-free guidance only when it is False and the
guidance scale is above 1. The defaults are read from diffusers' pipelines themselves, so a converted repository
carries the numbers diffusers would use for it (manifest.json `pipeline`, builder.repo.manifest.PipelineDefaults).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from builder.errors import ConversionError
from builder.repo.manifest import DISTILLED, PipelineDefaults


def pipeline_defaults(model_index: Mapping[str, object]) -> PipelineDefaults:
    """The PipelineDefaults of the checkpoint whose model_index.json is `model_index`."""
    is_distilled = model_index.get("is_distilled", False)
    if not isinstance(is_distilled, bool):
        raise ConversionError(
            f"model_index.json's is_distilled is {is_distilled!r}; it must be true (klein-4B, klein-9B) or false "
            "(the base models). Check it against the original checkpoint's."
        )
    if is_distilled:
        return DISTILLED  # 4 steps (the model cards'), no guidance: diffusers ignores any scale
    from diffusers import Flux2KleinInpaintPipeline, Flux2KleinPipeline

    text = inspect.signature(Flux2KleinPipeline.__call__).parameters
    inpaint = inspect.signature(Flux2KleinInpaintPipeline.__call__).parameters
    return PipelineDefaults(
        is_distilled=False,
        steps=int(text["num_inference_steps"].default),
        guidance_scale=float(text["guidance_scale"].default),
        inpaint_guidance_scale=float(inpaint["guidance_scale"].default),
    )
