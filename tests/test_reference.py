"""`klein-web reference` against diffusers' Flux2KleinPipeline (float32) on the make-tiny model, and its errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import REPO_ROOT
from builder.errors import InputError, ModelRepoError
from builder.pipeline import imaging, reference

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

PROMPT = "a red fox sitting in the snow"
SEED = 42
STEPS = 4

# q4 MatMulNBits (block 32) on the tiny random-weight model, measured against the float32 diffusers image:
# 35.3 dB at 64x64 and 35.4 dB at 96x64 (make-tiny seed 0). Quantisation error, not a pipeline bug; the
# bound leaves margin for other seeds and onnxruntime versions while still catching a broken q4 path
# (a wrong schedule, noise or decode gives < 15 dB).
Q4_PSNR_MIN = 30.0


@pytest.fixture(scope="module")
def diffusers_pipe(tiny_models: dict[str, Path]) -> Any:
    from diffusers import Flux2KleinPipeline

    return Flux2KleinPipeline.from_pretrained(str(tiny_models["diffusers"]), dtype=torch.float32)


def diffusers_uint8(pipe: Any, *, width: int, height: int, prompt: str = PROMPT, seed: int = SEED) -> np.ndarray:
    """The oracle: diffusers in float32, output_type="np", then numpy_to_pil's rounding."""
    images = pipe(
        prompt=prompt,
        width=width,
        height=height,
        num_inference_steps=STEPS,
        guidance_scale=1.0,
        generator=torch.Generator("cpu").manual_seed(seed),
        output_type="np",
    ).images
    pixels: np.ndarray = np.round(images[0] * 255).astype(np.uint8)
    return pixels


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "builder", "reference", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_fp32_64x64_matches_diffusers(tiny_models: dict[str, Path], diffusers_pipe: Any, tmp_path: Path) -> None:
    out = tmp_path / "ref.png"
    result = run_cli(
        str(tiny_models["fp32"]),
        "--prompt",
        PROMPT,
        "--seed",
        str(SEED),
        "--size",
        "64x64",
        "--steps",
        str(STEPS),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    for stage in ("check", "load", "encode", "latents", "timesteps", "denoise", "decode", "peak RSS"):
        assert f"reference: {stage}" in result.stderr
    pixels, text = imaging.read_png(out)
    expected = diffusers_uint8(diffusers_pipe, width=64, height=64)
    comparison = imaging.compare(pixels, expected)
    print(f"fp32 64x64 vs diffusers: {comparison.summary()}")
    assert comparison.psnr >= 40.0, comparison.summary()
    assert text["prompt"] == PROMPT and text["seed"] == str(SEED) and text["steps"] == str(STEPS)
    assert text["size"] == "64x64" and "fp32" in text["model"]
    assert [p.name for p in tmp_path.iterdir()] == ["ref.png"]  # written atomically, no temp file left


def test_fp32_non_square_matches_diffusers(tiny_models: dict[str, Path], diffusers_pipe: Any) -> None:
    messages: list[str] = []
    result = reference.generate(
        tiny_models["fp32"], prompt=PROMPT, seed=7, width=96, height=64, steps=STEPS, log=messages.append
    )
    expected = diffusers_uint8(diffusers_pipe, width=96, height=64, seed=7)
    assert result.image.shape == (64, 96, 3) and result.image_float.shape == (1, 3, 64, 96)
    comparison = imaging.compare(result.image, expected)
    print(f"fp32 96x64 vs diffusers: {comparison.summary()}")
    assert comparison.psnr >= 40.0, comparison.summary()
    assert result.variants == {"text_encoder": "fp32", "transformer": "fp32", "vae_decoder": "fp32"}
    # diffusers' order and the app's timing keys (web_src/src/pipeline/generate.js)
    assert list(result.stage_seconds) == ["check", "load", "encode", "latents", "timesteps", "denoise", "decode"]
    assert result.peak_rss_bytes and result.peak_rss_bytes > 0
    tokenizer = diffusers_pipe.tokenizer
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert result.prompt_tokens == len(tokenizer(text)["input_ids"]) and result.prompt_dropped == 0
    assert sum(m.startswith("reference: step ") for m in messages) == STEPS


@pytest.mark.parametrize(("width", "height"), [(64, 64), (96, 64)])
def test_q4_is_close_to_diffusers(tiny_models: dict[str, Path], diffusers_pipe: Any, width: int, height: int) -> None:
    result = reference.generate(
        tiny_models["q4"], prompt=PROMPT, seed=SEED, width=width, height=height, steps=STEPS, log=lambda _m: None
    )
    assert result.variants["transformer"] == "q4" and result.variants["text_encoder"] == "q4"
    comparison = imaging.compare(result.image, diffusers_uint8(diffusers_pipe, width=width, height=height))
    print(f"q4 {width}x{height} vs diffusers fp32: {comparison.summary()}")
    assert comparison.psnr >= Q4_PSNR_MIN, comparison.summary()


def test_pinned_variant(tiny_models: dict[str, Path]) -> None:
    result = reference.generate(
        tiny_models["q4"],
        prompt=PROMPT,
        seed=SEED,
        width=64,
        height=64,
        steps=1,
        log=lambda _m: None,
        variants={"vae_decoder": "fp16"},
    )
    assert result.variants["vae_decoder"] == "fp16"
    with pytest.raises(ModelRepoError, match="variant `fp32`"):
        reference.generate(
            tiny_models["q4"],
            prompt=PROMPT,
            seed=SEED,
            width=64,
            height=64,
            steps=1,
            log=lambda _m: None,
            variants={"transformer": "fp32"},
        )


def test_cli_variant_pins_a_component_and_a_bad_pair_is_refused(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "fp16-vae.png"
    common = ["--prompt", PROMPT, "--seed", str(SEED), "--size", "64x64", "--steps", "1"]
    result = run_cli(str(tiny_models["q4"]), *common, "--variant", "vae_decoder=fp16", "--out", str(out))
    assert result.returncode == 0, result.stderr
    pinned = reference.generate(
        tiny_models["q4"],
        prompt=PROMPT,
        seed=SEED,
        width=64,
        height=64,
        steps=1,
        log=lambda _m: None,
        variants={"vae_decoder": "fp16"},
    )
    pixels, _text = imaging.read_png(out)
    assert np.array_equal(pixels, pinned.image)
    for bad in ("vae_decoder", "vae=fp16", "vae_decoder="):
        refused = run_cli(str(tiny_models["q4"]), *common, "--variant", bad, "--out", str(tmp_path / "x.png"))
        assert refused.returncode == 1 and "COMPONENT=VARIANT" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    ("width", "height", "steps", "name"),
    [
        (100, 64, 4, "width"),
        (64, 8, 4, "height"),
        (0, 64, 4, "width"),
        (64, 64, 0, "steps"),
        (64, 64, 101, "steps"),
    ],
)
def test_bad_parameters_are_rejected(
    tiny_models: dict[str, Path], width: int, height: int, steps: int, name: str
) -> None:
    with pytest.raises(InputError, match=f"`{name}`"):
        reference.generate(
            tiny_models["fp32"], prompt=PROMPT, seed=SEED, width=width, height=height, steps=steps, log=lambda _m: None
        )


def test_cli_size_not_multiple_of_16(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    result = run_cli(str(tiny_models["fp32"]), "--prompt", PROMPT, "--size", "100x64", "--out", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert "multiples of 16" in result.stderr and "96x64" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.fixture
def repo_copy(tiny_models: dict[str, Path], tmp_path: Path) -> Path:
    dest = tmp_path / "fp32"
    shutil.copytree(tiny_models["fp32"], dest)
    return dest


def no_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if onnxruntime is asked for a session: file problems must be caught before that."""
    import onnxruntime

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("an onnxruntime session was created before the model files were checked")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)


def test_missing_model_file_is_named(repo_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = repo_copy / "transformer" / "transformer_fp32.onnx_data_3"
    missing.unlink()
    result = run_cli(str(repo_copy), "--prompt", PROMPT, "--size", "64x64", "--out", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert str(missing) in result.stderr and "missing" in result.stderr and "Traceback" not in result.stderr
    no_sessions(monkeypatch)
    with pytest.raises(ModelRepoError, match=r"transformer_fp32\.onnx_data_3"):
        reference.generate(repo_copy, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _m: None)


def test_truncated_external_data_is_a_clear_error(repo_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = repo_copy / "text_encoder" / "text_encoder_fp32.onnx_data"
    size = data.stat().st_size
    with open(data, "r+b") as handle:
        handle.truncate(size // 2)
    no_sessions(monkeypatch)
    with pytest.raises(ModelRepoError, match=r"text_encoder_fp32\.onnx_data has .* bytes but the manifest says"):
        reference.generate(repo_copy, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _m: None)


def test_missing_tokenizer_and_bad_scheduler(repo_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_sessions(monkeypatch)
    config_path = repo_copy / "scheduler" / "scheduler_config.json"
    config = json.loads(config_path.read_text())
    # The manifest pins the scheduler config's size, so rewrite it with the same length.
    changed = json.dumps({**config, "use_dynamic_shifting": False})
    manifest_data = json.loads((repo_copy / "manifest.json").read_text())
    manifest_data["files"]["scheduler/scheduler_config.json"]["size"] = len(changed.encode())
    # No sha256 (and so no block hashes): the check that fails must be the scheduler's own.
    manifest_data["files"]["scheduler/scheduler_config.json"]["sha256"] = None
    del manifest_data["files"]["scheduler/scheduler_config.json"]["blocks"]
    (repo_copy / "manifest.json").write_text(json.dumps(manifest_data))
    config_path.write_text(changed)
    with pytest.raises(ModelRepoError, match="use_dynamic_shifting"):
        reference.generate(repo_copy, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _m: None)
    (repo_copy / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(ModelRepoError, match=r"tokenizer\.json"):
        reference.generate(repo_copy, prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, log=lambda _m: None)


def test_runtime_modules_import_no_ml_framework() -> None:
    """reference/fetch run without the optional torch/diffusers/transformers extras."""
    modules = (
        "builder.cli",
        "builder.pipeline.limits",
        "builder.pipeline.rng",
        "builder.pipeline.schedule",
        "builder.pipeline.latents",
        "builder.pipeline.inpaint",
        "builder.pipeline.imaging",
        "builder.pipeline.prompt",
        "builder.pipeline.reference",
        "builder.repo.hub",
        "builder.repo.download",
    )
    code = (
        f"import sys; import {', '.join(modules)}; "
        "heavy = sorted(m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules); "
        "print(','.join(heavy)); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"imported: {result.stdout.strip()} {result.stderr}"
