"""`klein-web bench --browser-overhead`: the share of a generation the app spends outside session.run.

One image on make-tiny in headless Chromium (SwiftShader), made through the form as a user makes it; the
worker's own timings give the time inside session.run (its meter), and the rest of the generation is the
app's orchestration. The figures go to OUT/browser-overhead.json.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from builder.check.driver.page import Form, generate, opened
from builder.check.driver.serving import check_models, serving, site
from builder.check.driver.session import launched, local_session, probe_adapter
from builder.errors import BenchError
from builder.pipeline.limits import parse_size
from builder.repo.files import atomic_write_bytes

Log = Callable[[str], None]

JSON_NAME = "browser-overhead.json"
PROMPT = "a lighthouse at dusk"


def overhead_figures(timings: Mapping[str, float]) -> dict[str, float]:
    """From the worker's StageTimings: ms outside session.run, and its share of the generation.

    The generation is the total minus model loading (`load`, and `download` where the app times it apart),
    which happens once per page, not per image; session.run time is the worker's own meter."""
    for key in ("total", "sessionRun"):
        if not isinstance(timings.get(key), (int, float)):
            raise BenchError(f"The app's timings lack {key!r}: {dict(timings)}")
    generation = timings["total"] - timings.get("download", 0) - timings.get("load", 0)
    outside = generation - timings["sessionRun"]
    return {
        "generation_ms": generation,
        "session_run_ms": timings["sessionRun"],
        "outside_ms": outside,
        "overhead_share": outside / generation if generation > 0 else float("nan"),
        "overhead_share_of_total": (timings["total"] - timings["sessionRun"]) / timings["total"],
    }


def browser_overhead(
    out_dir: Path,
    *,
    log: Log,
    models_dir: Path | None = None,
    steps: int = 4,
    size: str = "512x512",
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    """Generate one image with the app (on make-tiny unless `models_dir`) and report the orchestration overhead."""
    from builder.convert.tiny import make_tiny

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    width, height = parse_size(size)
    if models_dir is None:
        models_dir = out_dir / "tiny-model" / "q4"
        if not (models_dir / "manifest.json").is_file():
            make_tiny(out_dir / "tiny-model", log=log)
    models_dir, repo = check_models(models_dir, log=log)
    session = local_session(None, gpu=False)
    dist_dir = site(None, log=log)
    with serving(dist_dir, models_dir, log=log, models_manifest=repo) as base_url, launched(session, log=log):
        session.adapter = probe_adapter(session, base_url)
        with opened(session.context, base_url + "/") as page:
            _seconds, info = generate(
                page, Form(prompt=PROMPT, seed=0, width=width, height=height, steps=steps), timeout_s=timeout_s, log=log
            )
    timings = info.get("timings")
    if not isinstance(timings, dict):
        raise BenchError(f"The app's #timings data has no per-stage timings: {info}")
    figures = overhead_figures(timings)
    atomic_write_bytes(
        out_dir / JSON_NAME,
        json.dumps({**figures, "timings": timings, "size": size, "steps": steps}, indent=1).encode("utf-8"),
    )
    log(
        f"browser overhead: {figures['outside_ms']:.0f} ms of {figures['generation_ms']:.0f} ms outside "
        f"session.run = {100 * figures['overhead_share']:.1f}% (target <= 5%)"
    )
    return {**figures, "timings": timings, "size": size, "steps": steps}
