"""klein-web: build, serve and test a browser app that runs FLUX.2 [klein] 4B on WebGPU."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# The repository root (editable install): web_src/ and dist/ live beside the package.
REPO_ROOT = Path(__file__).resolve().parent.parent
WEB_SRC = REPO_ROOT / "web_src"
DEFAULT_DIST = REPO_ROOT / "dist"

DEFAULT_REPO = "kny/FLUX.2-klein-4B-onnx-web"
DEFAULT_MODEL_BASE = f"https://huggingface.co/{DEFAULT_REPO}/resolve/main/"
