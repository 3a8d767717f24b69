"""Stage 1 of the CPU reference (builder.pipeline.reference): the request's parameters checked against the limits,
its input files decoded, and the plan of the run (mode, output size, each input's used size and tokens) made before
any model work."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from builder.errors import InputError
from builder.pipeline import imaging, inputs, limits, outpaint
from builder.pipeline.inpaint import inpaint_start


@dataclass(frozen=True)
class InputInfo:
    """What the pipeline made of one input file (the protocol's InputImageInfo)."""

    name: str
    sha256: str
    width: int  # decoded
    height: int
    used_width: int  # the size it was used at
    used_height: int
    tokens: int  # transformer tokens it added to every step (0 for the mask)

    def metadata_line(self) -> str:
        return imaging.input_line(self.sha256, self.used_width, self.used_height, self.name)


@dataclass(frozen=True)
class InputPlan:
    """The mode of a request and the sizes of everything in it, known before any model work."""

    mode: str  # text | edit | inpaint
    width: int  # the output size
    height: int
    images: tuple[InputInfo, ...] = ()
    mask: InputInfo | None = None  # the mask file given (outpainting may have none)
    strength: float | None = None
    extension: outpaint.Extension | None = None  # outpainting: the pixels added on each side
    encoder_runs: tuple[tuple[int, int, int], ...] = ()  # (batch, width, height) of each VAE encoder run

    @property
    def reference_tokens(self) -> int:
        return sum(info.tokens for info in self.images)


def check_request(
    *,
    prompt: str,
    seed: int,
    width: int | None,
    height: int | None,
    steps: int,
    images: Sequence[Path],
    mask: Path | None,
    strength: float,
    log: Callable[[str], None],
    extend: Mapping[str, int] | None = None,
) -> tuple[InputPlan, list[inputs.InputFile], inputs.InputFile | None]:
    """Stage 1: the parameters, then every input file decoded and checked, before any model work.

    Outpainting (`extend` adds pixels on some side) is inpainting of the padded image under the padded mask
    (builder.pipeline.outpaint): the files returned are the padded ones, the plan keeps the given mask's info."""
    limits.check_prompt(prompt)
    limits.check_steps(steps)
    limits.check_seed(seed)
    extension = outpaint.check_extension(dict(extend)) if extend is not None else None
    extension = extension or None  # all sides 0: no outpainting
    if mask is not None or extension:
        strength = limits.check_strength(strength)
    files, mask_file = inputs.read_inputs(list(images), mask, outpainting=extension is not None)
    given_mask = mask_file
    if extension is not None:
        files[0], mask_file = outpaint_inputs(files[0], mask_file, extension)
    plan = plan_inputs(files, mask_file, width=width, height=height, strength=strength)
    if extension is not None:
        # The PNG's `mask` key names the mask file given; without one there is none to name.
        plan = dataclasses.replace(plan, extension=extension, mask=plan.mask if given_mask is not None else None)
    check_inputs(prompt=prompt, seed=seed, width=plan.width, height=plan.height, steps=steps)
    if plan.strength is not None:
        inpaint_start(steps, plan.strength)  # a strength that leaves no step fails here, not in stage 6
    for info in plan.images:
        log(
            f"reference: input {info.name} {info.width}x{info.height} used at {info.used_width}x"
            f"{info.used_height} ({info.tokens} tokens)"
        )
    return plan, files, mask_file


def outpaint_inputs(
    source: inputs.InputFile, mask: inputs.InputFile | None, extension: outpaint.Extension
) -> tuple[inputs.InputFile, inputs.InputFile]:
    """The image to inpaint and the mask, padded by `extension` (builder.pipeline.outpaint's rule), as the files
    diffusers' inpaint pipeline is then given; refused in one line when the padded image is beyond the limits."""
    name = f"The image to inpaint ({source.name})"
    problem = outpaint.padded_problem(extension, source.width, source.height, name)
    if mask is not None:
        problem = problem or outpaint.mask_size_problem(
            source.width, source.height, mask.width, mask.height, f"The mask ({mask.name})"
        )
    if problem:
        raise InputError(problem)
    padded = Image.fromarray(outpaint.pad_image(np.asarray(source.image), extension))
    grey = None if mask is None else np.asarray(mask.image)
    padded_mask = Image.fromarray(outpaint.pad_mask(grey, source.width, source.height, extension))
    mask_name = mask.name if mask is not None else "outpaint mask"
    mask_sha = mask.sha256 if mask is not None else hashlib.sha256(padded_mask.tobytes()).hexdigest()
    return (
        dataclasses.replace(source, image=padded, width=padded.width, height=padded.height),
        inputs.InputFile(mask_name, Path(mask_name), mask_sha, padded_mask.width, padded_mask.height, padded_mask),
    )


def check_inputs(*, prompt: str, seed: int, width: int, height: int, steps: int) -> None:
    """Reject bad parameters before any work starts (the limits of builder.pipeline.limits); never adjust them."""
    limits.check_prompt(prompt)
    limits.check_side(width, name="`width`")
    limits.check_side(height, name="`height`")
    limits.check_steps(steps)
    limits.check_seed(seed)


def plan_inputs(
    files: Sequence[inputs.InputFile],
    mask: inputs.InputFile | None,
    *,
    width: int | None,
    height: int | None,
    strength: float,
) -> InputPlan:
    """The mode, the output size and each input's used size and tokens, as the pipelines will use them."""

    def info(item: inputs.InputFile, used: tuple[int, int], *, tokens: bool = True) -> InputInfo:
        count = (used[0] // limits.SIZE_MULTIPLE) * (used[1] // limits.SIZE_MULTIPLE) if tokens else 0
        return InputInfo(item.name, item.sha256, item.width, item.height, used[0], used[1], count)

    if mask is None and not files:
        if width is None or height is None:
            raise InputError("Text-to-image needs the image size: pass --size WIDTHxHEIGHT (e.g. 512x512).")
        return InputPlan("text", width, height)
    if mask is None:
        # Flux2KleinPipeline: `height = height or image_height` for the first image, each side on its own.
        used = [limits.input_image_size(item.width, item.height) for item in files]
        if (width is None or height is None) and not all(limits.side_allowed(side) for side in used[0]):
            raise InputError(
                f"Reference image 1 ({files[0].name}) is used at {used[0][0]}x{used[0][1]}, beyond the "
                f"{limits.SIZE_MAX} pixels an output side may have; pass --size for the output."
            )
        return InputPlan(
            "edit",
            width or used[0][0],
            height or used[0][1],
            images=tuple(info(item, size) for item, size in zip(files, used, strict=True)),
            encoder_runs=tuple((1, w, h) for w, h in used),
        )
    # Flux2KleinInpaintPipeline ignores a height/width it is given and uses the image's; asking for another
    # size is a mistake worth a message, not a silent change.
    source_size = limits.input_image_size(files[0].width, files[0].height)
    if (width is not None and width != source_size[0]) or (height is not None and height != source_size[1]):
        raise InputError(
            f"Inpainting keeps the size of the image to inpaint: {files[0].name} is used at "
            f"{source_size[0]}x{source_size[1]}, but --size {width}x{height} was asked; leave --size out."
        )
    if not all(limits.side_allowed(side) for side in source_size):
        raise InputError(
            f"The image to inpaint ({files[0].name}) is used at {source_size[0]}x{source_size[1]}, beyond "
            f"the {limits.SIZE_MAX} pixels an output side may have; crop it first."
        )
    references = files[1:]
    reference_size = inputs.inpaint_reference_size(references) if references else (0, 0)
    runs = [(1, *source_size)] + ([(len(references), *reference_size)] if references else [])
    return InputPlan(
        "inpaint",
        *source_size,
        images=(info(files[0], source_size), *(info(item, reference_size) for item in references)),
        mask=info(mask, source_size, tokens=False),
        strength=strength,
        encoder_runs=tuple(runs),
    )
