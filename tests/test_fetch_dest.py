"""`klein-web fetch --dir` writes only into a new or empty folder or a model repository, never over a user's files.

A project folder holding its own manifest.json, tokenizer/tokenizer_config.json and a file in .fetch/ (the names
fetch writes and cleans) must be refused before anything is written; so must a file, and an empty --dir (which
would be the current folder). A folder fetch wrote before, a converted repo and an `hf download` seed-layout
folder are still updated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakehub import FakeHub, FakeRepo, serving
from test_hub import COMMIT, REPO, run_fetch, write_seed_like_repo

from builder import REPO_ROOT
from builder.repo import fetch_dest


@pytest.fixture(scope="module")
def seed_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_seed_like_repo(tmp_path_factory.mktemp("seed-repo"))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(folder.rglob("*"))
    }


def project_folder(root: Path) -> Path:
    """Someone's web project: the very names fetch writes or cleans."""
    files = {
        "manifest.json": '{"name": "my app", "start_url": "/"}',
        "tokenizer/tokenizer_config.json": "{}",
        ".fetch/notes.txt": "mine",
        "scheduler/scheduler_config.json": "{}",
        "index.html": "<p>hi</p>",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


@pytest.mark.parametrize("kind", ["project", "project-without-manifest", "only-a-user-file-in-.fetch", "file"])
def test_a_folder_that_is_no_model_repository_is_refused_untouched(seed_repo: Path, tmp_path: Path, kind: str) -> None:
    dest = tmp_path / "dest"
    if kind == "file":
        dest.write_text("a file")
        before = {"": dest.read_bytes()}
    else:
        dest.mkdir()
        project_folder(dest)
        if kind == "project-without-manifest":
            (dest / "manifest.json").unlink()
        if kind == "only-a-user-file-in-.fetch":  # what a killed fetch leaves, plus a file it never writes
            for path in [p for p in dest.iterdir() if p.name != ".fetch"]:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            (dest / ".fetch" / "x.onnx.0123.incomplete").write_bytes(b"partial")
        before = snapshot(dest)
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest)
    assert isinstance(result, subprocess.CompletedProcess)
    print(one_error(result.stderr))
    assert result.returncode == 1
    assert "othing was written" in result.stderr
    assert kind == "file" or fetch_dest.MARKER in result.stderr
    after = {"": dest.read_bytes()} if kind == "file" else snapshot(dest)
    assert after == before
    assert hub.requests == []  # refused before the Hub was asked anything


def test_an_empty_dir_is_refused_and_the_current_folder_untouched(seed_repo: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "manifest.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    with serving(FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})) as endpoint:
        env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home")})
        for args in (["--dir="], ["--dir", ""], ["--dir", "  "]):
            result = subprocess.run(
                [sys.executable, "-m", "builder", "fetch", "--repo", REPO, *args],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 1, (args, result.stderr)
            assert "--dir is empty" in one_error(result.stderr)
    assert sorted(p.name for p in cwd.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("kind", ["hf-download", "fetched-then-emptied-of-manifest"])
def test_a_model_repository_is_still_updated(seed_repo: Path, tmp_path: Path, kind: str) -> None:
    dest = tmp_path / "dest"
    if kind == "hf-download":  # the seed layout, as `hf download` leaves it (no manifest.json, no marker)
        shutil.copytree(seed_repo, dest)
    with serving(FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})) as endpoint:
        if kind != "hf-download":
            first = run_fetch(endpoint, dest)
            assert isinstance(first, subprocess.CompletedProcess) and first.returncode == 0, first.stderr
            (dest / "manifest.json").unlink()  # an interrupted update: only the marker says whose it is
            shutil.rmtree(dest / "tokenizer")
        result = run_fetch(endpoint, dest)
    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode == 0, result.stderr
    assert (dest / "manifest.json").is_file() and (dest / fetch_dest.MARKER).is_file()
