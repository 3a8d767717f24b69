"""builder.pipeline.latents' ids and packing against Flux2KleinPipeline's helpers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers.pipelines.flux2 import pipeline_flux2_klein as klein

from builder.errors import InputError
from builder.pipeline import latents


def test_ids_match_pipeline() -> None:
    pipe_cls = klein.Flux2KleinPipeline
    grid = torch.zeros((1, 128, 3, 5))
    expected_img = pipe_cls._prepare_latent_ids(grid)[0].numpy()
    assert np.array_equal(latents.prepare_latent_ids(3, 5), expected_img)
    assert latents.prepare_latent_ids(3, 5).dtype == np.int64

    prompt_embeds = torch.zeros((1, 512, 96))
    expected_txt = pipe_cls._prepare_text_ids(prompt_embeds)[0].numpy()
    assert np.array_equal(latents.prepare_text_ids(512), expected_txt)


def test_pack_and_unpack_match_pipeline() -> None:
    pipe_cls = klein.Flux2KleinPipeline
    noise = torch.randn((1, 128, 3, 5), generator=torch.Generator("cpu").manual_seed(1))
    packed = pipe_cls._pack_latents(noise).numpy()
    assert np.array_equal(latents.pack_latents(noise.numpy()), packed)

    ids = pipe_cls._prepare_latent_ids(noise)
    unpacked = pipe_cls._unpack_latents_with_ids(torch.from_numpy(packed), ids).numpy()
    assert np.array_equal(latents.unpack_latents(packed, 3, 5), unpacked)
    with pytest.raises(InputError, match="tokens"):
        latents.unpack_latents(packed, 4, 5)
