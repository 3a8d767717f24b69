"""`tsc --noEmit -p web_src/jsconfig.json`: the JSDoc types of web_src/src, checked with `checkJs` and `strict`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder import WEB_SRC
from builder.node import ensure_node_modules, find_node

SOURCE_FILES = sorted((WEB_SRC / "src").rglob("*.js"))


def tsc(web_src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The pinned TypeScript (web_src/package.json) run by the project's node over `web_src`'s jsconfig.json."""
    modules = ensure_node_modules(log=lambda _msg: None)
    tools = find_node()
    command = [str(tools.node), str(modules / "typescript" / "bin" / "tsc"), "-p", str(web_src / "jsconfig.json")]
    return subprocess.run(
        [*command, *args], cwd=web_src, env=tools.env(), capture_output=True, text=True, timeout=600, check=False
    )


def test_jsconfig_checks_plain_javascript_strictly() -> None:
    config = json.loads((WEB_SRC / "jsconfig.json").read_text(encoding="utf-8"))
    options = config["compilerOptions"]
    assert options["checkJs"] is True
    assert options["strict"] is True
    assert options["noEmit"] is True
    assert "src/**/*.js" in config["include"]


@pytest.fixture(scope="module")
def checked() -> subprocess.CompletedProcess[str]:
    """One strict check of web_src/src, listing the files it read (--listFiles) after any errors it found."""
    return tsc(WEB_SRC, "--noEmit", "--pretty", "false", "--listFiles")


def test_every_source_file_is_type_checked(checked: subprocess.CompletedProcess[str]) -> None:
    listed = {Path(line).resolve() for line in checked.stdout.splitlines() if Path(line.strip()).is_absolute()}
    assert listed, f"tsc listed no file:\n{checked.stdout}{checked.stderr}"
    missing = [str(path.relative_to(WEB_SRC)) for path in SOURCE_FILES if path.resolve() not in listed]
    assert len(SOURCE_FILES) >= 30 and not missing, f"tsc does not check {missing}"


def test_typescript_finds_no_type_errors(checked: subprocess.CompletedProcess[str]) -> None:
    errors = [line for line in checked.stdout.splitlines() if not Path(line.strip()).is_absolute()]
    assert checked.returncode == 0, f"tsc found type errors in web_src/src:\n{chr(10).join(errors)}{checked.stderr}"


def test_a_type_error_fails_the_check(tmp_path: Path) -> None:
    """The same configuration (web_src/jsconfig.json, copied) over a source with one wrong JSDoc type: tsc must
    name it."""
    copy = tmp_path / "web_src"
    (copy / "src" / "shared").mkdir(parents=True)
    shutil.copy2(WEB_SRC / "jsconfig.json", copy / "jsconfig.json")
    (copy / "node_modules").symlink_to(ensure_node_modules(log=lambda _msg: None), target_is_directory=True)
    bad = copy / "src" / "shared" / "wrong.js"
    bad.write_text(
        "// @ts-check\n/** @file A deliberate type error. @module shared/wrong */\n\n"
        "/** @param {number} bytes @returns {string} */\nexport const size = (bytes) => bytes;\n",
        encoding="utf-8",
    )
    result = tsc(copy, "--noEmit", "--pretty", "false")
    assert result.returncode != 0
    assert "src/shared/wrong.js" in result.stdout and "TS2322" in result.stdout, result.stdout


@pytest.mark.parametrize("path", SOURCE_FILES, ids=[str(p.relative_to(WEB_SRC / "src")) for p in SOURCE_FILES])
def test_no_type_check_is_switched_off(path: Path) -> None:
    """`@ts-ignore` / `@ts-nocheck` hide errors; `@ts-expect-error` must say why (a library's types are wrong)."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("// @ts-check\n"), f"{path.name} must start with // @ts-check"
    assert "@ts-ignore" not in text and "@ts-nocheck" not in text
    for line in text.splitlines():
        if "@ts-expect-error" in line:
            assert line.split("@ts-expect-error", 1)[1].strip(" -:*/"), (
                f"{path.name}: @ts-expect-error without a reason"
            )
