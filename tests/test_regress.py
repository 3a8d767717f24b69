"""`klein-web regress`: cases parsing, metrics and report writing without a browser; then real runs of the
app in headless Chromium (SwiftShader) against the CPU reference of the tiny fp32 model."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from stub_repo import write_stub_repo

from builder import REPO_ROOT
from builder.check.driver.session import check_adapter
from builder.check.regress.cases import Case, RegressOptions, load_cases
from builder.check.regress.report import (
    COULD_NOT_RUN,
    FAIL,
    PASS,
    AppRun,
    CaseReport,
    Reference,
    compare,
    worst_exit_code,
    write_case_report,
)
from builder.check.regress.run import main
from builder.errors import InputError, RegressionError
from builder.pipeline import imaging
from builder.repo import manifest

DEFAULTS = Case(
    name="case", prompt="a red fox", seed=42, width=64, height=64, steps=4, psnr_min=40.0, reference_from_cpu=True
)


def png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def read_pixels(path: Path) -> np.ndarray:
    return imaging.read_png(path)[0]


def random_image(seed: int, height: int = 32, width: int = 48) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


# ------------------------------------------------------------------------------------- inputs and cases


def test_cases_from_json_and_toml_agree_and_fill_gaps_from_the_flags(tmp_path: Path) -> None:
    (tmp_path / "refs").mkdir()
    png = png_bytes(random_image(0))
    (tmp_path / "refs" / "fox.png").write_bytes(png)
    json_file = tmp_path / "cases.json"
    json_file.write_text(
        json.dumps(
            {
                "cases": [
                    {
                        "name": "fox",
                        "prompt": "a fox",
                        "seed": 7,
                        "size": "128x64",
                        "steps": 2,
                        "reference": "refs/fox.png",
                    },
                    {"seed": 9, "psnr_min": 30},
                ]
            }
        )
    )
    toml_file = tmp_path / "cases.toml"
    toml_file.write_text(
        '[[cases]]\nname = "fox"\nprompt = "a fox"\nseed = 7\nsize = "128x64"\nsteps = 2\nreference = "refs/fox.png"\n'
        "[[cases]]\nseed = 9\npsnr_min = 30\n"
    )
    from_json = load_cases(json_file, defaults=DEFAULTS)
    assert from_json == load_cases(toml_file, defaults=DEFAULTS)

    fox, second = from_json
    assert (fox.prompt, fox.seed, fox.width, fox.height, fox.steps) == ("a fox", 7, 128, 64, 2)
    # A relative reference is relative to the cases file, and it replaces the flags' --reference-from-cpu.
    assert fox.reference_png == tmp_path / "refs" / "fox.png" and not fox.reference_from_cpu
    # Fields a case leaves out come from the command-line flags.
    assert (second.prompt, second.width, second.steps, second.psnr_min) == ("a red fox", 64, 4, 30.0)
    assert second.reference_from_cpu and second.name == "02-seed9-64x64"


@pytest.mark.parametrize(
    ("cases", "message"),
    [
        ([{"seed": 1, "colour": "red"}], r"case 1: unknown field\(s\) colour"),
        ([{"seed": "1"}], r"case 1: `seed` must be int, got '1'"),
        ([{"seed": True}], r"`seed` must be int, got True"),
        ([{"size": "60x60"}], r"case 1: `size` 60x60: .*multiples of 16"),
        ([{"name": "a"}, {"name": "a"}], r"repeated: \['a'\]"),
        ([{"name": "../up"}], r"name '../up' must be"),
        ([{"seed": -1}], r"seed -1 is outside"),
        ([{"precision": "int8"}], r"precision 'int8' is not one of q4, q4f16, fp32, fp16"),
        ([], r"non-empty list"),
    ],
)
def test_bad_cases_name_the_case_and_the_field(tmp_path: Path, cases: list[dict[str, Any]], message: str) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    with pytest.raises(InputError, match=message):
        load_cases(path, defaults=DEFAULTS)


def test_a_precision_forces_the_apps_variant_through_its_url(tmp_path: Path) -> None:
    path = tmp_path / "cases.toml"
    path.write_text('[[cases]]\nname = "forced"\nprecision = "q4"\n[[cases]]\nname = "best"\n')
    forced, best = load_cases(path, defaults=DEFAULTS)
    assert forced.page_path() == "/?precision=q4" and forced.parameters()["precision"] == "q4"
    assert best.page_path() == "/" and best.precision is None


def test_a_dist_folder_without_a_built_app_could_not_run(tmp_path: Path) -> None:
    from builder.check.driver.serving import site

    with pytest.raises(RegressionError, match=r"--dist .* holds no built app.*klein-web build --out"):
        site(tmp_path, log=lambda _message: None)


def test_a_case_without_any_reference_or_a_missing_reference_png_could_not_run(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"reference_from_cpu": False}]))
    with pytest.raises(RegressionError, match=r"no reference image.*--reference PNG"):
        load_cases(path, defaults=DEFAULTS)
    path.write_text(json.dumps([{"reference": "missing.png"}]))
    with pytest.raises(RegressionError, match=r"reference image .*missing.png does not exist"):
        load_cases(path, defaults=DEFAULTS)


def test_invalid_cases_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cases.toml"
    path.write_text("[[cases]\n")
    with pytest.raises(InputError, match=r"--cases .*cases.toml is not valid TOML"):
        load_cases(path, defaults=DEFAULTS)


SWIFTSHADER = {"vendor": "google", "architecture": "swiftshader", "isFallbackAdapter": True}
NVIDIA = {"vendor": "nvidia", "architecture": "hopper", "isFallbackAdapter": False}


def test_adapter_check_names_the_missing_adapter_and_a_software_adapter_under_gpu() -> None:
    chromium = Path("/usr/bin/chromium")
    with pytest.raises(
        RegressionError, match=r"no WebGPU adapter in /usr/bin/chromium \(navigator.gpu.*\): .*SwiftShader"
    ):
        check_adapter({"error": "navigator.gpu is undefined"}, gpu=False, executable=chromium)
    with pytest.raises(RegressionError, match=r"no WebGPU adapter .*libvulkan1"):
        check_adapter({"error": "requestAdapter() returned null"}, gpu=True, executable=chromium)
    with pytest.raises(RegressionError, match=r"--gpu, but .* only offers the software adapter \(google swiftshader\)"):
        check_adapter(SWIFTSHADER, gpu=True, executable=chromium)
    check_adapter(SWIFTSHADER, gpu=False, executable=chromium)  # --software asks for exactly this
    check_adapter(NVIDIA, gpu=True, executable=chromium)
    check_adapter(NVIDIA, gpu=False, executable=chromium)


# ------------------------------------------------------------------------------------- metrics and reports


def test_compare_identical_images_pass_with_infinite_psnr() -> None:
    image = random_image(1)
    result = compare(image, image.copy(), psnr_min=40)
    assert result.verdict is PASS and result.metrics is not None
    assert math.isinf(result.metrics.psnr) and result.metrics.max_abs_diff == 0 and result.metrics.share_off_by_8 == 0
    assert result.diff is not None and result.diff.shape == image.shape and not result.diff.any()


def test_compare_metrics_match_their_definitions_and_gate_the_verdict() -> None:
    reference = random_image(2)
    rng = np.random.default_rng(3)
    noise = rng.integers(-12, 13, size=reference.shape)
    candidate = np.clip(reference.astype(int) + noise, 0, 255).astype(np.uint8)
    difference = candidate.astype(float) - reference.astype(float)
    expected_psnr = 10 * math.log10(255**2 / np.mean(difference**2))
    expected_off = np.mean(np.abs(difference).max(axis=2) > 8)

    result = compare(candidate, reference, psnr_min=expected_psnr - 0.01)
    assert result.verdict is PASS and result.metrics is not None
    assert result.metrics.psnr == pytest.approx(expected_psnr, abs=1e-6)
    assert result.metrics.max_abs_diff == int(np.abs(difference).max())
    assert result.metrics.share_off_by_8 == pytest.approx(expected_off)
    assert 0 < result.metrics.ssim < 1

    stricter = compare(candidate, reference, psnr_min=expected_psnr + 0.01)
    assert stricter.verdict is FAIL and "<" in stricter.reason
    assert stricter.diff is not None and stricter.diff.shape == reference.shape and stricter.diff.any()


def test_compare_size_mismatch_fails_with_both_sizes() -> None:
    result = compare(random_image(4, 64, 64), random_image(4, 32, 64), psnr_min=40)
    assert result.verdict is FAIL and result.diff is None and result.metrics is None
    assert result.reason == "size mismatch: the app made 64x64, the reference is 64x32"


def test_case_report_is_complete_json_and_drops_stale_images(tmp_path: Path) -> None:
    reference = random_image(5)
    parameters = {"prompt": "p", "seed": 1, "width": 48, "height": 32, "steps": 4, "psnr_min": 40.0}
    report = CaseReport(name="one", parameters=parameters, reference=Reference(source="cpu", image=reference))
    report.app = AppRun(png=png_bytes(reference), image=reference, timings={"total": 1234.0}, console_errors=["boom"])
    report.comparison = compare(reference, reference, psnr_min=40)
    report.verdict, report.reason = report.comparison.verdict, report.comparison.reason
    (tmp_path / "diff.png").write_bytes(b"old")
    write_case_report(tmp_path, report, browser={"launches": 1}, adapter={"vendor": "google"})
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["verdict"] == "pass" and data["metrics"]["psnr"] is None and data["metrics"]["identical"]
    assert data["timings"] == {"total": 1234.0} and data["console_errors"] == ["boom"]
    assert data["browser"]["launches"] == 1 and data["files"]["diff"] == "diff.png"
    assert (tmp_path / "candidate.png").read_bytes() == report.app.png
    # A CPU reference is written with the case's parameters in its text chunks.
    pixels, text = imaging.read_png(tmp_path / "reference.png")
    assert np.array_equal(pixels, reference) and text["seed"] == "1" and text["prompt"] == "p"
    assert not read_pixels(tmp_path / "diff.png").any()

    # A later run that got no image must not leave this run's candidate/diff behind.
    report.app, report.comparison, report.verdict = AppRun(), None, COULD_NOT_RUN
    write_case_report(tmp_path, report, browser={}, adapter={})
    assert not (tmp_path / "candidate.png").exists() and not (tmp_path / "diff.png").exists()
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "could-not-run"
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_worst_case_decides_the_exit_code() -> None:
    def with_verdict(verdict: Any) -> CaseReport:
        report = CaseReport(name="x", parameters={}, reference=Reference(source="cpu", image=random_image(0)))
        report.verdict = verdict
        return report

    assert worst_exit_code([with_verdict(PASS), with_verdict(PASS)]) == 0
    assert worst_exit_code([with_verdict(PASS), with_verdict(FAIL)]) == 1
    assert worst_exit_code([with_verdict(COULD_NOT_RUN), with_verdict(FAIL)]) == 2


# ------------------------------------------------------------------------------------- could not run (CLI)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", "regress", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def empty_model_repo(path: Path) -> Path:
    return write_stub_repo(path)


def assert_one_line_reason(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("could not run: ")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_cli_missing_model_folder_could_not_run(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    result = run_cli(
        "--models", str(missing), "--prompt", "a fox", "--reference-from-cpu", "--report", str(tmp_path / "report")
    )
    assert_one_line_reason(result, str(missing), "klein-web fetch")
    assert not (tmp_path / "report").exists()


def test_cli_missing_or_unknown_browser_could_not_run(tmp_path: Path) -> None:
    models = empty_model_repo(tmp_path / "models")
    reference = tmp_path / "ref.png"
    reference.write_bytes(png_bytes(random_image(6, 64, 64)))
    common = ("--models", str(models), "--prompt", "a fox", "--size", "64x64", "--reference", str(reference))
    missing = tmp_path / "no-chromium"
    assert_one_line_reason(run_cli(*common, "--browser", str(missing)), f"--browser {missing}")
    not_a_browser = tmp_path / "fake-chrome"
    not_a_browser.write_text("#!/bin/sh\necho 'Firefox 140.0'\n")
    not_a_browser.chmod(0o755)
    assert_one_line_reason(run_cli(*common, "--browser", str(not_a_browser)), "not a Chromium", "Firefox 140.0")


def test_cli_without_reference_could_not_run(tmp_path: Path) -> None:
    models = empty_model_repo(tmp_path / "models")
    assert_one_line_reason(run_cli("--models", str(models), "--prompt", "a fox"), "--reference PNG")


# ------------------------------------------------------------------------------------- real browser runs


def regress(tiny_models: dict[str, Path], dist_dir: Path, report: Path, **options: Any) -> int:
    messages: list[str] = []
    arguments: dict[str, Any] = {
        "models_dir": tiny_models["fp32"],
        "prompt": "a red fox in the snow",
        "size": "64x64",
        "steps": 2,  # what these tests check (reports, verdicts, launches) holds for any number of steps
        "reference_from_cpu": True,
        "report_dir": report,
        "dist_dir": dist_dir,
    }
    return main(RegressOptions(**{**arguments, **options}), log=messages.append)


@pytest.mark.browser
@pytest.mark.slow
def test_the_app_matches_the_cpu_reference(tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path) -> None:
    report_dir, profile = tmp_path / "report", tmp_path / "profile"
    assert regress(tiny_models, dist_dir, report_dir, precision="fp32", profile=profile) == 0
    data = json.loads((report_dir / "report.json").read_text())
    assert data["verdict"] == "pass" and data["reference"]["source"] == "cpu"
    # The forced variant ran, and the kept profile holds the model store (a re-run downloads nothing).
    assert data["parameters"]["precision"] == "fp32"
    assert {graph["variant"] for graph in data["graphs"].values()} == {"fp32"}
    stored = sum(f.stat().st_size for f in profile.rglob("*") if f.is_file() and "File System" in f.as_posix())
    assert stored >= max(entry.size for entry in manifest.load(tiny_models["fp32"]).files.values())
    metrics = data["metrics"]
    assert metrics["identical"] or metrics["psnr"] >= 40
    assert isinstance(data["timings"], dict) and data["timings"]["total"] > 0
    assert data["adapter"]["architecture"] and data["browser"]["version"] and data["browser"]["launches"] == 1
    assert read_pixels(report_dir / "candidate.png").shape == (64, 64, 3)
    assert read_pixels(report_dir / "reference.png").shape == (64, 64, 3)
    # The app's Download PNG carries the generation parameters.
    assert data["download"]["png_text"].get("seed") == "42"
    # Chromium's own log of the run is kept (where a crash shows its cause): its lines carry Chromium's prefix.
    assert re.search(
        r"^\[\d+:\d+:\d{4}/\d{6}\.\d+:(INFO|WARNING|ERROR|VERBOSE\d):",
        (report_dir / "browser.log").read_text(),
        re.MULTILINE,
    )


@pytest.mark.browser
def test_gpu_mode_without_a_gpu_could_not_run(tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path) -> None:
    """On a machine without a Vulkan GPU, --gpu gets SwiftShader from Chromium: a one-line could-not-run."""
    with pytest.raises(RegressionError) as raised:
        regress(tiny_models, dist_dir, tmp_path / "report", gpu=True, timeout_s=1.0)
    if "timed out" in str(raised.value):  # the adapter check passed and the 1 s case timed out
        pytest.skip("a hardware WebGPU adapter is present")
    assert "--gpu, but" in str(raised.value) and "software adapter" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "report").exists()  # stopped before any case ran


def test_summary_shows_the_apps_stage_timings_in_the_order_it_reported_them(tmp_path: Path) -> None:
    from builder.check.regress.report import summary_lines

    report = CaseReport(
        name="fox",
        parameters={"prompt": "a fox", "seed": 1, "width": 64, "height": 64, "steps": 4, "psnr_min": 40.0},
        reference=None,
        verdict=PASS,
        reason="identical",
    )
    report.app.timings = {
        "check": 1.0,
        "load": 2500.0,
        "encode": 300.0,
        "latents": 2.0,
        "timesteps": 1.0,
        "denoise": 4000.0,
        "decode": 700.0,
        "total": 7504.0,
        "sessionRun": 4900.0,
        "notes": "x",
    }
    lines = summary_lines(
        [report],
        browser={"version": "Chromium 1", "mode": "software", "launches": 1},
        adapter={"vendor": "google"},
        report_dir=tmp_path,
    )
    assert (
        "app timings: check 0.00s, load 2.50s, encode 0.30s, latents 0.00s, timesteps 0.00s, denoise 4.00s, "
        "decode 0.70s, total 7.50s, sessionRun 4.90s"
    ) in [line.strip() for line in lines]
    assert lines[-1] == f"overall: PASS (exit 0); report in {tmp_path}"


def _png(path: Path, width: int, height: int, grey: bool = False) -> Path:
    rng = np.random.default_rng(width * 1000 + height)
    pixels = rng.integers(0, 256, (height, width) if grey else (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_editing_and_inpainting_cases_take_images_mask_and_strength(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", 200, 150)
    _png(tmp_path / "b.png", 1100, 1000)
    _png(tmp_path / "m.png", 50, 40, grey=True)
    cases_file = tmp_path / "cases.toml"
    cases_file.write_text(
        '[[cases]]\nname = "edit"\nimages = ["a.png", "b.png"]\n'
        '[[cases]]\nname = "edit-sized"\nimages = ["a.png"]\nsize = "64x96"\n'
        '[[cases]]\nname = "inpaint"\nimages = ["b.png", "a.png"]\nmask = "m.png"\nstrength = 0.5\n',
        encoding="utf-8",
    )
    edit, sized, inpaint = load_cases(cases_file, defaults=DEFAULTS)
    # Without a size, editing takes the first image's used size: 200x150 floored to multiples of 16.
    assert (edit.mode, edit.size, edit.images) == ("edit", "192x144", (tmp_path / "a.png", tmp_path / "b.png"))
    assert (sized.mode, sized.size) == ("edit", "64x96")
    # Inpainting always has its image's used size: 1100x1000 is scaled to about 1024^2, then floored.
    assert (inpaint.mode, inpaint.size, inpaint.mask, inpaint.strength) == (
        "inpaint",
        "1072x976",
        tmp_path / "m.png",
        0.5,
    )
    assert inpaint.parameters()["strength"] == 0.5 and edit.parameters()["images"][1].endswith("b.png")
    assert "mode" not in load_cases(_cases(tmp_path, [{"name": "t"}]), defaults=DEFAULTS)[0].parameters()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"images": ["a.png"], "strength": 0.5}, "`strength` is for inpainting"),
        ({"images": ["a.png"], "mask": "m.png", "strength": 1.5}, "outside 0..1"),
        ({"images": ["missing.png"]}, "missing.png does not exist"),
        ({"images": ["a.png"] * 5}, "5 reference images; at most 4"),
        ({"mask": "m.png"}, "a mask needs the image to inpaint"),
        ({"images": ["a.png"], "mask": "m.png", "size": "512x512"}, "inpainting keeps the size.*192x144"),
        ({"images": "a.png"}, "`images` must be list"),
    ],
)
def test_bad_editing_cases_say_what_to_fix(tmp_path: Path, entry: dict[str, Any], message: str) -> None:
    _png(tmp_path / "a.png", 200, 150)
    _png(tmp_path / "m.png", 50, 40, grey=True)
    with pytest.raises(InputError, match=message):
        load_cases(_cases(tmp_path, [{"name": "c", **entry}]), defaults=DEFAULTS)


def test_cases_carry_a_base_models_guidance_and_the_flags_fill_it_in(tmp_path: Path) -> None:
    flags = replace(DEFAULTS, guidance_scale=2.0, negative_prompt="dark")
    entries: list[dict[str, Any]] = [{"name": "g", "guidance_scale": 5, "negative_prompt": "blurry"}, {"name": "flags"}]
    guided, from_flags = load_cases(_cases(tmp_path, entries), defaults=flags)
    assert (guided.guidance_scale, guided.negative_prompt) == (5.0, "blurry")
    assert guided.parameters()["guidance_scale"] == 5.0 and guided.parameters()["negative_prompt"] == "blurry"
    assert (from_flags.guidance_scale, from_flags.negative_prompt) == (2.0, "dark")
    plain = load_cases(_cases(tmp_path, [{"name": "p"}]), defaults=DEFAULTS)[0]
    assert plain.guidance_scale is None and "guidance_scale" not in plain.parameters()
    bad: list[tuple[dict[str, Any], str]] = [
        ({"guidance_scale": 0.5}, r"case 1 \(c\): guidance_scale 0.5 is outside 1..30"),
        ({"guidance_scale": "4"}, r"`guidance_scale` must be int or float, got '4'"),
        ({"guidance_scale": True}, r"`guidance_scale` must be int or float, got True"),
        ({"negative_prompt": 3}, r"`negative_prompt` must be str, got 3"),
    ]
    for entry, message in bad:
        with pytest.raises(InputError, match=message):
            load_cases(_cases(tmp_path, [{"name": "c", **entry}]), defaults=DEFAULTS)


def _cases(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": entries}), encoding="utf-8")
    return path


@pytest.mark.browser
@pytest.mark.slow
def test_editing_inpainting_and_text_cases_run_in_one_launch_and_a_wrong_seed_fails(
    tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path
) -> None:
    """regress gives the page its images as a user does (file pickers, slider), and the CPU reference the same; the
    cases of one file share one browser launch, and a case whose reference is another seed's image fails."""
    from builder.pipeline.reference import generate_png

    _png(tmp_path / "ref.png", 90, 70)  # used at 80x64
    _png(tmp_path / "room.png", 100, 75)  # inpainting resizes it to 96x64
    mask = np.zeros((75, 100), dtype=np.uint8)
    mask[20:60, 30:80] = 255
    Image.fromarray(mask).save(tmp_path / "mask.png")
    prompt = "a lighthouse at dusk"
    for seed in (7, 8):
        generate_png(
            tiny_models["fp32"],
            prompt=prompt,
            seed=seed,
            width=80,
            height=64,
            steps=2,
            out=tmp_path / f"seed{seed}.png",
            log=lambda _m: None,
        )
    cases = tmp_path / "cases.toml"
    cases.write_text(
        '[[cases]]\nname = "edit"\nimages = ["ref.png"]\nreference_from_cpu = true\n'
        '[[cases]]\nname = "inpaint"\nimages = ["room.png", "ref.png"]\nmask = "mask.png"\nstrength = 0.5\n'
        "reference_from_cpu = true\n"
        f'[[cases]]\nname = "wrong-seed"\nprompt = "{prompt}"\nseed = 7\nsize = "80x64"\nsteps = 2\n'
        'reference = "seed8.png"\n',
        encoding="utf-8",
    )
    report_dir = tmp_path / "report"
    # The worst case's code.
    assert regress(tiny_models, dist_dir, report_dir, cases_file=cases, precision="fp32", psnr_min=60.0) == 1
    run = json.loads((report_dir / "report.json").read_text())
    assert run["browser"]["launches"] == 1
    assert [(c["case"], c["verdict"]) for c in run["cases"]] == [
        ("edit", "pass"),
        ("inpaint", "pass"),
        ("wrong-seed", "fail"),
    ]
    edit = json.loads((report_dir / "edit" / "report.json").read_text())
    inpaint = json.loads((report_dir / "inpaint" / "report.json").read_text())
    assert read_pixels(report_dir / "edit" / "candidate.png").shape == (64, 80, 3)
    assert read_pixels(report_dir / "inpaint" / "candidate.png").shape == (64, 96, 3)
    # The app's PNG names the inputs it was given, and the timings show the images stage.
    assert edit["download"]["png_text"]["mode"] == "edit" and "80x64 ref.png" in edit["download"]["png_text"]["images"]
    assert inpaint["download"]["png_text"]["strength"] == "0.5"
    assert inpaint["timings"]["images"] > 0
    # The wrong seed: below the bar, with the reason and a diff image.
    wrong = json.loads((report_dir / "wrong-seed" / "report.json").read_text())
    assert wrong["metrics"]["psnr"] < 40 and "<" in wrong["reason"]
    diff = read_pixels(report_dir / "wrong-seed" / "diff.png")
    assert diff.shape == (64, 80, 3) and diff.any()
    # It failed because its reference is another seed's image: its candidate is the CPU's image of its own seed.
    candidate = read_pixels(report_dir / "wrong-seed" / "candidate.png")
    assert imaging.psnr(candidate, read_pixels(tmp_path / "seed7.png")) >= 40.0


@pytest.mark.browser
def test_an_image_the_page_would_refuse_is_refused_before_the_browser_in_its_words(
    tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path
) -> None:
    """A truncated PNG (its header, and so its size, intact): regress decodes every case's images as the page and
    `reference` do (one decoding contract) and refuses the run before any browser starts, naming the case and the
    file in the page's own words, instead of waiting on the page."""
    whole = _png(tmp_path / "whole.png", 80, 64).read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])
    reference = tmp_path / "ref.png"
    reference.write_bytes(png_bytes(random_image(6, 64, 80)))
    cases = tmp_path / "cases.toml"
    cases.write_text(
        '[[cases]]\nname = "cut"\nimages = ["cut.png"]\nsize = "80x64"\nreference = "ref.png"\n'
        '[[cases]]\nname = "text"\nsize = "64x64"\nreference_from_cpu = true\n',
        encoding="utf-8",
    )
    report_dir = tmp_path / "report"
    with pytest.raises(
        InputError,
        match=r"case 1 \(cut\): Reference image 1 \(.*cut\.png\) cannot be decoded: the "
        r"file is damaged or incomplete; save it again",
    ):
        regress(tiny_models, dist_dir, report_dir, cases_file=cases, precision="fp32")
    assert not (report_dir / "report.json").exists()
