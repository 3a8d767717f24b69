"""The onnxruntime-web runtime in a built site: its loader (`.mjs`) copied as it is, its `.wasm` (25.5 MiB in
onnxruntime-web 1.30) written in parts small enough for every static host (Cloudflare Pages refuses files over
25 MiB: docs/deploying.md#hosts). The service worker joins the parts when it stores the app, checks the whole
against the SHA-256 compiled into it and serves it under the name the whole `.wasm` would have (`whole`, no file on
the host), so onnxruntime-web fetches and compiles one `.wasm` file; without the service worker the app's worker
joins and checks the parts itself and hands the bytes over (web_src/src/runtime/wasm_parts.js).

Each part is named by the hash of its own bytes (`ort-wasm-simd-threaded.asyncify.1of2-HASH.wasm`), so a deploy
replaces parts whole, like every other asset; the `.wasm` suffix keeps the content type (and the compression)
hosts give the runtime.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.errors import BuildError

LOADER = "ort-wasm-simd-threaded.asyncify.mjs"
WASM = "ort-wasm-simd-threaded.asyncify.wasm"
# The largest part. Well under the smallest per-file limit of the hosts `build --host` knows (25 MiB), so a runtime
# that grows by a few MiB still fits; two parts for onnxruntime-web 1.30.
PART_BYTES = 16 * 2**20
ASSETS = "assets/"


@dataclass(frozen=True)
class Runtime:
    """The runtime's files in the site (names in the assets folder) and the whole `.wasm`'s name and identity."""

    mjs: str
    parts: tuple[str, ...]
    whole: str
    wasm_bytes: int
    wasm_sha256: str

    def roles(self) -> dict[str, str]:
        """The build record's roles: `ort_mjs` and `ort_wasm_part0`, `ort_wasm_part1`, ... in joining order."""
        return {"ort_mjs": self.mjs, **{f"ort_wasm_part{i}": name for i, name in enumerate(self.parts)}}

    def names(self, folder: str = "") -> dict[str, object]:
        """The `.wasm`'s parts and joined copy, `folder` before each name, with its length and SHA-256."""
        return {
            "whole": folder + self.whole,
            "parts": [folder + name for name in self.parts],
            "bytes": self.wasm_bytes,
            "sha256": self.wasm_sha256,
        }

    def worker_define(self) -> str:
        """KLEIN_ORT_WASM for the worker bundle: names relative to the worker's own folder (all live in assets/)."""
        return json.dumps({"mjs": self.mjs, **self.names()})

    def service_worker_define(self) -> str:
        """KLEIN_RUNTIME for the service worker: names relative to the site root, where it lives."""
        return json.dumps(self.names(ASSETS))


def split(data: bytes, part_bytes: int = PART_BYTES) -> list[bytes]:
    """`data` in the fewest parts of at most `part_bytes`, of equal sizes but the last (which may be shorter)."""
    count = max(1, -(-len(data) // part_bytes))
    size = -(-len(data) // count)
    return [data[i : i + size] for i in range(0, max(len(data), 1), size)]


def part_name(index: int, count: int, data: bytes) -> str:
    """`ort-wasm-simd-threaded.asyncify.1of2-1a2b3c4d5e.wasm`: the part's place and its own bytes' hash."""
    stem, suffix = WASM.rsplit(".", 1)
    return f"{stem}.{index + 1}of{count}-{hashlib.sha256(data).hexdigest()[:10]}.{suffix}"


def hashed_name(name: str, data: bytes) -> str:
    """`ort-wasm-simd-threaded.asyncify.mjs` -> `ort-wasm-simd-threaded.asyncify-1a2b3c4d5e.mjs`."""
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:10]}.{suffix}"


def copy_runtime(ort_dist: Path, assets: Path) -> Runtime:
    """Copy the loader and write the `.wasm`'s parts from onnxruntime-web's dist/ folder into `assets`."""
    sources = {name: ort_dist / name for name in (LOADER, WASM)}
    for path in sources.values():
        if not path.is_file():
            raise BuildError(
                f"{path} is missing: node_modules is incomplete. Fix: delete node_modules beside package.json and "
                "build again."
            )
    loader = hashed_name(LOADER, sources[LOADER].read_bytes())
    shutil.copyfile(sources[LOADER], assets / loader)
    wasm = sources[WASM].read_bytes()
    pieces = split(wasm)
    names = []
    for index, piece in enumerate(pieces):
        names.append(part_name(index, len(pieces), piece))
        (assets / names[-1]).write_bytes(piece)
    return Runtime(loader, tuple(names), hashed_name(WASM, wasm), len(wasm), hashlib.sha256(wasm).hexdigest())
