"""The lab's static site: its page bundled by esbuild from web_src/src/lab/main.js (as `klein-web build` bundles the
app, with the same onnxruntime-web runtime files), plus onnxruntime's equivalent graphs of every case. Built once
(`klein-web kernel-lab --build DIR`), it runs wherever Python, numpy and Chromium are: no node there."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from builder import WEB_SRC, __version__
from builder.check.kernel_lab import kernels, shapes
from builder.errors import KernelLabError

LAB_ENTRY = "src/lab/main.js"
PAGE = "lab.html"
RECORD = "lab.json"  # names the bundle; its presence marks a built lab

PAGE_HTML = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>klein-web kernel lab</title></head>
<body><pre id="log"></pre><script type="module" src="assets/{script}"></script></body>
</html>
"""


def build(out_dir: Path, *, log: Callable[[str], None]) -> Path:
    """Bundle the lab page into out_dir (replacing an earlier lab there) and write every case's graphs."""
    from builder.node import ensure_node_modules, find_node
    from builder.site.bundle import ORT_DIST, run_esbuild
    from builder.site.runtime_files import copy_runtime

    out_dir = Path(out_dir)
    if out_dir.exists() and not (out_dir / RECORD).is_file() and any(out_dir.iterdir()):
        raise KernelLabError(f"--build {out_dir}: the folder holds other files; give an empty or new folder.")
    shutil.rmtree(out_dir, ignore_errors=True)
    assets = out_dir / "assets"
    assets.mkdir(parents=True)
    ensure_node_modules(web_src=WEB_SRC, log=log)
    runtime = copy_runtime(WEB_SRC / ORT_DIST, assets)  # the app's runtime files: the .wasm in parts
    script = run_esbuild(
        find_node(),
        WEB_SRC,
        LAB_ENTRY,
        out_assets=assets,
        name="lab",
        extra=[
            "--format=esm",
            "--platform=browser",
            f"--define:KLEIN_VERSION={json.dumps(__version__)}",
            f"--define:KLEIN_ORT_WASM={runtime.worker_define()}",
        ],
    )
    (out_dir / PAGE).write_text(PAGE_HTML.format(script=script))
    written = write_graphs(out_dir)
    (out_dir / RECORD).write_text(json.dumps({"script": script, "graphs": written}, indent=2) + "\n")
    log(f"built the kernel lab in {out_dir} ({len(written)} graphs)")
    return out_dir


def write_graphs(out_dir: Path) -> list[str]:
    """onnxruntime's graphs of every case of every shape set (they are a few hundred bytes each)."""
    import onnx

    written: dict[str, onnx.ModelProto] = {}
    for shape_set in shapes.SHAPE_SETS:
        for case in kernels.all_cases(shape_set):
            written.update(kernels.MODULES[case.kernel].graphs(case))
    for path, model in written.items():
        (out_dir / path).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, out_dir / path)
    return sorted(written)


def check_built(site_dir: Path) -> Path:
    if not (Path(site_dir) / RECORD).is_file():
        raise KernelLabError(
            f"--site {site_dir} holds no built lab (no {RECORD}); build one with `klein-web kernel-lab --build DIR`."
        )
    return Path(site_dir)
