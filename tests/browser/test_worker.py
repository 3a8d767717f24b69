"""The inference worker in real headless Chromium (WebGPU on SwiftShader), driven through its protocol.

Each test serves the built app plus a tiny model repository (builder.convert.tiny) and compares the worker's image with
the onnxruntime CPU reference (builder.pipeline.reference) for the same prompt, seed and size. One Chromium context is
shared by the module; each test gets its own server port, hence its own origin and an empty model store.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (  # tests/browser is on sys.path (rootdir-relative import mode)
    Reply,
    WorkerClient,
)

from builder.pipeline import imaging, reference
from builder.repo import manifest
from builder.site.server import serve_in_thread

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
# fp32 graphs on WebGPU vs onnxruntime CPU: only float rounding differs, so the images are near-identical.
FP32_PSNR_MIN = 40.0
# What these tests check (where each graph runs, the store, downloads, errors) is the same after any number of steps.
STEPS = 2
WEIGHT_FILE = re.compile(r"\.onnx(_data(_\d+)?)?\b")


@pytest.fixture(scope="module")
def reference_rgb(tiny_models: dict[str, Path]) -> Any:
    """reference_rgb(repo, seed, width, height, variants) -> uint8 [H, W, 3], computed once per case; `repo` is a
    make-tiny output name or a repository folder."""
    cache: dict[tuple[Any, ...], Any] = {}

    def make(repo: str | Path, *, seed: int, width: int, height: int, variants: dict[str, str] | None = None) -> Any:
        key = (repo, seed, width, height, tuple(sorted((variants or {}).items())))
        if key not in cache:
            folder = tiny_models[repo] if isinstance(repo, str) else repo
            cache[key] = reference.generate(
                folder,
                prompt=PROMPT,
                seed=seed,
                width=width,
                height=height,
                steps=STEPS,
                variants=variants,
                log=lambda _msg: None,
            ).image
        return cache[key]

    return make


def variants_of(reply: Reply) -> dict[str, str]:
    """The graph variants the worker ran, to pin the reference to the same ones."""
    return {component: graph["variant"] for component, graph in reply.ok()["graphs"].items()}


def where(graphs: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """{component: (variant, EP)} of a result's graphs."""
    return {component: (graph["variant"], graph["ep"]) for component, graph in graphs.items()}


def assert_progress_stream(reply: Reply) -> None:
    """Download progress invariants: loaded never decreases, total is constant, it ends at total."""
    progress = [event["progress"] for event in reply.of_type("progress")]
    assert progress, "a first run on a fresh origin must report download progress"
    loaded = [p["loaded"] for p in progress]
    assert loaded == sorted(loaded), f"loaded went backwards: {loaded}"
    assert len({p["total"] for p in progress}) == 1, f"total changed: {[p['total'] for p in progress]}"
    assert loaded[-1] == progress[-1]["total"] > 0
    assert all(0 <= p["fileLoaded"] <= p["fileTotal"] for p in progress)


def test_probe_reports_software_adapter_without_f16(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    caps = client.request("probe").ok()
    assert caps["webgpu"] is True and caps["error"] is None
    # SwiftShader: a software adapter, no shader-f16, 1 GiB buffers (builder/site/chrome.py SOFTWARE_FLAGS).
    assert caps["software"] is True, caps["adapter"]
    assert caps["shaderF16"] is False
    assert caps["maxBufferSize"] >= 256 * 2**20
    assert caps["crossOriginIsolated"] is True and caps["threads"] >= 1
    assert caps["storage"]["quota"] > 0


def test_fp32_matches_reference_and_second_visit_uses_the_store(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], reference_rgb: Any
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    caps = client.request("probe").ok()

    # A square and a non-square size, then the non-square size again with another seed: its sessions are kept,
    # and their captured kernels replay (the VAE decoder's for the first time, the transformer's from step 1).
    # The last asks for guidance, which this distilled model ignores, as diffusers does: the same image.
    cases = [(0, 64, 64), (42, 96, 64), (7, 96, 64)]
    for i, (seed, width, height) in enumerate(cases):
        guidance: dict[str, Any] = {"guidance_scale": 4.0, "negative_prompt": "blurry"} if i == 2 else {}
        # onnxruntime's transformer, the fallback of our kernels (tests/browser/test_step_kernels.py runs those).
        reply = client.generate(
            prompt=PROMPT, seed=seed, width=width, height=height, steps=STEPS, step_kernels=False, **guidance
        )
        result = reply.ok()
        assert result["transformerCalls"] == STEPS and result["inputs"]["guidance"] is None
        assert len([note for note in result["notes"] if "ignored" in note]) == (2 if guidance else 0), result["notes"]
        # The tiny transformer's 2 heads fit these sizes unsplit; pinned to the size, it captures its kernels
        # (the steps after the first replay them), and the image still matches the reference.
        transformer = dict(result["graphs"]["transformer"])
        # Pinned to each new size, the transformer session is created anew (its load time is reported); at the
        # same size it is reused.
        load_ms = transformer.pop("loadMs")
        read_ms = transformer.pop("readMs")
        # The fp32 graphs have no quantized matrices to stream: onnxruntime reads their files whole.
        assert transformer.pop("streamedBytes") == 0
        new_size = i == 0 or (width, height) != cases[i - 1][1:]
        assert (load_ms > 0) == new_size and 0 <= read_ms <= load_ms  # reading the store is part of it
        assert (result["graphs"]["vae_decoder"]["loadMs"] > 0) == new_size
        step = transformer.pop("step")
        assert step["runner"] == "onnxruntime" and step["why"] == "asked for" and step["graphNodes"] > 0, step
        assert transformer == {
            "variant": "fp32",
            "ep": "webgpu",
            "detail": "attention unsplit, graph capture, onnxruntime (not our kernels: asked for)",
        }
        # The VAE decoder, pinned to the image's latent size, captures too; the image is still the reference's.
        assert result["graphs"]["vae_decoder"]["ep"] == "webgpu"
        assert result["graphs"]["vae_decoder"]["detail"].endswith(", graph capture"), result["graphs"]["vae_decoder"]
        # The shared device was given the adapter's limits, not WebGPU's defaults (onnxruntime sizes its tiles by them).
        assert result["device"]["limits"]["maxStorageBufferBindingSize"] == caps["maxStorageBufferBindingSize"]
        assert result["device"]["limits"]["maxComputeInvocationsPerWorkgroup"] >= 256
        assert [e["stage"] for e in reply.of_type("stage")] == [
            "check",
            "download",
            "load",
            "encode",
            "latents",
            "timesteps",
            "denoise",
            "decode",
        ]
        assert [e["step"] for e in reply.of_type("step")] == list(range(1, STEPS + 1))
        timings = result["timings"]
        assert timings["total"] >= timings["denoise"] > 0 and timings["sessionRun"] > 0
        # Every stage is timed once: session loading inside a later stage counts under `load`, not twice.
        stages = [e["stage"] for e in reply.of_type("stage")]
        # Text-to-image has no `images` stage: its timing is there (StageTimings has every stage) and 0.
        assert set(timings) == {*stages, "images", "total", "sessionRun"} and timings["images"] == 0
        assert all(timings[stage] >= 0 for stage in stages)
        assert sum(timings[stage] for stage in stages) <= timings["total"] + 1
        if i == 0:
            assert_progress_stream(reply)
            # The prompt was tokenized in the tokenizer's helper worker, started by the inference worker.
            helpers = [w.url for w in page.workers if "/assets/tokenizer-" in w.url]
            assert len(helpers) == 1, [w.url for w in page.workers]
        else:
            # Same prompt again: the embeddings are cached, nothing is downloaded.
            assert reply.of_type("stage")[3].get("detail") == "cached"
            assert not reply.of_type("progress")
        psnr = imaging.psnr(reply.rgb(), reference_rgb("fp32", seed=seed, width=width, height=height))
        print(f"fp32 {width}x{height} seed {seed}: PSNR {psnr:.1f} dB vs CPU reference; timings {timings}")
        assert psnr >= FP32_PSNR_MIN

    # The repo has VAE encoder graphs (editing); text-to-image never requests them.
    time.sleep(0.5)  # let the access log flush
    assert "vae_decoder/vae_decoder_fp32.onnx" in server.output() and "vae_encoder" not in server.output()

    # A second visit (new worker, nothing in memory) loads every weight from OPFS: no weight-file request.
    log_mark = len(server.output())
    client.reload()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    assert imaging.psnr(reply.rgb(), reference_rgb("fp32", seed=0, width=64, height=64)) >= FP32_PSNR_MIN
    assert reply.of_type("stage")[3].get("detail") is None, "a fresh worker must run the text encoder"
    time.sleep(0.5)  # let the access log flush
    after = server.output()[log_mark:]
    assert "manifest.json" in after, "the manifest is re-fetched on each run (stale-size check)"
    requested = [line for line in after.splitlines() if WEIGHT_FILE.search(line)]
    assert requested == [], "weight files requested after the reload:\n" + "\n".join(requested)


def streamed_bytes(graph: Path) -> int:
    """The bytes of `graph`'s external initializers that only quantized-matrix nodes read."""
    import onnx

    model = onnx.load(graph, load_external_data=False)
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    return sum(
        int({e.key: e.value for e in t.external_data}["length"])
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
        and readers.get(t.name)
        and readers[t.name] <= {"MatMulNBits", "GatherBlockQuantized"}
    )


def test_q4_against_reference(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], reference_rgb: Any
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    # onnxruntime's transformer, the fallback of our kernels (tests/browser/test_step_kernels.py runs those).
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS, step_kernels=False)
    graphs = reply.ok()["graphs"]
    # No shader-f16 on SwiftShader: the compact q4 set has no fp16 node (the 4-bit token embedding has fp32
    # scales, the scales stored in fp16 are cast up when the session is created), so all of it runs on WebGPU;
    # the VAE is the fp32 graph.
    assert where(graphs) == {
        "text_encoder": ("q4", "webgpu"),
        "transformer": ("q4", "webgpu"),
        "vae_decoder": ("fp32", "webgpu"),
    }
    # The text encoder runs once per prompt (never captured); the transformer captures.
    assert (
        graphs["text_encoder"]["detail"] == ""
        and graphs["transformer"]["detail"]
        == "attention unsplit, graph capture, onnxruntime (not our kernels: asked for)"
    )
    assert not [note for note in reply.ok()["notes"] if "shader-f16" in note], reply.ok()["notes"]
    # The quantized weights reach the GPU through the app's own buffers, not onnxruntime's copies: exactly the
    # external initializers that only MatMulNBits / GatherBlockQuantized read (models/graph_weights.js).
    for component in ("text_encoder", "transformer", "vae_decoder"):
        graph = next((tiny_models["q4"] / component).glob(f"{component}_{graphs[component]['variant']}.onnx"))
        assert graphs[component]["streamedBytes"] == streamed_bytes(graph), component
    assert graphs["transformer"]["streamedBytes"] > 0
    psnr = imaging.psnr(reply.rgb(), reference_rgb("q4", seed=0, width=64, height=64, variants=variants_of(reply)))
    print(f"q4 64x64 seed 0: PSNR {psnr:.1f} dB vs CPU reference (same variants)")
    # Both q4 graphs run MatMulNBits at accuracy_level 4: int8 activations on the CPU and on WebGPU, quantised
    # in different blocks (onnxruntime-web notes section 4: ~0.3% relative), so q4 is looser than fp32. Measured
    # on the tiny model: 54 dB; the bound keeps 9 dB of headroom and still fails on a wrong image.
    assert psnr >= 45.0


def test_seed_layout_keeps_its_fp16_embedding_on_the_cpu(
    page: Any, dist_dir: Path, live_server_factory: Any, seed_layout_q4: Path, reference_rgb: Any
) -> None:
    """A repository in the seed's layout (fp16 token embedding) runs as it always has: without shader-f16 its two
    fp16 nodes go to the CPU, the rest of the text encoder stays on WebGPU."""
    server = live_server_factory(dist_dir, models=seed_layout_q4)
    client = WorkerClient(page, server.url("/"))
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    assert where(reply.ok()["graphs"]) == {
        "text_encoder": ("q4", "webgpu"),
        "transformer": ("q4", "webgpu"),
        "vae_decoder": ("fp32", "webgpu"),
    }
    assert any("2 fp16 node(s) run on the CPU" in note for note in reply.ok()["notes"]), reply.ok()["notes"]
    psnr = imaging.psnr(
        reply.rgb(), reference_rgb(seed_layout_q4, seed=0, width=64, height=64, variants=variants_of(reply))
    )
    print(f"seed-layout q4 64x64 seed 0: PSNR {psnr:.1f} dB vs CPU reference (same variants)")
    assert psnr >= 45.0  # as the q4 test


def without_f16_fallbacks(repo: Path, out: Path) -> Path:
    """A copy of a seed-layout q4 repo as the seed repo is: no fp32 VAE, no CPU-node list for the fp16 text encoder."""
    shutil.copytree(repo, out)
    data = json.loads((out / manifest.MANIFEST_NAME).read_text())
    data["graphs"] = [g for g in data["graphs"] if (g["component"], g["variant"]) != ("vae_decoder", "fp32")]
    for graph in data["graphs"]:
        graph["cpu_nodes_without_f16"] = []
    data["files"] = {path: entry for path, entry in data["files"].items() if "vae_decoder_fp32" not in path}
    (out / manifest.MANIFEST_NAME).write_text(json.dumps(data))
    return out


def test_fp16_graphs_without_shader_f16_run_on_wasm_with_a_note(
    page: Any, dist_dir: Path, live_server_factory: Any, seed_layout_q4: Path, tmp_path: Path, reference_rgb: Any
) -> None:
    repo = without_f16_fallbacks(seed_layout_q4, tmp_path / "q4-f16-only")
    server = live_server_factory(dist_dir, models=repo)
    client = WorkerClient(page, server.url("/"))
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    result = reply.ok()
    # fp16 graphs throw on a WebGPU device without shader-f16: they must go to the wasm EP, and say so.
    assert where(result["graphs"]) == {
        "text_encoder": ("q4", "wasm"),
        "transformer": ("q4", "webgpu"),
        "vae_decoder": ("fp16", "wasm"),
    }
    wasm_notes = [note for note in result["notes"] if "wasm" in note]
    assert len(wasm_notes) == 2 and all("shader-f16" in note for note in wasm_notes), result["notes"]
    psnr = imaging.psnr(
        reply.rgb(), reference_rgb(seed_layout_q4, seed=0, width=64, height=64, variants=variants_of(reply))
    )
    print(f"q4 text encoder + fp16 VAE on wasm: PSNR {psnr:.1f} dB vs CPU reference (same variants)")
    assert psnr >= 45.0  # measured 54 dB; same reasoning as the q4 test


OPFS_LISTING_JS = """async () => {
    const walk = async (dir, prefix) => {
        const names = [];
        for await (const [name, handle] of dir.entries()) {
            if (handle.kind === 'directory') names.push(...await walk(handle, prefix + name + '/'));
            else names.push(prefix + name);
        }
        return names;
    };
    return walk(await navigator.storage.getDirectory(), '');
}"""


def test_missing_model_file_is_an_error_and_nothing_is_stored(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    repo = tmp_path / "broken"
    shutil.copytree(tiny_models["fp32"], repo)
    missing = manifest.load(repo).graph("transformer", "fp32").files()[-1]
    (repo / missing).unlink()
    server = live_server_factory(dist_dir, models=repo)
    client = WorkerClient(page, server.url("/"))
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    assert reply.type == "error" and reply.error is not None
    assert reply.error["code"] == "model-file" and missing in reply.error["message"], reply.error
    stored = page.evaluate(OPFS_LISTING_JS)
    # The files before it were stored whole; the 404 answer was not stored under any name.
    assert any(name.endswith("text_encoder/text_encoder_fp32.onnx") for name in stored), stored
    assert not [name for name in stored if Path(missing).name in name], stored


class CutOnce:
    """ASGI middleware: records every request and cuts the first GET of `target` after `after` bytes."""

    def __init__(self, app: Any, *, target: str, after: int) -> None:
        self.app, self.target, self.after = app, target, after
        self.requests: list[tuple[str, str, str | None]] = []
        self.cut = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        self.requests.append((scope["method"], scope["path"], headers.get("range")))
        if self.cut or scope["method"] != "GET" or scope["path"] != self.target:
            await self.app(scope, receive, send)
            return
        self.cut = True
        sent = 0

        async def send_until_cut(message: Any) -> None:
            nonlocal sent
            if message["type"] == "http.response.body":
                body = message.get("body", b"")
                if sent + len(body) >= self.after:
                    await send({**message, "body": body[: self.after - sent], "more_body": True})
                    # Let the browser read those bytes before the connection drops (a stall, then a reset);
                    # otherwise Chromium may fail the response before handing any of it to the stream.
                    await asyncio.sleep(1.0)
                    raise ConnectionResetError("connection cut by the test")
                sent += len(body)
            await send(message)

        await self.app(scope, receive, send_until_cut)


@pytest.fixture
def cutting_server(dist_dir: Path, tiny_models: dict[str, Path]) -> Iterator[tuple[str, CutOnce, str, int]]:
    """The real app (builder.site.server.create_app) behind CutOnce, in a uvicorn thread on a free port."""

    from builder.site.server import create_app

    repo = manifest.load(tiny_models["fp32"])
    transformer = repo.graph("transformer", "fp32")
    # The transformer's largest external-data file, cut in the middle.
    path = max(transformer.files()[1:], key=lambda p: repo.files[p].size)
    size = repo.files[path].size
    app = CutOnce(create_app(dist_dir, tiny_models["fp32"]), target="/models/" + path, after=size // 2)
    with serve_in_thread(app, log_level="critical") as port:
        yield f"http://127.0.0.1:{port}/", app, path, size


def test_cut_download_resumes_with_range(
    page: Any, cutting_server: tuple[str, CutOnce, str, int], tiny_models: dict[str, Path]
) -> None:
    base_url, app, path, size = cutting_server
    client = WorkerClient(page, base_url)
    client.open()
    # A load request downloads what a generation downloads and creates every session from it; the store commits
    # the resumed file only once its SHA-256 is the manifest's.
    loaded = client.load().ok()
    assert app.cut, f"the test never cut /models/{path}"
    gets = [(p, r) for method, p, r in app.requests if method == "GET" and p == "/models/" + path]
    assert len(gets) == 2, gets
    assert gets[0][1] is None
    resumed_from = int(re.fullmatch(r"bytes=(\d+)-", gets[1][1] or "").group(1))  # type: ignore[union-attr]
    assert 0 < resumed_from <= size // 2
    assert loaded["downloadedBytes"] > 0 and set(loaded["graphs"]) == {"text_encoder", "transformer", "vae_decoder"}
    # The resumed file is the one stored: its bytes, read back from the store, are the served file's.
    assert client.stored_file(path, sha256=True) == manifest.load(tiny_models["fp32"]).files[path].sha256
    # Every download ran in one of the store's helper workers: the inference worker fetched the manifest itself and
    # no model file, so its thread stays free while the model arrives.
    fetched = client.worker_fetches()
    assert any(url == client.model_base + "manifest.json" for url in fetched), fetched
    assert not [url for url in fetched if WEIGHT_FILE.search(url)], fetched


def test_cancel_during_denoising(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], reference_rgb: Any
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    generate_id = client.send(
        "generate",
        params={"prompt": PROMPT, "seed": 0, "width": 64, "height": 64, "steps": 30, "modelBase": client.model_base},
    )
    client.wait_for_event(generate_id, "step", timeout_s=300)
    cancel = client.request("cancel", target=generate_id, timeout_s=30)
    assert cancel.ok() == {"cancelled": True}
    reply = client.wait(generate_id, timeout_s=60)
    assert reply.type == "error" and reply.error is not None and reply.error["code"] == "cancelled", reply.error

    steps = reply.of_type("step")
    assert len(steps) < 30
    late = [event for event in steps if event["at"] > cancel.sent_at]
    assert len(late) <= 1, f"{len(late)} steps ran after the cancel"
    step_ms = (
        max(b["elapsedMs"] - a["elapsedMs"] for a, b in itertools.pairwise(steps))
        if len(steps) > 1
        else steps[0]["elapsedMs"]
    )
    # Stops within one step (plus the session release and message latency).
    assert reply.answered_at - cancel.sent_at <= step_ms + 2000

    again = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS)
    assert imaging.psnr(again.rgb(), reference_rgb("fp32", seed=0, width=64, height=64)) >= FP32_PSNR_MIN
    assert client.request("cancel", target=generate_id).ok() == {"cancelled": False}


def test_bad_or_too_large_sizes_are_refused_before_any_download(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    # A repo whose VAE attention is NOT split into query blocks, like the seed repo's vae_decoder_fp16:
    # the tiny fp32 repo with its manifest saying so (the run is refused before any graph is read).
    repo = tmp_path / "unsplit"
    shutil.copytree(tiny_models["fp32"], repo)
    data = json.loads((repo / "manifest.json").read_text())
    for graph in data["graphs"]:
        if graph["component"] == "vae_decoder":
            graph["attention_query_blocks"] = 1
    (repo / "manifest.json").write_text(json.dumps(data))
    server = live_server_factory(dist_dir, models=repo)
    client = WorkerClient(page, server.url("/"))
    client.open()
    bad = client.generate(prompt=PROMPT, seed=0, width=100, height=64)
    assert bad.type == "error" and bad.error is not None and bad.error["code"] == "input", bad.error
    assert "`width`" in bad.error["message"] and "try 96" in bad.error["message"]  # names the argument and a fix
    # 2048x2048: unsplit VAE attention scores (65536^2 fp32 = 16 GiB) cannot fit SwiftShader's 1 GiB buffers.
    huge = client.generate(prompt=PROMPT, seed=0, width=2048, height=2048)
    assert huge.type == "error" and huge.error is not None and huge.error["code"] == "out-of-memory", huge.error
    assert "smaller size" in huge.error["message"]
    assert not huge.of_type("progress"), "nothing may be downloaded for a run that cannot finish"


def test_load_creates_and_releases_each_session_without_running_it(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    params = {"modelBase": client.model_base, "width": 128, "height": 128}
    bad = client.request("load", params={**params, "components": ["transformer", "evil"]})
    assert bad.type == "error" and bad.error is not None and bad.error["code"] == "input", bad.error
    assert "`components`" in bad.error["message"]

    first = client.request("load", params={**params, "components": ["vae_decoder", "transformer"]}, timeout_s=120).ok()
    assert first["downloadedBytes"] > 0 and set(first["graphs"]) == {"vae_decoder", "transformer"}
    # Released after the request: loading again creates the session again (load time), from the store (0 bytes).
    again = client.request("load", params={**params, "components": ["transformer"]}, timeout_s=120).ok()
    assert again["downloadedBytes"] == 0 and again["graphs"]["transformer"]["loadMs"] > 0
    assert again["graphs"]["transformer"]["path"] == first["graphs"]["transformer"]["path"]
