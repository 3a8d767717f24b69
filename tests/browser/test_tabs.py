"""Two tabs of one origin share the model store (web_src/src/store/store_lock.js), in real headless Chromium.

"Clear cached model" in one tab must not break the other: that tab's next Generate downloads the model again. A
clear while another tab uses the store (here: generating) is refused with a clear message, and that tab finishes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import WorkerClient, new_page  # tests/browser is on sys.path (rootdir-relative import mode)

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"


def test_a_clear_in_one_tab_leaves_the_other_working_and_waits_for_its_jobs(
    context: Any, page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    first = WorkerClient(page, server.url("/"))
    first.open()
    other_page = new_page(context)
    try:
        second = WorkerClient(other_page, server.url("/"))
        second.open()

        stored = first.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=2)
        assert stored.of_type("progress"), "the first image downloads the model"

        # The second tab clears the store the first one filled.
        cleared = second.request("clearCache", timeout_s=60).ok()
        assert cleared["freedBytes"] > 0

        # The first tab's next image downloads the model again and matches the first one.
        again = first.generate(prompt=PROMPT, seed=0, width=64, height=64, steps=2)
        assert again.type == "result", again.error
        assert again.of_type("progress"), "the model is downloaded again after the other tab cleared it"
        assert again.rgb().tobytes() == stored.rgb().tobytes()

        # While the first tab generates, a clear in the second is refused at once and the generation finishes. (The
        # job holds the store for its whole run, its prompt's embeddings cached or not.)
        running = first.send(
            "generate",
            params={"prompt": PROMPT, "seed": 1, "width": 64, "height": 64, "steps": 4, "modelBase": first.model_base},
        )
        first.wait_for_event(running, "stage", timeout_s=30)
        refused = second.request("clearCache", timeout_s=30)
        assert refused.type == "error" and refused.error is not None
        assert refused.error["code"] == "busy" and "in use in another tab" in refused.error["message"]
        finished = first.wait(running, timeout_s=300)
        assert finished.type == "result", finished.error
        assert not finished.of_type("progress"), "nothing was cleared: the store still held every file"
    finally:
        other_page.close()
