"""Base (not distilled) FLUX.2 [klein] models: `convert` carries the model's kind and diffusers' defaults into the
manifest, and `klein-web reference` runs classifier-free guidance exactly as Flux2KleinPipeline and
Flux2KleinInpaintPipeline do (float32) on a tiny base checkpoint: make-tiny's with `"is_distilled": false`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from builder.errors import ConversionError, InputError
from builder.pipeline import imaging, reference
from builder.pipeline.guidance import guided
from builder.repo import manifest as repo_manifest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

PROMPT = "a red fox sitting in the snow"
NEGATIVE = "blurry, low quality"
SEED = 5
STEPS = 3
# The same float32 math on both sides (see test_reference_editing.py): most runs are identical.
PSNR_MIN = 80.0


@pytest.fixture(scope="module")
def base_checkpoint(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """make-tiny's diffusers folder as a base model: model_index.json's is_distilled false."""
    folder = tmp_path_factory.mktemp("base") / "diffusers"
    shutil.copytree(tiny_models["diffusers"], folder)
    index = json.loads((folder / "model_index.json").read_text())
    assert index["is_distilled"] is True  # make-tiny builds distilled klein, like klein-4B
    index["is_distilled"] = False
    (folder / "model_index.json").write_text(json.dumps(index, indent=2))
    return folder


@pytest.fixture(scope="module")
def base_repo(base_checkpoint: Path) -> Path:
    from builder.convert.convert import convert
    from builder.convert.tiny import TINY_DATA_FILE_CAPS

    out = base_checkpoint.parent / "fp32"
    convert(base_checkpoint, out, precision="fp32", log=lambda _m: None, max_data_file_bytes=TINY_DATA_FILE_CAPS)
    return out


@pytest.fixture(scope="module")
def base_pipe(base_checkpoint: Path) -> Any:
    pipe = diffusers.Flux2KleinPipeline.from_pretrained(str(base_checkpoint), dtype=torch.float32)
    assert pipe.config.is_distilled is False
    return pipe


def oracle(pipe: Any, *, guidance_scale: float, negative: str | None = None, **kwargs: Any) -> np.ndarray:
    """diffusers in float32, output_type="np", numpy_to_pil's rounding. Flux2KleinPipeline takes no negative prompt
    text, only its embeddings: encoded here with the pipeline's own encode_prompt, as it encodes its default ""."""
    if negative is not None:
        kwargs["negative_prompt_embeds"] = pipe.encode_prompt(prompt=negative, device="cpu")[0]
    images = pipe(
        prompt=PROMPT,
        num_inference_steps=STEPS,
        guidance_scale=guidance_scale,
        generator=torch.Generator("cpu").manual_seed(SEED),
        output_type="np",
        **kwargs,
    ).images
    pixels: np.ndarray = np.round(images[0] * 255).astype(np.uint8)
    return pixels


def assert_close(result: np.ndarray, expected: np.ndarray, what: str) -> None:
    comparison = imaging.compare(result, expected)
    print(f"{what} vs diffusers: {comparison.summary()}")
    assert comparison.psnr >= PSNR_MIN, comparison.summary()


def test_convert_writes_the_base_models_kind_and_diffusers_defaults(base_repo: Path) -> None:
    defaults = repo_manifest.load(base_repo).pipeline
    assert defaults == repo_manifest.PipelineDefaults(
        is_distilled=False, steps=50, guidance_scale=4.0, inpaint_guidance_scale=8.0
    )
    written = json.loads((base_repo / repo_manifest.MANIFEST_NAME).read_text())
    assert written["pipeline"]["is_distilled"] is False


def test_a_distilled_models_manifest_reads_as_before(tiny_models: dict[str, Path]) -> None:
    written = json.loads((tiny_models["fp32"] / repo_manifest.MANIFEST_NAME).read_text())
    assert "pipeline" not in written  # distilled klein's manifest keeps the layout older readers know
    assert repo_manifest.load(tiny_models["fp32"]).pipeline == repo_manifest.DISTILLED


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_convert_refuses_an_is_distilled_that_is_not_a_boolean(
    base_checkpoint: Path, tmp_path: Path, value: object
) -> None:
    from builder.convert.convert import convert

    src = tmp_path / "src"
    shutil.copytree(base_checkpoint, src)
    index = json.loads((src / "model_index.json").read_text())
    index["is_distilled"] = value
    (src / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ConversionError, match="is_distilled"):
        convert(src, tmp_path / "out", precision="fp32", log=lambda _m: None)
    assert not (tmp_path / "out").exists()


def test_text_with_the_default_guidance_matches_diffusers(base_repo: Path, base_pipe: Any, tmp_path: Path) -> None:
    messages: list[str] = []
    result = reference.generate_png(
        base_repo,
        prompt=PROMPT,
        seed=SEED,
        width=80,
        height=64,
        steps=STEPS,
        out=tmp_path / "guided.png",
        log=messages.append,
    )
    assert result.guidance is not None and result.guidance.scale == 4.0 and result.guidance.negative_prompt == ""
    expected = oracle(base_pipe, guidance_scale=4.0, width=80, height=64)
    assert_close(result.image, expected, "base, guidance 4 (default)")
    # Guidance changes the image: the unguided diffusers image is far outside the bound (53 dB on this model).
    unguided = oracle(base_pipe, guidance_scale=1.0, width=80, height=64)
    assert imaging.psnr(result.image, unguided) < PSNR_MIN - 10  # far outside the bound above
    pixels, text = imaging.read_png(tmp_path / "guided.png")
    assert np.array_equal(pixels, result.image)
    assert text["guidance_scale"] == "4.0" and text["negative_prompt"] == "" and text["steps"] == str(STEPS)


def test_guidance_one_runs_no_guidance(base_repo: Path, base_pipe: Any) -> None:
    result = reference.generate(
        base_repo, prompt=PROMPT, seed=SEED, width=80, height=64, steps=STEPS, log=lambda _m: None, guidance_scale=1
    )
    assert result.guidance is None
    assert_close(result.image, oracle(base_pipe, guidance_scale=1.0, width=80, height=64), "base, guidance 1")


def test_a_negative_prompt_and_another_scale_match_diffusers(base_repo: Path, base_pipe: Any) -> None:
    result = reference.generate(
        base_repo,
        prompt=PROMPT,
        seed=SEED,
        width=64,
        height=80,
        steps=STEPS,
        log=lambda _m: None,
        guidance_scale=2.5,
        negative_prompt=NEGATIVE,
    )
    expected = oracle(base_pipe, guidance_scale=2.5, negative=NEGATIVE, width=64, height=80)
    assert_close(result.image, expected, f"base, guidance 2.5, negative {NEGATIVE!r}")
    with_empty = oracle(base_pipe, guidance_scale=2.5, width=64, height=80)
    assert imaging.psnr(result.image, with_empty) < PSNR_MIN - 10  # the negative prompt was used


def test_editing_with_guidance_matches_diffusers(base_repo: Path, base_pipe: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    picture = tmp_path / "ref.png"
    Image.fromarray(rng.integers(0, 256, (10, 13, 3), dtype=np.uint8)).resize((104, 80)).save(picture)
    result = reference.generate(
        base_repo,
        prompt=PROMPT,
        seed=SEED,
        width=None,
        height=None,
        steps=STEPS,
        log=lambda _m: None,
        images=[picture],
        guidance_scale=3.0,
    )
    assert result.mode == "edit" and result.guidance is not None
    from diffusers.utils import load_image

    expected = oracle(base_pipe, guidance_scale=3.0, image=[load_image(str(picture))])
    assert_close(result.image, expected, "base, edit with guidance 3")


def test_inpainting_defaults_to_the_inpaint_pipelines_guidance(base_repo: Path, base_checkpoint: Path) -> None:
    source = base_repo.parent / "source.png"
    mask = base_repo.parent / "mask.png"
    rng = np.random.default_rng(12)
    Image.fromarray(rng.integers(0, 256, (8, 12, 3), dtype=np.uint8)).resize((96, 64)).save(source)
    mask_image = Image.new("L", (96, 64), 0)
    mask_image.paste(255, (20, 10, 70, 50))
    mask_image.save(mask)
    result = reference.generate(
        base_repo,
        prompt=PROMPT,
        seed=SEED,
        width=None,
        height=None,
        steps=STEPS,
        log=lambda _m: None,
        images=[source],
        mask=mask,
        strength=1.0,
    )
    assert result.guidance is not None and result.guidance.scale == 8.0
    from diffusers.utils import load_image

    pipe = diffusers.Flux2KleinInpaintPipeline.from_pretrained(str(base_checkpoint), dtype=torch.float32)
    images = pipe(
        prompt=PROMPT,
        image=load_image(str(source)),
        mask_image=load_image(str(mask)),
        strength=1.0,
        num_inference_steps=STEPS,
        generator=torch.Generator("cpu").manual_seed(SEED),
        output_type="np",
    ).images  # guidance_scale left at the inpaint pipeline's own default
    assert_close(result.image, np.round(images[0] * 255).astype(np.uint8), "base, inpaint, default guidance")


def test_a_distilled_model_ignores_guidance_as_diffusers_does(tiny_models: dict[str, Path]) -> None:
    messages: list[str] = []
    kwargs: dict[str, Any] = {"prompt": PROMPT, "seed": SEED, "width": 80, "height": 64, "steps": 2}
    guided_request = reference.generate(
        tiny_models["fp32"], log=messages.append, guidance_scale=6.0, negative_prompt=NEGATIVE, **kwargs
    )
    plain = reference.generate(tiny_models["fp32"], log=lambda _m: None, **kwargs)
    assert guided_request.guidance is None and np.array_equal(guided_request.image, plain.image)
    assert any("guidance scale 6 is ignored for step-wise distilled models" in m for m in messages), messages
    assert any("negative prompt is ignored" in m for m in messages), messages


def test_the_models_default_steps(base_repo: Path, tiny_models: dict[str, Path]) -> None:
    """steps=None takes the model's: 4 for distilled klein; a base model's 50 (diffusers') is checked by the plan
    alone here, not run."""
    result = reference.generate(tiny_models["fp32"], prompt=PROMPT, seed=1, width=64, height=64, steps=None, log=print)
    assert result.steps == 4 and result.steps_run == 4
    assert repo_manifest.load(base_repo).pipeline.steps == 50


@pytest.mark.parametrize("scale", [0.5, 31, float("nan"), True])
def test_a_guidance_scale_out_of_range_is_refused_before_any_work(base_repo: Path, scale: float) -> None:
    with pytest.raises(InputError, match="guidance_scale"):
        reference.generate(
            base_repo, prompt=PROMPT, seed=1, width=64, height=64, steps=2, log=print, guidance_scale=scale
        )


def test_guided_rounds_each_operation_in_float32_like_torch() -> None:
    rng = np.random.default_rng(0)
    positive = rng.standard_normal((1, 64, 128), dtype=np.float32)
    negative = rng.standard_normal((1, 64, 128), dtype=np.float32)
    for scale in (4.0, 3.3, 7.25):
        expected = torch.from_numpy(negative) + scale * (torch.from_numpy(positive) - torch.from_numpy(negative))
        assert np.array_equal(guided(positive, negative, scale), expected.numpy())
