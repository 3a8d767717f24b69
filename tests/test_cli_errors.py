"""Wrong paths, ports, hosts, prompts and configs given to the CLI: a non-zero exit and one message, never a
traceback, and nothing slow runs first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from builder import REPO_ROOT
from builder.site.server import browser_url


def run_cli(*args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("places")
    (root / "a-file").write_text("x")
    (root / "folder").mkdir()
    (root / "target.png").write_bytes(b"keep")
    (root / "link.png").symlink_to(root / "target.png")
    immutable = root / "immutable"
    immutable.mkdir()
    locked = (
        shutil.which("chattr") is not None
        and subprocess.run(["chattr", "+i", str(immutable)], capture_output=True, check=False).returncode == 0
    )
    yield {"root": root, "immutable": immutable if locked else Path("/proc")}
    if locked:
        subprocess.run(["chattr", "-i", str(immutable)], check=False)


def reference(out: str, prompt: str | bytes = "a fox") -> list[str | bytes]:
    return ["reference", "no-model-needed", "--prompt", prompt, "--size", "64x64", "--out", out]


def fetch(folder: str) -> list[str | bytes]:
    return ["fetch", "--dir", folder]


CASES: dict[str, tuple[Callable[[dict[str, Path]], list[str | bytes]], str]] = {
    "prompt-invalid-utf8": (lambda p: reference(str(p["root"] / "x.png"), b"\xff\xfe fox"), "UTF-8"),
    "out-is-a-folder": (lambda p: reference(str(p["root"] / "folder")), "is a folder"),
    "out-under-a-file": (lambda p: reference(str(p["root"] / "a-file" / "x.png")), "is a file"),
    "out-in-proc": (lambda _p: reference("/proc/x.png"), "/proc"),
    "out-is-a-device": (lambda _p: reference("/dev/full"), "not a regular file"),
    "out-is-a-symlink": (lambda p: reference(str(p["root"] / "link.png")), "symlink"),
    "out-in-immutable-folder": (lambda p: reference(str(p["immutable"] / "x.png")), "cannot write"),
    "fetch-dir-is-a-file": (lambda p: fetch(str(p["root"] / "a-file")), "not a folder"),
    "fetch-dir-proc": (lambda _p: fetch("/proc"), "not a model repository"),
    "fetch-dir-empty": (lambda _p: fetch(""), "--dir is empty"),
    "fetch-dir-under-proc": (lambda _p: fetch("/proc/klein"), "/proc/klein"),
    "fetch-dir-immutable": (lambda p: fetch(str(p["immutable"])), "cannot write"),
    "serve-port-too-big": (lambda _p: ["serve", "--port", "70000"], "70000"),
    "serve-port-negative": (lambda _p: ["serve", "--port", "-1"], "-1"),
    "serve-host-empty": (lambda _p: ["serve", "--host", "", "--port", "0"], "--host"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_arguments_give_one_message(places: dict[str, Path], name: str) -> None:
    make_args, expected = CASES[name]
    # An unreachable Hub: a fetch that got past its --dir check would fail on the network instead.
    result = run_cli(*make_args(places), env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    assert "Error" in output and expected in output, output
    assert (places["root"] / "target.png").read_bytes() == b"keep"  # a symlink's target is never written


def test_a_lone_surrogate_in_a_cases_file_is_refused(tmp_path: Path) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"prompt": "fox \ud800", "reference_from_cpu": True}]))
    result = run_cli("regress", "--models", str(tmp_path), "--cases", str(cases), "--report", str(tmp_path / "r"))
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    assert result.returncode == 2 and "Traceback" not in output and "UTF-8" in output, output


def test_a_config_with_a_wrong_type_is_a_conversion_error(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(tiny_models["diffusers"], src)
    config_path = src / "transformer" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "num_layers": "x"}))
    result = run_cli("convert", str(src), str(tmp_path / "out"))
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "transformer" in output and "config" in output, output
    # Found while checking the inputs, before any part (the text encoder first) is converted.
    assert " done in " not in output, output
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize(
    ("host", "bound", "url"),
    [
        ("0.0.0.0", "0.0.0.0", "http://127.0.0.1:8000/"),
        ("0", "0.0.0.0", "http://127.0.0.1:8000/"),
        ("::", "::", "http://[::1]:8000/"),
        ("127.0.0.1", "127.0.0.1", "http://127.0.0.1:8000/"),
        ("localhost", "127.0.0.1", "http://localhost:8000/"),
        ("::1", "::1", "http://[::1]:8000/"),
    ],
)
def test_the_printed_url_can_be_opened(host: str, bound: str, url: str) -> None:
    assert browser_url(host, bound, 8000) == url


# browser-bench / load-bench arguments the run would only trip over with Chromium running: refused before it starts.
BENCH_ARGUMENTS = [
    ("browser-bench", ["--timeout", "-1"], "--timeout -1"),
    ("browser-bench", ["--timeout", "nan"], "--timeout nan"),
    ("browser-bench", ["--timeout", "0"], "--timeout 0"),
    ("browser-bench", ["--sizes", ""], "--sizes is empty"),
    ("browser-bench", ["--sizes", ","], "--sizes is empty"),
    ("browser-bench", ["--sizes", "big"], "--sizes must look like 512x512"),
    ("browser-bench", ["--precision", ""], "--precision is empty"),
    ("browser-bench", ["--steps", "0"], "--steps 0"),
    ("browser-bench", ["--steps", "51"], "--steps 51"),
    ("browser-bench", ["--seed", "-1"], "--seed -1"),
    ("browser-bench", ["--seed", str(2**32)], f"--seed {2**32}"),
    ("load-bench", ["--sizes", ""], "--sizes is empty"),
    ("load-bench", ["--precision", ""], "--precision is empty"),
    ("load-bench", ["--precision", " "], "--precision is empty"),
]


@pytest.mark.parametrize(("command", "args", "expected"), BENCH_ARGUMENTS)
def test_bench_arguments_are_refused_before_chromium(
    tmp_path: Path, command: str, args: list[str], expected: str
) -> None:
    from stub_repo import write_stub_repo

    started = tmp_path / "browser-started"
    browser = tmp_path / "chromium"
    browser.write_text(f"#!/bin/sh\ntouch {started}\necho 'Chromium 140.0'\nsleep 30\n")
    browser.chmod(0o755)
    models = write_stub_repo(tmp_path / "models")
    common = ["--models", str(models), "--browser", str(browser), "--out", str(tmp_path / "out")]
    if command == "browser-bench" and "--precision" not in args:
        common += ["--precision", "q4"]  # the stub repo's one transformer variant
    result = run_cli(command, *common, *args)
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    lines = [line for line in output.splitlines() if line.startswith(("could not run:", "Error:"))]
    assert result.returncode != 0 and len(lines) == 1 and expected in lines[0], output
    assert "Traceback" not in output
    assert not started.exists() and not (tmp_path / "out").exists()
