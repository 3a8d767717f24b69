"""The GPU-run kit (scripts/gpu/): what runs without a GPU machine. parts.sh cuts payloads into checked parts,
setup.sh gathers them as they arrive, refuses a damaged one and unpacks the rest once, run.sh fills in a bench's
browser, model and app and records the run, and pack.sh says what to install when no Python has the packages.

setup.sh and run.sh run here with their GPU machine's outside stood in for: nvidia-smi a script printing one
memory sample, Chromium a script printing its version. The payloads are small stand-ins without Chromium or
loader packages (those are unpacked into /)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from builder import REPO_ROOT

KIT = REPO_ROOT / "scripts" / "gpu"


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def tar_xz(out: Path, root: Path, name: str) -> None:
    with tarfile.open(out, "w:xz") as archive:
        archive.add(root / name, arcname=name)


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """The environment of a stand-in GPU machine: this Python as python3, an nvidia-smi that names the GPU or
    samples its memory once, and the kit's root in tmp_path/root."""
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "python3", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    executable(
        bin_dir / "nvidia-smi",
        '#!/bin/sh\ncase "$*" in *-lms*) echo "2026/12/07 10:00:00.000, 7656 MiB"; exec sleep 30 ;; esac\n'
        'echo "NVIDIA H200, 580.159.04, 143771 MiB"\n',
    )
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "KLEIN_GPU_ROOT": str(tmp_path / "root"),
    }


def payloads(tmp_path: Path) -> Path:
    """Stand-ins for pack.sh's payloads: the app, the kernel lab, a model folder, the Python packages, the commit."""
    made = tmp_path / "made"
    (made / "dist").mkdir(parents=True)
    (made / "dist" / ".klein-build.json").write_text(json.dumps({"onnxruntime_web": "1.30.0"}), encoding="utf-8")
    (made / "model").mkdir()
    (made / "model" / "manifest.json").write_text("{}", encoding="utf-8")
    (made / "model" / "weights.bin").write_bytes(os.urandom(300_000))  # random: xz cannot shrink it below a part
    (made / "lab").mkdir()
    (made / "lab" / "lab.json").write_text("{}", encoding="utf-8")
    (made / "site").mkdir()
    (made / "site" / "KLEIN_PACKAGES").write_text("playwright==1.65.2\n", encoding="utf-8")
    payload = tmp_path / "payload"
    payload.mkdir()
    for name in ("dist", "lab", "model", "site"):
        tar_xz(payload / f"{'python' if name == 'site' else name}.tar.xz", made, name)
    (payload / "commit").write_text("abc1234\n", encoding="utf-8")
    return payload


def run(script: str, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KIT / script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def test_parts_arrive_one_by_one_and_are_unpacked_once_all_are_there(tmp_path: Path, machine: dict[str, str]) -> None:
    packed = tmp_path / "packed"
    packed.mkdir()
    cut = run("parts.sh", payloads(tmp_path), packed, "100K")
    assert cut.returncode == 0, cut.stderr
    parts = sorted(packed.glob("part-*"), key=lambda p: int(p.name.split("-")[1]))
    assert len(parts) >= 3 and all(p.stat().st_size <= 100 * 1024 for part in parts for p in part.glob("pack.tar.*"))

    arrived = tmp_path / "arrived"
    root = Path(machine["KLEIN_GPU_ROOT"])
    for index, part in enumerate(parts):
        shutil.copytree(part, arrived / part.name)
        setup = run("setup.sh", arrived, env=machine)
        if index < len(parts) - 1:
            assert setup.returncode == 0 and "still to come" in setup.stdout, setup.stdout + setup.stderr
            assert not (root / "dist").exists()
    assert setup.returncode == 0 and "ready" in setup.stdout, setup.stdout + setup.stderr
    assert "commit abc1234" in setup.stdout and '"onnxruntime_web": "1.30.0"' in setup.stdout
    assert (root / "model" / "weights.bin").stat().st_size == 300_000
    assert (root / "site" / "KLEIN_PACKAGES").is_file() and (root / "lab" / "lab.json").is_file()

    again = run("setup.sh", arrived, env=machine)  # nothing is unpacked twice
    assert again.returncode == 0 and "ready" in again.stdout and "the app in" not in again.stdout, again.stdout


def test_a_damaged_part_is_named_and_nothing_is_unpacked_until_it_comes_again(
    tmp_path: Path, machine: dict[str, str]
) -> None:
    packed = tmp_path / "packed"
    packed.mkdir()
    assert run("parts.sh", payloads(tmp_path), packed, "100K").returncode == 0
    piece = next((packed / "part-2").glob("pack.tar.*"))
    data = bytearray(piece.read_bytes())
    data[100] ^= 0xFF
    piece.write_bytes(bytes(data))
    setup = run("setup.sh", packed, env=machine)
    assert setup.returncode == 1 and f"Arrived damaged: {piece.name}." in setup.stderr, setup.stdout + setup.stderr
    assert not (Path(machine["KLEIN_GPU_ROOT"]) / "dist").exists()
    # A good copy of that part, copied again, is taken.
    piece.write_bytes(bytes(data[:100]) + bytes([data[100] ^ 0xFF]) + bytes(data[101:]))
    again = run("setup.sh", packed, env=machine)
    assert again.returncode == 0 and "ready" in again.stdout, again.stdout + again.stderr


def test_setup_without_parts_says_where_to_put_them(tmp_path: Path, machine: dict[str, str]) -> None:
    setup = run("setup.sh", tmp_path / "nothing", env=machine)
    assert setup.returncode == 1 and "No part in" in setup.stderr and "pack.sh" in setup.stderr


def test_run_fills_in_the_served_app_and_records_the_run(tmp_path: Path, machine: dict[str, str]) -> None:
    root = Path(machine["KLEIN_GPU_ROOT"])
    executable(root / "chr" / "chromium" / "chromium", "#!/bin/sh\necho 'Chromium 156.0.8078.114'\n")
    (root / "dist").mkdir(parents=True)
    (root / "dist" / ".klein-build.json").write_text('{"onnxruntime_web": "1.30.0"}', encoding="utf-8")
    folder = tmp_path / "results" / "b512-lean"

    # --help: the command line run.sh made, parsed by the real command, runs nothing.
    bench = run("run.sh", folder, "browser-bench", "--memory", "lean", "--sizes", "512x512", "--help", env=machine)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    record = (folder / "run.txt").read_text(encoding="utf-8")
    command = record.splitlines()[0]
    for part in (
        "python3 -m builder browser-bench --gpu",
        f"--browser {root}/chr/chromium/chromium",
        f"--models {root}/model --dist {root}/dist --out {folder}",
        "--memory lean --sizes 512x512 --help",
    ):
        assert part in command, command
    assert "chromium: Chromium 156.0.8078.114" in record and '"onnxruntime_web": "1.30.0"' in record
    assert "exit status: 0" in record and "nvidia-smi peak: 7656 MiB" in record and "gpu: NVIDIA H200" in record
    assert "--memory [auto|fast|lean]" in (folder / "output.log").read_text(encoding="utf-8")

    lab = run("run.sh", tmp_path / "lab", "kernel-lab", "--kernel", "flash_attention", "--help", env=machine)
    assert lab.returncode == 0, lab.stdout + lab.stderr
    command = (tmp_path / "lab" / "run.txt").read_text(encoding="utf-8").splitlines()[0]
    assert (
        f"python3 -m builder kernel-lab --gpu --browser {root}/chr/chromium/chromium --site {root}/lab "
        f"--out {tmp_path / 'lab'}/kernel-lab.json --kernel flash_attention --help"
    ) in command, command
    assert "--shapes [small|real]" in (tmp_path / "lab" / "output.log").read_text(encoding="utf-8")

    regress = run("run.sh", tmp_path / "regress", "regress", "--no-such-option", env=machine)
    assert regress.returncode == 2
    record = (tmp_path / "regress" / "run.txt").read_text(encoding="utf-8")
    assert f"--report {tmp_path / 'regress'}/report --no-such-option" in record and "exit status: 2" in record


def test_run_without_setup_says_so(tmp_path: Path, machine: dict[str, str]) -> None:
    result = run("run.sh", tmp_path / "out", "browser-bench", env=machine)
    assert result.returncode == 2 and "run scripts/gpu/setup.sh" in result.stderr


def test_pack_names_what_no_python_has(tmp_path: Path) -> None:
    """A clone whose only python3 has no packages at all (site-packages off): pack.sh stops before packing anything,
    naming what is missing and how to get it."""
    clone = tmp_path / "clone"
    shutil.copytree(KIT, clone / "scripts" / "gpu")
    bare = executable(tmp_path / "bin" / "python3", f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    env["PATH"] = f"{bare.parent}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["bash", str(clone / "scripts" / "gpu" / "pack.sh"), str(tmp_path / "out"), "--model", "none"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "needs a python3 with klein-web's packages" in result.stderr and "lacks: jinja2" in result.stderr
    assert "torch" not in result.stderr  # --model none needs no convert extra
    assert "bash scripts/test.sh" in result.stderr and not (tmp_path / "out" / "part-1").exists()
    usage = subprocess.run(["bash", str(KIT / "pack.sh")], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "usage:" in usage.stderr
