"""Where inpainting starts in the schedule (Flux2KleinInpaintPipeline's strength).

web_src/src/shared/inpaint.js `inpaintStart` is its twin (tests/test_twins.py holds the two equal).
"""

from __future__ import annotations

from builder.errors import InputError


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.get_timesteps and the
# "steps is < 1" check of its __call__ @ 0.42.1
def inpaint_start(num_steps: int, strength: float) -> int:
    """`t_start`: inpainting runs timesteps[t_start:] with sigmas[t_start:], num_steps - t_start steps.

    In float64 as Python computes it, so 4 steps at strength 0.8 start at 0 (4 - 3.2000000000000002 truncates
    to 0) and run all four; at 0.5 they run the last two.
    """
    init_timestep = min(num_steps * strength, num_steps)
    t_start = int(max(num_steps - init_timestep, 0))
    if num_steps - t_start < 1:
        raise InputError(
            f"`strength` {strength} leaves no denoising step of {num_steps}: inpainting runs "
            f"strength x steps of them; raise the strength or the steps."
        )
    return t_start
