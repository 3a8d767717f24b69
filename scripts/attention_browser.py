"""Which attention kernels onnxruntime-web runs in Chromium, and their GPU time: the decomposed form the converter
emits against one com.microsoft.MultiHeadAttention node (with present_key/present_value outputs, the condition of
onnxruntime's WebGPU flash-attention path), for one klein attention layer (24 heads x 128, fp16).

    python scripts/attention_browser.py [--tokens 1536,4608] [--gpu] [--browser PATH] [--out attention.json]

A development aid beside scripts/attention_kernels.py (which asks the same of the native EP): it serves the graphs,
random fp16 q/k/v and onnxruntime-web's WebGPU build from web_src/node_modules, opens a page in Chromium that
creates its GPUDevice the way the app does (runtime/gpu.js deviceDescriptor: every feature onnxruntime can use,
subgroups included) and runs each graph with onnxruntime's profiler on. It prints, per graph, the device's
features, the GPU time per run and the WebGPU programs that ran (pipeline/kernel_times.js), and how far each
output is from the decomposed one.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
from attention_kernels import HIDDEN, decomposed, mha
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from builder.check.driver.chromium import find_chromium, launch_persistent  # noqa: E402

ORT_FILES = ("ort.webgpu.bundle.min.mjs", "ort-wasm-simd-threaded.asyncify.wasm")

PAGE = """<!doctype html><meta charset="utf-8"><title>attention probe</title>
<script type="importmap">{"imports": {"onnxruntime-web/webgpu": "./ort/ort.webgpu.bundle.min.mjs"}}</script>
<script type="module">
// The app's own runtime module: its sessions and its profiler plumbing (the wasm module's prints read back).
// This page is not the app: it also takes onnxruntime's Tensor class directly, for the fp16 inputs.
import * as ort from 'onnxruntime-web/webgpu';
import { configureOrt, createSession, profileEvents, release, run } from './src/runtime/ort.js';
import { deviceDescriptor } from './src/runtime/gpu.js';
import { kernelTimes } from './src/pipeline/kernel_times.js';

configureOrt({ runtime: null, threads: 1 });

async function bytes(path) {
    return new Uint8Array(await (await fetch(path)).arrayBuffer());
}

window.probe = async ({ cases, ep }) => {
    const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
    const device = await adapter.requestDevice(deviceDescriptor(adapter));
    const result = { features: [...device.features].sort(), cases: {} };
    const reference = {};
    for (const c of cases) {
        const feeds = {};
        for (const name of ['q', 'k', 'v']) {
            const raw = (await bytes(`inputs/${c.tokens}-${name}-${c.dtype}.bin`)).buffer;
            const data = c.dtype === 'float16' ? new Uint16Array(raw) : new Float32Array(raw);
            feeds[name] = new ort.Tensor(c.dtype, data, [1, c.tokens, c.hidden]);
        }
        const session = await createSession(await bytes(`models/${c.file}`), [], { ep, device, profile: true });
        let output = null;
        for (let i = 0; i < c.runs; i++) output = (await run(session, feeds)).out;
        const events = await profileEvents(session);
        await release(session);
        const values = Float32Array.from(output.data);
        if (!reference[c.tokens]) reference[c.tokens] = values;
        let maxDiff = 0;
        for (let i = 0; i < values.length; i++) maxDiff = Math.max(maxDiff, Math.abs(values[i] - reference[c.tokens][i]));
        result.cases[c.label] = { ...kernelTimes({ [c.label]: events })[c.label], maxDiffVsFirst: maxDiff };
    }
    return result;
};
window.ready = true;
</script>
"""


def with_fp32_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph's fp16 `out` read back as fp32 (the page compares outputs as numbers)."""
    for node in model.graph.node:
        node.output[:] = ["out16" if name == "out" else name for name in node.output]
    model.graph.node.append(helper.make_node("Cast", ["out16"], ["out"], to=TensorProto.FLOAT))
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    return model


def mha_fp32(tokens: int) -> onnx.ModelProto:
    """The MultiHeadAttention graph in fp32 throughout: its kernel choice on an adapter without shader-f16."""
    model = mha(tokens, 1)
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    http.server.SimpleHTTPRequestHandler.extensions_map.update(
        {".mjs": "text/javascript", ".wasm": "application/wasm", ".js": "text/javascript"}
    )
    http.server.SimpleHTTPRequestHandler.log_message = lambda *_a: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/probe.html"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1536,4608")
    parser.add_argument("--blocks", default="1,4", help="query blocks of the decomposed form, one per --tokens entry")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--gpu", action="store_true", help="the real GPU (Vulkan on Linux); default SwiftShader")
    parser.add_argument("--browser", type=Path)
    parser.add_argument("--ep", default="webgpu", help="wasm: check the page itself where WebGPU has no shader-f16")
    parser.add_argument("--fp32", action="store_true", help="only an fp32 MultiHeadAttention (no shader-f16 needed)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    tokens_list = [int(t) for t in args.tokens.split(",")]
    blocks_list = [int(b) for b in args.blocks.split(",")]
    with tempfile.TemporaryDirectory(prefix="attention-browser-") as tmp:
        folder = Path(tmp)
        (folder / "probe.html").write_text(PAGE)
        (folder / "ort").mkdir()
        for name in ORT_FILES:
            shutil.copy(ROOT / "web_src/node_modules/onnxruntime-web/dist" / name, folder / "ort" / name)
        shutil.copytree(ROOT / "web_src/src", folder / "src")
        (folder / "models").mkdir()
        (folder / "inputs").mkdir()
        rng = np.random.default_rng(0)
        cases = []
        for tokens, blocks in zip(tokens_list, blocks_list, strict=True):
            for name in ("q", "k", "v"):  # post-RMSNorm, post-RoPE activations: unit scale
                values = rng.standard_normal((1, tokens, HIDDEN)).astype(np.float16)
                values.tofile(folder / "inputs" / f"{tokens}-{name}-float16.bin")
                values.astype(np.float32).tofile(folder / "inputs" / f"{tokens}-{name}-float32.bin")
            graphs = [
                (f"{tokens} tokens decomposed, {blocks} query blocks", decomposed(tokens, blocks, 1), "float16"),
                (f"{tokens} tokens MultiHeadAttention", mha(tokens, 1), "float16"),
            ]
            if args.fp32:
                graphs = [(f"{tokens} tokens MultiHeadAttention fp32", mha_fp32(tokens), "float32")]
            for label, model, dtype in graphs:
                file = f"{label.replace(' ', '_').replace(',', '')}.onnx"
                onnx.save(with_fp32_output(model) if dtype == "float16" else model, folder / "models" / file)
                cases.append(
                    {
                        "label": label,
                        "file": file,
                        "tokens": tokens,
                        "hidden": HIDDEN,
                        "runs": args.runs,
                        "dtype": dtype,
                    }
                )
        server, url = serve(folder)
        try:
            with sync_playwright() as playwright:
                context = launch_persistent(
                    playwright, folder / "profile", executable=find_chromium(args.browser), gpu=args.gpu
                )
                page = context.new_page()
                page.on("console", lambda m: print("  [page]", m.text[:300]) if m.type == "error" else None)
                page.goto(url)
                page.wait_for_function("() => window.ready === true", timeout=60_000)
                result = page.evaluate("(request) => window.probe(request)", {"cases": cases, "ep": args.ep})
                context.close()
        finally:
            server.shutdown()
    print("device features:", ", ".join(result["features"]))
    for label, times in result["cases"].items():
        programs = ", ".join(f"{k['op']}/{k['program']} {k['gpuMs']:.2f} ms" for k in times["kernels"][:8])
        print(
            f"{label}: GPU {times['gpuMs']:.2f} ms per run, {times['runMs']:.2f} ms per run in onnxruntime "
            f"(max |diff| vs the first {times['maxDiffVsFirst']:.2e}); {programs}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
