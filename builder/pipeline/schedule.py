"""The FLUX.2 [klein] sampling schedule in NumPy: `mu`, the time-shifted sigmas, the scheduler timesteps and the
transformer's `t / 1000`, bit-exact with diffusers 0.42.1 (CPU, float32).

web_src/src/pipeline/schedule.js is its twin (tests/test_twins.py holds their constants and their schedules equal;
tests/test_schedule.py holds this module equal to diffusers).
"""

from __future__ import annotations

import math

import numpy as np

from builder.errors import InputError

NUM_TRAIN_TIMESTEPS = 1000  # scheduler_config num_train_timesteps of FLUX.2
# The scheduler_config.json settings this schedule is the math of (the reference refuses a repository with others).
SCHEDULER_CONFIG = {
    "num_train_timesteps": NUM_TRAIN_TIMESTEPS,
    "use_dynamic_shifting": True,
    "time_shift_type": "exponential",
}
# compute_empirical_mu's fits of mu against the image tokens (slope, intercept), at 10 and at 200 steps; above
# MU_FIT_TOKENS_MAX tokens the 200-step fit alone gives mu.
MU_FIT_10_STEPS = (8.73809524e-05, 1.89833333)
MU_FIT_200_STEPS = (0.00016927, 0.45666666)
MU_FIT_TOKENS_MAX = 4300


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.compute_empirical_mu @ 0.42.1
def compute_empirical_mu(image_seq_len: int, num_steps: int) -> float:
    """The time-shift `mu` for `image_seq_len` packed image tokens and `num_steps` steps (float64, as Python does)."""
    a1, b1 = MU_FIT_10_STEPS
    a2, b2 = MU_FIT_200_STEPS

    if image_seq_len > MU_FIT_TOKENS_MAX:
        return float(a2 * image_seq_len + b2)

    m_200 = a2 * image_seq_len + b2
    m_10 = a1 * image_seq_len + b1
    a = (m_200 - m_10) / 190.0
    b = m_200 - 200.0 * a
    return float(a * num_steps + b)


# Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler._time_shift_exponential @ 0.42.1
def time_shift(mu: float, sigmas: np.ndarray) -> np.ndarray:
    """math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0) on float32 `sigmas`: the Python floats are "weak" under
    NumPy 2 promotion, so every operation rounds to float32."""
    shift = np.float32(math.exp(mu))
    shifted: np.ndarray = shift / (shift + (np.float32(1.0) / sigmas - np.float32(1.0)))
    return shifted


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.retrieve_timesteps +
# diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.set_timesteps
# (sigmas given, use_dynamic_shifting=True, time_shift_type="exponential") @ 0.42.1
def retrieve_timesteps(num_steps: int, image_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(sigmas float32 [N+1] ending in 0, scheduler timesteps float32 [N]) exactly as diffusers computes them."""
    if int(num_steps) < 1:
        raise InputError(f"`num_steps` must be at least 1, got {num_steps}; klein is distilled for 4 steps.")
    mu = compute_empirical_mu(image_seq_len, num_steps)
    # float64 linspace -> float32 (scheduler L349), as Flux2KleinPipeline.__call__ builds it.
    base = np.linspace(1.0, 1 / num_steps, num_steps).astype(np.float32)
    shifted = time_shift(mu, base)
    timesteps = (shifted * np.float32(NUM_TRAIN_TIMESTEPS)).astype(np.float32)
    sigmas = np.concatenate([shifted, np.zeros(1, dtype=np.float32)]).astype(np.float32)
    return sigmas, timesteps


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline.__call__ `timestep=timestep / 1000` @ 0.42.1
def model_timestep(timestep: np.float32 | float) -> np.ndarray:
    """The transformer's `timestep` input [1]: f32(t / 1000). Not always equal to sigma (512², step 1 differs)."""
    return np.array([np.float32(timestep) / np.float32(NUM_TRAIN_TIMESTEPS)], dtype=np.float32)
