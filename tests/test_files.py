"""Safe writes (regular files only, the umask's mode) and the clean-up of staging folders killed runs leave."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from builder.errors import OutputError
from builder.pipeline import imaging
from builder.repo import files, manifest


def test_written_files_get_the_umask_mode_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        files.atomic_write_bytes(tmp_path / "a.json", b"{}")
        manifest.write(tmp_path, manifest.Manifest(source="s", converter="c", files={}, graphs=[]))
        imaging.write_png(tmp_path / "x.png", __import__("numpy").zeros((4, 4, 3), dtype="uint8"), text={})
        staged = files.make_staging(tmp_path, "repo")
    finally:
        os.umask(old)
    for name in ("a.json", manifest.MANIFEST_NAME, "x.png"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert stat.S_IMODE(staged.stat().st_mode) == 0o755


def test_a_symlink_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OutputError, match="symlink"):
        files.atomic_write_bytes(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and target.read_bytes() == b"keep"


def test_a_non_regular_file_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        files.atomic_write_bytes(fifo, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(OutputError, match="not a regular file"):
        files.check_output_file(Path("/dev/full"))
    with pytest.raises(OutputError, match="is a folder"):
        files.check_output_file(tmp_path)
    assert not list(tmp_path.glob(".*.tmp"))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_staging_folders_of_dead_processes_are_removed_live_ones_kept(tmp_path: Path) -> None:
    dead = tmp_path / f".q4.partial-{dead_pid()}-abc123"
    (dead / "transformer").mkdir(parents=True)
    (dead / "transformer" / "w.onnx_data").write_bytes(b"x" * 1000)
    old = tmp_path / f".q4.old-{dead_pid()}-zz"
    old.mkdir()
    live = tmp_path / f".q4.partial-{os.getppid()}-abc123"
    live.mkdir()
    unrelated = tmp_path / f".other.partial-{dead_pid()}-abc"
    unrelated.mkdir()
    legacy_old = tmp_path / ".q4.partial-k2j3h4"  # no owner recorded: judged by age
    legacy_old.mkdir()
    os.utime(legacy_old, (1, 1))
    legacy_new = tmp_path / ".q4.partial-a1b2c3"
    legacy_new.mkdir()
    lines: list[str] = []
    removed = files.clean_stale_staging(tmp_path, ("q4",), log=lines.append)
    assert sorted(removed) == sorted([dead, old, legacy_old])
    assert live.is_dir() and unrelated.is_dir() and legacy_new.is_dir()
    assert any(str(dead) in line and "removed" in line for line in lines)


def test_convert_removes_what_a_killed_conversion_left(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    from builder.convert.convert import convert

    stale = tmp_path / f".repo.partial-{dead_pid()}-x1y2z3"
    (stale / "text_encoder").mkdir(parents=True)
    lines: list[str] = []
    convert(
        tiny_models["diffusers"], tmp_path / "repo", precision="fp32", log=lines.append, max_data_file_bytes=1 << 30
    )
    assert not stale.exists()
    assert any("removed" in line and ".repo.partial-" in line for line in lines)
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]


def test_an_unwritable_report_folder_stops_regress_before_the_browser(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from stub_repo import write_stub_repo

    from builder.cli import main

    models = write_stub_repo(tmp_path / "models")
    (tmp_path / "a-file").write_text("x")
    for report in (tmp_path / "a-file" / "report", Path("/proc/klein-report")):
        result = CliRunner().invoke(
            main,
            [
                "regress",
                "--models",
                str(models),
                "--prompt",
                "a fox",
                "--reference-from-cpu",
                "--browser",
                str(tmp_path / "no-chromium"),
                "--report",
                str(report),
            ],
        )
        assert result.exit_code == 2 and "--report" in result.output, result.output
