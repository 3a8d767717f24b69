"""Half-precision graphs that overflow never end the image (worker/recovery.js).

The tiny model's text encoder carries injected massive activations (tests/conftest.py overflowing_q4f16_repo): its
q4f16 graph computes NaN prompt embeddings (on SwiftShader, which has no shader-f16, the q4f16 graphs run on the wasm
EP, whose fp16 kernels overflow the same way), its q4 graph computes in fp32 and does not. A q4f16 request must run
again on the q4 graphs, say so, give the q4 path's image byte for byte, and the browser must remember the choice for
that model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
STEPS = 2


def fallbacks(reply: Any) -> list[str]:
    return [event.get("detail", "") for event in reply.of_type("stage") if "again on the" in event.get("detail", "")]


def test_an_overflowing_q4f16_text_encoder_finishes_on_q4_and_is_remembered(
    page: Any, dist_dir: Path, live_server_factory: Any, overflowing_q4f16_repo: Path
) -> None:
    server = live_server_factory(dist_dir, models=overflowing_q4f16_repo)
    client = WorkerClient(page, server.url("/"))
    client.open()

    fast = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS, precision="q4f16")
    result = fast.ok()
    # The q4f16 run did overflow: its prompt embeddings held NaN, which the retry's reason counts.
    (retry,) = fallbacks(fast)
    assert retry.startswith("again on the q4 graphs: the q4f16 text encoder overflowed half precision"), retry
    assert "NaN" in retry and "prompt embeddings" in retry, retry
    assert {result["graphs"][c]["variant"] for c in ("text_encoder", "transformer")} == {"q4"}, result["graphs"]
    assert any(note.startswith("Ran again on the q4 graphs (fp32 activations)") for note in result["notes"])

    # A new worker (nothing cached in it) asked for q4 directly: the same image, byte for byte.
    client.start_worker()
    direct = client.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=STEPS, precision="q4")
    assert fallbacks(direct) == []
    np.testing.assert_array_equal(fast.rgb(), direct.rgb())

    # The next request that asks for no precision starts on the remembered q4 graphs and says why.
    client.start_worker()
    later = client.generate(prompt=PROMPT, seed=1, width=64, height=64, steps=STEPS)
    assert fallbacks(later) == []
    notes = later.ok()["notes"]
    assert any("as this browser remembers for this model: the q4f16 text encoder overflowed" in n for n in notes), notes
