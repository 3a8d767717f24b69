"""Counts the checks the test suite makes at one or more git revisions, so a refactor of the tests can show it
dropped none: `python scripts/assertion_count.py REV [REV ...]` (default: HEAD).

What counts as one check:
- Python (`tests/**/*.py`): an `assert` statement, a `pytest.raises(...)` or `pytest.warns(...)` call, and a
  Playwright `expect(...)` call.
- JavaScript (`tests/**/*.mjs`, `tests/**/*.js`): a call of node's `assert` (`assert(...)`, `assert.equal(...)`,
  `assert.deepStrictEqual(...)`, ...), comments left out.

A check inside a helper counts once however many tests call the helper, so the figure is a floor on what the tests
prove, not a measure of it; compare it across revisions, never against a target.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_CALLS = frozenset({"raises", "warns", "expect"})
JS_ASSERT = re.compile(r"\bassert(?:\.\w+)?\s*\(")
JS_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def python_checks(source: str) -> int:
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            count += 1
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            count += name in PYTHON_CALLS
    return count


def js_checks(source: str) -> int:
    return len(JS_ASSERT.findall(JS_COMMENT.sub("", source)))


def count(rev: str) -> dict[str, int]:
    totals = {"python files": 0, "python checks": 0, "js files": 0, "js checks": 0}
    for path in git("ls-tree", "-r", "--name-only", rev, "tests").splitlines():
        if path.endswith(".py"):
            totals["python files"] += 1
            totals["python checks"] += python_checks(git("show", f"{rev}:{path}"))
        elif path.endswith((".mjs", ".js")):
            totals["js files"] += 1
            totals["js checks"] += js_checks(git("show", f"{rev}:{path}"))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="*", default=["HEAD"], help="git revisions to count (default: HEAD)")
    args = parser.parse_args()
    for rev in args.revs:
        totals = count(rev)
        short = git("rev-parse", "--short", rev).strip()
        print(f"{rev} ({short}): " + ", ".join(f"{value} {name}" for name, value in totals.items()))


if __name__ == "__main__":
    main()
