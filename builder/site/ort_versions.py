"""Which onnxruntime-web a site is built with: the version package.json pins (in node_modules), or another exact
version installed beside it for timing one against the other (`klein-web build --onnxruntime-web VERSION`)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from builder import WEB_SRC
from builder.errors import BuildError
from builder.node import find_node

ORT_PACKAGE = "node_modules/onnxruntime-web"
# Other onnxruntime-web versions than the pinned one, installed on demand for builds that compare versions.
OTHER_RUNTIMES = ".onnxruntime-web"


def onnxruntime_web_version(web_src: Path = WEB_SRC) -> str:
    """The onnxruntime-web version the app is built with (pinned exactly in package.json)."""
    dependencies = json.loads((web_src / "package.json").read_text()).get("dependencies", {})
    return str(dependencies.get("onnxruntime-web", "unknown"))


def runtime_package(version: str | None, *, web_src: Path, log: Callable[[str], None]) -> Path:
    """The onnxruntime-web package folder to build with: the pinned one in node_modules, or `version` installed
    once into web_src/.onnxruntime-web/VERSION (`npm install`, outside the lock file), so that a site can be built
    with either for timing one against the other."""
    if version is None or version == onnxruntime_web_version(web_src):
        return web_src / ORT_PACKAGE
    if not re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", version):
        raise BuildError(f"--onnxruntime-web {version!r}: give an exact npm version, e.g. 1.30.0.")
    prefix = web_src / OTHER_RUNTIMES / version
    package = prefix / ORT_PACKAGE
    if package_version(package) != version:
        tools = find_node()
        log(f"npm install onnxruntime-web@{version} into {prefix} ...")
        cmd = [
            *tools.npm,
            "install",
            "--prefix",
            str(prefix),
            "--no-save",
            "--no-package-lock",
            "--no-audit",
            "--no-fund",
            f"onnxruntime-web@{version}",
        ]
        result = subprocess.run(cmd, cwd=web_src, env=tools.env(), capture_output=True, text=True, check=False)
        if result.returncode != 0 or package_version(package) != version:
            raise BuildError(
                f"`npm install onnxruntime-web@{version}` failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()[-2000:]}\nFix: check the version exists (npm view "
                "onnxruntime-web versions) and that the npm registry is reachable."
            )
    return package


def package_version(package: Path) -> str | None:
    """The version an installed npm package folder holds, or None where there is none."""
    try:
        return str(json.loads((package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None
