"""One line, early, for every bad input, and nothing lost.

A full disk or the file-size limit during convert; shard reports damaged in each field regress-merge reads; an
absurd --shard; terminal escapes in a report's text; --model-base URLs the app could never download from; a NUL in a
prompt; a --connect / --advertise / --app-url that is no URL; a case name with a newline; and 200,000 cases, whose
names are compared in one pass. Each is refused with one line (no traceback), before anything is written.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from refusals import fake_browser, one_reason, snapshot
from stub_repo import write_stub_repo
from test_regress_shards import write_shard

from builder import REPO_ROOT
from builder.check.regress import cases as regress_cases
from builder.check.regress import merge, shards, where
from builder.check.regress.cases import Case, RegressOptions
from builder.errors import BuildError, InputError


def run_cli(*args: str | Path, env: dict[str, str] | None = None, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *map(str, args)],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        **options,
    )


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith(("Error:", "could not"))]
    assert result.returncode != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


# --------------------------------------------------------------------------------------- convert: disk and limits

# Loaded through PYTHONPATH by the convert subprocess: the tokenizer's copy meets a full disk.
FULL_DISK = """
import errno, os, shutil
_copyfile = shutil.copyfile
def _full(src, dst, *args, **kwargs):
    if "tokenizer" in os.fspath(src):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(dst))
    return _copyfile(src, dst, *args, **kwargs)
shutil.copyfile = _full
"""


@pytest.mark.parametrize(
    ("kind", "jobs"),
    [
        ("file-size-limit-at-the-tokenizer", "1"),  # 8 MB: every q4 graph file fits, the 11 MB tokenizer.json not
        ("file-size-limit-at-the-first-graph", "1"),
        ("file-size-limit-in-a-part-process", "2"),
        ("full-disk-at-the-tokenizer", "1"),
    ],
)
def test_convert_on_a_full_disk_says_so_in_one_line(
    tiny_models: dict[str, Path], tmp_path: Path, kind: str, jobs: str
) -> None:
    out = tmp_path / "models" / "klein"
    shutil.copytree(tiny_models["q4"], out)  # an earlier repository: it must stay as it was
    before = snapshot(out)
    env: dict[str, str] = {}
    limit = 8 << 20 if kind.endswith("tokenizer") else 64 << 10

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    if kind.startswith("full-disk"):
        (tmp_path / "shim").mkdir()
        (tmp_path / "shim" / "sitecustomize.py").write_text(FULL_DISK)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "shim"), str(REPO_ROOT)])
    result = run_cli(
        "convert",
        tiny_models["diffusers"],
        out,
        "--jobs",
        jobs,
        env=env,
        preexec_fn=None if kind.startswith("full-disk") else limit_file_size,
    )
    line = one_error(result)
    print(line)
    assert result.returncode == 1
    expected = "the disk is full" if kind.startswith("full-disk") else "file-size limit (ulimit -f)"
    assert expected in line and "was left as it was" in line
    if kind.endswith("tokenizer"):
        assert "tokenizer" in line
    assert snapshot(out) == before
    assert [p.name for p in out.parent.iterdir()] == ["klein"]  # the staging folder went too


# ------------------------------------------------------------------------------------- regress-merge: damaged reports


@pytest.fixture
def two_shards(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = write_stub_repo(tmp_path / "models")
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps({"cases": [{"name": n, "prompt": "a fox"} for n in ("a", "b", "c")]}))
    one = write_shard(tmp_path / "s1", repo, cases_file, "1/2", {"a": True, "c": True})
    two = write_shard(tmp_path / "s2", repo, cases_file, "2/2", {"b": False})
    return one, two, tmp_path


def damage(shard: Path, change: str) -> None:
    """Rewrite one field of the shard's report.json as a damaged or hand-made report would have it."""
    path = shard / "report.json"
    data = json.loads(path.read_text())
    entry = data["cases"][0]
    raw: str | None = None
    if change == "folder-missing":
        del entry["folder"]
    elif change == "case-missing":
        del entry["case"]
    elif change == "entry-not-a-table":
        data["cases"][0] = "b"
    elif change.startswith("position="):
        value = change.removeprefix("position=")
        entry["position"] = "@@POSITION@@"
        raw = json.dumps(data).replace('"@@POSITION@@"', value)
    elif change.startswith("verdict="):
        entry["verdict"] = json.loads(change.removeprefix("verdict="))
    elif change.startswith("reason="):
        entry["reason"] = json.loads(change.removeprefix("reason="))
    elif change.startswith("index="):
        data["run"]["shard"]["index"] = json.loads(change.removeprefix("index="))
    elif change.startswith("count="):
        data["run"]["shard"]["count"] = json.loads(change.removeprefix("count="))
    elif change.startswith("total="):
        data["run"]["cases_total"] = json.loads(change.removeprefix("total="))
    elif change == "metrics-nan":
        entry["metrics"] = {"psnr": float("nan")}
    elif change == "browser-infinity":
        data["browser"] = {"version": float("inf")}
    path.write_text(raw if raw is not None else json.dumps(data))


@pytest.mark.parametrize(
    "change",
    [
        "folder-missing",
        "case-missing",
        "entry-not-a-table",
        'position="abc"',
        "position=1e999",
        "position=-1",
        "position=0",
        "position=true",
        "position=2.5",
        "position=99",
        "verdict=null",
        'verdict="great"',
        "verdict=1",
        "reason=null",
        "reason=5",
        'index="x"',
        "index=0",
        "index=3",
        "count=0",
        "count=1e999",
        "total=null",
        'total="3"',
        "metrics-nan",
        "browser-infinity",
    ],
)
def test_a_damaged_shard_report_is_one_line_before_out_is_touched(
    two_shards: tuple[Path, Path, Path], change: str
) -> None:
    one, two, root = two_shards
    damage(two, change)
    before = snapshot(root)
    result = run_cli("regress-merge", root / "merged", one, two)
    line = one_error(result)
    print(line)
    assert result.returncode == 2 and line.startswith("could not merge: ") and "s2" in line
    assert snapshot(root) == before and not (root / "merged").exists()


def test_terminal_escapes_in_a_reason_are_shown_not_obeyed(two_shards: tuple[Path, Path, Path]) -> None:
    one, two, root = two_shards
    evil = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\rover\u202eesrever\nsecond line\x9b1m"
    path = two / "report.json"
    data = json.loads(path.read_text())
    data["cases"][0]["reason"] = evil
    path.write_text(json.dumps(data))
    result = run_cli("regress-merge", root / "merged", one, two)
    assert result.returncode == 1, result.stderr
    from builder.terminal import printable

    for raw in ("\x1b", "\x07", "\r", "\u202e", "\x9b"):
        assert raw not in result.stderr + result.stdout
    (line,) = [line for line in result.stderr.splitlines() if " b (shard 2/2)" in line]
    assert line.endswith(printable(evil, one_line=True)) and "\\x1b]0;owned\\x07" in line and "\\n" in line


# ----------------------------------------------------------------------------------------------------- --shard


@pytest.mark.parametrize(
    "text", ["1/99999999999999999999", "99999999999999999999/99999999999999999999", "1/" + "9" * 5000]
)
def test_an_absurd_shard_count_is_refused_at_once(text: str) -> None:
    with pytest.raises(InputError, match="more shards than a cases file has cases"):
        shards.parse_shard(text)


@pytest.mark.parametrize("text", ["1/4", "2/4", "4/4"])
def test_more_shards_than_cases_are_refused_in_every_shard(text: str) -> None:
    three = [Case(name=n, prompt="a", seed=1, width=64, height=64, steps=1, psnr_min=40.0) for n in "abc"]
    with pytest.raises(InputError, match=r"3 case\(s\), so shard 4 would run none; use at most 3 shards"):
        shards.select(three, shards.parse_shard(text))


@pytest.mark.parametrize("text", ["\u0661/2", "1/\u0662", "1/2/3", "1 2"])
def test_a_shard_is_plain_digits(text: str) -> None:
    with pytest.raises(InputError, match="give I/N"):
        shards.parse_shard(text)


def test_a_report_of_an_absurd_shard_count_is_refused_without_listing_every_shard(
    two_shards: tuple[Path, Path, Path],
) -> None:
    """A report claiming 10^18 shards of 10^18 cases names the first missing shards, with no MemoryError."""
    one, _two, root = two_shards
    for field in ("count", "total"):
        damage(one, f"{field}={10**18}")
    with pytest.raises(
        InputError, match=r"shard\(s\) 2/1000000000000000000, 3/1000000000000000000, .*, \.\.\. missing"
    ):
        merge.merge(root / "merged", [one], log=lambda _m: None)


# ------------------------------------------------------------------------------------------------- --model-base


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("//evil.example/", "scheme-relative"),
        ("https://user:pw@models.example/m/", "user name or password"),
        ("https://user@models.example/m/", "user name or password"),
        ("https://models.example:99999/m/", "Port out of range"),
        ("https://models.example:0/m/", "port 0"),
        ("https://models.example:http/m/", "is not a URL"),
        ("https://a,b.example/m/", "'a,b.example'"),
        ("https://models_1.example/m/", "'models_1.example'"),
        ("https://bücher.example/m/", "xn--"),
        ("https://[::1/m/", "is not a URL"),
        ("https://[nonsense]/m/", "IPv6 address"),
        ("https://models.example/m/?token=1/", "query or a fragment"),
        ("https://models.example/m/#top/", "query or a fragment"),
        ("https://models.example/m/?/", "query or a fragment"),
        ("models/?v=2/", "query or a fragment"),
        ("https://models.example/m\t/", "control character"),
        ("https://models.example/m\x00/", "control character"),
    ],
)
def test_a_model_base_the_app_could_never_download_from_is_refused_at_build_time(
    bad: str, says: str, tmp_path: Path
) -> None:
    from builder.site.bundle import build

    with pytest.raises(BuildError, match="--model-base") as raised:
        build(tmp_path / "dist", model_base=bad)
    print(raised.value)
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize(
    "good",
    [
        "https://huggingface.co/kny/FLUX.2-klein-4B-onnx-web/resolve/main/",
        "https://models.example.org/klein/",
        "https://MODELS.example.org/k/",
        "http://10.0.0.5:9000/m/",
        "http://[::1]:8000/m/",
        "https://localhost:8443/m/",
        "https://xn--bcher-kva.example/m/",
        "models/",
        "/models/",
        "../models/",
        "https://models.example/a%20b/",
    ],
)
def test_model_bases_that_work_still_build(good: str) -> None:
    from builder.site.model_base import check_model_base

    assert check_model_base(good) == good


def test_the_command_line_refuses_a_bad_model_base_in_one_line(tmp_path: Path) -> None:
    assert "scheme-relative" in one_error(run_cli("build", "--out", tmp_path / "d", "--model-base", "//evil.example/"))
    assert not (tmp_path / "d").exists()


# --------------------------------------------------------------------------------------------------- prompts


def test_a_prompt_with_a_nul_is_refused_before_the_browser(tmp_path: Path) -> None:
    browser, started = fake_browser(tmp_path)
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps({"cases": [{"name": "fox", "prompt": "a fox\u0000 in snow"}]}))
    models = write_stub_repo(tmp_path / "models")
    result = run_cli(
        "regress",
        "--models",
        models,
        "--cases",
        cases_file,
        "--reference-from-cpu",
        "--browser",
        browser,
        "--report",
        tmp_path / "report",
    )
    reason = one_reason(result)
    assert "NUL character" in reason and "character 5" in reason and "PNG" not in reason
    assert not started.exists() and not (tmp_path / "report").exists()


# ---------------------------------------------------------------------------------- --connect, --advertise, --app-url


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"connect": "ws://[::1:/x"}, "--connect 'ws://[::1:/x' is not a URL (Invalid IPv6 URL)"),
        ({"connect": "ws://127.0.0.1:99999/x"}, "is not a URL (Port out of range"),
        ({"connect": "ws://localhost:abc/x"}, "is not a URL (Port could not be cast"),
        ({"connect": "ws://local host/x"}, "contains a space"),
        ({"advertise": "http://[::1:8123/"}, "--advertise 'http://[::1:8123/' is not a URL"),
        ({"advertise": "http://build-box:70000/"}, "is not a URL (Port out of range"),
        ({"app_url": "https://[bad/?model=x"}, "--app-url 'https://[bad/?model=x' is not a URL"),
        ({"app_url": "https://h.example:-1/"}, "is not a URL (Port could not be cast"),
    ],
)
def test_an_address_that_is_no_url_is_one_line(given: dict[str, str], says: str) -> None:
    with pytest.raises(InputError) as raised:
        where.check(RegressOptions(prompt="a fox", reference_from_cpu=True, **given))  # type: ignore[arg-type]
    print(raised.value)
    assert says in str(raised.value)


def test_the_command_line_refuses_a_bad_connect_in_one_line(tmp_path: Path) -> None:
    result = run_cli(
        "regress", "--models", tmp_path, "--prompt", "a fox", "--reference-from-cpu", "--connect", "ws://[::1:/x"
    )
    assert "--connect 'ws://[::1:/x'" in one_reason(result)


# ----------------------------------------------------------------------------------------------------- case names


@pytest.mark.parametrize("name", ["fox\n", "fox\r", "fox\r\n", " fox", "fox ", "fo\u0000x", "f\u00f6x", "a" * 65])
def test_a_case_name_that_is_not_one_plain_folder_name_is_refused(tmp_path: Path, name: str) -> None:
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps({"cases": [{"name": name, "prompt": "a fox"}]}))
    flags = Case(name="case", prompt="a fox", seed=1, width=64, height=64, steps=1, psnr_min=40.0)
    with pytest.raises(InputError, match="must be 1-64 letters"):
        regress_cases.load_cases(cases_file, defaults=flags)


class Folded(str):
    """A case name whose folded form counts how often it is compared: list.count() compares with every other."""

    comparisons = 0

    def casefold(self) -> str:
        return Compared(super().casefold())


class Compared(str):
    def __eq__(self, other: object) -> bool:
        Folded.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_case_names_are_compared_in_one_pass() -> None:
    """200,000 cases took minutes when every name was compared with every other (a list's count() per name)."""
    names = [Folded(f"case-{i}") for i in range(2000)] + [Folded("Case-7")]
    Folded.comparisons = 0
    assert regress_cases.repeated_names(names) == ["Case-7", "case-7"]
    assert Folded.comparisons < 10 * len(names), Folded.comparisons
