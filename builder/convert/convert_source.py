"""SRC, the diffusers FLUX.2 [klein] folder `klein-web convert` reads: checked, each component built as a skeleton
(its classes and config; weights stay on disk, builder.convert.checkpoint), the --lora files merged into the
transformer's, and tokenizer/ and scheduler/ copied as they are.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.convert import lora
from builder.errors import ConversionError

# The SRC subfolder each component is converted from, and the folders copied unchanged.
SOURCE_FOLDER = {
    "text_encoder": "text_encoder",
    "transformer": "transformer",
    "vae_decoder": "vae",
    "vae_encoder": "vae",
}
COPIED_FOLDERS = ("tokenizer", "scheduler")
SOURCE_FOLDERS = (*SOURCE_FOLDER.values(), *COPIED_FOLDERS)


@dataclass
class PreparedLoras:
    """The LoRAs read, and the transformer skeleton they were merged into (None without LoRAs)."""

    loras: list[lora.Lora]
    skeleton: Any = None


def prepare_loras(src: Path, specs: Sequence[lora.LoraSpec], *, log: Callable[[str], None]) -> PreparedLoras:
    """Read each --lora file and merge it into a transformer skeleton (nothing is read from the checkpoint yet:
    the deltas are added as each base weight is streamed in during the export)."""
    if not specs:
        return PreparedLoras([])
    loras = []
    for spec in specs:
        loaded = lora.load(spec, log=log)
        log(
            f"LoRA {spec.path}: {loaded.format} format, {len(loaded.pairs)} layer(s), scale {spec.scale:g}, "
            f"sha256 {loaded.sha256[:12]}"
        )
        loras.append(loaded)
    skeleton = load_skeleton(src, "transformer", log=log)
    count = lora.merge(skeleton, loras)
    log(f"transformer: {len(loras)} LoRA(s) merged into {count} Linear layer(s)")
    return PreparedLoras(loras, skeleton)


def check_source(src: Path) -> dict[str, object]:
    """SRC must be a diffusers FLUX.2 [klein] pipeline folder; returns its model_index.json."""
    index_path = src / "model_index.json"
    if not index_path.is_file():
        raise ConversionError(
            f"SRC {src} is not a diffusers pipeline folder (no model_index.json). Pass the folder of a "
            "FLUX.2 [klein] checkpoint in diffusers format, e.g. a snapshot of black-forest-labs/FLUX.2-klein-4B."
        )
    try:
        model_index: dict[str, object] = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConversionError(f"SRC {src}: model_index.json is not readable JSON ({exc}).") from exc
    missing = [name for name in SOURCE_FOLDERS if not (src / name).is_dir()]
    if missing:
        raise ConversionError(f"SRC {src} lacks the subfolder(s) {', '.join(missing)} of a Flux2KleinPipeline.")
    if not str(model_index.get("_class_name", "")).startswith("Flux2"):
        raise ConversionError(
            f"SRC {src} holds a {model_index.get('_class_name')!r}, not a FLUX.2 pipeline (Flux2KleinPipeline)."
        )
    return model_index


def load_skeleton(src: Path, component: str, *, log: Callable[[str], None]) -> Any:
    """One component as a skeleton (builder.convert.checkpoint): its classes and config, weights left on disk."""
    from builder.convert.checkpoint import Checkpoint, build_skeleton

    folder = src / SOURCE_FOLDER[component]
    log(f"{component}: reading {folder}")
    with config_errors(folder, component):
        return build_skeleton(model_factory(folder, component), Checkpoint(folder))


def check_config(src: Path, component: str) -> None:
    """Fails as load_skeleton would when `component`'s config cannot build its model, reading no tensor (every
    parameter lands on the meta device)."""
    from builder.convert.checkpoint import parameters_on_meta

    folder = src / SOURCE_FOLDER[component]
    with config_errors(folder, component), parameters_on_meta():
        model_factory(folder, component)()


@contextmanager
def config_errors(folder: Path, component: str) -> Iterator[None]:
    """A hand-edited config.json (`"num_layers": "x"`) fails deep inside transformers/diffusers: say which."""
    try:
        yield
    except ConversionError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OSError, OverflowError) as exc:
        raise ConversionError(
            f"{folder}: its config cannot build a {component} ({type(exc).__name__}: {exc}). "
            "Check config.json against the original checkpoint's."
        ) from exc


def model_factory(folder: Path, component: str) -> Callable[[], Any]:
    """What builds `component`'s model from the config in `folder` (weights uninitialised)."""
    if component == "text_encoder":
        from builder.convert.export_text_encoder import OUT_LAYERS

        return lambda: text_encoder_from_config(folder, num_layers=max(OUT_LAYERS))
    import diffusers

    model_class: Any = diffusers.Flux2Transformer2DModel if component == "transformer" else diffusers.AutoencoderKLFlux2
    config = model_class.load_config(folder)
    return lambda: model_class.from_config(config)


def text_encoder_from_config(folder: Path, *, num_layers: int) -> Any:
    """Qwen3ForCausalLM built from its config with only the first `num_layers` decoder layers (the rest
    is never run); weights are not loaded (see load_skeleton)."""
    from transformers import AutoConfig, Qwen3ForCausalLM

    config = AutoConfig.from_pretrained(folder)
    if config.num_hidden_layers < num_layers:
        raise ConversionError(
            f"{folder}: the text encoder has {config.num_hidden_layers} layers; the embeddings need {num_layers}."
        )
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    return Qwen3ForCausalLM(config)


def copy_unchanged(src: Path, stage: Path) -> list[str]:
    """Copy tokenizer/ and scheduler/ byte for byte; returns the repo-relative paths."""
    copied: list[str] = []
    for folder in COPIED_FOLDERS:
        for path in sorted((src / folder).rglob("*")):
            if path.is_file():
                rel = path.relative_to(src).as_posix()
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, stage / rel)
                copied.append(rel)
    return copied
