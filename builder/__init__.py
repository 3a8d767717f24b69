"""klein-web: build, serve and test a browser app that runs FLUX.2 [klein] 4B on WebGPU."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
# The repository root of a checkout (editable install): web_src/ and dist/ live beside the package.
REPO_ROOT = PACKAGE_DIR.parent
WEB_SRC = REPO_ROOT / "web_src"
# A wheel carries the app already built (setup.py bundles it into builder/_app/), so an installed package
# serves it with no web_src, node or npm. A checkout keeps building web_src/ into dist/ even when an _app/ exists.
PACKAGED_APP = PACKAGE_DIR / "_app"


def has_web_src(web_src: Path = WEB_SRC) -> bool:
    """True in a checkout: the app's sources are there to build (an installed wheel has none)."""
    return (web_src / "package.json").is_file()


DEFAULT_DIST = REPO_ROOT / "dist" if has_web_src() or not PACKAGED_APP.is_dir() else PACKAGED_APP

DEFAULT_REPO = "kny/FLUX.2-klein-4B-onnx-web"
DEFAULT_MODEL_BASE = f"https://huggingface.co/{DEFAULT_REPO}/resolve/main/"
