"""builder.check.driver.page's form filling without a browser: a page whose fill() leaves the old prompt, and a base
model's guidance fields, which the page shows once it knows the model's kind."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builder.check.driver.page import MODEL_KIND_JS, fill_form
from builder.check.regress.cases import Case
from builder.errors import RegressionError


class FormPage:
    """The few Playwright Page calls fill_form makes, over a dict of field values."""

    def __init__(self, *, fill_works: bool, setter_works: bool = True, model: str = "distilled") -> None:
        self.values: dict[str, str] = {"#prompt": "old prompt", "#seed": "0", "#steps": "4", "#size": "512x512"}
        self.fill_works, self.setter_works = fill_works, setter_works
        self.evaluated: list[Any] = []
        self.model = model  # what #guidance[data-model] settles on ('none': a page without it)
        self.filled: list[str] = []

    def fill(self, selector: str, value: str) -> None:
        self.filled.append(selector)
        if self.fill_works or selector != "#prompt":
            self.values[selector] = value

    def input_value(self, selector: str) -> str:
        return self.values[selector]

    def evaluate(self, _script: str, args: list[str]) -> None:
        self.evaluated.append(args)
        if self.setter_works:
            self.values[args[0]] = args[1]

    def eval_on_selector(self, _selector: str, _script: str) -> str:
        return "INPUT"

    def eval_on_selector_all(self, _selector: str, _script: str) -> list[str]:
        return ["512x512", "1024x1024"]

    def select_option(self, selector: str, value: str) -> None:
        self.values[selector] = value

    def query_selector(self, _selector: str) -> None:
        return None  # a page without the editing modes

    def wait_for_function(self, script: str, **_options: Any) -> Any:
        assert script == MODEL_KIND_JS
        kind = self.model

        class Handle:
            def json_value(self) -> str:
                return kind

        return Handle()

    def text_content(self, selector: str) -> str:
        assert selector == "#guidance-note"
        return "Guidance scale and negative prompt: unknown whether this model takes them (offline)."


CASE = Case(name="c", prompt="a red fox", seed=7, width=512, height=512, steps=4, psnr_min=40.0)


def test_a_working_fill_is_trusted() -> None:
    page = FormPage(fill_works=True)
    fill_form(page, CASE)
    assert page.values["#prompt"] == "a red fox" and page.values["#seed"] == "7" and not page.evaluated


def test_a_fill_that_left_the_old_prompt_is_redone_through_the_value_setter() -> None:
    page = FormPage(fill_works=False)
    fill_form(page, CASE)
    assert page.values["#prompt"] == "a red fox"
    assert page.evaluated == [["#prompt", "a red fox"]]


def test_a_prompt_that_cannot_be_entered_stops_the_run() -> None:
    page = FormPage(fill_works=False, setter_works=False)
    with pytest.raises(RegressionError, match="could not enter the prompt"):
        fill_form(page, CASE)


def test_a_base_models_guidance_is_typed_before_the_steps_and_left_empty_for_its_default() -> None:
    page = FormPage(fill_works=True, model="base")
    fill_form(page, replace(CASE, guidance_scale=4.5, negative_prompt="blurry"))
    assert page.values["#guidance-scale"] == "4.5" and page.values["#negative-prompt"] == "blurry"
    # Before the steps: the page's default steps for the model's kind never overwrite the case's.
    assert page.filled.index("#guidance-scale") < page.filled.index("#steps")
    default = FormPage(fill_works=True, model="base")
    fill_form(default, CASE)
    assert default.values["#guidance-scale"] == "" and default.values["#negative-prompt"] == ""


def test_a_distilled_models_page_gets_no_guidance_and_a_page_that_cannot_tell_refuses_it() -> None:
    distilled = FormPage(fill_works=True, model="distilled")
    fill_form(distilled, replace(CASE, guidance_scale=4.0))
    assert "#guidance-scale" not in distilled.filled  # ignored, as diffusers and the CPU reference ignore it
    fill_form(FormPage(fill_works=True, model="error"), CASE)  # nothing asked of it: the case runs
    for kind, said in (("error", "unknown whether this model takes them"), ("none", "it has no guidance fields")):
        with pytest.raises(RegressionError, match=f"cannot take the case's guidance: .*{said}"):
            fill_form(FormPage(fill_works=True, model=kind), replace(CASE, negative_prompt="blurry"))
