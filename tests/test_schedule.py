"""builder.pipeline.schedule (and the Euler step of builder.pipeline.latents) against diffusers' scheduler and
Flux2KleinPipeline helpers, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux2 import pipeline_flux2_klein as klein

from builder.pipeline import latents, schedule

# The scheduler config the FLUX.2 checkpoints ship (diffusers-format FLUX.2-dev / convert_flux2_to_diffusers.py).
FLUX2_SCHEDULER = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "invert_sigmas": False,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "shift_terminal": None,
    "stochastic_sampling": False,
    "time_shift_type": "exponential",
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}


def test_the_checkpoints_scheduler_config_is_the_one_schedule_computes() -> None:
    assert {key: FLUX2_SCHEDULER[key] for key in schedule.SCHEDULER_CONFIG} == schedule.SCHEDULER_CONFIG
    assert (
        schedule.SCHEDULER_CONFIG["num_train_timesteps"] == FlowMatchEulerDiscreteScheduler().config.num_train_timesteps
    )


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


# (height, width, steps): square and non-square, tiny to 2048 px (image_seq_len > 4300 branch), 1 to 50 steps.
SCHEDULE_CASES = [
    (64, 64, 4),
    (96, 64, 4),
    (64, 96, 4),
    (128, 128, 4),
    (256, 256, 4),
    (512, 512, 4),
    (512, 768, 4),
    (768, 512, 4),
    (1024, 1024, 4),
    (1024, 1024, 50),
    (2048, 2048, 4),
    (1024, 2048, 4),
    (16, 16, 1),
    (16, 16, 2),
    (512, 512, 1),
    (512, 512, 2),
    (512, 512, 3),
    (512, 512, 8),
    (640, 480, 6),
    (1360, 768, 4),
    (1088, 1088, 4),
    (1120, 1088, 4),
    (64, 64, 28),
    (1024, 1024, 100),
]


@pytest.mark.parametrize(("height", "width", "steps"), SCHEDULE_CASES)
def test_schedule_matches_diffusers(height: int, width: int, steps: int) -> None:
    image_seq_len = (height // 16) * (width // 16)
    mu = klein.compute_empirical_mu(image_seq_len=image_seq_len, num_steps=steps)
    assert schedule.compute_empirical_mu(image_seq_len, steps) == mu

    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER)
    base = np.linspace(1.0, 1 / steps, steps)  # exactly what Flux2KleinPipeline.__call__ passes
    timesteps, n = klein.retrieve_timesteps(scheduler, steps, "cpu", sigmas=base, mu=mu)
    assert n == steps

    sigmas, actual_timesteps = schedule.retrieve_timesteps(steps, image_seq_len)
    assert sigmas.dtype == np.float32 and actual_timesteps.dtype == np.float32
    assert np.array_equal(bits(sigmas), bits(scheduler.sigmas.numpy()))
    assert np.array_equal(bits(actual_timesteps), bits(timesteps.numpy()))
    assert sigmas[-1] == 0.0 and sigmas.shape == (steps + 1,)

    for i, t in enumerate(timesteps):
        # What the pipeline hands the transformer: t.expand(B).to(dtype), then `timestep / 1000`.
        expected = (t.expand(1).to(torch.float32) / 1000).numpy()
        assert np.array_equal(bits(schedule.model_timestep(actual_timesteps[i])), bits(expected))


def test_euler_step_matches_scheduler_step() -> None:
    steps, seq = 4, 1024
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER)
    mu = klein.compute_empirical_mu(image_seq_len=seq, num_steps=steps)
    timesteps, _ = klein.retrieve_timesteps(scheduler, steps, "cpu", sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    scheduler.set_begin_index(0)
    sigmas, _ = schedule.retrieve_timesteps(steps, seq)

    generator = torch.Generator("cpu").manual_seed(3)
    x_torch = torch.randn((1, seq, 128), generator=generator)
    x_numpy = x_torch.numpy().copy()
    for i, t in enumerate(timesteps):
        velocity = torch.randn((1, seq, 128), generator=generator)
        x_torch = scheduler.step(velocity, t, x_torch, return_dict=False)[0]
        x_numpy = latents.euler_step(x_numpy, velocity.numpy(), sigmas[i], sigmas[i + 1])
        assert np.array_equal(bits(x_numpy), bits(x_torch.numpy())), f"step {i}"
