"""What the two browser benchmarks (browser-bench, load-bench) share: the --precision check and the record of where
a run ran."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from builder import __version__
from builder.check.driver.session import BrowserSession
from builder.errors import InputError
from builder.repo import manifest
from builder.site import bundle


def check_variant(repo: manifest.Manifest, models_dir: Path, variant: str) -> None:
    """InputError unless the repo has a transformer of `variant` (a --precision value)."""
    if variant not in repo.variants("transformer"):
        raise InputError(
            f"--precision {variant}: {models_dir} has no transformer of that variant "
            f"(it has {', '.join(repo.variants('transformer'))})."
        )


def run_environment(session: BrowserSession, models_dir: Path, dist_dir: Path) -> dict[str, Any]:
    """What a benchmark record says about where it ran: date, versions (onnxruntime-web: the one the served site
    was built with), browser, adapter, model folder."""
    return {
        "date": datetime.date.today().isoformat(),
        "klein_web": __version__,
        "browser": f"{session.executable.name if session.executable else session.name} {session.version}",
        "adapter": " ".join(str(session.adapter.get(k, "")) for k in ("vendor", "architecture", "description")).strip(),
        "onnxruntime_web": bundle.built_onnxruntime_web(dist_dir),
        "models": str(models_dir),
    }
