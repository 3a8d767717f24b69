"""Memory modes in real headless Chromium (models/memory_mode.js, models/sessions.js).

Lean mode holds one session at a time and none between images: each image creates its sessions again (a repeated
prompt still skips the text encoder), and the image is the same, byte for byte, as fast mode's.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from helpers import WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"


def test_lean_mode_reloads_each_session_per_image_and_makes_the_same_image(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()

    fast = [client.generate(prompt=PROMPT, seed=seed, width=64, height=64, steps=2, memory="fast") for seed in (3, 4)]
    for reply in fast:
        assert reply.ok()["memory"]["mode"] == "fast"
    # Fast mode: the second image (same prompt) creates no session.
    assert all(graph["loadMs"] == 0 for graph in fast[1].ok()["graphs"].values()), fast[1].ok()["graphs"]

    lean = [client.generate(prompt=PROMPT, seed=seed, width=64, height=64, steps=2, memory="lean") for seed in (3, 4)]
    for reply in lean:
        assert reply.ok()["memory"] == {"mode": "lean", "why": "lean mode, as asked"}
    # Lean mode: nothing stayed loaded, so the second image creates the transformer and the VAE decoder again; the
    # repeated prompt's embedding is cached, so the text encoder is not created.
    graphs = lean[1].ok()["graphs"]
    assert graphs["transformer"]["loadMs"] > 0 and graphs["vae_decoder"]["loadMs"] > 0, graphs
    assert graphs["text_encoder"]["loadMs"] == 0, graphs
    assert [event.get("detail") for event in lean[1].of_type("stage") if event["stage"] == "encode"] == ["cached"]
    # The same image either way.
    for fast_reply, lean_reply in zip(fast, lean, strict=True):
        assert base64.b64decode(fast_reply.ok()["rgba"]) == base64.b64decode(lean_reply.ok()["rgba"])


def test_a_memory_mode_that_is_not_one_is_refused_before_any_download(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, memory="tiny")
    assert reply.type == "error" and reply.error is not None
    assert reply.error["code"] == "input" and "`memory` must be one of fast, lean" in reply.error["message"]
    assert reply.of_type("progress") == []
