"""What `klein-web regress` checks: its options, the cases from the flags or a cases file, and each case's checks."""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder.check.driver.page import Form
from builder.errors import InputError, RegressionError
from builder.pipeline import limits, outpaint
from builder.repo import manifest

CASE_KEYS = frozenset(
    {
        "name",
        "prompt",
        "seed",
        "size",
        "steps",
        "reference",
        "reference_from_cpu",
        "psnr_min",
        "precision",
        "images",
        "mask",
        "strength",
        "extend",
        "guidance_scale",
        "negative_prompt",
    }
)
CASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class RegressOptions:
    """Everything one regress run takes; the defaults are the CLI's."""

    models_dir: Path | None = None  # the model folder to serve
    prompt: str | None = None
    seed: int = 42
    size: str = "512x512"  # WIDTHxHEIGHT
    steps: int = 4
    cases_file: Path | None = None  # several cases (JSON or TOML), run in one browser launch
    reference_png: Path | None = None
    reference_from_cpu: bool = False  # make the reference with builder.pipeline.reference instead
    browser_path: Path | None = None  # default: check.browser.find_chromium
    headed: bool = False
    gpu: bool = False  # a real GPU (Vulkan) instead of SwiftShader
    report_dir: Path = Path("report")
    psnr_min: float = 40.0
    timeout_s: float = 600.0  # per case
    dist_dir: Path | None = None  # serve this built app as it is (no node needed); None: build dist/ if stale
    precision: str | None = None  # force the app's graph variant (its ?precision=); None: the app's choice
    f16_toggle: bool = True  # Linux + NVIDIA, --gpu: the Dawn toggle that exposes shader-f16 (site/chrome.py)
    profile: Path | None = None  # browser profile to use and keep (its model store survives); None: a temp one
    images: tuple[Path, ...] = ()  # editing: reference images; with `mask`: the image to inpaint, then references
    mask: Path | None = None  # inpainting mask (white repaints)
    strength: float | None = None  # inpainting strength; None: limits.STRENGTH_DEFAULT
    extend: Mapping[str, int] = field(default_factory=dict)  # outpainting: pixels added per side
    # Base models' classifier-free guidance; None: the model's default scale and no negative prompt. Distilled models
    # ignore both, in the app and in the reference, as diffusers does.
    guidance_scale: float | None = None
    negative_prompt: str | None = None
    size_given: bool = True  # False: editing / inpainting take the size from the first image
    # Where the browser runs and where it finds the app (docs/regress.md, "On another machine's browser").
    connect: str | None = None  # ws:// address of a Playwright browser server; None: launch Chromium here
    host: str = "127.0.0.1"  # the address the app server listens on
    port: int = 0  # its port; 0: a free one
    advertise: str | None = None  # the URL the browser opens this server at; None: http://HOST:PORT
    app_url: str | None = None  # a deployed app (with ?model=) to open instead of serving one
    shard: str | None = None  # "I/N": every N-th case of the cases file, from the I-th


@dataclass(frozen=True, kw_only=True)
class Case(Form):
    """One generation to check: what the form is given, its name, and where its reference comes from."""

    name: str
    psnr_min: float
    reference_png: Path | None = None
    reference_from_cpu: bool = False
    # Force the app's graph variant (its `?precision=`); None: the app picks the best its adapter runs.
    precision: str | None = None

    def parameters(self) -> dict[str, Any]:
        parameters: dict[str, Any] = {
            "prompt": self.prompt,
            "seed": self.seed,
            "width": self.width,
            "height": self.height,
            "steps": self.steps,
            "psnr_min": self.psnr_min,
            "precision": self.precision,
        }
        if self.images:
            parameters.update(mode=self.mode, images=[str(path) for path in self.images])
        if self.mask is not None:
            parameters.update(mask=str(self.mask))
        if self.inpainting:
            parameters.update(strength=self.strength_or_default)
        if self.extend:
            parameters.update(extend=dict(self.extend))
        if self.guidance_scale is not None:
            parameters.update(guidance_scale=self.guidance_scale)
        if self.negative_prompt is not None:
            parameters.update(negative_prompt=self.negative_prompt)
        return parameters

    def page_path(self) -> str:
        return f"/?precision={self.precision}" if self.precision else "/"


def cases_from_options(options: RegressOptions) -> list[Case]:
    """The cases of a run: the --cases file's (gaps filled from the flags), else the one the flags describe."""
    width, height = limits.parse_size(options.size)
    flags = Case(
        name="case",
        prompt=options.prompt or "",
        seed=options.seed,
        width=width,
        height=height,
        steps=options.steps,
        psnr_min=options.psnr_min,
        reference_png=Path(options.reference_png) if options.reference_png else None,
        reference_from_cpu=options.reference_from_cpu,
        precision=options.precision,
        guidance_scale=options.guidance_scale,
        negative_prompt=options.negative_prompt,
    )
    if options.cases_file is not None:
        if options.images or options.mask is not None or options.strength is not None or options.extend:
            raise InputError(
                "--image, --mask, --strength and --extend describe one case; with --cases, put `images`, `mask`, "
                "`strength` and `extend` into the cases file."
            )
        return load_cases(Path(options.cases_file), defaults=flags)
    if options.prompt is None:
        raise InputError("--prompt is required (the text to generate), or pass --cases FILE with several cases.")
    flags = replace(
        flags,
        images=tuple(Path(p) for p in options.images),
        mask=Path(options.mask) if options.mask is not None else None,
        strength=options.strength,
        extend=dict(options.extend),
    )
    return [check_case(with_input_size(flags, size_given=options.size_given), where="regress")]


def load_cases(path: Path, *, defaults: Case) -> list[Case]:
    """Cases from a JSON or TOML file; every field a case leaves out comes from `defaults` (the flags).

    JSON: `{"cases": [{...}, ...]}` or a bare list. TOML: `[[cases]]` tables. Fields: name, prompt, seed,
    size ("WxH"), steps, reference (PNG path, relative to the file), reference_from_cpu, psnr_min, precision,
    images (paths relative to the file: editing references; with `mask`, the image to inpaint first), mask,
    strength (inpainting, default 0.8), guidance_scale and negative_prompt (base models: the model's default scale
    and no negative prompt when absent). An editing or inpainting case without `size` takes the first image's.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--cases {path}: no such file.")
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise InputError(f"--cases {path} is not valid {kind}: {exc}.") from exc
    except RecursionError:
        raise InputError(
            f"--cases {path} nests its values too deeply to be a cases file; a cases file is a list of flat tables."
        ) from None
    except OSError as exc:
        raise InputError(f"--cases {path} cannot be read ({exc.strerror}).") from None
    entries = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise InputError(f"--cases {path}: expected a non-empty list of cases under `cases` (JSON or [[cases]] TOML).")

    cases: list[Case] = []
    for index, entry in enumerate(entries, start=1):
        where = f"--cases {path}, case {index}"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: expected a table/object of fields, got {entry!r}.")
        unknown = sorted(set(entry) - CASE_KEYS)
        if unknown:
            raise InputError(
                f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(CASE_KEYS))}."
            )
        case = replace(defaults)
        if "size" in entry:
            width, height = limits.parse_size(_typed(entry, "size", str, where), where=f"{where}: `size`")
            case = replace(case, width=width, height=height)
        if "prompt" in entry:
            case = replace(case, prompt=_typed(entry, "prompt", str, where))
        if "seed" in entry:
            case = replace(case, seed=_typed(entry, "seed", int, where))
        if "steps" in entry:
            case = replace(case, steps=_typed(entry, "steps", int, where))
        if "psnr_min" in entry:
            case = replace(case, psnr_min=float(_typed(entry, "psnr_min", (int, float), where)))
        if "precision" in entry:
            case = replace(case, precision=_typed(entry, "precision", str, where))
        if "images" in entry:
            listed = _typed(entry, "images", list, where)
            if not all(isinstance(item, str) for item in listed):
                raise InputError(f"{where}: `images` must be a list of image paths, got {listed!r}.")
            case = replace(case, images=tuple(_relative(path, item) for item in listed))
        if "mask" in entry:
            case = replace(case, mask=_relative(path, _typed(entry, "mask", str, where)))
        if "strength" in entry:
            case = replace(case, strength=float(_typed(entry, "strength", (int, float), where)))
        if "extend" in entry:
            case = replace(case, extend=_typed(entry, "extend", dict, where))
        if "guidance_scale" in entry:
            case = replace(case, guidance_scale=float(_typed(entry, "guidance_scale", (int, float), where)))
        if "negative_prompt" in entry:
            case = replace(case, negative_prompt=_typed(entry, "negative_prompt", str, where))
        # A case that names its own reference replaces the flags' choice rather than combining with it.
        if "reference" in entry:
            reference = Path(_typed(entry, "reference", str, where))
            case = replace(
                case,
                reference_png=reference if reference.is_absolute() else path.parent / reference,
                reference_from_cpu=False,
            )
        if "reference_from_cpu" in entry:
            from_cpu = _typed(entry, "reference_from_cpu", bool, where)
            case = replace(case, reference_from_cpu=from_cpu, reference_png=None if from_cpu else case.reference_png)
        name = _typed(entry, "name", str, where) if "name" in entry else f"{index:02d}-seed{case.seed}-{case.size}"
        check_case_name(name, where=where)
        case = with_input_size(replace(case, name=name), size_given="size" in entry)
        cases.append(check_case(case, where=f"{where} ({name})"))

    # Compared without letter case: on a file system that ignores it, `Fox` and `fox` would share one folder.
    duplicates = repeated_names(case.name for case in cases)
    if duplicates:
        raise InputError(
            f"--cases {path}: case names must be unique, letter case aside (each gets a report "
            f"folder); repeated: {duplicates}."
        )
    return cases


def repeated_names(names: Iterable[str]) -> list[str]:
    """The names that occur more than once, letter case aside (sorted): each name's folded form counted once, so
    200,000 cases take one pass, not one pass per case."""
    listed = list(names)
    folded = Counter(name.casefold() for name in listed)
    return sorted({name for name in listed if folded[name.casefold()] > 1})


def check_case_name(name: object, *, where: str) -> str:
    """`name`, when it can name a case, else InputError naming `where`."""
    problem = case_name_problem(name)
    if problem is not None:
        raise InputError(f"{where}: name {name!r} {problem}; rename the case.")
    assert isinstance(name, str)
    return name


def case_name_problem(name: object) -> str | None:
    """Why `name` cannot name a case, or None. It names the case's report folder (and regress-merge reads it back
    from reports), so it is one plain folder name, never a path, and none of the run's own files."""
    from builder.check.regress.report_folder import RUN_FILES, colliding_name

    if not isinstance(name, str) or not CASE_NAME.fullmatch(name):
        return "must be 1-64 letters, digits, '.', '_' or '-' (it names a folder)"
    own = colliding_name(name)
    if own is not None:
        return (
            f"is the run's own {own} in the report folder (each case gets a folder of its name). "
            f"Reserved: {', '.join(RUN_FILES)}"
        )
    return None


def _relative(cases_file: Path, name: str) -> Path:
    given = Path(name)
    return given if given.is_absolute() else cases_file.parent / given


def with_input_size(case: Case, *, size_given: bool) -> Case:
    """An editing case without a size takes its first image's used size (as Flux2KleinPipeline does); an inpainting
    case always has its image's (Flux2KleinInpaintPipeline ignores the size it is given), so a different explicit
    size is refused by check_case."""
    if not case.images or (size_given and not case.inpainting) or not case.images[0].is_file():
        return case
    upright = _upright_size(case.images[0], inpainting=case.inpainting)
    if case.extend and outpaint.extension_problem(dict(case.extend)) is None:  # outpainting: the padded image's
        upright = outpaint.check_extension(dict(case.extend)).padded_size(*upright)
    width, height = limits.input_image_size(*upright)
    if case.inpainting and size_given and (width, height) != (case.width, case.height):
        raise InputError(
            f"inpainting keeps the size of the image to inpaint: {case.images[0]} is used at "
            f"{width}x{height}, but the case asks for {case.size}; leave the size out."
        )
    return replace(case, width=width, height=height)


def _upright_size(path: Path, *, inpainting: bool) -> tuple[int, int]:
    """The first image's size as `reference` and the app see it: decoded with its EXIF orientation applied, through
    the same checks (format, truncation, decompression bombs, size limits)."""
    from builder.pipeline import inputs

    loaded = inputs.read_image(path, role="The image to inpaint" if inpainting else "Reference image 1")
    return loaded.width, loaded.height


def _typed(entry: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = entry[key]
    # bool is an int subclass: `seed = true` must not pass as seed 1.
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"{where}: `{key}` must be {expected}, got {value!r}.")
    return value


def check_case(case: Case, *, where: str) -> Case:
    """`case`, or InputError / RegressionError naming `where` and the field that is wrong."""
    if not case.prompt or not case.prompt.strip():
        raise InputError(f"{where}: the prompt is empty; give --prompt TEXT (or `prompt` in the cases file).")
    limits.check_prompt(case.prompt, name=f"{where}: the prompt")
    limits.check_seed(case.seed, name=f"{where}: seed")
    limits.check_steps(case.steps, name=f"{where}: steps")
    if case.precision is not None and case.precision not in manifest.VARIANTS:
        raise InputError(f"{where}: precision {case.precision!r} is not one of {', '.join(manifest.VARIANTS)}.")
    for image in (*case.images, *([case.mask] if case.mask is not None else [])):
        if not image.is_file():
            raise InputError(f"{where}: input image {image} does not exist.")
    references = len(case.images) - (1 if case.inpainting else 0)
    if references > limits.REFERENCES_MAX:
        raise InputError(f"{where}: {references} reference images; at most {limits.REFERENCES_MAX} are supported.")
    if case.mask is not None and not case.images:
        raise InputError(f"{where}: a mask needs the image to inpaint: give it as the first of `images`.")
    if case.extend:
        problem = outpaint.extension_problem(dict(case.extend))
        if problem:
            raise InputError(f"{where}: {problem}")
    if case.strength is not None:
        if not case.inpainting:
            raise InputError(f"{where}: `strength` is for inpainting; give a `mask` or `extend` too, or leave it out.")
        limits.check_strength(case.strength, name=f"{where}: strength")
    if case.guidance_scale is not None:
        limits.check_guidance(case.guidance_scale, name=f"{where}: guidance_scale")
    if case.negative_prompt is not None:
        limits.check_prompt(case.negative_prompt, name=f"{where}: the negative prompt")
    if not case.psnr_min > 0:
        raise InputError(f"{where}: psnr_min {case.psnr_min} must be a positive number of dB, e.g. 40.")
    if case.reference_png is not None and case.reference_from_cpu:
        raise InputError(
            f"{where}: give either a reference PNG or reference-from-cpu, not both "
            f"(got {case.reference_png} and reference-from-cpu)."
        )
    if case.reference_png is None and not case.reference_from_cpu:
        raise RegressionError(
            f"{where}: no reference image. Pass --reference PNG (e.g. made by `klein-web reference`) "
            "or --reference-from-cpu."
        )
    if case.reference_png is not None and not case.reference_png.is_file():
        raise RegressionError(
            f"{where}: reference image {case.reference_png} does not exist. Make it with `klein-web reference "
            "MODEL_DIR --prompt ... --out PNG`, or use --reference-from-cpu."
        )
    if case.images:  # decoded as `reference` decodes them, so a file it refuses stops the run before the browser
        from builder.pipeline import inputs
        from builder.pipeline.reference_request import outpaint_inputs

        try:
            files, mask = inputs.read_inputs(case.images, case.mask, outpainting=case.inpainting)
            if case.extend and any(case.extend.values()):
                outpaint_inputs(files[0], mask, outpaint.check_extension(dict(case.extend)))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    return case
