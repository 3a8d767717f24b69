"""`browser-bench` and `load-bench` check every output path before launching anything.

--out in /proc, --out an existing file, a folder holding someone's browser-bench.json (or load-bench.json), a table
(.md) with no result beside it, a result path that is a folder or a symlink: each is refused with one line before the
browser runs, and nothing there changes. The browser given is a script that leaves a file when it is started (and
says it is Firefox): a refusal must come before it, and an accepted --out goes on to the browser check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from refusals import fake_browser, one_reason, snapshot
from stub_repo import write_stub_repo

from builder import REPO_ROOT

COMMANDS = {
    "browser-bench": ("browser-bench.json", "browser-bench.md"),
    "load-bench": ("load-bench.json", "load-bench.md"),
}


def run_bench(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command with the stub repo's one transformer variant (browser-bench asks for q4f16 and q4 otherwise)."""
    return subprocess.run(
        [sys.executable, "-m", "builder", command, "--precision", "q4", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    browser, started = fake_browser(tmp_path)
    return {"models": write_stub_repo(tmp_path / "models"), "browser": browser, "started": started}


def unrelated_json(out: Path, names: tuple[str, str]) -> Path:
    out.mkdir()
    (out / names[0]).write_text('{"my": "own numbers"}')
    (out / names[1]).write_text("# my notes\n")
    return out


def table_alone(out: Path, names: tuple[str, str]) -> Path:
    out.mkdir()
    (out / names[1]).write_text("# my notes\n")
    return out


def result_is_a_folder(out: Path, names: tuple[str, str]) -> Path:
    (out / names[0]).mkdir(parents=True)
    return out


def result_is_a_symlink(out: Path, names: tuple[str, str]) -> Path:
    out.mkdir()
    (out.parent / "elsewhere.json").write_text('{"environment": {}, "rows": []}')
    (out / names[0]).symlink_to(out.parent / "elsewhere.json")
    return out


def an_existing_file(out: Path, _names: tuple[str, str]) -> Path:
    out.write_text("a file")
    return out


BAD_OUTS: dict[str, tuple[Callable[[Path, tuple[str, str]], Path], str]] = {
    "unrelated-json": (unrelated_json, "not a result of an earlier run"),
    "table-alone": (table_alone, "no earlier run's table"),
    "result-is-a-folder": (result_is_a_folder, "there is a folder"),
    "result-is-a-symlink": (result_is_a_symlink, "symlink"),
    "an-existing-file": (an_existing_file, "is a file"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", sorted(BAD_OUTS))
def test_a_bad_out_is_refused_before_the_browser(
    setup: dict[str, Path], tmp_path: Path, command: str, kind: str
) -> None:
    make, phrase = BAD_OUTS[kind]
    out = make(tmp_path / "out", COMMANDS[command])
    before = snapshot(tmp_path / "out") if out.is_dir() else {"": out.read_bytes()}
    reason = one_reason(
        run_bench(
            command,
            "--models",
            str(setup["models"]),
            "--sizes",
            "64x64",
            "--browser",
            str(setup["browser"]),
            "--out",
            str(out),
        )
    )
    print(f"{command} {kind}: {reason}")
    assert phrase in reason
    assert (snapshot(out) if out.is_dir() else {"": out.read_bytes()}) == before
    assert not setup["started"].exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_out_in_proc_is_refused_before_the_browser(setup: dict[str, Path], command: str) -> None:
    reason = one_reason(
        run_bench(
            command,
            "--models",
            str(setup["models"]),
            "--sizes",
            "64x64",
            "--browser",
            str(setup["browser"]),
            "--out",
            "/proc/self/bb",
        )
    )
    assert "/proc/self" in reason and "cannot write" in reason
    assert not setup["started"].exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["missing", "empty", "earlier-result"])
def test_a_usable_out_goes_on_to_the_browser(setup: dict[str, Path], tmp_path: Path, command: str, kind: str) -> None:
    out = tmp_path / "out"
    if kind != "missing":
        out.mkdir()
    if kind == "earlier-result":
        result, table = COMMANDS[command]
        (out / result).write_text(json.dumps({"environment": {"date": "2026-01-01"}, "rows": []}))
        (out / table).write_text("| earlier |\n")
    reason = one_reason(
        run_bench(
            command,
            "--models",
            str(setup["models"]),
            "--sizes",
            "64x64",
            "--browser",
            str(setup["browser"]),
            "--out",
            str(out),
        )
    )
    assert "not a Chromium" in reason


@pytest.mark.parametrize(
    ("content", "phrase"),
    [("not json", "not readable JSON"), ('{"rows": 3}', "no list"), ("[" * 100_000, "not readable JSON")],
)
def test_a_native_file_that_is_no_bench_json_is_refused_before_the_browser(
    setup: dict[str, Path], tmp_path: Path, content: str, phrase: str
) -> None:
    native = tmp_path / "bench.json"
    native.write_text(content)
    reason = one_reason(
        run_bench(
            "browser-bench",
            "--models",
            str(setup["models"]),
            "--sizes",
            "64x64",
            "--browser",
            str(setup["browser"]),
            "--native",
            str(native),
            "--out",
            str(tmp_path / "out"),
        )
    )
    assert phrase in reason
    assert not setup["started"].exists() and not (tmp_path / "out").exists()
