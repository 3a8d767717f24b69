"""A base model (model_index.json's is_distilled false) in the real app in headless Chromium: the page shows its
Guidance scale and Negative prompt with the model's defaults, and the worker runs classifier-free guidance as the CPU
reference (builder.pipeline.reference, held to diffusers by tests/test_reference_guidance.py) does.

One regress run drives it as a user would: the page's fields, the worker's two transformer calls a step, the PNG's
keys, and the CPU reference made with the same guidance. One small image, two steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.check.regress.cases import RegressOptions
from builder.check.regress.run import main
from builder.pipeline import imaging, reference

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROMPT = "a red fox in the snow"
NEGATIVE = "blurry, low quality"
SEED = 3
STEPS = 2


def test_a_base_model_is_guided_in_the_browser_as_the_cpu_reference_guides_it(
    base_fp32_repo: Path, dist_dir: Path, tmp_path: Path
) -> None:
    cases = tmp_path / "cases.json"
    case = {"name": "guided", "guidance_scale": 4.5, "negative_prompt": NEGATIVE, "reference_from_cpu": True}
    cases.write_text(json.dumps({"cases": [case]}), encoding="utf-8")
    report_dir = tmp_path / "report"
    messages: list[str] = []
    options = RegressOptions(
        models_dir=base_fp32_repo,
        prompt=PROMPT,
        seed=SEED,
        size="64x64",
        steps=STEPS,
        cases_file=cases,
        report_dir=report_dir,
        dist_dir=dist_dir,
        precision="fp32",
    )
    assert main(options, log=messages.append) == 0, "\n".join(messages[-20:])
    data: dict[str, Any] = json.loads((report_dir / "report.json").read_text())
    # fp32 graphs on WebGPU against onnxruntime on the CPU: the bounds of every fp32 browser test.
    metrics = data["metrics"]
    assert metrics["identical"] or metrics["psnr"] >= 40.0, metrics
    assert data["parameters"]["guidance_scale"] == 4.5 and data["parameters"]["negative_prompt"] == NEGATIVE
    # Two transformer calls a step; the image says which guidance made it, in the reference CLI's keys.
    assert data["transformer_calls"] == 2 * STEPS
    assert data["guidance"] == {"scale": 4.5, "negativePrompt": NEGATIVE}
    png_text = data["download"]["png_text"]
    assert (png_text["guidance_scale"], png_text["negative_prompt"], png_text["steps"]) == ("4.5", NEGATIVE, "2")

    # Guidance changed the image: the same run without it (scale 1) is another image, further from the app's than the
    # guided reference is (the tiny model's random weights make the two predictions of a step close).
    unguided = reference.generate(
        base_fp32_repo,
        prompt=PROMPT,
        seed=SEED,
        width=64,
        height=64,
        steps=STEPS,
        guidance_scale=1.0,
        log=lambda _msg: None,
    ).image
    candidate = imaging.read_png(report_dir / "candidate.png")[0]
    apart = imaging.psnr(candidate, unguided)
    print(f"the app against the guided CPU reference: {metrics}; against the unguided one: {apart:.1f} dB")
    assert not np.array_equal(candidate, unguided)
    assert metrics["identical"] or metrics["psnr"] > apart


def test_the_page_shows_a_base_models_fields_with_its_defaults_and_checks_them(
    base_fp32_repo: Path, dist_dir: Path, tmp_path: Path, chromium_path: Path, profile_dir: Path
) -> None:
    """No image: the form as the model's manifest sets it up, a share link's settings, and a refused scale."""
    from conftest import start_server  # tests/ is on sys.path (rootdir-relative conftest import)
    from playwright.sync_api import sync_playwright

    from builder.check.driver.chromium import launch_persistent

    server = start_server(dist_dir, tmp_path, models=base_fp32_repo)
    try:
        with sync_playwright() as playwright:
            context = launch_persistent(playwright, profile_dir, executable=chromium_path)
            try:
                page = context.new_page()
                page.goto(server.url("/"))
                page.wait_for_selector('#guidance[data-model="base"]')
                # The model's defaults: diffusers' 50 steps, guidance 4 (8 for inpainting), no negative prompt.
                assert page.input_value("#steps") == "50"
                assert page.is_visible("#guidance-scale") and page.is_visible("#negative-prompt")
                assert page.get_attribute("#guidance-scale", "placeholder") == "4 (8 for Inpaint)"
                assert "runs the transformer twice" in (page.text_content("#guidance-note") or "")

                # A share link's settings win over the model's defaults.
                page.goto(server.url("/?steps=3&guidance=6.5&negative=dark"))
                page.wait_for_selector('#guidance[data-model="base"]')
                assert page.input_value("#steps") == "3"
                assert (page.input_value("#guidance-scale"), page.input_value("#negative-prompt")) == ("6.5", "dark")

                # A scale out of range is refused in the form, naming what to do; nothing starts.
                page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')")
                page.fill("#guidance-scale", "0.5")
                page.click("#generate")
                page.wait_for_selector("#error:not(:empty)")
                assert "Guidance scale must be a number from 1 to 30" in page.inner_text("#error")
                assert page.get_attribute("#guidance-scale", "aria-invalid") == "true"
                assert page.evaluate("() => document.body.dataset.state") == "idle"
            finally:
                context.close()
    finally:
        server.stop()
