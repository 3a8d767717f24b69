"""builder.check.driver.page's form filling without a browser: a page whose fill() leaves the old prompt."""

from __future__ import annotations

from typing import Any

import pytest

from builder.check.driver.page import fill_form
from builder.check.regress.cases import Case
from builder.errors import RegressionError


class FormPage:
    """The few Playwright Page calls fill_form makes, over a dict of field values."""

    def __init__(self, *, fill_works: bool, setter_works: bool = True) -> None:
        self.values: dict[str, str] = {"#prompt": "old prompt", "#seed": "0", "#steps": "4", "#size": "512x512"}
        self.fill_works, self.setter_works = fill_works, setter_works
        self.evaluated: list[Any] = []

    def fill(self, selector: str, value: str) -> None:
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
