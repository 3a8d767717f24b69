"""The model card `klein-web convert` writes into the repository it makes: README.md with the Hub's metadata block
(made by huggingface_hub's ModelCardData) and what anyone who hosts the repository must say about it: the licence
(the source's, read from the source folder's own card), the origin (the source checkpoint, the LoRAs merged in) and
the `convert` version and options that made it, then its graphs and how the app loads them.

Where the source folder is a Hugging Face cache snapshot (`models--ORG--NAME/snapshots/REV`), the card names ORG/NAME
as its base model; otherwise the card names the folder, and the person who uploads the repository adds `base_model`
(docs/deploying.md#a-model-mirror-on-the-hub).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huggingface_hub import ModelCardData, metadata_load

from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import Manifest

CARD_NAME = "README.md"
QUANTIZED = ("q4", "q4f16")
TAGS = ["onnx", "onnxruntime-web", "webgpu", "klein-web", "flux2"]


def source_metadata(src: Path) -> dict[str, Any]:
    """The metadata block of the source folder's own card (README.md); empty when it has none."""
    card = src / CARD_NAME
    try:
        return dict(metadata_load(card) or {}) if card.is_file() else {}
    except (OSError, ValueError):
        return {}


def hub_repo_id(src: Path) -> str | None:
    """ORG/NAME of a Hugging Face cache snapshot folder (`.../models--ORG--NAME/snapshots/REV`), else None."""
    resolved = src.resolve()
    if resolved.parent.name != "snapshots" or not resolved.parent.parent.name.startswith("models--"):
        return None
    parts = resolved.parent.parent.name.removeprefix("models--").split("--")
    return "/".join(parts) if len(parts) == 2 and all(parts) else None


def card_data(manifest: Manifest, src: Path) -> ModelCardData:
    meta = source_metadata(src)
    extra: dict[str, Any] = {key: meta[key] for key in ("license_name", "license_link") if meta.get(key)}
    licence = meta.get("license")
    if not licence:
        licence, extra = "other", {"license_name": "unknown"}
    base = hub_repo_id(src)
    if base:
        extra["base_model"] = base
        if any(graph.variant in QUANTIZED for graph in manifest.graphs):
            extra["base_model_relation"] = "quantized"
    return ModelCardData(license=str(licence), pipeline_tag="text-to-image", tags=TAGS, **extra)


def size_gb(manifest: Manifest, paths: list[str]) -> float:
    return sum(manifest.files[path].size for path in paths if path in manifest.files) / 1e9


def card_text(manifest: Manifest, src: Path) -> str:
    data = card_data(manifest, src)
    base = getattr(data, "base_model", None)
    origin = f"[{base}](https://huggingface.co/{base})" if base else f"the diffusers folder `{src.resolve().name}`"
    licence = str(data.license)
    if licence == "other" and getattr(data, "license_name", None) == "unknown":
        licence_text = (
            f"The source folder has no model card naming its licence. These weights are a conversion of {origin} and "
            "keep its licence: state it here, and in `license` above, before publishing this repository."
        )
    else:
        name = getattr(data, "license_name", None) or licence
        link = getattr(data, "license_link", None)
        licence_text = (
            f"These weights are a conversion of {origin} and keep its licence: `{name}`"
            + (f" ({link})" if link else "")
            + ". The LoRAs merged in, if any, come under their own terms."
        )
    lines = [
        "---",
        data.to_yaml(),
        "---",
        "",
        f"# {manifest.source}, for the browser (ONNX, WebGPU)",
        "",
        (
            f"ONNX graphs of {origin} for onnxruntime-web on WebGPU, written by `klein-web convert`: the text "
            "encoder, the transformer and the VAE, which the klein-web app downloads once into the browser's storage "
            "and runs on the visitor's GPU. `manifest.json` lists every file with its size and SHA-256; the app "
            "checks each file against it."
        ),
        "",
        "## Origin",
        "",
        f"- Source: {manifest.source}, {origin}.",
        f"- Made by: `{manifest.converter}`.",
    ]
    if manifest.loras:
        lines.append("- LoRAs merged into the transformer's weights:")
        lines += [f"  - `{entry.file}` at scale {entry.scale!r} (sha256 `{entry.sha256}`)" for entry in manifest.loras]
    lines += ["", "## Licence", "", licence_text, "", "## Graphs", ""]
    lines += ["| component | variant | precision | files | GB |", "|---|---|---|---|---|"]
    for graph in manifest.graphs:
        files = graph.files()
        lines.append(
            f"| {graph.component} | {graph.variant} | {graph.precision} | {len(files)} | {size_gb(manifest, files):.2f} |"
        )
    total = size_gb(manifest, list(manifest.files))
    lines += [
        "",
        f"{len(manifest.files)} files, {total:.2f} GB in all.",
        "",
        "## Use",
        "",
        "With this repository at `https://huggingface.co/<owner>/<name>`:",
        "",
        "- any klein-web site: open it with `?model=https://huggingface.co/<owner>/<name>/resolve/main/`;",
        "- a site of your own: `klein-web build --model-base https://huggingface.co/<owner>/<name>/resolve/main/`;",
        "- a local copy: `klein-web fetch --repo <owner>/<name> --dir DIR`, then `klein-web serve --models DIR`.",
        "",
    ]
    return "\n".join(lines)


def write_model_card(out: Path, manifest: Manifest, src: Path) -> Path:
    """OUT/README.md for the repository `convert` wrote into OUT from SRC."""
    path = out / CARD_NAME
    atomic_write_bytes(path, card_text(manifest, src).encode("utf-8"))
    return path
