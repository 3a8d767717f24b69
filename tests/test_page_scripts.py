"""Scripts handed to Playwright are functions, never bare expressions.

Playwright runs a string by `eval` in the page. The app's CSP has no 'unsafe-eval': eval is allowed only during
the DevTools call itself, so `wait_for_function("expr")` (evaluated again on every poll) fails as soon as the first
poll is not already true, while `wait_for_function("() => expr")` is evaluated once, inside that call, and then
called. Whether a test passes must not depend on how fast the browser gets there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from builder import REPO_ROOT

CALLS = ("wait_for_function", "evaluate", "evaluate_handle")
FUNCTION = re.compile(r"^(async\s+)?(function\b|\([^)]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)")
SOURCES = sorted(
    path
    for folder in ("builder", "tests", "scripts")
    for path in (REPO_ROOT / folder).rglob("*.py")
    if "_app" not in path.parts
)


def string_constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Module-level NAME = "..." of every source: scripts are often defined in one module and imported in another."""
    return {
        target.id: node.value.value
        for tree in trees.values()
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def script_text(arg: ast.expr, constants: dict[str, str]) -> str | None:
    """The JavaScript an argument holds: a literal, a named constant, or an f-string's leading text."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        return constants.get(arg.id)
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def page_scripts() -> list[tuple[str, str]]:
    """(place, script) of every wait_for_function / evaluate / evaluate_handle call with a string script."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in SOURCES}
    constants = string_constants(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CALLS
                and node.args
            ):
                script = script_text(node.args[0], constants)
                if script is not None:
                    found.append((f"{path.relative_to(REPO_ROOT)}:{node.lineno}", script.strip()))
    return found


@pytest.mark.parametrize(
    ("script", "is_function"),
    [
        ("() => document.body.dataset.state", True),
        ("([t, f]) => window.kleinTest.send(t, f)", True),
        ("(n) => n + 1", True),
        ("n => n + 1", True),
        ("async () => { await 1; }", True),
        ("async (path) => path", True),
        ("function () { return 1; }", True),
        ("crossOriginIsolated", False),
        ("self.crossOriginIsolated === true", False),
        ("document.body.dataset.state !== 'done'", False),
        ("(window.ready)", False),
    ],
)
def test_the_function_rule_tells_functions_from_expressions(script: str, is_function: bool) -> None:
    assert bool(FUNCTION.match(script)) is is_function


def test_every_script_given_to_playwright_is_a_function() -> None:
    scripts = page_scripts()
    # The scan finds the calls (the browser tests and checks make dozens).
    assert len(scripts) > 40 and any(place.startswith("builder/") for place, _ in scripts), scripts
    expressions = [f"{place}: {script[:80]}" for place, script in scripts if not FUNCTION.match(script)]
    assert not expressions, "pass '() => ...' instead of an expression:\n" + "\n".join(expressions)
