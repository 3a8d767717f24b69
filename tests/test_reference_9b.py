"""`klein-web reference` against diffusers' Flux2KleinPipeline (float32) on make-tiny's klein-9B-shaped model
(`make-tiny --like 9b`: a wider text encoder and prompt embeddings, a wider transformer, klein-9B's block ratios),
held to the same bounds as the klein-4B-shaped one (tests/test_reference.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_reference import PROMPT, Q4_PSNR_MIN, SEED, STEPS, diffusers_uint8  # tests/ is on sys.path

from builder.pipeline import imaging, reference

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def diffusers_pipe_9b(tiny_models_9b: dict[str, Path]) -> Any:
    from diffusers import Flux2KleinPipeline

    return Flux2KleinPipeline.from_pretrained(str(tiny_models_9b["diffusers"]), dtype=torch.float32)


@pytest.mark.parametrize(("width", "height", "seed"), [(64, 64, SEED), (96, 64, 7)])
def test_fp32_matches_diffusers(
    tiny_models_9b: dict[str, Path], diffusers_pipe_9b: Any, width: int, height: int, seed: int
) -> None:
    result = reference.generate(
        tiny_models_9b["fp32"], prompt=PROMPT, seed=seed, width=width, height=height, steps=STEPS, log=lambda _m: None
    )
    assert result.variants == {"text_encoder": "fp32", "transformer": "fp32", "vae_decoder": "fp32"}
    comparison = imaging.compare(
        result.image, diffusers_uint8(diffusers_pipe_9b, width=width, height=height, seed=seed)
    )
    print(f"9B-shaped fp32 {width}x{height} vs diffusers: {comparison.summary()}")
    assert comparison.psnr >= 40.0, comparison.summary()


def test_q4_is_close_to_diffusers(tiny_models_9b: dict[str, Path], diffusers_pipe_9b: Any) -> None:
    result = reference.generate(
        tiny_models_9b["q4"], prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _m: None
    )
    assert result.variants["transformer"] == "q4" and result.variants["text_encoder"] == "q4"
    comparison = imaging.compare(result.image, diffusers_uint8(diffusers_pipe_9b, width=64, height=64))
    print(f"9B-shaped q4 64x64 vs diffusers fp32: {comparison.summary()}")
    assert comparison.psnr >= Q4_PSNR_MIN, comparison.summary()
