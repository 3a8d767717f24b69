"""The Python/JavaScript twins (docs/architecture.md) hold the same numbers and compute the same results.

Node imports the app's modules (web_src/src) and reads their constants; tests/js/twins.mjs runs their pure
functions on the cases below, and builder/pipeline's twins run on the same cases here. Floats are compared bit for
bit. Plain NumPy and node: no torch, no browser.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from builder import REPO_ROOT, WEB_SRC
from builder.errors import InputError
from builder.node import find_node
from builder.pipeline import guidance, imaging, inpaint, latents, limits, outpaint, prompt, rng, schedule
from builder.repo.manifest import DISTILLED, PipelineDefaults

TWINS_SCRIPT = REPO_ROOT / "tests" / "js" / "twins.mjs"

# Each Python module and the app module it mirrors: the same constants (names and values) on both sides.
TWINS: tuple[tuple[ModuleType, str], ...] = (
    (rng, "pipeline/rng.js"),
    (schedule, "pipeline/schedule.js"),
    (latents, "pipeline/latents.js"),
    (inpaint, "shared/inpaint.js"),
    (outpaint, "shared/outpaint.js"),
    (prompt, "pipeline/tokenizer.js"),
)
CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*")

# A module's exported constants that are data (numbers, strings, booleans, arrays and plain objects of them).
JS_CONSTANTS = r"""
const module = await import(process.argv[1]);
const isData = (v) => ['number', 'string', 'boolean'].includes(typeof v)
    || (Array.isArray(v) && v.every(isData))
    || (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype
        && Object.values(v).every(isData));
const constants = Object.entries(module).filter(([name, value]) => /^[A-Z][A-Z0-9_]*$/.test(name) && isData(value));
console.log(JSON.stringify({ constants: Object.fromEntries(constants),
                             frozen: constants.filter(([, v]) => typeof v === 'object').every(([, v]) => Object.isFrozen(v)) }));
"""


def run_node(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(find_node().node), *args], capture_output=True, text=True, timeout=120, check=False)


def node_module_json(script: str, module: Path) -> Any:
    """What `script` prints as JSON, run by node as an ES module with `module`'s file URL as its argument."""
    result = run_node("--input-type=module", "-e", script, module.as_uri())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def plain(value: Any) -> Any:
    """A Python constant as JSON data (NumPy scalars as Python numbers, tuples as lists), or None if it is not data."""
    if isinstance(value, bool | str | int | float):
        return value
    if isinstance(value, np.floating | np.integer):
        return value.item()
    if isinstance(value, tuple | list):
        items = [plain(item) for item in value]
        return None if any(item is None for item in items) else items
    if isinstance(value, Mapping):
        entries = {key: plain(item) for key, item in value.items()}
        return None if any(item is None for item in entries.values()) else entries
    return None


def python_constants(module: ModuleType) -> dict[str, Any]:
    return {
        name: plain(value)
        for name, value in vars(module).items()
        if CONSTANT_NAME.fullmatch(name) and plain(value) is not None
    }


@pytest.mark.parametrize(("module", "js_module"), TWINS, ids=[js for _, js in TWINS])
def test_twin_modules_hold_the_same_constants(module: ModuleType, js_module: str, node_modules: Path) -> None:
    """`node_modules`: tokenizer.js imports its npm packages."""
    js = node_module_json(JS_CONSTANTS, WEB_SRC / "src" / js_module)
    assert js["frozen"], f"{js_module}: an exported array or object constant is not Object.freeze'd"
    python = python_constants(module)
    for name, value in js["constants"].items():
        assert name in python, f"{js_module} exports {name}; {module.__name__} has no {name}"
        assert python[name] == value, f"{name}: {module.__name__} has {python[name]!r}, {js_module} {value!r}"
    # File names (strings) belong to the repository layout's twins; every other Python constant needs a JS twin.
    unpaired = sorted(
        name for name, value in python.items() if not isinstance(value, str) and name not in js["constants"]
    )
    assert not unpaired, f"{module.__name__} has {unpaired}, which {js_module} does not export"


def camel_case(name: str) -> str:
    """STEPS_MAX -> stepsMax: the JS spelling of a Python constant's name."""
    first, *rest = name.lower().split("_")
    return first + "".join(word.title() for word in rest)


def python_limits() -> dict[str, int | float]:
    return {
        camel_case(name): value
        for name, value in vars(limits).items()
        if name.isupper() and isinstance(value, int | float) and not isinstance(value, bool)
    }


def test_python_and_js_limits_are_the_same_numbers() -> None:
    script = (
        "const { LIMITS } = await import(process.argv[1]);"
        "console.log(JSON.stringify({ limits: LIMITS, frozen: Object.isFrozen(LIMITS) }));"
    )
    js = node_module_json(script, WEB_SRC / "src" / "shared" / "limits.js")
    assert js["frozen"], "LIMITS must be Object.freeze'd"
    assert js["limits"] == python_limits()
    assert python_limits() == {
        "stepsMin": 1,
        "stepsMax": 50,
        "sizeMin": 64,
        "sizeMax": 2048,
        "sizeMultiple": 16,
        "seedMax": 2**32,
        "referencesMax": 4,
        "imageSideMin": 64,
        "imageAspectMax": 8,
        "imageAreaMax": 1024**2,
        "imageFileBytesMax": 64 * 2**20,
        "imagePixelsMax": 8192**2,
        "strengthDefault": 0.8,
        "guidanceMin": 1,
        "guidanceMax": 30,
    }


INPUT_IMAGE_SIZES = [
    (512, 512),
    (1024, 1024),
    (1025, 1024),
    (4032, 3024),
    (3000, 375),
    (97, 1000),
    (1500, 700),
    (64, 64),
    (12345, 1600),
]


def test_input_image_size_is_the_same_in_python_and_js() -> None:
    script = (
        "const { inputImageSize } = await import(process.argv[1]);"
        f"console.log(JSON.stringify({json.dumps(INPUT_IMAGE_SIZES)}.map(([w, h]) => inputImageSize(w, h))));"
    )
    js = node_module_json(script, WEB_SRC / "src" / "shared" / "limits.js")
    for size, used_js in zip(INPUT_IMAGE_SIZES, js, strict=True):
        used = limits.input_image_size(*size)
        assert used_js == {"width": used[0], "height": used[1], "tokens": limits.input_image_tokens(*size)}, size
        assert used[0] % 16 == 0 and used[1] % 16 == 0 and used[0] * used[1] <= max(1024**2, size[0] * size[1])


PROMPTS = ["a fox", "", "a fox\x00", "\x00", "fox\x00 in snow", "a fox\x01\x1b[31m", "un renard \u00e9 \U0001f98a"]


def test_the_prompt_is_refused_alike_in_python_and_js(node_modules: Path) -> None:
    """A NUL character is refused where each side checks the prompt, before any work: the saved PNG keeps the prompt
    as text, which cannot hold one. Other control characters are prompts like any other."""
    params = {"seed": 1, "steps": 1, "width": 64, "height": 64, "modelBase": "https://m.example/r/"}
    script = (
        "const { checkInputs } = await import(process.argv[1]);"
        f"const prompts = {json.dumps(PROMPTS)};"
        "console.log(JSON.stringify(prompts.map((prompt) => {"
        f"  try {{ checkInputs({{ ...{json.dumps(params)}, prompt }}); return null; }}"
        "  catch (error) { if (error.name !== 'InputError') throw error; return error.message; }"
        "})));"
    )
    js = node_module_json(script, WEB_SRC / "src" / "pipeline" / "check_inputs.js")
    for text, js_reason in zip(PROMPTS, js, strict=True):
        try:
            limits.check_prompt(text)
            python_reason = None
        except InputError as exc:
            python_reason = str(exc)
        assert (js_reason is None) == (python_reason is None), (text, js_reason, python_reason)
        if "\x00" in text:
            assert js_reason.lower() == str(python_reason).lower(), (js_reason, python_reason)
            assert "NUL character" in js_reason and f"character {text.index(chr(0))}" in js_reason


# --------------------------------------------------------------------------------------------------------------------
# The pure functions on the same inputs
# --------------------------------------------------------------------------------------------------------------------


def encode(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()).decode()


def decode(text: str, dtype: type[np.generic]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))


def same_float32(js: str, python: np.ndarray) -> bool:
    """Bit for bit: the same float32 values, NaN payloads and signed zeros included."""
    return np.array_equal(decode(js, np.uint32), np.ascontiguousarray(python, dtype=np.float32).view(np.uint32).ravel())


def random_float32(generator: np.random.Generator, *shape: int) -> np.ndarray:
    return (generator.standard_normal(shape) * 3).astype(np.float32)


def fma_cases(generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random triples over wide exponents, and ones whose double sum lands on a float32 midpoint while the exact
    sum does not (where rounding the double sum again gives the wrong float32)."""
    count = 4096
    a, b, c = (generator.standard_normal(count) * 2.0 ** generator.integers(-30, 30, count) for _ in range(3))
    # (1 + 2^-23) * 2^-24 (1 - 2^-23) + (1 + 2^-23): exact sum just below the midpoint 1 + 2^-23 + 2^-24
    tricky_a, tricky_b, tricky_c = 1 + 2.0**-23, 2.0**-24 * (1 - 2.0**-23), 1 + 2.0**-23
    a = np.concatenate([a, [tricky_a, -tricky_a, tricky_a * 2.0**40]])
    b = np.concatenate([b, [tricky_b, tricky_b, tricky_b * 2.0**-40]])
    c = np.concatenate([c, [tricky_c, -tricky_c, tricky_c]])
    return a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)


NOISE = [
    (seed, shape)
    for seed in (0, 42, 123456789, 2**32 - 1)
    for shape in ((1,), (5,), (15,), (16,), (17,), (33,), (1, 128, 4, 6), (1, 128, 8, 8))
]
# Step counts from 1 to 50 and token counts from 1 to 16384, both sides of compute_empirical_mu's switch at 4300.
SCHEDULES = [(steps, tokens) for steps in (1, 2, 3, 4, 8, 28, 50) for tokens in (1, 16, 256, 1024, 4225, 4356, 16384)]
INPAINT_STARTS = [
    (steps, strength) for steps in (1, 2, 3, 4, 7, 10, 50) for strength in (0.0, 0.1, 0.25, 0.3, 0.5, 0.8, 0.99, 1.0)
]
LATENT_GRIDS = [(1, 1), (3, 5), (4, 1), (64, 64)]
TEXT_LENGTHS = [1, 7, 512]
IMAGE_GRIDS = [[], [(3, 5)], [(3, 5), (2, 2), (4, 1)], [(64, 48), (2, 2), (2, 2), (5, 7), (1, 1)]]
PACKING_GRIDS = [(3, 5), (8, 6)]
MASK_SIZES = [(64, 96), (256, 128), (80, 1024), (16, 16)]  # binary masks shrunk 16x, as the pipeline uses them
GUIDANCE_SCALES = [1.5, 4.0, 7.3, 30.0]
GUIDANCE_DEFAULTS = [
    DISTILLED,
    PipelineDefaults(is_distilled=False, steps=50, guidance_scale=4.0, inpaint_guidance_scale=8.0),
    PipelineDefaults(is_distilled=False, steps=28, guidance_scale=None, inpaint_guidance_scale=1.0),
]
GUIDANCE_REQUESTS = [
    (defaults, mode, scale, negative)
    for defaults in GUIDANCE_DEFAULTS
    for mode in ("text", "edit", "inpaint")
    for scale in (None, 1, 1.0001, 4.5)
    for negative in (None, "", "blurry")
]
BAD_SCALES = [0.5, 30.5, 31, 0.999]
BAD_PROMPTS = ["a\ud800b", "x\U0001f98a\udc80", "\udfff", "\U0001f98a no\x00", "\x00\ud800"]
PNG_GUIDANCE = [(1.5, ""), (4.0, "blurry, low quality"), (7.25, "狐"), (30, "x"), (4.1, "")]
SEQ = 24
# Outpainting: (image width, height, extension); the pixels are random, the masks random grey or none.
PADDINGS = [
    (5, 4, {"left": 3}),
    (5, 4, {"right": 2, "bottom": 1}),
    (7, 3, {"left": 1, "right": 4, "top": 2, "bottom": 3}),
    (1, 1, {"top": 2, "left": 2}),
    (6, 5, {}),
]
EXTENSIONS = [
    (100, 80, {"right": 64}),
    (100, 80, {"left": 0, "top": 16, "bottom": 7}),
    (100, 80, {"right": -1}),
    (100, 80, {"top": 2049}),
    (100, 80, {"bottom": 1.5}),
    (100, 80, {"middle": 8}),
    (100, 80, {"right": 540}),  # 640x80, 8:1 exactly: allowed
    (100, 80, {"right": 541}),  # beyond 8:1
    (1024, 1024, {"right": 2048, "left": 2048}),  # 5120x1024, used at 2288x457: wider than an output side
    (8000, 8000, {"right": 2048}),  # beyond the megapixels
    (64, 64, {"left": 2048, "right": 2048, "top": 2048, "bottom": 2048}),
]


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    """The inputs both languages run on, as arrays (Python's side) and as JSON (the app's)."""
    generator = np.random.default_rng(0)
    sigmas, _ = schedule.retrieve_timesteps(4, SEQ)

    def tokens() -> np.ndarray:
        return random_float32(generator, 1, SEQ, latents.LATENT_CHANNELS)

    return {
        "fma": fma_cases(generator),
        "packing": [random_float32(generator, 1, latents.LATENT_CHANNELS, h, w) for h, w in PACKING_GRIDS],
        "euler": (tokens(), tokens(), sigmas[1], sigmas[2]),
        "scale_noise": (tokens(), sigmas[1], tokens()),
        "blend_mask": (
            tokens(),
            tokens(),
            generator.choice(np.array([0, 0.25, 0.5, 0.75, 1, 0.3], np.float32), (1, SEQ, 1)),
        ),
        "masks": [(generator.random(size) > 0.5).astype(np.float32) for size in MASK_SIZES],
        "pad_images": [generator.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h, _ in PADDINGS],
        "pad_masks": [
            None if k % 2 else np.repeat(generator.integers(0, 256, (h, w, 1), dtype=np.uint8), 3, axis=2)
            for k, (w, h, _) in enumerate(PADDINGS)
        ],
        # Wide exponents, so that rounding once per operation differs from rounding the whole expression once.
        "guided": tuple(
            (generator.standard_normal(4096) * 2.0 ** generator.integers(-20, 20, 4096)).astype(np.float32)
            for _ in range(2)
        ),
    }


@pytest.fixture(scope="module")
def js(cases: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the app's modules compute on `cases` (tests/js/twins.mjs)."""
    folder = tmp_path_factory.mktemp("twins")
    euler_latents, velocity, sigma, sigma_next = cases["euler"]
    sample, noise_sigma, noise = cases["scale_noise"]
    blend_latents, image, mask = cases["blend_mask"]
    data = {
        "noise": [{"seed": seed, "shape": list(shape)} for seed, shape in NOISE],
        "fma": dict(zip("abc", map(encode, cases["fma"]), strict=True)),
        "schedules": [{"steps": steps, "tokens": tokens} for steps, tokens in SCHEDULES],
        "inpaintStarts": INPAINT_STARTS,
        "latentIds": LATENT_GRIDS,
        "textIds": TEXT_LENGTHS,
        "imageIds": IMAGE_GRIDS,
        "packing": [
            {"h": h, "w": w, "data": encode(array)}
            for (h, w), array in zip(PACKING_GRIDS, cases["packing"], strict=True)
        ],
        "euler": {
            "latents": encode(euler_latents),
            "velocity": encode(velocity),
            "sigma": float(sigma),
            "sigmaNext": float(sigma_next),
        },
        "scaleNoise": {"sample": encode(sample), "sigma": float(noise_sigma), "noise": encode(noise)},
        "blendMask": {"latents": encode(blend_latents), "image": encode(image), "mask": encode(mask)},
        "masks": [
            {"height": plane.shape[0], "width": plane.shape[1], "plane": encode(plane)} for plane in cases["masks"]
        ],
        "guided": {
            "positive": encode(cases["guided"][0]),
            "negative": encode(cases["guided"][1]),
            "scales": GUIDANCE_SCALES,
        },
        "resolved": [
            {
                "defaults": {
                    "isDistilled": defaults.is_distilled,
                    "steps": defaults.steps,
                    "guidanceScale": defaults.guidance_scale,
                    "inpaintGuidanceScale": defaults.inpaint_guidance_scale,
                },
                "mode": mode,
                "scale": scale,
                "negativePrompt": negative,
            }
            for defaults, mode, scale, negative in GUIDANCE_REQUESTS
        ],
        "scaleProblems": BAD_SCALES,
        "promptProblems": BAD_PROMPTS,
        "guidanceText": PNG_GUIDANCE,
        "paddings": [
            {
                "width": width,
                "height": height,
                "extension": outpaint_extension(values),
                "rgb": encode(image),
                "mask": None if mask is None else encode(mask),
            }
            for (width, height, values), image, mask in zip(
                PADDINGS, cases["pad_images"], cases["pad_masks"], strict=True
            )
        ],
        "extensions": EXTENSIONS,
    }
    (folder / "cases.json").write_text(json.dumps(data))
    result = run_node(str(TWINS_SCRIPT), str(folder / "cases.json"), str(folder / "out.json"))
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads((folder / "out.json").read_text())
    return out


def refused(run: Callable[[], int]) -> int | None:
    try:
        return run()
    except InputError:
        return None


def test_the_noise_is_the_same_draw(js: dict[str, Any]) -> None:
    assert len(js["noise"]) == len(NOISE)
    for (seed, shape), drawn in zip(NOISE, js["noise"], strict=True):
        assert same_float32(drawn, rng.torch_randn(shape, seed)), (seed, shape)


def test_fma32_rounds_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    a, b, c = cases["fma"]
    python = rng.fma32(a, b, c)
    assert same_float32(js["fma"], python)
    # The midpoint case: correctly rounded, where rounding the double sum again would not be.
    assert python[-3] == np.float32(1 + 2.0**-23) != np.float32(np.float64(a[-3]) * np.float64(b[-3]) + c[-3])


def test_the_schedules_are_the_same(js: dict[str, Any]) -> None:
    for (steps, tokens), made in zip(SCHEDULES, js["schedules"], strict=True):
        sigmas, timesteps = schedule.retrieve_timesteps(steps, tokens)
        assert made["mu"] == schedule.compute_empirical_mu(tokens, steps), (steps, tokens)
        assert same_float32(made["sigmas"], sigmas), (steps, tokens)
        assert same_float32(made["timesteps"], timesteps), (steps, tokens)
        model = np.concatenate([schedule.model_timestep(t) for t in timesteps])
        assert same_float32(made["modelTimesteps"], model), (steps, tokens)


def test_inpainting_starts_at_the_same_step(js: dict[str, Any]) -> None:
    python = [refused(functools.partial(inpaint.inpaint_start, steps, strength)) for steps, strength in INPAINT_STARTS]
    assert js["inpaintStarts"] == python
    assert None in python and 0 in python and any(start not in (None, 0) for start in python)


def test_the_position_ids_are_the_same(js: dict[str, Any]) -> None:
    for (h, w), ids in zip(LATENT_GRIDS, js["latentIds"], strict=True):
        assert np.array_equal(decode(ids, np.int64), latents.prepare_latent_ids(h, w).ravel()), (h, w)
    for length, ids in zip(TEXT_LENGTHS, js["textIds"], strict=True):
        assert np.array_equal(decode(ids, np.int64), latents.prepare_text_ids(length).ravel()), length
    for grids, ids in zip(IMAGE_GRIDS, js["imageIds"], strict=True):
        assert np.array_equal(decode(ids, np.int64), latents.prepare_image_ids(grids).ravel()), grids


def test_packing_is_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    for (h, w), array, made in zip(PACKING_GRIDS, cases["packing"], js["packing"], strict=True):
        packed = latents.pack_latents(array)
        assert same_float32(made["packed"], packed), (h, w)
        assert same_float32(made["unpacked"], latents.unpack_latents(packed, h, w)), (h, w)


def test_the_euler_step_noising_and_mask_blend_are_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    assert same_float32(js["euler"], latents.euler_step(*cases["euler"]))
    assert same_float32(js["scaleNoise"], latents.scale_noise(*cases["scale_noise"]))
    assert same_float32(js["blendMask"], latents.blend_mask(*cases["blend_mask"]))


def test_the_mask_on_the_latent_grid_is_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    for plane, made in zip(cases["masks"], js["masks"], strict=True):
        height, width = plane.shape
        python = latents.mask_latents(plane, height // latents.PATCH, width // latents.PATCH)
        assert same_float32(made, python), plane.shape


def test_guidance_combines_the_predictions_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    positive, negative = cases["guided"]
    for scale, made in zip(GUIDANCE_SCALES, js["guided"], strict=True):
        python = guidance.guided(positive, negative, scale)
        assert same_float32(made, python), scale
        # One rounding per operation: rounding the float64 expression once gives other bits somewhere.
        once = (negative.astype(np.float64) + scale * (positive.astype(np.float64) - negative)).astype(np.float32)
        assert not np.array_equal(python, once), scale


def test_guidance_is_resolved_the_same(js: dict[str, Any]) -> None:
    for (defaults, mode, scale, negative), made in zip(GUIDANCE_REQUESTS, js["resolved"], strict=True):
        notes: list[str] = []
        python = guidance.resolve_guidance(defaults, mode=mode, scale=scale, negative_prompt=negative, log=notes.append)
        expected = None if python is None else {"scale": python.scale, "negativePrompt": python.negative_prompt}
        assert made == {"guidance": expected, "notes": len(notes)}, (defaults, mode, scale, negative)
    assert any(made["guidance"] for made in js["resolved"]) and any(made["notes"] for made in js["resolved"])


def test_guidance_inputs_are_refused_in_the_same_words(js: dict[str, Any]) -> None:
    for value, message in zip(BAD_SCALES, js["scaleProblems"], strict=True):
        with pytest.raises(InputError) as refused:
            limits.check_guidance(value, name="`name`")
        assert message == str(refused.value), value
    for text, message in zip(BAD_PROMPTS, js["promptProblems"], strict=True):
        with pytest.raises(InputError) as refused:
            limits.check_prompt(text, name="the text")
        assert message == str(refused.value), repr(text)


def test_the_png_guidance_keys_are_the_same(js: dict[str, Any]) -> None:
    for (scale, negative), made in zip(PNG_GUIDANCE, js["guidanceText"], strict=True):
        text = imaging.png_text(
            prompt="p", seed=1, steps=2, width=64, height=64, model="m", guidance_scale=scale, negative_prompt=negative
        )
        assert made == {key: text[key] for key in ("guidance_scale", "negative_prompt")}, (scale, negative)


def outpaint_extension(values: dict[str, int]) -> dict[str, int]:
    return {side: values.get(side, 0) for side in outpaint.SIDES}


def test_outpainting_pads_the_same(cases: dict[str, Any], js: dict[str, Any]) -> None:
    for (width, height, values), image, mask, made in zip(
        PADDINGS, cases["pad_images"], cases["pad_masks"], js["paddings"], strict=True
    ):
        extension = outpaint.check_extension(values)
        padded = outpaint.pad_image(image, extension)
        padded_mask = outpaint.pad_mask(mask, width, height, extension)
        size = list(extension.padded_size(width, height))
        assert made["image"] == {"size": size, "rgb": encode(padded)}, values
        assert made["mask"] == {"size": size, "rgb": encode(padded_mask)}, values
        assert made["text"] == extension.text()
        # The original area is the image and the mask (black without one); the new area edge copies and white.
        top, left = extension.top, extension.left
        assert np.array_equal(padded[top : top + height, left : left + width], image)
        kept = np.zeros_like(image) if mask is None else mask
        assert np.array_equal(padded_mask[top : top + height, left : left + width], kept)
        new = np.ones(padded_mask.shape[:2], bool)
        new[top : top + height, left : left + width] = False
        assert (padded_mask[new] == outpaint.MASK_REPAINT).all()
        if left:
            assert np.array_equal(padded[top : top + height, 0], image[:, 0])


def test_outpainting_refuses_in_the_same_words(js: dict[str, Any]) -> None:
    refusals = 0
    for (width, height, values), made in zip(EXTENSIONS, js["extensions"], strict=True):
        problem = outpaint.extension_problem(values)
        if problem is None:
            extension = outpaint.check_extension(values)
            problem = outpaint.padded_problem(extension, width, height, "The image to inpaint (a.png)")
        assert made == problem, values
        refusals += problem is not None
    assert 0 < refusals < len(EXTENSIONS)
