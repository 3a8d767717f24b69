"""Driving the app's page like a user: fill the form, click Generate, wait for the app's state, read what it shows.

No test hooks: only the UI's element ids, `body[data-state]` and the `data-json` attributes the app shows.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import RegressionError
from builder.pipeline import limits
from builder.pipeline.outpaint import SIDES

Log = Callable[[str], None]

# How often the waiting loop wakes up to log the app's #status line.
STATUS_POLL_MS = 2_000


@dataclass(frozen=True, kw_only=True)
class Form:
    """What the form is given for one image: prompt, seed, size, steps, the input images of editing and inpainting,
    and a base model's guidance."""

    prompt: str
    seed: int
    width: int
    height: int
    steps: int
    # Editing: reference images. Inpainting (`mask` or `extend` set): the image to inpaint, then its references.
    images: tuple[Path, ...] = ()
    mask: Path | None = None
    strength: float | None = None  # inpainting only; None: limits.STRENGTH_DEFAULT
    # Outpainting: pixels added on each side of the image to inpaint (builder.pipeline.outpaint.SIDES); the mask is
    # optional then. Empty: none.
    extend: Mapping[str, int] = field(default_factory=dict)
    # Base models only (the page shows the fields once it knows the model's kind); None: the model's default scale,
    # no negative prompt. A distilled model's page has no such fields and its pipeline ignores both.
    guidance_scale: float | None = None
    negative_prompt: str | None = None

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def mode(self) -> str:
        return "inpaint" if self.inpainting else "edit" if self.images else "text"

    @property
    def inpainting(self) -> bool:
        return self.mask is not None or any(self.extend.values())

    @property
    def strength_or_default(self) -> float:
        return limits.STRENGTH_DEFAULT if self.strength is None else self.strength


# done | error | rejected (the form refused the settings: it shows #error but stays idle) | false (keep waiting).
STATE_SETTLED_JS = """() => {
    const state = document.body.dataset.state;
    if (state === 'done' || state === 'error') return state;
    const error = document.querySelector('#error');
    return state === 'idle' && error && error.textContent.trim() ? 'rejected' : false;
}"""


# Sets a text control's value as typing would end (the native setter, then an `input` event).
FORM_WAIT_MS = 30_000  # the page decodes and checks each image file it is given
SET_VALUE_JS = """([selector, value]) => {
    const element = document.querySelector(selector);
    const setter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(element), 'value').set;
    setter.call(element, value);
    element.dispatchEvent(new Event('input', {bubbles: true}));
}"""


def fill_form(page: Any, case: Form) -> None:
    """Type the prompt, seed, steps and size into the form and give it the input images, as a user would."""
    fill_guidance(page, case)  # first: once the page knows the model's kind, it sets that kind's default steps
    page.fill("#prompt", case.prompt)
    if page.input_value("#prompt") != case.prompt:
        # Seen in headless Chromium on a GPU machine: fill() on the prompt of a page that has made an image
        # returned without changing it. The image would then be made for the previous prompt.
        page.evaluate(SET_VALUE_JS, ["#prompt", case.prompt])
        if page.input_value("#prompt") != case.prompt:
            raise RegressionError(f"could not enter the prompt {case.prompt!r} into the form")
    _set_field(page, "#seed", str(case.seed))
    _set_field(page, "#steps", str(case.steps))
    fill_images(page, case)
    if case.mode == "inpaint":
        return  # inpainting's size is the image's: the form locks it
    if case.mode == "edit":
        if case.size == _shown_size(page):
            return  # "match the first image" already set it
        if page.is_checked("#match-size"):
            page.uncheck("#match-size")
    presets = page.eval_on_selector_all("#size option", "options => options.map(o => o.value)")
    if case.size in presets:
        page.select_option("#size", case.size)
    else:
        page.select_option("#size", "custom")
        page.fill("#width", str(case.width))
        page.fill("#height", str(case.height))


# The model's kind as the page shows it (page/ui/guidance.js): `unknown` until the page has read the manifest,
# then `distilled`, `base`, or `error` when it could not.
MODEL_KIND_JS = """() => {
    const section = document.querySelector('#guidance');
    if (!section) return 'none';
    return section.dataset.model === 'unknown' ? false : section.dataset.model;
}"""


def fill_guidance(page: Any, case: Form) -> None:
    """Wait until the page knows the model's kind; for a base model, type the case's guidance scale (empty: the
    model's default) and negative prompt. A distilled model's page has no such fields, and its pipeline ignores both,
    as the CPU reference does."""
    kind = str(page.wait_for_function(MODEL_KIND_JS, timeout=FORM_WAIT_MS).json_value())
    wanted = case.guidance_scale is not None or case.negative_prompt is not None
    if kind == "base":
        page.fill("#guidance-scale", "" if case.guidance_scale is None else repr(case.guidance_scale))
        page.fill("#negative-prompt", case.negative_prompt or "")
    elif wanted and kind in ("none", "error"):
        note = (page.text_content("#guidance-note") or "").strip() if kind == "error" else "it has no guidance fields"
        raise RegressionError(f"the page cannot take the case's guidance: {note}")


# True once the page has read what it was given (`what`: the image to inpaint shown, the mask file named, `arg`
# references listed), or once it shows an error (it refused a file).
READ_OR_REFUSED_JS = """([what, arg]) => {
    const error = document.querySelector('#error');
    if (error && error.getClientRects().length > 0 && error.textContent.trim() !== '') return true;
    if (what === 'source') return !document.querySelector('#painter').hidden;
    if (what === 'mask') return document.querySelector('#mask-info').textContent.includes(arg);
    return document.querySelectorAll('#references li').length === arg;
}"""


def _wait_read(page: Any, what: str, arg: object = None) -> None:
    """Wait until the page has read the files it was given (READ_OR_REFUSED_JS), or has refused one: then the
    RegressionError in the page's own words, at once (not after FORM_WAIT_MS)."""
    page.wait_for_function(READ_OR_REFUSED_JS, arg=[what, arg], timeout=FORM_WAIT_MS)
    if page.query_selector("#error") is not None and page.is_visible("#error"):
        raise RegressionError(f"the page refused the case's images: {app_error(page)[1]}")


def fill_images(page: Any, case: Form) -> None:
    """Choose the case's mode and give the form its images as a user would: the file pickers' inputs, then wait
    until the page has read them (each reference listed, the image to inpaint shown with its mask)."""
    if case.mode == "text":
        if page.query_selector("#mode-text") is not None:
            _choose_mode(page, "text")  # after an editing case of the same run
        return
    _choose_mode(page, case.mode)
    references = list(case.images[1:] if case.mode == "inpaint" else case.images)
    if case.mode == "inpaint":
        page.set_input_files("#source-file", str(case.images[0]))
        _wait_read(page, "source")
        if case.mask is not None:
            page.set_input_files("#mask-file", str(case.mask))
            # The painter names a loaded mask file ("Mask: NAME, sent as given") once it has read it.
            _wait_read(page, "mask", case.mask.name)
        for side in SIDES:  # typed as a person types them; an earlier case's values are replaced
            page.fill(f"#extend-{side}", str(case.extend.get(side, 0) or ""))
        page.evaluate(SET_VALUE_JS, ["#strength", repr(case.strength_or_default)])
        if float(page.input_value("#strength")) != case.strength_or_default:
            raise RegressionError(
                f"the strength slider does not take {case.strength_or_default} (its step is "
                f"{page.get_attribute('#strength', 'step')}); use a multiple of it"
            )
    if references:
        page.set_input_files("#reference-files", [str(path) for path in references])
        _wait_read(page, "references", len(references))


def _choose_mode(page: Any, mode: str) -> None:
    """Click the mode's label, as a person does (the radio itself is drawn by its label)."""
    page.click(f"label[for=mode-{mode}]")
    if not page.is_checked(f"#mode-{mode}"):
        raise RegressionError(f"the page did not switch to the {mode} mode")


def _shown_size(page: Any) -> str:
    """The output size the form holds now, as WIDTHxHEIGHT."""
    value = page.input_value("#size")
    return value if value != "custom" else f"{page.input_value('#width')}x{page.input_value('#height')}"


def _set_field(page: Any, selector: str, value: str) -> None:
    """Type into an input/textarea, or choose in a select, whichever the UI uses for this control."""
    tag = page.eval_on_selector(selector, "el => el.tagName")
    if tag == "SELECT":
        page.select_option(selector, value)
    else:
        page.fill(selector, value)


def wait_settled(page: Any, *, label: str, timeout_s: float, log: Log) -> str:
    """Wait for body[data-state] to settle (see STATE_SETTLED_JS), logging the app's #status as it changes."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout_s
    last_status = None
    while True:
        try:
            return str(page.wait_for_function(STATE_SETTLED_JS, timeout=STATUS_POLL_MS).json_value())
        except PlaywrightTimeout:
            pass
        status = (page.text_content("#status") or "").strip()
        if status and status != last_status:
            log(f"[{label}] {status}")
            last_status = status
        if time.monotonic() > deadline:
            raise RegressionError(
                f"timed out after {timeout_s:g} s waiting for the image "
                f"(last status: {last_status!r}); "
                "raise --timeout for slow (software) adapters"
            )


def read_json_attribute(page: Any, selector: str) -> Any:
    """The parsed `data-json` of `selector` (None when absent; {"unparsed": text} when it is not JSON)."""
    raw = page.get_attribute(selector, "data-json") if page.query_selector(selector) else None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"unparsed": raw}


def app_error(page: Any) -> tuple[str, str]:
    """(code, message) of the app's #error element."""
    element = page.query_selector("#error")
    if element is None:
        return "", "the app went to state `error` without an #error message"
    code = element.get_attribute("data-code") or ""
    return code, " ".join((element.inner_text() or "").split()) or "the app showed an empty #error"


@contextlib.contextmanager
def opened(context: Any, url: str, *, timeout_ms: float = 120_000) -> Iterator[Any]:
    """A page of the app at `url`, its form on screen; closed afterwards."""
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    try:
        page.goto(url, wait_until="load")
        page.wait_for_selector("#generate")
        yield page
    finally:
        with contextlib.suppress(Exception):
            page.close()


def generate(page: Any, form: Form, *, timeout_s: float, log: Log) -> tuple[float, dict[str, Any]]:
    """Fill the form, click Generate, wait for the image and check it is the one asked for; (seconds from the
    click, the #timings JSON). RegressionError when the app made no image or another one."""
    # The form stays busy a moment after an image appears (history, storage estimate): a click then is ignored.
    page.wait_for_selector("#generate:enabled")
    fill_form(page, form)
    started = time.perf_counter()
    page.click("#generate")
    page.wait_for_function("() => document.body.dataset.state !== 'done'", timeout=10_000)
    state = wait_settled(page, label=form.size, timeout_s=timeout_s, log=log)
    seconds = time.perf_counter() - started
    if state != "done":
        raise RegressionError(f"the app did not produce an image at {form.size}: {app_error(page)[1]}")
    caption = page.text_content("#result-caption") or ""
    if f"Seed {form.seed} · {form.width}×{form.height}" not in caption:
        raise RegressionError(f"the image shown is not the one asked for (seed {form.seed}, {form.size}): {caption!r}")
    # The image's alt text names the prompt the app generated it for: a stale prompt would time a cached encode.
    alt = page.get_attribute("#result-image", "alt") or ""
    if not alt.endswith(f": {form.prompt}"):
        raise RegressionError(f"the image shown was generated for another prompt than {form.prompt!r}: {alt!r}")
    info = read_json_attribute(page, "#timings")
    if not isinstance(info, dict):
        raise RegressionError("the app finished without its #timings data")
    return seconds, info
