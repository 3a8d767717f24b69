"""`klein-web convert`: a diffusers FLUX.2 [klein] folder -> the ONNX web model repo the app loads.

    SRC (diffusers format)              OUT (the seed repo's layout, builder/manifest.py)
    text_encoder/  (Qwen3ForCausalLM)   text_encoder/text_encoder_{q4|q4f16|fp32}.onnx + .onnx_data, .onnx_data_1, ...
    transformer/   (Flux2Transformer)   transformer/transformer_{q4|q4f16|fp32}.onnx   + data files
    vae/           (AutoencoderKLFlux2) vae_decoder/vae_decoder_fp16.onnx (q4, q4f16) and vae_decoder_fp32.onnx

--precision q4f16 writes the q4 graphs too (same packed weights), so one repo serves adapters with and
without shader-f16; the manifest marks the q4f16 graphs requires_f16.
    tokenizer/, scheduler/              copied unchanged
                                        manifest.json (every file with size + sha256, every graph's I/O)

One component is loaded, exported, rewritten and written at a time, and freed before the next, so the
peak memory is set by the largest single component. OUT is assembled in a temp folder beside it and
swapped in at the end: a failed or interrupted conversion never leaves a half-written repo.
"""

from __future__ import annotations

import gc
import json
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx

from builder import __version__
from builder.attention import recorded_query_blocks
from builder.errors import ConversionError
from builder.manifest import (
    CONTRACT,
    MANIFEST_NAME,
    GraphEntry,
    Manifest,
    describe_files,
    external_data_names,
    graph_path,
    write,
)
from builder.onnx_graph import DEFAULT_DATA_FILE_CAP, check_no_float64, check_ops, save_graph, verify_saved_graph

PRECISIONS = ("q4", "q4f16", "fp32")
COMPONENT_ORDER = ("text_encoder", "transformer", "vae_decoder")
SOURCE_FOLDERS = ("text_encoder", "transformer", "vae", "tokenizer", "scheduler")
COPIED_FOLDERS = ("tokenizer", "scheduler")

PRECISION_TEXT = {
    ("text_encoder", "q4"): "q4 MatMulNBits (block 32, symmetric, accuracy_level 4); token embedding fp16",
    ("text_encoder", "fp32"): "fp32",
    ("transformer", "q4"): "q4 MatMulNBits (block 32, symmetric); modulation and time-embedding MatMuls, norms, "
    "biases fp32",
    ("transformer", "fp32"): "fp32",
    ("text_encoder", "q4f16"): "q4 MatMulNBits (block 32, symmetric, accuracy_level 0) with fp16 activations and "
    "scales; token embedding fp16; norm statistics, softmax, RoPE fp32; fp32 I/O",
    ("transformer", "q4f16"): "q4 MatMulNBits (block 32, symmetric, accuracy_level 0) with fp16 activations and "
    "scales; modulation, time embedding, norm statistics, softmax, RoPE fp32; fp32 I/O",
    ("vae_decoder", "fp16"): "fp16 weights and compute, fp32 I/O",
    ("vae_decoder", "fp32"): "fp32",
}

# Transformer q4: MatMulNBits with fp32 activations (the seed card gives no accuracy level for it);
# text encoder q4: accuracy_level 4 (int8 activations), as the seed card states.
TEXT_ENCODER_ACCURACY_LEVEL = 4


@dataclass(frozen=True)
class SavedGraph:
    component: str
    variant: str
    data_files: list[str]
    requires_f16: bool = False
    cpu_nodes_without_f16: tuple[str, ...] = ()
    attention_query_blocks: int = 1

    def entry(self) -> GraphEntry:
        inputs, outputs = CONTRACT[self.component]
        return GraphEntry(
            component=self.component,
            variant=self.variant,
            path=graph_path(self.component, self.variant),
            external_data=list(self.data_files),
            precision=PRECISION_TEXT[(self.component, self.variant)],
            inputs=inputs,
            outputs=outputs,
            requires_f16=self.requires_f16,
            cpu_nodes_without_f16=list(self.cpu_nodes_without_f16),
            attention_query_blocks=self.attention_query_blocks,
        )


def convert(
    src: Path,
    out: Path,
    *,
    precision: str = "q4",
    log: Callable[[str], None],
    max_data_file_bytes: int | Mapping[str, int] = DEFAULT_DATA_FILE_CAP,
) -> Manifest:
    """Convert the diffusers pipeline folder SRC into a web model repo at OUT; returns its manifest.

    `max_data_file_bytes` caps each external-data file (one number, or per component; components missing
    from the mapping get the default 1.8 GB). Tests use small caps to get several files per graph.
    """
    return convert_many(src, {precision: Path(out)}, log=log, max_data_file_bytes=max_data_file_bytes)[precision]


def convert_many(
    src: Path,
    outs: Mapping[str, Path],
    *,
    log: Callable[[str], None],
    max_data_file_bytes: int | Mapping[str, int] = DEFAULT_DATA_FILE_CAP,
) -> dict[str, Manifest]:
    """Like `convert`, for several precisions at once ({"q4": OUT1, "fp32": OUT2}): each component is
    loaded and exported once and every precision's variants are derived from that one fp32 graph."""
    src = Path(src)
    start = time.monotonic()

    # 1. Check inputs: nothing is written when the source or a destination is wrong.
    model_index = check_source(src)
    for precision, out in outs.items():
        check_precision(precision)
        check_destination(Path(out))

    # 2. Convert each component into one staging folder per precision, beside its OUT.
    stages: dict[str, Path] = {}
    try:
        for precision, out in outs.items():
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            stages[precision] = Path(tempfile.mkdtemp(dir=Path(out).parent, prefix=f".{Path(out).name}.partial-"))
        saved: dict[str, list[SavedGraph]] = {precision: [] for precision in outs}
        for component in COMPONENT_ORDER:
            fp32_graph = export_component(src, component, log=log)
            query_blocks = recorded_query_blocks(fp32_graph)
            for index, precision in enumerate(outs):
                last = index == len(outs) - 1
                # Rewrites and saving consume the graph's weights, so every precision but the last gets a copy.
                base = fp32_graph if last else _copy(fp32_graph)
                for variant in precision_variants(component, precision, base, log=log):
                    names = _save_component(variant.model, stages[precision], component, variant.variant,
                                            max_data_file_bytes=max_data_file_bytes, log=log)
                    saved[precision].append(SavedGraph(component, variant.variant, names, variant.requires_f16,
                                                       variant.cpu_nodes_without_f16, query_blocks))
                del base
            del fp32_graph
            gc.collect()
            _log_progress(log, component, start)

        # 3. Tokenizer and scheduler config, unchanged; 4. manifest.json; 5. swap each finished repo in.
        manifests: dict[str, Manifest] = {}
        for precision, out in outs.items():
            stage = stages[precision]
            copied = copy_unchanged(src, stage)
            graphs = [graph.entry() for graph in saved[precision]]
            files = [name for graph in graphs for name in graph.files()] + copied
            manifests[precision] = Manifest(
                source=f"{model_index.get('_class_name', 'diffusers pipeline')} ({src.resolve().name})",
                converter=f"klein-web {__version__} convert --precision {precision}",
                files=describe_files(stage, files),
                graphs=graphs,
            )
            write(stage, manifests[precision])
            stage.chmod(0o755)  # mkdtemp makes it private; a model repo is meant to be served
            replace_folder(stage, Path(out))
            log(f"convert: wrote {out} ({precision})")
    except BaseException:
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)
        raise
    log(f"convert: done in {time.monotonic() - start:.1f} s, peak RSS {peak_rss_mb():.0f} MB")
    return manifests


def check_source(src: Path) -> dict[str, object]:
    """SRC must be a diffusers FLUX.2 [klein] pipeline folder; returns its model_index.json."""
    index_path = src / "model_index.json"
    if not index_path.is_file():
        raise ConversionError(
            f"SRC {src} is not a diffusers pipeline folder (no model_index.json). Pass the folder of a "
            "FLUX.2 [klein] checkpoint in diffusers format, e.g. a snapshot of black-forest-labs/FLUX.2-klein-4B."
        )
    try:
        model_index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConversionError(f"SRC {src}: model_index.json is not readable JSON ({exc}).")
    missing = [name for name in SOURCE_FOLDERS if not (src / name).is_dir()]
    if missing:
        raise ConversionError(f"SRC {src} lacks the subfolder(s) {', '.join(missing)} of a Flux2KleinPipeline.")
    if not str(model_index.get("_class_name", "")).startswith("Flux2"):
        raise ConversionError(
            f"SRC {src} holds a {model_index.get('_class_name')!r}, not a FLUX.2 pipeline (Flux2KleinPipeline)."
        )
    return model_index


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConversionError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}.")


def check_destination(out: Path) -> None:
    """OUT may be missing, empty, or an earlier model repo (replaced); never an unrelated folder."""
    if out.exists() and not out.is_dir():
        raise ConversionError(f"OUT {out} is a file; pass a folder path for the model repo.")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_NAME).is_file():
        raise ConversionError(
            f"OUT {out} is a non-empty folder that is not a model repo (no {MANIFEST_NAME}); "
            "pass a new or empty folder so nothing unrelated is overwritten."
        )


@dataclass
class GraphVariant:
    """One graph to save: a variant name, its ONNX model and what the app must know about it."""

    variant: str
    model: onnx.ModelProto
    requires_f16: bool = False
    cpu_nodes_without_f16: tuple[str, ...] = ()


def export_component(src: Path, component: str, *, log: Callable[[str], None]) -> onnx.ModelProto:
    """Load one component in float32, export it to an fp32 ONNX graph, free the torch module."""
    import torch

    log(f"{component}: loading {src}")
    if component == "text_encoder":
        from builder.export_text_encoder import OUT_LAYERS, export_text_encoder

        module = load_text_encoder(src / "text_encoder", num_layers=max(OUT_LAYERS))
        export = export_text_encoder
    elif component == "transformer":
        from diffusers import Flux2Transformer2DModel

        from builder.export_transformer import export_transformer

        module = Flux2Transformer2DModel.from_pretrained(src / "transformer", dtype=torch.float32)
        export = export_transformer
    else:
        from diffusers import AutoencoderKLFlux2

        from builder.export_vae import export_vae

        module = AutoencoderKLFlux2.from_pretrained(src / "vae", dtype=torch.float32)
        export = export_vae
    log(f"{component}: exporting to ONNX")
    model = export(module)
    del module
    gc.collect()
    return model


def precision_variants(component: str, precision: str, model: onnx.ModelProto, *,
                       log: Callable[[str], None]) -> list[GraphVariant]:
    """The graphs a repo of `precision` holds for `component`, derived from its fp32 graph."""
    from builder.quantize import embedding_to_fp16, quantize_q4, to_fp16, to_q4f16

    if precision == "fp32":
        return [GraphVariant("fp32", model)]
    if component in ("text_encoder", "transformer"):
        if component == "text_encoder":
            from builder.export_text_encoder import embedding_table_name

            log("text_encoder: q4 MatMulNBits (accuracy_level 4) + fp16 token embedding")
            gather_name, table_name = embedding_table_name(model)
            quantized = quantize_q4(model, accuracy_level=TEXT_ENCODER_ACCURACY_LEVEL, exclude=[])
            cpu_nodes = tuple(embedding_to_fp16(quantized, gather_name=gather_name, table_name=table_name))
            variants = [GraphVariant("q4", quantized, requires_f16=True, cpu_nodes_without_f16=cpu_nodes)]
        else:
            from builder.export_transformer import q4_excluded_nodes

            log("transformer: q4 MatMulNBits (modulation and time embedding stay fp32)")
            quantized = quantize_q4(model, accuracy_level=None, exclude=q4_excluded_nodes(model))
            variants = [GraphVariant("q4", quantized)]
        if precision == "q4f16":
            # The same packed q4 weights (quantised once), with fp16 activations and scales. The q4 graph
            # is saved too: adapters without shader-f16 run it.
            log(f"{component}: q4f16 (fp16 activations and scales, accuracy_level 0)")
            variants.append(GraphVariant("q4f16", to_q4f16(_copy(quantized)), requires_f16=True))
        return variants
    # The q4 repo ships the seed's fp16 VAE and the small fp32 one for adapters without shader-f16.
    log("vae_decoder: fp16 variant (+ fp32)")
    return [GraphVariant("fp16", to_fp16(_copy(model)), requires_f16=True), GraphVariant("fp32", model)]


def load_text_encoder(folder: Path, *, num_layers: int) -> object:
    """Qwen3ForCausalLM in float32 with only the first `num_layers` decoder layers (the rest is never run)."""
    import torch
    import transformers
    from transformers import AutoConfig, Qwen3ForCausalLM

    config = AutoConfig.from_pretrained(folder)
    if config.num_hidden_layers < num_layers:
        raise ConversionError(
            f"{folder}: the text encoder has {config.num_hidden_layers} layers; the embeddings need {num_layers}.")
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # "weights not used" for the dropped layers is expected
    try:
        return Qwen3ForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32).eval()
    finally:
        transformers.logging.set_verbosity(verbosity)


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


def replace_folder(stage: Path, out: Path) -> None:
    """Move the finished staging folder to OUT, replacing an earlier repo only once the new one is complete."""
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        out.rename(old / "repo")
        stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        stage.rename(out)


def _save_component(model: onnx.ModelProto, stage: Path, component: str, variant: str, *,
                    max_data_file_bytes: int | Mapping[str, int], log: Callable[[str], None]) -> list[str]:
    check_ops(model, component)
    check_no_float64(model, what=f"{component} {variant}")
    folder = stage / component
    cap = (max_data_file_bytes.get(component, DEFAULT_DATA_FILE_CAP) if isinstance(max_data_file_bytes, Mapping)
           else max_data_file_bytes)
    names = save_graph(model, folder, component, variant, max_data_file_bytes=cap, log=log)
    expected = external_data_names(component, variant, len(names))
    if names != expected:  # save_graph names them through manifest.external_data_names; keep them in step
        raise ConversionError(f"Data files {names} do not follow the repo naming {expected}.")
    verify_saved_graph(stage / graph_path(component, variant), component)
    return names


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return clone


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _log_progress(log: Callable[[str], None], what: str, start: float) -> None:
    log(f"  {what} done at {time.monotonic() - start:.1f} s, peak RSS so far {peak_rss_mb():.0f} MB")
