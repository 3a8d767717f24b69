"""`klein-web regress --report` never overwrites a user's files, and no case name collides with the run's own files.

A --report folder holding someone's reference.png, candidate.png, diff.png, report.json or browser.log (or any
other file) is refused before the browser starts; a new or empty folder, and an earlier report, are used. A case
named like one of the run's files (browser.log, report.json, in any letter case) is refused up front, since its
folder would collide with that file after every case ran. The browser given is a script that leaves a file when it
is started: a refusal must come before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from refusals import fake_browser, one_reason, snapshot
from stub_repo import write_stub_repo

from builder import REPO_ROOT
from builder.check.regress import report_folder


def run_regress(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", "regress", *args],
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


@pytest.mark.parametrize(
    "files",
    [
        {
            "reference.png": b"my reference",
            "candidate.png": b"mine",
            "diff.png": b"mine",
            "browser.log": b"mine",
            "report.json": b'{"my": "data"}',
        },
        {"report.json": b'{"verdict": "mine"}'},  # a verdict alone is not a report of ours
        {"notes.txt": b"anything else"},
        {"sub/report.json": b"{}"},
    ],
)
def test_a_folder_that_is_no_earlier_report_is_refused_untouched(
    setup: dict[str, Path], tmp_path: Path, files: dict[str, bytes]
) -> None:
    report = tmp_path / "report"
    for rel, data in files.items():
        (report / rel).parent.mkdir(parents=True, exist_ok=True)
        (report / rel).write_bytes(data)
    before = snapshot(report)
    result = run_regress(
        "--models",
        str(setup["models"]),
        "--prompt",
        "a fox",
        "--size",
        "64x64",
        "--reference-from-cpu",
        "--browser",
        str(setup["browser"]),
        "--report",
        str(report),
    )
    reason = one_reason(result)
    print(reason)
    assert f"--report {report} is a non-empty folder" in reason and "nothing was written" in reason
    assert snapshot(report) == before
    assert not setup["started"].exists()


@pytest.mark.parametrize("kind", ["missing", "empty", "marked", "report-json-of-ours"])
def test_a_new_folder_or_an_earlier_report_is_used(setup: dict[str, Path], tmp_path: Path, kind: str) -> None:
    report = tmp_path / "report"
    if kind != "missing":
        report.mkdir()
    if kind == "marked":
        report_folder.mark(report)
        (report / "candidate.png").write_bytes(b"an earlier run's")
    if kind == "report-json-of-ours":
        (report / "report.json").write_text(json.dumps({"verdict": "pass", "exit_code": 0, "klein_web": "0.1"}))
    report_folder.check_report_folder(report)
    # Past the --report check the run goes on to the browser, here not a Chromium.
    result = run_regress(
        "--models",
        str(setup["models"]),
        "--prompt",
        "a fox",
        "--size",
        "64x64",
        "--reference-from-cpu",
        "--browser",
        str(setup["browser"]),
        "--report",
        str(report),
    )
    assert "not a Chromium" in one_reason(result)


@pytest.mark.parametrize(
    "name", ["browser.log", "report.json", "REPORT.JSON", "Browser.Log", "candidate.png", "reference.png", "diff.png"]
)
def test_a_case_named_like_a_run_file_is_refused_before_the_browser(
    setup: dict[str, Path], tmp_path: Path, name: str
) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": "fine", "prompt": "a"}, {"name": name, "prompt": "b"}]}))
    result = run_regress(
        "--models",
        str(setup["models"]),
        "--cases",
        str(cases),
        "--size",
        "64x64",
        "--reference-from-cpu",
        "--browser",
        str(setup["browser"]),
        "--report",
        str(tmp_path / "report"),
    )
    reason = one_reason(result)
    print(reason)
    assert repr(name) in reason and "rename the case" in reason
    assert not setup["started"].exists() and not (tmp_path / "report").exists()


@pytest.mark.parametrize("names", [("fox", "fox"), ("Fox", "fox"), ("CASE-1", "case-1")])
def test_case_names_that_differ_only_in_letter_case_are_refused(
    setup: dict[str, Path], tmp_path: Path, names: tuple[str, str]
) -> None:
    """On a file system that ignores letter case (macOS, Windows) the two cases would share one report folder."""
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": name, "prompt": "a"} for name in names]}))
    reason = one_reason(
        run_regress(
            "--models",
            str(setup["models"]),
            "--cases",
            str(cases),
            "--size",
            "64x64",
            "--reference-from-cpu",
            "--browser",
            str(setup["browser"]),
            "--report",
            str(tmp_path / "report"),
        )
    )
    assert "must be unique" in reason and all(repr(name) in reason for name in names)
    assert not setup["started"].exists()
