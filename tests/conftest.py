"""Shared fixtures: one tiny model per session, one build, a real `klein-web serve` subprocess, Chromium."""

from __future__ import annotations

import ast
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from builder import REPO_ROOT

# The worker-level browser tests' `context` and `page` fixtures (one definition for the three modules using them).
pytest_plugins = ("worker_page",)

# The sha256 cache (builder.repo.verify) of test runs stays out of the user's own cache folder; subprocesses
# inherit it. Each pytest-xdist worker (PYTEST_XDIST_WORKER) gets its own rather than the one it inherits.
if "PYTEST_XDIST_WORKER" in os.environ or "KLEIN_WEB_CACHE_DIR" not in os.environ:
    os.environ["KLEIN_WEB_CACHE_DIR"] = tempfile.mkdtemp(prefix="klein-web-test-cache-")
    atexit.register(shutil.rmtree, os.environ["KLEIN_WEB_CACHE_DIR"], ignore_errors=True)
# Where the workers of one run (scripts/test.sh runs pytest-xdist) take turns at what they share in the checkout.
LOCK_DIR = REPO_ROOT / ".test-cache"


@contextmanager
def checkout_lock(name: str) -> Iterator[None]:
    """Held while a test process builds something every worker reads from the checkout (node_modules, make-tiny's
    cache): the others wait, then find it built."""
    from filelock import FileLock

    LOCK_DIR.mkdir(exist_ok=True)
    with FileLock(LOCK_DIR / f"{name}.lock"):
        yield


# The lanes (docs/development-testing.md). `pytest` alone runs the fast lane: plain Python and node tests, with no
# torch imported. The full lane (`pytest --full`, or KLEIN_TEST_FULL=1; scripts/test.sh passes --full) adds every
# test that runs Chromium, needs make-tiny's torch-built model, imports torch or its model libraries, or is marked
# slow.
FULL_LANE_FIXTURES = frozenset({"tiny_models", "tiny_models_9b", "chromium_path"})
FULL_LANE_MARKERS = frozenset({"browser", "slow", "torch"})
FULL_LANE_LIBRARIES = frozenset({"torch", "diffusers", "transformers"})
FULL_LANE_ENV = "KLEIN_TEST_FULL"
# Set once the fast lane has reported a test that imported a full-lane library (only the first one is to blame).
_IMPORT_REPORTED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help=f"run the whole suite: browser, slow, torch and make-tiny tests too (or set {FULL_LANE_ENV}=1)",
    )


def full_lane(config: pytest.Config) -> bool:
    return bool(config.getoption("--full")) or os.environ.get(FULL_LANE_ENV, "") not in ("", "0")


def needs_full_lane(item: pytest.Item) -> list[str]:
    """Why `item` belongs to the full lane only: its markers and the heavy fixtures it requests (directly or
    through other fixtures); empty for a fast-lane test."""
    reasons = sorted(FULL_LANE_MARKERS & {mark.name for mark in item.iter_markers()})
    reasons += sorted(FULL_LANE_FIXTURES & set(getattr(item, "fixturenames", ())))
    return reasons


def top_level_imports(path: Path) -> set[str]:
    """The root package names a module imports when it is imported: `import`, `from ... import` and
    `pytest.importorskip(...)` outside its functions and classes."""
    names: set[str] = set()
    pending: list[ast.AST] = list(ast.parse(path.read_bytes(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value.split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return names


class FullLaneModule(pytest.Module):
    """A test module that imports a full-lane library at its top: the fast lane skips it without importing it."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        libraries = ", ".join(sorted(FULL_LANE_LIBRARIES & top_level_imports(self.path)))
        raise pytest.skip.Exception(f"full lane (imports {libraries}): pytest --full", allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if full_lane(parent.config) or not FULL_LANE_LIBRARIES & top_level_imports(module_path):
        return None
    return FullLaneModule.from_parent(parent, path=module_path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if full_lane(config):
        return
    for item in items:
        reasons = needs_full_lane(item)
        if reasons:
            item.add_marker(pytest.mark.skip(reason=f"full lane ({', '.join(reasons)}): pytest --full"))


def fast_lane_import_failure(config: pytest.Config, what: str) -> str | None:
    """In the fast lane, the first collector or test after which a full-lane library is imported: why it fails."""
    imported = sorted(name for name in FULL_LANE_LIBRARIES if name in sys.modules)
    if full_lane(config) or not imported or config.stash.get(_IMPORT_REPORTED, False):
        return None
    config.stash[_IMPORT_REPORTED] = True
    return (
        f"{what} imported {', '.join(imported)}, which the fast lane never imports: mark the test "
        "`@pytest.mark.torch` (or import the library at the module's top, which puts the whole module in the "
        "full lane)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if isinstance(collector, FullLaneModule) and report.skipped and isinstance(report.longrepr, tuple):
        report.longrepr = (str(collector.path), 1, report.longrepr[2])  # the module skipped, not this file
    failure = fast_lane_import_failure(collector.config, f"collecting {collector.nodeid}")
    if failure is not None:
        report.outcome, report.longrepr = "failed", failure
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    failure = fast_lane_import_failure(item.config, f"{item.nodeid} ({call.when})")
    if failure is not None:
        report.outcome, report.longrepr = "failed", failure
    return report


def pytest_report_header(config: pytest.Config) -> str:
    return (
        "lane: full"
        if full_lane(config)
        else "lane: fast (no Chromium, no make-tiny model, no torch, nothing marked slow); the whole suite: "
        "pytest --full"
    )


def find_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session", autouse=True)
def _node_modules_before_the_workers_race() -> None:
    """Under pytest-xdist: node_modules installed by one worker before any test or fixture of the session runs
    (builds, tsc, make-tiny and the tokenizer tests read it, and a build installs it where it is missing), so no
    two workers ever run `npm ci` at once. One process needs no lock: the `node_modules` fixture installs it."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        from builder.node import ensure_node_modules

        with checkout_lock("node_modules"):
            ensure_node_modules(log=lambda _msg: None)


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """web_src/node_modules installed from package-lock.json (npm ci on a fresh clone; two small reads after).

    Requested by every test that reads it or links it into a copy of web_src, so none depends on an earlier
    test (or an earlier run) having installed it."""
    from builder.node import ensure_node_modules

    return ensure_node_modules(log=lambda _msg: None)


@pytest.fixture
def web_src_copy(tmp_path: Path, node_modules: Path) -> Path:
    """A private copy of web_src that a test may edit freely: node_modules linked, not copied, and beside it the
    manifest's schema that the app imports from the Python package (linked)."""
    copy = tmp_path / "web_src"
    shutil.copytree(REPO_ROOT / "web_src", copy, ignore=shutil.ignore_patterns("node_modules"))
    (copy / "node_modules").symlink_to(node_modules, target_is_directory=True)
    schema = tmp_path / "builder" / "repo" / "manifest_schema.json"
    schema.parent.mkdir(parents=True)
    schema.symlink_to(REPO_ROOT / "builder" / "repo" / "manifest_schema.json")
    return copy


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    """make-tiny output: {'diffusers': ..., 'q4': ..., 'fp32': ...}, built once and kept between sessions, keyed by
    the code and libraries that make it (tests/tiny_cache.py). Tests copy a folder before changing anything in it."""
    from tiny_cache import tiny_models as cached_tiny_models  # tests/ is on sys.path

    with checkout_lock("tiny-models"):
        return cached_tiny_models(0, log=lambda _msg: None)


@pytest.fixture(scope="session")
def tiny_models_9b() -> dict[str, Path]:
    """make-tiny --like 9b: klein-9B's structure (builder.convert.tiny LIKES), cached like `tiny_models` and built
    only for the tests that ask for it."""
    from tiny_cache import tiny_models as cached_tiny_models  # tests/ is on sys.path

    with checkout_lock("tiny-models-9b"):
        return cached_tiny_models(0, log=lambda _msg: None, like="9b")


def tiny_conversion(tiny_models: dict[str, Path], name: str, **options: Any) -> Path:
    """make-tiny's model converted by `convert(..., **options)`, once for all the workers of a run and kept with
    the tiny model in .test-cache/ (tests/tiny_cache.py), so no test file converts it again for itself."""
    from tiny_cache import derived  # tests/ is on sys.path

    from builder.convert.convert import convert
    from builder.convert.tiny import TINY_DATA_FILE_CAPS

    def make(models: dict[str, Path], out: Path) -> None:
        convert(models["diffusers"], out, log=lambda _msg: None, max_data_file_bytes=TINY_DATA_FILE_CAPS, **options)

    with checkout_lock(f"tiny-{name}"):
        return derived(tiny_models, name, make, log=lambda _msg: None)


@pytest.fixture(scope="session")
def seed_layout_q4(tiny_models: dict[str, Path]) -> Path:
    """make-tiny's model converted with --precision q4 --weights seed: the weight layout of the seed repository on
    the Hub (fp16 token embedding, fp32 AdaLN and scales), which the app keeps running."""
    from builder.convert.weight_format import SEED

    return tiny_conversion(tiny_models, "seed-q4", precision="q4", weights=SEED, jobs=1)


@pytest.fixture(scope="session")
def base_fp32_repo(tiny_models: dict[str, Path]) -> Path:
    """make-tiny's checkpoint as a base model (model_index.json's is_distilled false: classifier-free guidance, 50
    steps) converted with --precision fp32, once for all the workers of a run (tests/tiny_cache.py `derived`)."""
    from tiny_cache import derived  # tests/ is on sys.path

    from builder.convert.convert import convert
    from builder.convert.tiny import TINY_DATA_FILE_CAPS

    def make(models: dict[str, Path], out: Path) -> None:
        checkpoint = out.parent / "base-checkpoint"
        shutil.copytree(models["diffusers"], checkpoint)
        index_file = checkpoint / "model_index.json"
        index = json.loads(index_file.read_text(encoding="utf-8"))
        index["is_distilled"] = False
        index_file.write_text(json.dumps(index, indent=2), encoding="utf-8")
        try:
            convert(checkpoint, out, precision="fp32", log=lambda _msg: None, max_data_file_bytes=TINY_DATA_FILE_CAPS)
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    with checkout_lock("tiny-base-fp32"):
        return derived(tiny_models, "base-fp32", make, log=lambda _msg: None)


@pytest.fixture(scope="session")
def q4f16_repo(tiny_models: dict[str, Path]) -> Path:
    """make-tiny's model converted with --precision q4f16 in one process (`convert --jobs 1`): the q4f16 and q4
    graphs side by side, both VAE decoders."""
    return tiny_conversion(tiny_models, "q4f16", precision="q4f16", jobs=1)


# The text encoder's first MLP channels that overflowing_q4f16_repo makes overflow, and how much their gate and up
# projections are scaled: about 1e6 after SiLU(gate) * up on the tiny model, past fp16's 65504, far within fp32.
OVERFLOW_CHANNELS = (5, 17, 40)
OVERFLOW_SCALE = 1e4


@pytest.fixture(scope="session")
def overflowing_q4f16_repo(tiny_models: dict[str, Path]) -> Path:
    """make-tiny's model with massive activations injected into its text encoder, converted with --precision q4f16
    --weights seed (the q4f16 and q4 graphs; the seed layout's fp16 token table is a plain Gather, which the wasm EP
    runs where an adapter without shader-f16 sends the q4f16 graphs, unlike the compact layout's 4-bit one). A few
    of layer 0's MLP channels have their gate and up rows scaled past fp16's range and their down-projection column
    zeroed: in fp32 they add exactly nothing, in fp16 they are infinite and the zero weight turns them into NaN, as
    a real checkpoint's massive channels overflow where random weights never do."""
    from safetensors.torch import load_file, save_file
    from tiny_cache import derived  # tests/ is on sys.path

    from builder.convert.convert import convert
    from builder.convert.tiny import TINY_DATA_FILE_CAPS
    from builder.convert.weight_format import SEED

    def make(models: dict[str, Path], out: Path) -> None:
        checkpoint = out.parent / "overflowing-checkpoint"
        shutil.copytree(models["diffusers"], checkpoint)
        weights_file = checkpoint / "text_encoder" / "model.safetensors"
        weights = load_file(weights_file)
        channels = list(OVERFLOW_CHANNELS)
        for projection in ("gate_proj", "up_proj"):
            weights[f"model.layers.0.mlp.{projection}.weight"][channels] *= OVERFLOW_SCALE
        weights["model.layers.0.mlp.down_proj.weight"][:, channels] = 0
        save_file(weights, weights_file, metadata={"format": "pt"})
        try:
            convert(
                checkpoint,
                out,
                precision="q4f16",
                weights=SEED,
                jobs=1,
                log=lambda _msg: None,
                max_data_file_bytes=TINY_DATA_FILE_CAPS,
            )
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    with checkout_lock("tiny-overflowing-seed-q4f16"):
        return derived(tiny_models, "overflowing-seed-q4f16", make, log=lambda _msg: None)


@pytest.fixture(scope="session")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the app for the whole session (the default model base)."""
    from builder.site.bundle import build

    out = tmp_path_factory.mktemp("dist")
    build(out, log=lambda _msg: None)
    return out


@dataclass
class LiveServer:
    """A real `klein-web serve` subprocess on a free loopback port."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    base_url: str = field(init=False)

    def __post_init__(self) -> None:
        self.base_url = f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(dist: Path, log_dir: Path, *, models: Path | None = None, extra: tuple[str, ...] = ()) -> LiveServer:
    port = find_free_port()
    log_path = log_dir / f"server-{port}.log"
    cmd = [sys.executable, "-m", "builder", "serve", "--port", str(port), "--dist", str(dist), *extra]
    if models is not None:
        cmd += ["--models", str(models)]
    handle = open(log_path, "wb")  # noqa: SIM115 - the server writes to it until the fixture stops it
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env)
    server = LiveServer(process, port, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"klein-web serve exited early ({process.returncode}):\n{server.output()}")
        try:
            urllib.request.urlopen(server.url("/"), timeout=2).close()
            return server
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.2)
    server.stop()
    raise AssertionError(f"klein-web serve did not answer within 60 s:\n{server.output()}")


@pytest.fixture
def live_server_factory(tmp_path: Path) -> Iterator[object]:
    """Call it with (dist, models=None) to get a LiveServer; all are stopped after the test."""
    servers: list[LiveServer] = []

    def factory(dist: Path, *, models: Path | None = None, extra: tuple[str, ...] = ()) -> LiveServer:
        server = start_server(dist, tmp_path, models=models, extra=extra)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    from builder.check.driver.chromium import find_chromium

    return find_chromium()


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Chromium profile folder of a test module's browser, removed once the module's tests are done (after the
    browser that uses it has closed): it holds the models the module stored and the browser's caches, hundreds of
    MB each, which would otherwise stay on disk until the whole run ends."""
    folder = tmp_path_factory.mktemp("chromium-profile")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fresh_context(tmp_path: Path, chromium_path: Path) -> Iterator[object]:
    """Chromium with a fresh persistent profile (OPFS needs one), for one test: what a first visit meets."""
    from playwright.sync_api import sync_playwright

    from builder.check.driver.chromium import launch_persistent

    with sync_playwright() as playwright:
        context = launch_persistent(playwright, tmp_path / "profile", executable=chromium_path)
        try:
            yield context
        finally:
            context.close()
