"""Stage 2 of the CPU reference (builder.pipeline.reference): which graph of the model repository runs for each
component, its files verified, and the onnxruntime CPU sessions on them.

Only one session lives at a time: the real model is 5.6 GB, so each graph is loaded, run and released before the
next one is created, like the browser does.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError, ModelRepoError
from builder.pipeline import capacity
from builder.pipeline.reference_request import InputPlan
from builder.pipeline.schedule import SCHEDULER_CONFIG
from builder.repo import local, manifest, verify

# Which variant of each graph to run on the CPU, best first. fp32 is the exact one; q4 is what the seed
# repo ships; fp16 VAE weights run on the CPU EP too, just slower.
VARIANT_PREFERENCE: Mapping[str, tuple[str, ...]] = {
    "text_encoder": ("fp32", "q4", "q4f16"),
    "transformer": ("fp32", "q4", "q4f16"),
    "vae_decoder": ("fp32", "fp16"),
    "vae_encoder": ("fp32", "fp16"),
}

# Scheduler settings that change the math away from what builder.pipeline.schedule computes.
UNSUPPORTED_SCHEDULER_FLAGS = (
    "use_karras_sigmas",
    "use_exponential_sigmas",
    "use_beta_sigmas",
    "invert_sigmas",
    "stochastic_sampling",
)


@dataclass(frozen=True)
class Models:
    """Stage 2's output: the graph of each component and how to open a session on it."""

    model_dir: Path
    repo: manifest.Manifest
    graphs: dict[str, manifest.GraphEntry]
    onnxruntime: Any

    @contextmanager
    def session(self, component: str) -> Iterator[Session]:
        with _open_session(self.onnxruntime, self.model_dir, self.graphs[component]) as session:
            yield session


def load_models(model_dir: Path, plan: InputPlan, variants: Mapping[str, str], *, log: Callable[[str], None]) -> Models:
    """Stage 2: the graph of each component (the VAE encoder too when there are input images), checked against the
    size and this machine's memory, its files verified before any session exists."""
    # onnxruntime is imported here and in check/bench/ort_timing.py (the bench's GPU timing), nowhere else in builder/.
    import onnxruntime

    repo = local.open_folder(model_dir, log=log)
    components = manifest.COMPONENTS + (("vae_encoder",) if plan.mode != "text" else ())
    graphs = {component: choose_graph(repo, component, variants.get(component)) for component in components}
    capacity.check_size(
        graphs["transformer"],
        plan.width,
        plan.height,
        reference_tokens=plan.reference_tokens,
        encoder_runs=plan.encoder_runs,
        encoder_blocks=graphs["vae_encoder"].attention_query_blocks if plan.encoder_runs else 1,
    )
    verify_repo(model_dir, repo, graphs, log=log)
    check_scheduler_config(model_dir)
    log("reference: graphs " + ", ".join(f"{g.path}" for g in graphs.values()))
    return Models(model_dir, repo, graphs, onnxruntime)


def parse_variants(pairs: Sequence[str]) -> dict[str, str]:
    """`COMPONENT=VARIANT` pairs (the CLI's --variant) as a mapping; a component the pipeline does not run, or a
    pair without `=`, is refused with the accepted form."""
    pinned: dict[str, str] = {}
    for pair in pairs:
        component, sep, variant = pair.partition("=")
        if not sep or not variant or component not in VARIANT_PREFERENCE:
            raise InputError(
                f"--variant {pair!r}: give COMPONENT=VARIANT with COMPONENT one of "
                f"{', '.join(VARIANT_PREFERENCE)}, e.g. vae_decoder=fp16."
            )
        pinned[component] = variant
    return pinned


def choose_graph(repo: manifest.Manifest, component: str, pinned: str | None) -> manifest.GraphEntry:
    """The manifest entry to run for `component`: the pinned variant, else the best available one."""
    available = repo.variants(component)
    if component == "vae_encoder" and not available:
        raise ModelRepoError(
            "Editing and inpainting need the VAE encoder, which this model repository lacks (the seed repo on the Hub "
            "has none): use a repository converted by `klein-web convert`."
        )
    if pinned is not None:
        return repo.graph(component, pinned)  # ModelRepoError listing what the repo has
    for variant in VARIANT_PREFERENCE[component]:
        if variant in available:
            return repo.graph(component, variant)
    raise ModelRepoError(
        f"The model repository has no {component} graph the CPU reference can run (it has: "
        f"{', '.join(available) or 'none'}; supported: {', '.join(VARIANT_PREFERENCE[component])})."
    )


def verify_repo(
    model_dir: Path, repo: manifest.Manifest, graphs: Mapping[str, manifest.GraphEntry], *, log: Callable[[str], None]
) -> None:
    """Sizes and sha256 of every file we will read, so a corrupt file fails here, not as a different image."""
    paths = [path for graph in graphs.values() for path in graph.files()]
    others = [*manifest.TOKENIZER_FILES, *manifest.OPTIONAL_TOKENIZER_FILES, manifest.SCHEDULER_CONFIG]
    verify.check_files(model_dir, repo, paths + [p for p in others if p in repo.files], log=log)
    for rel in (*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG):
        if not (model_dir / rel).is_file():
            raise ModelRepoError(
                f"Model file {model_dir / rel} is missing. Run `klein-web fetch` again to complete it."
            )


def check_scheduler_config(model_dir: Path) -> None:
    """The schedule in builder.pipeline.schedule is the one this config describes; refuse any other."""
    path = model_dir / manifest.SCHEDULER_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRepoError(f"{path} is not readable JSON ({exc}); run `klein-web fetch` again.") from exc
    for key, expected in SCHEDULER_CONFIG.items():
        if config.get(key, expected) != expected:
            raise ModelRepoError(f"{path}: `{key}` is {config.get(key)!r}, but klein's sampler needs {expected!r}.")
    for key in UNSUPPORTED_SCHEDULER_FLAGS:
        if config.get(key):
            raise ModelRepoError(f"{path}: `{key}` is set, which the klein reference sampler does not support.")
    if config.get("shift_terminal"):
        raise ModelRepoError(f"{path}: `shift_terminal` is set, which the klein reference sampler does not support.")


class Session:
    """An onnxruntime session that can be dropped while callers still hold this wrapper."""

    def __init__(self, session: Any, path: Path) -> None:
        self._session: Any = session
        self._path = path

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._session is None:
            raise RuntimeError(f"the session of {self._path} was already released")
        return list(self._session.run(outputs, feeds))

    def release(self) -> None:
        self._session = None
        gc.collect()


@contextmanager
def _open_session(onnxruntime: Any, model_dir: Path, graph: manifest.GraphEntry) -> Iterator[Session]:
    """One CPU session for `graph`, released (and its memory returned) when the block ends."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initialisers etc. are noise here
    path = model_dir / graph.path
    try:
        session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ModelRepoError(f"onnxruntime cannot load {path} ({exc}). Re-fetch or re-convert the model.") from exc
    wrapper = Session(session, path)
    del session
    try:
        yield wrapper
    finally:
        wrapper.release()


def model_defaults(model_dir: Path) -> manifest.PipelineDefaults:
    """The model's kind and default steps and guidance (manifest.json `pipeline`), read before any model work; a
    folder without a manifest is the seed repository's layout: distilled klein-4B."""
    if (Path(model_dir) / manifest.MANIFEST_NAME).is_file():
        return manifest.load(Path(model_dir)).pipeline
    return manifest.DISTILLED
