"""One component's graphs: its export function, the variants a precision asks for (q4, q4f16, fp32, the VAE's
fp16), each saved into the staging folder with its weights stored as --weights says, checked, and for the
transformer one graph per attention size class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from builder.convert.attention import recorded_query_blocks
from builder.convert.onnx_checks import check_no_float64, check_ops, verify_saved_graph
from builder.convert.onnx_export import Placement
from builder.convert.onnx_graph import DEFAULT_DATA_FILE_CAP, save_graph
from builder.convert.weight_format import COMPACT, WeightFormat
from builder.errors import ConversionError
from builder.memory import peak_rss_bytes, reset_peak_rss
from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import CONTRACT, GraphEntry, external_data_names, graph_path
from builder.repo.sizes import gigabytes

# The VAE's halves: small convolutional graphs kept in fp32 and fp16 instead of q4.
VAE_COMPONENTS = ("vae_decoder", "vae_encoder")
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


def exporter(component: str, module: Any) -> Export:
    """The export function of `component` for `module` (a skeleton, or a module with weights in memory)."""
    if component == "text_encoder":
        from builder.convert.export_text_encoder import export_text_encoder

        return lambda placement: export_text_encoder(module, placement=placement)
    if component == "transformer":
        from builder.convert.export_transformer import export_transformer

        # Unsplit: write_graphs writes one graph per size class from it (write_size_classes).
        return lambda placement: export_transformer(module, query_blocks=1, placement=placement)
    if component == "vae_encoder":
        from builder.convert.export_vae_encoder import export_vae_encoder

        return lambda _placement: export_vae_encoder(module)
    from builder.convert.export_vae import export_vae

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
    from builder.convert.fp16_compute import to_fp16, to_q4f16
    from builder.convert.fp16_storage import store_fp16

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
        from builder.convert.export_text_encoder import embedding_table_name
        from builder.convert.fp16_storage import cast_fp16_embedding
        from builder.convert.quantize import q4_placement

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
        from builder.convert.export_transformer import q4_excluded_nodes
        from builder.convert.quantize import q4_placement

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
    class (builder.convert.attention.size_classes): the same weight files, the attention split just enough for
    that class. The most-split one takes the main path, so a client that reads only the main graph can
    run every size; the others are `<component>_<variant>.qb<N>.onnx`. Other components pass through."""
    from builder.convert.attention import apply_query_blocks, recorded_heads, size_classes

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
