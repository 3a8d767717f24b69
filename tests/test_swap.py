"""The swap that puts a finished folder in place of an earlier one (convert's OUT, make-tiny's folders) is crash-safe.

A child process swaps a new folder in for an old one and is killed (SIGKILL) or interrupted (KeyboardInterrupt, as
Ctrl-C raises it) before its n-th file-system call, for every n until the swap completes; then the next run's
clean-up (what convert and make-tiny run first) is made. At every point, OUT afterwards is exactly the old folder or
exactly the new one, the other is gone, and nothing of the swap is left beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from refusals import snapshot

from builder import REPO_ROOT
from builder.errors import OutputError
from builder.repo import files

# Runs in the child: every call that changes the file system counts as a step; before step STOP the child dies.
CHILD = """
import json, os, shutil, signal, sys
from pathlib import Path
from builder.repo import files

stop, how, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
# The finished folder, staged by this process as convert stages OUT (so a killed child's stage is stale).
stage = files.make_staging(out.parent, out.name)
(stage / "sub").mkdir()
(stage / "manifest.json").write_text(json.dumps({"which": "new"}))
(stage / "sub" / "weights.bin").write_bytes(b"new" * 1000)
steps = [0]

def counted(call):
    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] == stop:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise KeyboardInterrupt
        return call(*args, **kwargs)
    return step

for name in ("rename", "replace", "unlink", "rmdir", "mkdir"):
    setattr(os, name, counted(getattr(os, name)))
try:
    files.replace_folder(stage, out)
except KeyboardInterrupt:
    shutil.rmtree(stage, ignore_errors=True)  # as convert does with its stage when interrupted
    sys.exit(130)
print("done")
"""


def repo(folder: Path, text: str) -> dict[str, bytes]:
    (folder / "sub").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"which": text}))
    (folder / "sub" / "weights.bin").write_bytes(text.encode() * 1000)
    return snapshot(folder)


def swap_until(
    tmp_path: Path, stop: int, how: str
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, bytes], dict[str, bytes]]:
    """The old folder at tmp/models/klein, and a child that swaps a new one in, stopped before its step `stop`."""
    parent = tmp_path / "models"
    if parent.exists():
        shutil.rmtree(parent)
    parent.mkdir()
    out = parent / "klein"
    old = repo(out, "old")
    new = repo(tmp_path / "expected" / str(stop), "new")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(stop), how, str(out)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return child, out, old, new


@pytest.mark.parametrize("how", ["kill", "interrupt"])
def test_at_every_point_of_the_swap_the_old_or_the_new_folder_survives(tmp_path: Path, how: str) -> None:
    outcomes = []
    for stop in range(1, 100):
        child, out, old, new = swap_until(tmp_path, stop, how)
        finished = child.returncode == 0
        if not finished:
            expected = -signal.SIGKILL if how == "kill" else 130
            assert child.returncode == expected, child.stderr
            lines: list[str] = []
            files.clean_stale_staging(out.parent, ("klein",), log=lines.append)  # the next run
        assert out.is_dir(), f"stopped before step {stop}: no OUT"
        kept = snapshot(out)
        assert kept in (old, new), f"stopped before step {stop}: OUT is neither folder"
        assert [p.name for p in out.parent.iterdir()] == ["klein"], f"stopped before step {stop}: leftovers"
        outcomes.append("new" if kept == new else "old")
        if finished:
            break
    else:
        pytest.fail("the swap never finished")
    # The points cover both sides of the swap: interrupted early the old folder stays, late the new one is in.
    assert outcomes[0] == "old" and outcomes[-1] == "new" and len(outcomes) >= 4, outcomes


def test_a_killed_swap_is_recovered_by_the_next_run_not_deleted(tmp_path: Path) -> None:
    """Killed between the two renames: no OUT, the old folder in `.klein.old-PID-*/previous`; the next run puts it
    back and says so."""
    for stop in range(1, 100):
        child, out, old, _new = swap_until(tmp_path, stop, "kill")
        if not out.exists():
            break
    else:
        pytest.fail("no point of the swap left OUT missing")
    assert child.returncode == -signal.SIGKILL
    (aside,) = out.parent.glob(".klein.old-*")
    assert snapshot(aside / files.PREVIOUS) == old
    lines: list[str] = []
    files.clean_stale_staging(out.parent, ("klein",), log=lines.append)
    assert snapshot(out) == old
    assert any(line.startswith(f"restored {out}") for line in lines), lines


def test_an_earlier_folder_whose_place_was_taken_is_kept(tmp_path: Path) -> None:
    """If something else now stands at OUT, the old folder moved aside is the only copy: kept, and said so."""
    for stop in range(1, 100):
        _child, out, old, _new = swap_until(tmp_path, stop, "kill")
        if not out.exists():
            break
    out.mkdir()  # say, the user made an empty folder there in the meantime
    lines: list[str] = []
    files.clean_stale_staging(out.parent, ("klein",), log=lines.append)
    (aside,) = out.parent.glob(".klein.old-*")
    assert snapshot(aside / files.PREVIOUS) == old
    assert any(line.startswith("kept ") for line in lines), lines


def test_a_folder_that_cannot_be_put_back_is_one_line(tmp_path: Path) -> None:
    for stop in range(1, 100):
        _child, out, _old, _new = swap_until(tmp_path, stop, "kill")
        if not out.exists():
            break
    out.parent.chmod(0o555)
    try:
        if os.access(out.parent, os.W_OK):
            pytest.skip("running as root: a read-only folder can still be written")
        with pytest.raises(OutputError, match="move it back by hand"):
            files.clean_stale_staging(out.parent, ("klein",), log=lambda _line: None)
    finally:
        out.parent.chmod(0o755)


# Loaded through PYTHONPATH by a convert subprocess: SIGKILL right after the swap moved OUT aside.
KILL_BETWEEN_RENAMES = """
import os, signal
_out = os.environ.get("KLEIN_TEST_KILL_AFTER_MOVING")
if _out:
    _rename = os.rename
    def _rename_then_die(src, dst, *args, **kwargs):
        _rename(src, dst, *args, **kwargs)
        if os.fspath(src) == _out:
            os.kill(os.getpid(), signal.SIGKILL)
    os.rename = _rename_then_die
"""


def test_convert_killed_between_the_renames_gets_its_old_out_back(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(KILL_BETWEEN_RENAMES)
    out = tmp_path / "models" / "klein"
    shutil.copytree(tiny_models["q4"], out)
    old = snapshot(out)
    command = [sys.executable, "-m", "builder", "convert", str(tiny_models["diffusers"]), str(out)]
    command += ["--precision", "fp32", "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO_ROOT)])}
    kill_env = {**env, "KLEIN_TEST_KILL_AFTER_MOVING": str(out)}
    killed = subprocess.run(command, cwd=REPO_ROOT, env=kill_env, capture_output=True, text=True, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()  # between the renames: the old repository is only in the swap's folder
    (aside,) = out.parent.glob(".klein.old-*")
    assert snapshot(aside / files.PREVIOUS) == old

    again = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert f"restored {out}" in again.stderr  # put back, not deleted as left behind
    assert json.loads((out / "manifest.json").read_text())["converter"].endswith("--precision fp32")
    assert [p.name for p in out.parent.iterdir()] == ["klein"]
