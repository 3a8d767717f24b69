"""The size of onnxruntime's wasm heap in the app's worker, read through a hook installed before its first session."""

from __future__ import annotations

import time
from typing import Any

from builder.errors import RegressionError

# Installed in the app's worker before its first session: remembers every WebAssembly.Memory onnxruntime makes,
# so the wasm heap's size can be read back (WebAssembly memories only grow: the last size is the peak). A threaded
# module imports a memory made with the constructor; a single-threaded one (one thread: no cross-origin isolation,
# or two cores) defines its own and exports it from the instance, so instantiation is watched too.
WASM_HOOK_JS = """() => {
    if (globalThis.__kleinWasmMemories) return true;
    const memories = [];
    const Original = WebAssembly.Memory;
    function Memory(descriptor) { const memory = new Original(descriptor); memories.push(memory); return memory; }
    Memory.prototype = Original.prototype;
    WebAssembly.Memory = /** @type {any} */ (Memory);
    const keep = (result) => {
        const instance = result instanceof WebAssembly.Instance ? result : result.instance;
        for (const value of Object.values(instance.exports)) {
            if (value instanceof Original && !memories.includes(value)) memories.push(value);
        }
        return result;
    };
    for (const name of ["instantiate", "instantiateStreaming"]) {
        const original = WebAssembly[name];
        WebAssembly[name] = (...args) => original.apply(WebAssembly, args).then(keep);
    }
    globalThis.__kleinWasmMemories = memories;
    return true;
}"""
WASM_SIZE_JS = "() => Math.max(0, ...(globalThis.__kleinWasmMemories || []).map((m) => m.buffer.byteLength))"


def hooked_worker(page: Any, *, timeout_s: float = 30) -> Any:
    """The page's first Web Worker, with the wasm-heap hook installed (a worker starts with its page; its first
    onnxruntime session, which creates the heap, comes later)."""
    deadline = time.monotonic() + timeout_s
    while not page.workers:
        if time.monotonic() > deadline:
            raise RegressionError(f"the app started no Web Worker within {timeout_s:g} s")
        page.wait_for_timeout(100)
    worker = page.workers[0]
    worker.evaluate(WASM_HOOK_JS)
    return worker


def wasm_heap_bytes(worker: Any) -> int | None:
    """The largest wasm memory onnxruntime made in `worker` (None before it made one)."""
    return int(worker.evaluate(WASM_SIZE_JS)) or None
