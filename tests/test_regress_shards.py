"""`regress --shard`, `--connect` and its serving options, and `regress-merge`, without a browser: which cases a
shard runs, which option combinations are refused, and how shard report folders merge or are refused.

The shard folders here are written by regress's own report writers (builder.check.regress.report) for a model
folder of placeholder files; tests/browser/test_regress_remote.py runs real shards in Chromium.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stub_repo import write_stub_repo

from builder import REPO_ROOT
from builder.check.regress import merge, shards, where
from builder.check.regress.cases import Case, RegressOptions
from builder.check.regress.report import (
    FAIL,
    PASS,
    AppRun,
    CaseReport,
    Reference,
    compare,
    write_case_report,
    write_run_report,
)
from builder.check.regress.run import main
from builder.errors import InputError
from builder.repo import manifest


def case(name: str) -> Case:
    return Case(name=name, prompt="a fox", seed=1, width=16, height=16, steps=1, psnr_min=40.0, reference_from_cpu=True)


# ------------------------------------------------------------------------------------------------ shards


@pytest.mark.parametrize(("text", "expected"), [("1/1", (1, 1)), ("2/3", (2, 3)), (" 3 / 3 ", (3, 3))])
def test_a_shard_is_i_of_n(text: str, expected: tuple[int, int]) -> None:
    shard = shards.parse_shard(text)
    assert (shard.index, shard.count) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2", "give I/N"),
        ("a/b", "give I/N"),
        ("-1/2", "give I/N"),
        ("1/0", "at least 1"),
        ("0/2", "from 1 to 2"),
        ("3/2", "from 1 to 2"),
    ],
)
def test_a_bad_shard_says_what_a_shard_is(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as raised:
        shards.parse_shard(text)
    assert "--shard" in str(raised.value)


def test_the_shards_of_a_file_run_every_case_once_in_the_files_numbering() -> None:
    cases = [case(f"c{i}") for i in range(1, 8)]
    chosen = [shards.select(cases, shards.Shard(index, 3)) for index in (1, 2, 3)]
    assert [[position for position, _case in part] for part in chosen] == [[1, 4, 7], [2, 5], [3, 6]]
    assert sorted(c.name for part in chosen for _p, c in part) == sorted(c.name for c in cases)
    assert [p for p, _c in shards.select(cases, None)] == list(range(1, 8))


def test_a_shard_with_no_case_is_refused() -> None:
    with pytest.raises(InputError, match=r"2 case\(s\), so shard 3 would run none; use at most 2 shards"):
        shards.select([case("a"), case("b")], shards.Shard(3, 3))


def test_shard_needs_a_cases_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--shard 1/2 splits a cases file"):
        main(
            RegressOptions(models_dir=tmp_path, prompt="a fox", reference_from_cpu=True, shard="1/2"),
            log=lambda _m: None,
        )


# ------------------------------------------------------------------------------- where the browser runs


def options(**given: Any) -> RegressOptions:
    return RegressOptions(prompt="a fox", reference_from_cpu=True, **given)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"connect": "http://gpu-box:3000/abc"}, "give the ws:// address"),
        (
            {"connect": "ws://127.0.0.1:3000/abc", "profile": Path("p")},
            "--profile choose how Chromium is launched here",
        ),
        ({"connect": "ws://127.0.0.1:3000/abc", "headed": True, "f16_toggle": False}, "--headed, --no-f16-toggle"),
        ({"app_url": "file:///srv/dist/index.html"}, "give an http:// or https:// address"),
        (
            {
                "app_url": "https://example.org/klein/?model=https://example.org/m/",
                "dist_dir": Path("dist"),
                "port": 8123,
            },
            "leave out --dist, --port",
        ),
        ({"advertise": "gpu-box:8123"}, "give an http:// or https:// address"),
        ({"connect": "ws://gpu-box:3000/abc"}, "that browser runs on another machine"),
        ({"connect": "ws://gpu-box:3000/abc", "host": "0.0.0.0"}, "that browser runs on another machine"),
        ({"connect": "ws://gpu-box:3000/abc", "advertise": "http://127.0.0.1:8123/"}, "that browser runs on another"),
    ],
)
def test_combinations_that_cannot_work_are_refused_with_what_to_pass(given: dict[str, Any], says: str) -> None:
    with pytest.raises(InputError, match=says):
        where.check(options(**given))


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"connect": "ws://127.0.0.1:3000/abc"},  # a browser server on this machine reaches the loopback server
        {"connect": "ws://localhost:3000/abc", "host": "0.0.0.0"},
        {"connect": "ws://gpu-box:3000/abc", "host": "0.0.0.0", "port": 8123, "advertise": "http://build-box:8123/"},
        {
            "connect": "wss://grid.example.org/chromium",
            "app_url": "https://example.org/klein/?model=https://m.example/",
        },
        {"host": "0.0.0.0"},
    ],
)
def test_combinations_that_can_work_pass(given: dict[str, Any]) -> None:
    where.check(options(**given))


@pytest.mark.parametrize(
    ("app", "path", "expected"),
    [
        ("http://127.0.0.1:5", "/", "http://127.0.0.1:5/"),
        ("http://127.0.0.1:5", "/?precision=q4", "http://127.0.0.1:5/?precision=q4"),
        (
            "https://h.example/klein/?model=https://m.example/r/",
            "/?precision=q4",
            "https://h.example/klein/?model=https://m.example/r/&precision=q4",
        ),
        (
            "https://h.example/klein/?precision=fp32&model=x",
            "/?precision=q4",
            "https://h.example/klein/?model=x&precision=q4",
        ),
    ],
)
def test_the_case_opens_the_app_with_its_own_parameters_added(app: str, path: str, expected: str) -> None:
    assert where.page_url(app, path) == expected


# ------------------------------------------------------------------------------------------------- merge


IMAGE = np.full((16, 16, 3), 120, dtype=np.uint8)


def write_shard(
    folder: Path,
    repo: Path,
    cases_file: Path,
    shard: str,
    verdicts: dict[str, bool],
    *,
    precision: str | None = None,
    psnr_min: float = 40.0,
) -> Path:
    """A shard's report folder as `regress --shard` writes it, for the cases `verdicts` names (True: pass)."""
    opts = RegressOptions(
        models_dir=repo,
        cases_file=cases_file,
        reference_from_cpu=True,
        precision=precision,
        psnr_min=psnr_min,
        shard=shard,
    )
    names = [entry["name"] for entry in json.loads(cases_file.read_text())["cases"]]
    reports = []
    for name, passes in verdicts.items():
        other = IMAGE if passes else 255 - IMAGE
        report = CaseReport(
            name=name,
            parameters=case(name).parameters(),
            reference=Reference(source="cpu", image=IMAGE),
            position=names.index(name) + 1,
        )
        report.app = AppRun(png=b"png", image=other)
        report.comparison = compare(other, IMAGE, psnr_min=40.0)
        report.verdict, report.reason = report.comparison.verdict, report.comparison.reason
        write_case_report(folder / name, report, browser={"version": "x"}, adapter={"vendor": "v"})
        reports.append(report)
    (folder / "browser.log").write_text(f"log of shard {shard}\n")
    identity = shards.run_identity(opts, manifest.load(repo), cases_total=len(names), shard=shards.parse_shard(shard))
    write_run_report(folder, reports, browser={"version": "x"}, adapter={"vendor": "v"}, run=identity)
    return folder


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    repo = write_stub_repo(tmp_path / "models")
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps({"cases": [{"name": n, "prompt": "a fox"} for n in ("a", "b", "c")]}))
    return {"repo": repo, "cases": cases_file, "root": tmp_path}


def test_two_shards_merge_into_one_report_in_the_files_order(setup: dict[str, Path]) -> None:
    root = setup["root"]
    one = write_shard(root / "s1", setup["repo"], setup["cases"], "1/2", {"a": True, "c": True})
    two = write_shard(root / "s2", setup["repo"], setup["cases"], "2/2", {"b": False})
    lines: list[str] = []
    assert merge.merge(root / "merged", [two, one], log=lines.append) == FAIL.exit_code
    data = json.loads((root / "merged" / "report.json").read_text())
    assert data["verdict"] == "fail"
    assert [(c["case"], c["verdict"], c["position"], c["shard"]) for c in data["cases"]] == [
        ("a", "pass", 1, 1),
        ("b", "fail", 2, 2),
        ("c", "pass", 3, 1),
    ]
    for name in ("a", "b", "c"):
        assert (root / "merged" / name / "report.json").read_bytes() == next(
            (s / name / "report.json").read_bytes() for s in (one, two) if (s / name).is_dir()
        )
    assert [s["shard"] for s in data["shards"]] == [1, 2] and data["run"]["shard"] is None
    log = (root / "merged" / "browser.log").read_text()
    assert log.index("log of shard 1/2") < log.index("log of shard 2/2")
    assert lines[-1].startswith("overall: FAIL (exit 1); 3 cases from 2 shards")
    # A merged folder is a report: merging again into it replaces it.
    assert merge.merge(root / "merged", [one, two], log=lines.append) == FAIL.exit_code
    # All passing: pass.
    write_shard(root / "s2", setup["repo"], setup["cases"], "2/2", {"b": True})
    assert merge.merge(root / "merged", [one, two], log=lines.append) == PASS.exit_code


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("cases", "differ in the cases file"),
        ("precision", "differ in --precision"),
        ("psnr", "differ in the flags that fill the cases' gaps"),
        ("repo", "differ in the model repository"),
    ],
)
def test_shards_of_different_runs_are_refused(setup: dict[str, Path], change: str, says: str) -> None:
    root = setup["root"]
    one = write_shard(root / "s1", setup["repo"], setup["cases"], "1/2", {"a": True, "c": True})
    cases, repo, precision, psnr = setup["cases"], setup["repo"], None, 40.0
    if change == "cases":
        cases = root / "other.json"
        cases.write_text(setup["cases"].read_text().replace('"a fox"', '"a cat"'))
    if change == "repo":
        repo = write_stub_repo(root / "other-models")
        (repo / manifest.TOKENIZER_FILES[0]).write_bytes(b"{ }")
        write_stub_repo(repo)
    precision = "q4" if change == "precision" else precision
    psnr = 30.0 if change == "psnr" else psnr
    two = write_shard(root / "s2", repo, cases, "2/2", {"b": True}, precision=precision, psnr_min=psnr)
    with pytest.raises(InputError, match=says):
        merge.merge(root / "merged", [one, two], log=lambda _m: None)
    assert not (root / "merged").exists()


def test_missing_twice_interrupted_and_unsharded_shards_are_refused(setup: dict[str, Path]) -> None:
    root = setup["root"]
    one = write_shard(root / "s1", setup["repo"], setup["cases"], "1/2", {"a": True, "c": True})
    with pytest.raises(InputError, match=r"shard\(s\) 2/2 missing: run `klein-web regress ... --shard 2/2`"):
        merge.merge(root / "merged", [one], log=lambda _m: None)
    with pytest.raises(InputError, match="shard 1/2 is given twice"):
        merge.merge(root / "merged", [one, one], log=lambda _m: None)
    two = write_shard(root / "s2", setup["repo"], setup["cases"], "2/2", {"b": True})
    (two / "b" / "report.json").unlink()
    with pytest.raises(InputError, match=r"case b has no report\.json"):
        merge.merge(root / "merged", [one, two], log=lambda _m: None)
    (two / "report.json").unlink()
    with pytest.raises(InputError, match=r"holds no report\.json"):
        merge.merge(root / "merged", [one, two], log=lambda _m: None)
    (two / "report.json").write_text(json.dumps({"verdict": "pass", "klein_web": "0.1", "cases": []}))
    with pytest.raises(InputError, match="is not the report of a `regress --shard I/N` run"):
        merge.merge(root / "merged", [one, two], log=lambda _m: None)
    with pytest.raises(InputError, match="is one of the shards' folders"):
        merge.merge(one, [one, two], log=lambda _m: None)
    assert not (root / "merged").exists()


def test_the_command_line_merges_and_refuses_in_one_line(setup: dict[str, Path]) -> None:
    root = setup["root"]
    one = write_shard(root / "s1", setup["repo"], setup["cases"], "1/2", {"a": True, "c": True})
    two = write_shard(root / "s2", setup["repo"], setup["cases"], "2/2", {"b": True})
    (root / "busy").mkdir()
    (root / "busy" / "notes.txt").write_text("mine")

    def run(*args: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "builder", "regress-merge", *map(str, args)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = run(root / "merged", one, two)
    assert done.returncode == 0 and "overall: PASS" in done.stderr + done.stdout
    refused = run(root / "busy", one, two)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("could not merge: OUT") and len(refused.stderr.strip().splitlines()) == 1
    assert (root / "busy" / "notes.txt").read_text() == "mine" and len(list((root / "busy").iterdir())) == 1
