"""builder.pipeline.sampling against its oracles: torch.randn, diffusers' scheduler and Flux2KleinPipeline helpers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux2 import pipeline_flux2_klein as klein

from builder.errors import InputError
from builder.pipeline import sampling

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


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


SHAPES = [(1,), (5,), (15,), (16,), (20,), (33,), (1, 128, 4, 4), (1, 128, 4, 6), (1, 128, 32, 32), (2, 7, 9)]


@pytest.mark.parametrize("seed", [0, 42, 123456789, 2**32 + 42])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_torch_randn_is_bit_exact(shape: tuple[int, ...], seed: int) -> None:
    expected = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed)).numpy()
    actual = sampling.torch_randn(shape, seed)
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    differing = int((bits(actual) != bits(expected)).sum())
    assert differing == 0, f"{differing} of {actual.size} values differ from torch.randn"


def test_torch_randn_large_is_fast_and_exact() -> None:
    import time

    shape = (1, 128, 64, 64)  # 1024x1024 px
    start = time.perf_counter()
    actual = sampling.torch_randn(shape, 7)
    seconds = time.perf_counter() - start
    expected = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(7)).numpy()
    assert np.array_equal(bits(actual), bits(expected))
    assert seconds < 2.0, f"torch_randn took {seconds:.2f} s for 524288 values"


def test_torch_randn_rejects_bad_seed() -> None:
    with pytest.raises(InputError, match="seed"):
        sampling.torch_randn((16,), -1)


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
    assert sampling.compute_empirical_mu(image_seq_len, steps) == mu

    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER)
    base = np.linspace(1.0, 1 / steps, steps)  # exactly what Flux2KleinPipeline.__call__ passes
    timesteps, n = klein.retrieve_timesteps(scheduler, steps, "cpu", sigmas=base, mu=mu)
    assert n == steps

    sigmas, actual_timesteps = sampling.retrieve_timesteps(steps, image_seq_len)
    assert sigmas.dtype == np.float32 and actual_timesteps.dtype == np.float32
    assert np.array_equal(bits(sigmas), bits(scheduler.sigmas.numpy()))
    assert np.array_equal(bits(actual_timesteps), bits(timesteps.numpy()))
    assert sigmas[-1] == 0.0 and sigmas.shape == (steps + 1,)

    for i, t in enumerate(timesteps):
        # What the pipeline hands the transformer: t.expand(B).to(dtype), then `timestep / 1000`.
        expected = (t.expand(1).to(torch.float32) / 1000).numpy()
        assert np.array_equal(bits(sampling.model_timestep(actual_timesteps[i])), bits(expected))


def test_euler_step_matches_scheduler_step() -> None:
    steps, seq = 4, 1024
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER)
    mu = klein.compute_empirical_mu(image_seq_len=seq, num_steps=steps)
    timesteps, _ = klein.retrieve_timesteps(scheduler, steps, "cpu", sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    scheduler.set_begin_index(0)
    sigmas, _ = sampling.retrieve_timesteps(steps, seq)

    generator = torch.Generator("cpu").manual_seed(3)
    x_torch = torch.randn((1, seq, 128), generator=generator)
    x_numpy = x_torch.numpy().copy()
    for i, t in enumerate(timesteps):
        velocity = torch.randn((1, seq, 128), generator=generator)
        x_torch = scheduler.step(velocity, t, x_torch, return_dict=False)[0]
        x_numpy = sampling.euler_step(x_numpy, velocity.numpy(), sigmas[i], sigmas[i + 1])
        assert np.array_equal(bits(x_numpy), bits(x_torch.numpy())), f"step {i}"


def test_ids_match_pipeline() -> None:
    pipe_cls = klein.Flux2KleinPipeline
    latents = torch.zeros((1, 128, 3, 5))
    expected_img = pipe_cls._prepare_latent_ids(latents)[0].numpy()
    assert np.array_equal(sampling.prepare_latent_ids(3, 5), expected_img)
    assert sampling.prepare_latent_ids(3, 5).dtype == np.int64

    prompt_embeds = torch.zeros((1, 512, 96))
    expected_txt = pipe_cls._prepare_text_ids(prompt_embeds)[0].numpy()
    assert np.array_equal(sampling.prepare_text_ids(512), expected_txt)


def test_pack_and_unpack_match_pipeline() -> None:
    pipe_cls = klein.Flux2KleinPipeline
    latents = torch.randn((1, 128, 3, 5), generator=torch.Generator("cpu").manual_seed(1))
    packed = pipe_cls._pack_latents(latents).numpy()
    assert np.array_equal(sampling.pack_latents(latents.numpy()), packed)

    ids = pipe_cls._prepare_latent_ids(latents)
    unpacked = pipe_cls._unpack_latents_with_ids(torch.from_numpy(packed), ids).numpy()
    assert np.array_equal(sampling.unpack_latents(packed, 3, 5), unpacked)
    with pytest.raises(InputError, match="tokens"):
        sampling.unpack_latents(packed, 4, 5)
