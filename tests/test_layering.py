"""Which module of builder/ may import what, read from the source with `ast` (imports inside functions count).

Data flows one way: the model repository (repo) is written by the converter (convert) and read by the reference
pipeline (pipeline) and the server (site); the checks (check) drive them; the command line (cli) calls everything.
The checks have three wings: the app driver, and on it `regress` and the benchmarks, which never import each other;
only the benchmarks build models with the converter.

    layer          may import from builder
    -------------  -------------------------------------------------------------
    root           builder/__init__.py, errors.py, memory.py, node.py, terminal.py, urls.py: only each other
    repo           root, repo
    convert        root, repo, convert
    pipeline       root, repo, pipeline
    site           root, repo, site
    check          builder/check/__init__.py: nothing
    check.driver   root, repo, pipeline, site, check.driver
    check.regress  root, repo, pipeline, site, check.driver, check.regress
    check.bench    root, repo, convert, pipeline, site, check.driver, check.bench
    check.kernel_lab  root, repo, convert, site, check.kernel_lab (its own server and browser: it runs without
                   Playwright; the graphs it compares against are the converter's)
    cli            everything (cli/, __main__.py); nothing outside cli imports it but __main__.py

Third-party libraries with a home:

    torch, diffusers, transformers, onnx, onnxscript, safetensors, ml_dtypes
                 the `convert` extra: the converter (convert/) and the bench that builds and exports torch models
                 (check.bench: native, graphs, models, report, stats, ort_timing); onnx also in the kernel lab's
                 graphs (check.kernel_lab: attention, linear, site),
                 so `serve`, `fetch`, `reference` and `regress` run without them
    onnxruntime  the reference pipeline's sessions (pipeline/reference_models.py), the bench's timing
                 (check/bench/ort_timing.py), the converter's q4 quantiser (convert/quantize.py: onnxruntime's
                 MatMulNBits quantiser) and its step-preview fit (convert/preview_map.py: runs the VAE graphs it
                 wrote)
    playwright   check only (site/chrome.py holds switches and launches nothing)
    starlette, uvicorn, watchfiles   site only (the HTTP server)
    huggingface_hub                  repo only (the Hub download)
    click                            cli/ only
    psutil                           check/driver/memory.py (memory of the browser during a bench) and
                                     pipeline/capacity.py (the memory a size needs, checked against what the
                                     machine has)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "builder"

ROOT_MODULES = {"builder", "builder.errors", "builder.memory", "builder.node", "builder.terminal", "builder.urls"}
LAYERS = ("repo", "convert", "pipeline", "site", "check")
CHECK_WINGS = ("driver", "regress", "bench", "kernel_lab")
BELOW_CHECK = {"root", "repo", "pipeline", "site"}
ALLOWED_LAYERS: dict[str, set[str]] = {
    "root": {"root"},
    "repo": {"root", "repo"},
    "convert": {"root", "repo", "convert"},
    "pipeline": {"root", "repo", "pipeline"},
    "site": {"root", "repo", "site"},
    "check": set(),
    "check.driver": BELOW_CHECK | {"check.driver"},
    "check.regress": BELOW_CHECK | {"check.driver", "check.regress"},
    "check.bench": BELOW_CHECK | {"convert", "check.driver", "check.bench"},
    "check.kernel_lab": {"root", "repo", "convert", "site", "check.kernel_lab"},
    "cli": BELOW_CHECK
    | {"convert", "check", "check.driver", "check.regress", "check.bench", "check.kernel_lab", "cli"},
}

BENCH = {f"builder.check.bench.{name}" for name in ("native", "graphs", "models", "report", "stats", "ort_timing")}
KERNEL_LAB_GRAPHS = {
    "builder.check.kernel_lab.attention",
    "builder.check.kernel_lab.linear",
    "builder.check.kernel_lab.site",
}
CONVERT_EXTRA = ("torch", "diffusers", "transformers", "onnx", "onnxscript", "safetensors", "ml_dtypes")
LIBRARY_HOMES: dict[str, set[str]] = {
    **dict.fromkeys(CONVERT_EXTRA, {"builder.convert.*"} | BENCH),
    "onnx": {"builder.convert.*"} | BENCH | KERNEL_LAB_GRAPHS,
    "onnxruntime": {
        "builder.pipeline.reference_models",
        "builder.check.bench.ort_timing",
        "builder.convert.quantize",
        "builder.convert.preview_map",
    },
    "onnxruntime_ep_webgpu": {"builder.check.bench.ort_timing"},
    "playwright": {"builder.check.*"},
    "starlette": {"builder.site.*"},
    "uvicorn": {"builder.site.*"},
    "watchfiles": {"builder.site.*"},
    "huggingface_hub": {"builder.repo.*"},
    "click": {"builder.cli", "builder.cli.*"},
    "psutil": {"builder.check.driver.memory", "builder.pipeline.capacity"},
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. builder.site.server
    target: str  # what it imports, absolute, e.g. builder.repo.manifest or torch.nn
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str, *, is_package: bool = False) -> Iterator[Import]:
    """Every import in `source`, at any depth (functions, try blocks, TYPE_CHECKING), made absolute;
    `importlib.import_module("x")` and `__import__("x")` with a literal name count too."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from builder import site` imports the subpackage builder.site; `from builder import WEB_SRC` a name.
                candidate = f"{base}.{alias.name}"
                yield Import(module, candidate if is_builder_module(candidate) else base, node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield Import(module, node.args[0].value, node.lineno)


def is_builder_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (PACKAGE.parent / relative).with_suffix(".py").is_file() or (PACKAGE.parent / relative).is_dir()


def layer_of(module: str) -> str | None:
    """root, repo, convert, pipeline, site, check (its wings: check.driver, ...) or cli for a builder module; None for
    anything else."""
    if module in ROOT_MODULES:
        return "root"
    parts = module.split(".")
    if parts[0] != "builder":
        return None
    if len(parts) >= 3 and parts[1] == "check":
        if parts[2] in CHECK_WINGS:
            return f"check.{parts[2]}"
        raise AssertionError(f"{module} is in none of builder/check's wings {CHECK_WINGS}: move it into one")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    if module in ("builder.cli", "builder.__main__") or module.startswith("builder.cli."):
        return "cli"
    raise AssertionError(f"{module} belongs to no layer: add it to the table in {Path(__file__).name}")


def matches(module: str, patterns: set[str]) -> bool:
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)


def violations(found: Iterator[Import]) -> list[str]:
    """Each import the rules above forbid, as `module:line imports target (why not)`."""
    problems = []
    for item in found:
        where = f"{item.module}:{item.line} imports {item.target}"
        top = item.target.split(".")[0]
        if top == "builder":
            importer, imported = layer_of(item.module), layer_of(item.target)
            if imported == "cli" and importer != "cli":
                problems.append(f"{where} (nothing imports the command line)")
            elif importer and imported and imported not in ALLOWED_LAYERS[importer]:
                problems.append(f"{where} ({importer} may import only {sorted(ALLOWED_LAYERS[importer])})")
        elif top in LIBRARY_HOMES and not matches(item.module, LIBRARY_HOMES[top]):
            problems.append(f"{where} ({top} belongs in {sorted(LIBRARY_HOMES[top])})")
    return problems


def package_imports() -> Iterator[Import]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield from imports(path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py")


def test_builder_follows_the_layering() -> None:
    problems = violations(package_imports())
    assert not problems, "imports that break the layering (see the table in tests/test_layering.py):\n" + "\n".join(
        problems
    )


def test_every_module_is_seen() -> None:
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    assert {
        "builder.cli",
        "builder.cli.app",
        "builder.site.server",
        "builder.convert.convert",
        "builder.pipeline.reference",
        "builder.check.regress.run",
        "builder.check.bench.browser",
        "builder.check.driver.page",
    } <= modules
    for module in modules:
        layer_of(module)  # raises for a module outside the table
    # The scan does reach function bodies: the command line imports its implementations lazily.
    assert any(item.target == "builder.site.server" for item in package_imports() if item.module == "builder.cli.app")


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("builder.site.server", "def f():\n    import torch.nn\n", "builder.site.server:2 imports torch.nn"),
        ("builder.pipeline.prompt", "from builder.check import regress\n", "imports builder.check.regress"),
        (
            "builder.site.bundle",
            "from ..check.driver.chromium import find_chromium\n",
            "imports builder.check.driver.chromium",
        ),
        ("builder.repo.hub", "from builder.pipeline.limits import parse_size\n", "imports builder.pipeline.limits"),
        (
            "builder.errors",
            "import importlib\nimportlib.import_module('builder.site.bundle')\n",
            "builder.errors:2 imports builder.site.bundle",
        ),
        ("builder.check.regress.run", "from builder import cli\n", "nothing imports the command line"),
        ("builder.check.bench.load", "from builder.cli.shared import log\n", "nothing imports the command line"),
        # The wings of builder/check: regress and the benches meet only in the driver.
        (
            "builder.check.bench.overhead",
            "from builder.check.regress import run\n",
            "imports builder.check.regress.run",
        ),
        (
            "builder.check.bench.load",
            "from builder.check.regress.cases import Case\n",
            "imports builder.check.regress.cases",
        ),
        (
            "builder.check.regress.run",
            "def f():\n    from builder.check.bench import stats\n",
            "imports builder.check.bench.stats",
        ),
        (
            "builder.check.driver.page",
            "from builder.check.regress.cases import Case\n",
            "imports builder.check.regress.cases",
        ),
        (
            "builder.check.driver.serving",
            "from ..bench.browser import ImageRun\n",
            "imports builder.check.bench.browser",
        ),
        (
            "builder.site.chrome",
            "try:\n    from playwright.sync_api import sync_playwright\nexcept ImportError:\n    pass\n",
            "playwright belongs in",
        ),
        ("builder.pipeline.reference", "if True:\n    import diffusers\n", "diffusers belongs in"),
        # The repository's format is read without the converter; only the bench and the command line build models.
        (
            "builder.repo.manifest",
            "from builder.convert.onnx_graph import DEFAULT_DATA_FILE_CAP\n",
            "imports builder.convert.onnx_graph",
        ),
        ("builder.repo.verify", "import onnx\n", "onnx belongs in"),
        ("builder.site.server", "from builder.convert import tiny\n", "imports builder.convert.tiny"),
        (
            "builder.check.regress.run",
            "def f():\n    from builder.convert import tiny\n",
            "imports builder.convert.tiny",
        ),
        ("builder.node", "from builder.site import bundle\n", "imports builder.site.bundle"),
    ],
)
def test_the_checker_finds_a_violation(module: str, source: str, expected: str) -> None:
    problems = violations(imports(source, module))
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("builder.check.regress.run", "from builder.site import server\nfrom builder.pipeline import limits\n"),
        ("builder.check.bench.load", "from builder.check.driver.session import launched\nfrom . import output\n"),
        ("builder.check.regress.page", "from ..driver.page import fill_form\nfrom .cases import Case\n"),
        ("builder.pipeline.reference_models", "def f():\n    import onnxruntime\n"),
        ("builder.convert.export_vae", "import torch\nfrom builder.convert.onnx_export import export_module\n"),
        ("builder.site.server", "from . import bundle\nfrom builder import WEB_SRC, __version__\n"),
        ("builder.__main__", "from builder.cli import main\n"),
        ("builder.cli.bench", "from builder.cli.shared import log\nfrom builder.check.bench import load\n"),
        (
            "builder.check.bench.models",
            "from builder.convert import tiny\nfrom builder.convert.export_vae import export\n",
        ),
        ("builder.convert.tiny", "from builder.node import ensure_node_modules\nfrom builder.repo import files\n"),
        ("builder.site.bundle", "from builder.node import find_node\n"),
    ],
)
def test_the_checker_allows_what_the_table_allows(module: str, source: str) -> None:
    assert violations(imports(source, module)) == []
