"""scripts/assertion_count.py: what it counts as a check in each language, and that it reads a revision's tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from builder import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "assertion_count.py"
spec = importlib.util.spec_from_file_location("assertion_count", SCRIPT)
assert spec and spec.loader
assertion_count = importlib.util.module_from_spec(spec)
spec.loader.exec_module(assertion_count)


def test_python_checks_are_asserts_raises_warns_and_expect() -> None:
    source = (
        "import pytest\n"
        "def helper(x):\n    assert x, 'why'\n"
        "def test_a(page):\n"
        "    assert 1 == 1\n"
        "    with pytest.raises(ValueError):\n        int('x')\n"
        "    with pytest.warns(UserWarning):\n        pass\n"
        "    expect(page).to_have_title('t')\n"
        "    print('assert not a check')\n"
    )
    assert assertion_count.python_checks(source) == 5


def test_js_checks_are_assert_calls_outside_comments() -> None:
    source = (
        "import assert from 'node:assert/strict';\n"
        "// assert.equal(1, 1) is a comment\n"
        "/* assert(false) too */\n"
        "test('x', () => { assert.equal(1, 1); assert(true); assert.deepStrictEqual([], []); });\n"
        "const asserted = 'assertion';\n"
    )
    assert assertion_count.js_checks(source) == 3


def test_counts_a_revision_of_the_tests() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "HEAD"], cwd=REPO_ROOT, check=True, capture_output=True, text=True
    ).stdout
    head = assertion_count.count("HEAD")
    assert head["python checks"] > 0 and head["js checks"] > 0
    assert f"{head['python checks']} python checks" in out and f"{head['js checks']} js checks" in out
