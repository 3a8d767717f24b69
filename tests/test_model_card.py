"""The model card `klein-web convert` writes (builder/repo/model_card.py): README.md whose metadata block the Hub's
library reads back, saying the licence, the origin and the `convert` version and options of the repository."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, metadata_load

from builder.repo.manifest import FileEntry, GraphEntry, LoraEntry, Manifest
from builder.repo.model_card import CARD_NAME, write_model_card

CONVERTER = "klein-web 0.1.0 convert --precision q4f16 --lora style.safetensors:0.8"


def a_manifest() -> Manifest:
    transformer = "transformer/transformer_q4f16.onnx"
    graphs = [
        GraphEntry(
            "transformer", "q4f16", transformer, ["transformer_q4f16.onnx_data"], "q4 MatMulNBits, fp16 compute", [], []
        ),
        GraphEntry("vae_decoder", "fp16", "vae_decoder/vae_decoder_fp16.onnx", [], "fp16", [], []),
    ]
    files = {
        "transformer/transformer_q4f16.onnx": FileEntry(1_000_000, "a" * 64),
        "transformer/transformer_q4f16.onnx_data": FileEntry(2_000_000_000, "b" * 64),
        "vae_decoder/vae_decoder_fp16.onnx": FileEntry(100_000_000, "c" * 64),
    }
    loras = [LoraEntry("style.safetensors", "d" * 64, 0.8)]
    return Manifest("Flux2KleinPipeline (FLUX.2-klein-4B)", CONVERTER, files, graphs, loras=loras)


def a_source(folder: Path, card: str | None) -> Path:
    folder.mkdir(parents=True)
    if card is not None:
        (folder / CARD_NAME).write_text(card)
    return folder


def test_the_card_says_licence_origin_and_how_it_was_made(tmp_path: Path) -> None:
    # A source as `hf download` leaves it in the Hub's cache, with its own card naming its licence.
    snapshot = tmp_path / "hub" / "models--black-forest-labs--FLUX.2-klein-4B" / "snapshots" / "0123abcd"
    src = a_source(snapshot, "---\nlicense: apache-2.0\npipeline_tag: text-to-image\n---\n# FLUX.2 [klein] 4B\n")
    out = tmp_path / "out"
    out.mkdir()
    path = write_model_card(out, a_manifest(), src)
    assert path == out / CARD_NAME
    meta = metadata_load(path)
    assert meta == {
        "license": "apache-2.0",
        "base_model": "black-forest-labs/FLUX.2-klein-4B",
        "base_model_relation": "quantized",
        "pipeline_tag": "text-to-image",
        "tags": ["onnx", "onnxruntime-web", "webgpu", "klein-web", "flux2"],
    }
    card = ModelCard.load(path)  # the Hub's own reader takes it whole
    assert card.data.license == "apache-2.0"
    text = card.text
    assert f"`{CONVERTER}`" in text, "the convert version and options"
    assert "[black-forest-labs/FLUX.2-klein-4B](https://huggingface.co/black-forest-labs/FLUX.2-klein-4B)" in text
    assert "`style.safetensors` at scale 0.8" in text and "d" * 64 in text, "the LoRA merged in"
    assert "keep its licence: `apache-2.0`" in text
    assert "| transformer | q4f16 | q4 MatMulNBits, fp16 compute | 2 | 2.00 |" in text
    assert "3 files, 2.10 GB in all." in text
    assert "?model=https://huggingface.co/<owner>/<name>/resolve/main/" in text


def test_a_source_without_a_card_gets_a_licence_to_fill_in(tmp_path: Path) -> None:
    src = a_source(tmp_path / "my-finetune", None)
    out = tmp_path / "out"
    out.mkdir()
    meta = metadata_load(write_model_card(out, a_manifest(), src))
    assert meta is not None
    assert meta["license"] == "other" and meta["license_name"] == "unknown"
    assert "base_model" not in meta, "a plain folder names no Hub repository"
    text = (out / CARD_NAME).read_text()
    assert "the diffusers folder `my-finetune`" in text
    assert "state it here, and in `license` above, before publishing" in text


def test_convert_writes_the_card_into_the_repository(tiny_models: dict[str, Path]) -> None:
    for name in ("q4", "fp32"):
        meta = metadata_load(tiny_models[name] / CARD_NAME)
        assert meta is not None and meta["pipeline_tag"] == "text-to-image", name
        text = (tiny_models[name] / CARD_NAME).read_text()
        assert f"convert --precision {name}" in text, name
