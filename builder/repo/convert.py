"""`klein-web convert`: a diffusers FLUX.2 [klein] folder -> the ONNX web model repo the app loads.

    SRC (diffusers format)              OUT (the seed repo's layout, builder/repo/manifest.py)
    text_encoder/  (Qwen3ForCausalLM)   text_encoder/text_encoder_{q4|q4f16|fp32}.onnx + .onnx_data, .onnx_data_1, ...
    transformer/   (Flux2Transformer)   transformer/transformer_{q4|q4f16|fp32}.onnx   + data files
    vae/           (AutoencoderKLFlux2) vae_decoder/vae_decoder_fp16.onnx (q4, q4f16) and vae_decoder_fp32.onnx
                                        vae_encoder/vae_encoder_fp16.onnx (q4, q4f16) and vae_encoder_fp32.onnx
                                        vae_decoder/preview_map.json: the step previews' colours, fitted to
                                        the VAE (builder/repo/preview_map.py)

--precision q4f16 writes the q4 graphs too (same packed weights), so one repo serves adapters with and
without shader-f16; the manifest marks the q4f16 graphs requires_f16.
    tokenizer/, scheduler/              copied unchanged
                                        manifest.json (every file with size + sha256, every graph's I/O)

--weights compact|seed: how the q4/q4f16 graphs store their weights (builder.repo.weight_format).

Memory: the checkpoint is never loaded. Each component is built as a skeleton (its classes and config,
placeholder weights: builder.repo.checkpoint), exported without weights, and then its weights are streamed
from the safetensors files one tensor at a time, each stored or quantised as it arrives; so the peak is
about one output graph. The log prints each component's peak RSS next to its graph size. --jobs N builds the
three parts (text encoder, transformer, VAE) in N processes at once (builder.repo.convert_jobs).

OUT is assembled in a temp folder beside it and swapped in at the end: a failed or interrupted
conversion never leaves a half-written repo. With --lora every merged weight is checked to be finite as it is
made, and the transformer graphs written are read back and checked again, before anything at OUT is replaced.

--lora PATH[:SCALE] (repeatable) merges LoRA weights into the transformer before its export and quantisation
(builder.repo.lora); the manifest lists them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from builder import __version__
from builder.errors import ConversionError
from builder.memory import peak_rss_bytes, reset_peak_rss
from builder.repo import lora, preview_map
from builder.repo.attention import recorded_query_blocks
from builder.repo.convert_jobs import choose_jobs, estimated_peak, run_parts
from builder.repo.files import (
    atomic_write_bytes,
    clean_stale_staging,
    ensure_folder,
    make_staging,
    probe_writable,
    replace_folder,
)
from builder.repo.finite_weights import check_finite_graph
from builder.repo.manifest import (
    CONTRACT,
    MANIFEST_NAME,
    GraphEntry,
    LoraEntry,
    Manifest,
    external_data_names,
    graph_path,
    write,
)
from builder.repo.onnx_checks import check_no_float64, check_ops, verify_saved_graph
from builder.repo.onnx_export import Placement
from builder.repo.onnx_graph import DEFAULT_DATA_FILE_CAP, save_graph
from builder.repo.sizes import gigabytes
from builder.repo.verify import describe_files
from builder.repo.weight_format import COMPACT, WeightFormat

PRECISIONS = ("q4", "q4f16", "fp32")
# What `convert` builds from one skeleton each (and, with --jobs, in one process each): the VAE's decoder and
# encoder share theirs, so its buffers are read once.
PARTS = {"text_encoder": ("text_encoder",), "transformer": ("transformer",), "vae": ("vae_decoder", "vae_encoder")}
# The SRC subfolder each component is converted from, and the folders copied unchanged.
SOURCE_FOLDER = {
    "text_encoder": "text_encoder",
    "transformer": "transformer",
    "vae_decoder": "vae",
    "vae_encoder": "vae",
}
# The VAE's halves: small convolutional graphs kept in fp32 and fp16 instead of q4.
VAE_COMPONENTS = ("vae_decoder", "vae_encoder")
COPIED_FOLDERS = ("tokenizer", "scheduler")
SOURCE_FOLDERS = (*SOURCE_FOLDER.values(), *COPIED_FOLDERS)

# A component's export function: given a weight placement (None = fp32), the finished ONNX graph.
Export = Callable[[Placement | None], onnx.ModelProto]

# Both q4 graphs: accuracy_level 4, as the seed card states for the text encoder. The q4 graphs are what
# adapters without shader-f16 run, and there onnxruntime's WebGPU EP runs level 4 as int8 dot products (DP4A,
# given the `subgroups` feature), much faster than its fp32 kernel at the same fidelity (docs/performance.md,
# docs/machines.md). The q4f16 variants reset it to 0 (fp16_compute.to_q4f16).
Q4_ACCURACY_LEVEL = 4


@dataclass(frozen=True)
class SavedGraph:
    component: str
    variant: str
    data_files: list[str]
    precision: str
    requires_f16: bool = False
    cpu_nodes_without_f16: tuple[str, ...] = ()
    attention_query_blocks: int = 1
    attention_max_tokens: int | None = None
    attention_heads: int | None = None
    path: str | None = None  # default: graph_path(component, variant)

    def entry(self) -> GraphEntry:
        inputs, outputs = CONTRACT[self.component]
        return GraphEntry(
            component=self.component,
            variant=self.variant,
            path=self.path or graph_path(self.component, self.variant),
            external_data=list(self.data_files),
            precision=self.precision,
            inputs=inputs,
            outputs=outputs,
            requires_f16=self.requires_f16,
            cpu_nodes_without_f16=list(self.cpu_nodes_without_f16),
            attention_query_blocks=self.attention_query_blocks,
            attention_max_tokens=self.attention_max_tokens,
            attention_heads=self.attention_heads,
        )


def convert(
    src: Path,
    out: Path,
    *,
    precision: str = "q4",
    log: Callable[[str], None],
    max_data_file_bytes: int | Mapping[str, int] = DEFAULT_DATA_FILE_CAP,
    loras: Sequence[lora.LoraSpec] = (),
    weights: WeightFormat = COMPACT,
    jobs: int | None = None,
) -> Manifest:
    """Convert the diffusers pipeline folder SRC into a web model repo at OUT; returns its manifest.

    `loras` are merged into the transformer in order (builder.repo.lora). `weights`: how the q4 and q4f16 graphs
    store their weights (builder.repo.weight_format; the seed repository's layout, or the compact default).

    `jobs`: how many parts (text encoder, transformer, VAE) are built at once, each in its own process
    (builder.repo.convert_jobs; the same bytes whatever the count); None chooses from the free memory.

    `max_data_file_bytes` caps each external-data file (one number, or per component; components missing
    from the mapping get the default 1.8 GB). Tests use small caps to get several files per graph.
    """
    src, out = Path(src), Path(out)
    start = time.monotonic()

    # 1. Check inputs: nothing is written when the source or the destination is wrong.
    model_index = check_source(src)
    check_precision(precision)
    check_destination(out)
    if jobs is not None:
        check_jobs(jobs)
    # LoRAs are read and matched against the transformer now, so a wrong one fails before any graph is built
    # (the transformer's part merges them again into the skeleton it exports).
    merged = [
        LoraEntry(file=item.file, sha256=item.sha256, scale=item.scale)
        for item in prepare_loras(src, loras, log=log).loras
    ]
    peaks = {part: estimated_peak(src / SOURCE_FOLDER[components[0]], precision) for part, components in PARTS.items()}
    jobs = choose_jobs(peaks, jobs, log=log)

    # 2. Write each part's graphs into a staging folder beside OUT (after removing ones a killed run left).
    clean_stale_staging(out.parent, (out.name,), log=log)
    stage = make_staging(out.parent, out.name)
    try:
        work = functools.partial(
            convert_part,
            src,
            precision=precision,
            stage=stage,
            max_data_file_bytes=max_data_file_bytes,
            weights=weights,
            loras=tuple(loras),
        )
        results = run_parts(list(PARTS), work, jobs=jobs, log=log)
        saved: list[SavedGraph] = [graph for part in PARTS for graph in results[part]]

        # The step previews' colour map, fitted to the VAE graphs written above.
        fitted = preview_map.write_fitted(stage, log=log)
        # 3. Tokenizer and scheduler config, unchanged; 4. manifest.json; 5. swap the finished repo in.
        copied = copy_unchanged(src, stage)
        entries = [graph.entry() for graph in saved]
        manifest = Manifest(
            source=f"{model_index.get('_class_name', 'diffusers pipeline')} ({src.resolve().name})",
            converter=f"klein-web {__version__} convert --precision {precision}"
            + (f" --weights {weights.name}" if weights != COMPACT and precision != "fp32" else "")
            + "".join(f" --lora {entry.file}:{entry.scale!r}" for entry in merged),
            files=describe_files(stage, [name for graph in entries for name in graph.files()] + copied + fitted),
            graphs=entries,
            loras=merged,
        )
        write(stage, manifest)
        replace_folder(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log(f"convert: wrote {out} ({precision}) in {time.monotonic() - start:.1f} s")
    return manifest


def convert_part(
    src: Path,
    part: str,
    *,
    precision: str,
    stage: Path,
    max_data_file_bytes: int | Mapping[str, int],
    weights: WeightFormat,
    loras: Sequence[lora.LoraSpec],
    log: Callable[[str], None],
) -> list[SavedGraph]:
    """Write the graphs of one part (PARTS) into `stage`, from one skeleton; returns what it saved."""
    start = time.monotonic()
    module: Any = prepare_loras(src, loras, log=lambda _line: None).skeleton if part == "transformer" else None
    saved: list[SavedGraph] = []
    for component in PARTS[part]:
        cap = (
            max_data_file_bytes.get(component, DEFAULT_DATA_FILE_CAP)
            if isinstance(max_data_file_bytes, Mapping)
            else max_data_file_bytes
        )
        if module is None:
            module = load_skeleton(src, component, log=log)
        graphs = write_graphs(
            exporter(component, module), component, precision, stage, max_data_file_bytes=cap, log=log, weights=weights
        )
        if component == "transformer" and loras:
            # The merged weights as stored, before anything at OUT is replaced (size classes share them).
            for graph in {graph.variant: graph for graph in graphs}.values():
                check_finite_graph(stage / graph.entry().path, what="--lora")
        saved += graphs
        log(f"  {component} done in {time.monotonic() - start:.1f} s")
    return saved


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= len(PARTS):
        raise ConversionError(f"--jobs {jobs}: a conversion has {len(PARTS)} parts; pass 1 to {len(PARTS)}.")


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


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConversionError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}.")


def check_destination(out: Path) -> None:
    """OUT may be missing, empty, or an earlier model repo (replaced); never an unrelated folder."""
    if out.is_symlink():
        raise ConversionError(f"OUT {out} is a symlink; pass the real folder so the link is not replaced.")
    if out.exists() and not out.is_dir():
        raise ConversionError(f"OUT {out} is a file; pass a folder path for the model repo.")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_NAME).is_file():
        raise ConversionError(
            f"OUT {out} is a non-empty folder that is not a model repo (no {MANIFEST_NAME}); "
            "pass a new or empty folder so nothing unrelated is overwritten."
        )
    # The staging folder goes beside OUT: find out now, not after the conversion, that it cannot be written.
    ensure_folder(out.parent, what=f"OUT {out}")
    probe_writable(out.parent, what=f"OUT {out}")


def load_skeleton(src: Path, component: str, *, log: Callable[[str], None]) -> Any:
    """One component as a skeleton (builder.repo.checkpoint): its classes and config, weights left on disk."""
    from builder.repo.checkpoint import Checkpoint, build_skeleton

    folder = src / SOURCE_FOLDER[component]
    log(f"{component}: reading {folder}")
    try:
        return _skeleton(folder, component, Checkpoint(folder), build_skeleton)
    except ConversionError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OSError, OverflowError) as exc:
        # A hand-edited config.json (`"num_layers": "x"`) fails deep inside transformers/diffusers.
        raise ConversionError(
            f"{folder}: its config cannot build a {component} ({type(exc).__name__}: {exc}). "
            "Check config.json against the original checkpoint's."
        ) from exc


def _skeleton(folder: Path, component: str, checkpoint: Any, build_skeleton: Any) -> Any:
    if component == "text_encoder":
        from builder.repo.export_text_encoder import OUT_LAYERS

        return build_skeleton(lambda: text_encoder_from_config(folder, num_layers=max(OUT_LAYERS)), checkpoint)
    import diffusers

    model_class: Any = diffusers.Flux2Transformer2DModel if component == "transformer" else diffusers.AutoencoderKLFlux2
    config = model_class.load_config(folder)
    return build_skeleton(lambda: model_class.from_config(config), checkpoint)


def exporter(component: str, module: Any) -> Export:
    """The export function of `component` for `module` (a skeleton, or a module with weights in memory)."""
    if component == "text_encoder":
        from builder.repo.export_text_encoder import export_text_encoder

        return lambda placement: export_text_encoder(module, placement=placement)
    if component == "transformer":
        from builder.repo.export_transformer import export_transformer

        # Unsplit: write_graphs writes one graph per size class from it (write_size_classes).
        return lambda placement: export_transformer(module, query_blocks=1, placement=placement)
    if component == "vae_encoder":
        from builder.repo.export_vae_encoder import export_vae_encoder

        return lambda _placement: export_vae_encoder(module)
    from builder.repo.export_vae import export_vae

    return lambda _placement: export_vae(module)


def write_graphs(
    export: Export,
    component: str,
    precision: str,
    stage: Path,
    *,
    max_data_file_bytes: int,
    log: Callable[[str], None],
    weights: WeightFormat = COMPACT,
) -> list[SavedGraph]:
    """Export one component and write the graphs a `precision` repo holds into stage/component/, their weights
    stored as `weights` says (q4 and q4f16 repos; an fp32 repo keeps every weight in fp32).

    Each graph is built with its weights stored as they are read (fp32, or quantised to q4 on the fly),
    saved, and freed before the next; a variant derived from another (q4f16 from q4, the fp16 VAE from
    the fp32 one) is read back from the saved files. So the peak is about one graph, never the checkpoint.
    """
    from builder.repo.fp16_compute import to_fp16, to_q4f16
    from builder.repo.fp16_storage import store_fp16

    saved: list[SavedGraph] = []
    start_rss = reset_peak_rss()  # each graph's peak is measured from here, then from the previous save
    halve_storage = weights.fp16_storage and precision != "fp32"

    def save(variant: str, model: onnx.ModelProto, **flags: Any) -> Path:
        nonlocal start_rss
        if halve_storage and variant != "fp16":
            store_fp16(model)
        names = _save_component(model, stage, component, variant, max_data_file_bytes=max_data_file_bytes, log=log)
        saved.append(
            SavedGraph(
                component,
                variant,
                names,
                weights.precision_text(component, variant),
                attention_query_blocks=recorded_query_blocks(model),
                **flags,
            )
        )
        size = graph_bytes(stage, saved[-1].entry())
        log(
            f"  {component}_{variant}: {gigabytes(size)}, peak RSS while building it {gigabytes(peak_rss_bytes())} "
            f"(the process held {gigabytes(start_rss)} before)"
        )
        start_rss = reset_peak_rss()
        return stage / graph_path(component, variant)

    if component in VAE_COMPONENTS:
        # The seed's fp16 VAE, plus the small fp32 one for adapters without shader-f16 (the only one in fp32 repos).
        log(f"{component}: exporting (fp32)")
        fp32 = save("fp32", export(None))
        if precision != "fp32":
            log(f"{component}: fp16 variant")
            save("fp16", to_fp16(onnx.load(str(fp32))), requires_f16=True)
        return saved
    if precision == "fp32":
        log(f"{component}: exporting (fp32)")
        save("fp32", export(None))
        return write_size_classes(saved, stage, log=log)

    log(f"{component}: exporting with q4 weights ({weights.precision_text(component, 'q4')})")
    block_size = weights.block_size[component]
    flags: dict[str, Any] = {}
    if component == "text_encoder":
        from builder.repo.export_text_encoder import embedding_table_name
        from builder.repo.fp16_storage import cast_fp16_embedding
        from builder.repo.quantize import q4_placement

        def table(graph: onnx.ModelProto) -> list[str]:
            return [embedding_table_name(graph)[1]]

        if weights.embedding == "q4":
            model = export(
                q4_placement(
                    accuracy_level=Q4_ACCURACY_LEVEL,
                    block_size=block_size,
                    bits=weights.bits,
                    q4_tables=table,
                    table_block_size=weights.embedding_block,
                )
            )
        else:
            model = export(
                q4_placement(
                    accuracy_level=Q4_ACCURACY_LEVEL, block_size=block_size, bits=weights.bits, fp16_tables=table
                )
            )
            gather_name, table_name = embedding_table_name(model)
            flags = {
                "requires_f16": True,
                "cpu_nodes_without_f16": tuple(
                    cast_fp16_embedding(model, gather_name=gather_name, table_name=table_name)
                ),
            }
    else:
        from builder.repo.export_transformer import q4_excluded_nodes
        from builder.repo.quantize import q4_placement

        exclude = q4_excluded_nodes if weights.adaln == "fp32" else (lambda _graph: ())
        model = export(
            q4_placement(accuracy_level=Q4_ACCURACY_LEVEL, block_size=block_size, bits=weights.bits, exclude=exclude)
        )
    q4 = save("q4", model, **flags)
    del model
    if precision == "q4f16":
        # The same packed q4 weights with fp16 activations and scales. The q4 graph stays in the repo:
        # adapters without shader-f16 run it.
        log(f"{component}: q4f16 variant (fp16 activations and scales, accuracy_level 0)")
        save("q4f16", to_q4f16(onnx.load(str(q4))), requires_f16=True)
    return write_size_classes(saved, stage, log=log)


def write_size_classes(saved: list[SavedGraph], stage: Path, *, log: Callable[[str], None]) -> list[SavedGraph]:
    """Replace each saved transformer graph (exported with its attention unsplit) by one graph per size
    class (builder.repo.attention.size_classes): the same weight files, the attention split just enough for
    that class. The most-split one takes the main path, so a client that reads only the main graph can
    run every size; the others are `<component>_<variant>.qb<N>.onnx`. Other components pass through."""
    from builder.repo.attention import apply_query_blocks, recorded_heads, size_classes

    result = []
    for graph in saved:
        if graph.component != "transformer":
            result.append(graph)
            continue
        main = stage / graph.entry().path
        unsplit = onnx.load(str(main), load_external_data=False)  # the structure only: weights stay in the data files
        sites = sum(node.op_type == "Softmax" for node in unsplit.graph.node)
        heads = recorded_heads(unsplit)
        for rank, (blocks, max_tokens) in enumerate(size_classes(graph.component, heads=heads)):
            path = graph.entry().path if rank == 0 else graph.entry().path.replace(".onnx", f".qb{blocks}.onnx")
            model = onnx.ModelProto()
            model.CopyFrom(unsplit)
            apply_query_blocks(model, query_blocks=blocks, expected_sites=sites)
            atomic_write_bytes(stage / path, model.SerializeToString())
            verify_saved_graph(stage / path, graph.component)
            result.append(
                dataclasses.replace(
                    graph,
                    path=path,
                    attention_query_blocks=blocks,
                    attention_max_tokens=max_tokens,
                    attention_heads=heads,
                )
            )
            log(
                f"  {path}: attention in {blocks} query block(s), up to {max_tokens} tokens "
                f"({(stage / path).stat().st_size / 1e6:.1f} MB, weights shared)"
            )
        del unsplit
    return result


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


def _save_component(
    model: onnx.ModelProto,
    stage: Path,
    component: str,
    variant: str,
    *,
    max_data_file_bytes: int | Mapping[str, int],
    log: Callable[[str], None],
) -> list[str]:
    check_ops(model, component)
    check_no_float64(model, what=f"{component} {variant}")
    folder = stage / component
    cap = (
        max_data_file_bytes.get(component, DEFAULT_DATA_FILE_CAP)
        if isinstance(max_data_file_bytes, Mapping)
        else max_data_file_bytes
    )
    names = save_graph(model, folder, component, variant, max_data_file_bytes=cap, log=log)
    expected = external_data_names(component, variant, len(names))
    if names != expected:  # save_graph names them through manifest.external_data_names; keep them in step
        raise ConversionError(f"Data files {names} do not follow the repo naming {expected}.")
    verify_saved_graph(stage / graph_path(component, variant), component)
    return names


def graph_bytes(stage: Path, graph: GraphEntry) -> int:
    return sum((stage / name).stat().st_size for name in graph.files())
