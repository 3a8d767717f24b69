"""The bench's ONNX side: layer chains exported with the converter's own code, and the labels of their graphs.

A label is the variant (q4, q4f16, fp16, fp32), for the transformer and the VAE plus the attention split, and for
a transformer timed as the app runs it plus CAPTURE.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from builder.check.bench.models import Scale, build_text_encoder, build_transformer, build_vae, out_layers

Log = Callable[[str], None]

# The fast variant and the plain variant it is checked against (same weights, same inputs).
FAST_VARIANTS = {"q4f16": "q4", "fp16": "fp32"}


# Label suffix of the transformer timed in a graph-capture session (the app's denoising loop).
CAPTURE = ", graph capture"


def blocks_label(blocks: int) -> str:
    """Label suffix of a graph exported with its attention in `blocks` query blocks (bench only)."""
    return ", attention unsplit" if blocks == 1 else f", attention in {blocks} query blocks"


def plain_label(label: str) -> str | None:
    """'q4f16, attention unsplit' -> 'q4, attention unsplit': the plain graph a fast one is checked against
    (same split); None for a label that is not a fast variant."""
    variant, comma, split = label.partition(",")
    return FAST_VARIANTS[variant] + comma + split if variant in FAST_VARIANTS else None


def export_graphs(
    scale: Scale, component: str, layers: tuple[int, ...] | None, folder: Path, *, precisions: Sequence[str], log: Log
) -> dict[str, Path]:
    """Export one chain (or the VAE), built on the CPU with random weights, with the converter's own
    write_graphs for each precision. Returns {label: graph path}; the label is the variant (q4, q4f16,
    fp16, fp32), for the transformer plus its attention split (one graph per size class, as the converter
    writes them), and for the VAE also an unsplit copy: what the split costs at sizes that fit without it."""
    from builder.convert.convert_graphs import exporter, write_graphs
    from builder.convert.onnx_graph import DEFAULT_DATA_FILE_CAP

    if component == "text_encoder":
        assert layers is not None, "a text-encoder chain has a layer count"
        causal_lm = build_text_encoder(scale, layers[0], device="cpu")
        exports = {"": lambda placement: export_text_chain(causal_lm, layers[0], placement=placement)}
    else:
        from builder.convert.export_vae import export_vae

        module = (
            build_transformer(scale, layers or (), device="cpu")
            if component == "transformer"
            else build_vae(scale, device="cpu")
        )
        exports = {"": exporter(component, module)}
        if component == "vae_decoder":
            exports[blocks_label(1)] = lambda _placement: export_vae(module, query_blocks=1)
    paths: dict[str, Path] = {}
    for suffix, export in exports.items():
        for precision in precisions:
            stage = folder / f"{precision}{suffix.replace(' ', '-').replace(',', '')}"
            for graph in write_graphs(
                export, component, precision, stage, max_data_file_bytes=DEFAULT_DATA_FILE_CAP, log=log
            ):
                entry = graph.entry()
                split = blocks_label(entry.attention_query_blocks) if component == "transformer" else suffix
                # q4f16 repos hold the q4 graph too: time each variant once.
                paths.setdefault(graph.variant + split, stage / entry.path)
    gc.collect()
    return paths


def export_text_chain(causal_lm: Any, layers: int, *, placement: Any = None) -> Any:
    """builder.convert.export_text_encoder.export_text_encoder for a k-layer chain (hidden states k/3, 2k/3, k)."""
    from builder.convert.export_text_encoder import export_text_encoder

    return export_text_encoder(causal_lm, placement=placement, out_layers=out_layers(layers))


def timed_transformers(scale: Scale, sizes: Sequence[int | None], graphs: Mapping[str, Path]) -> set[str]:
    """The transformer graphs worth a device's time: each variant's main graph (every size) and the ones
    the app runs at the bench's sizes; the other size classes only serve sizes the bench does not time."""
    from builder.convert.attention import size_classes

    most = size_classes("transformer", heads=int(scale.transformer["num_attention_heads"]))[0][0]
    variants = {label.split(",")[0] for label in graphs}
    return {v + blocks_label(most) for v in variants} | {app_choice(scale, s, v) for v in variants for s in sizes}


def app_choice(scale: Scale, size: int | None, variant: str) -> str:
    """The label of the transformer graph the app runs at size x size (models.sizeClass): the least-split
    graph of the variant whose attention limit covers the image and text tokens."""
    from builder.convert.attention import size_classes

    tokens = (int(size or 0) // 16) ** 2 + scale.txt_seq
    classes = size_classes("transformer", heads=int(scale.transformer["num_attention_heads"]))
    blocks = min((n for n, limit in classes if limit >= tokens), default=classes[0][0])
    return variant + blocks_label(blocks)


def graph_bytes(path: Path) -> int:
    """Bytes of a saved graph and the external-data files it references (its weights on disk; the
    transformer's size-class graphs reference the main graph's files)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    files = {
        entry.value for tensor in model.graph.initializer for entry in tensor.external_data if entry.key == "location"
    }
    return path.stat().st_size + sum((path.parent / str(name)).stat().st_size for name in files)


def fast_path_fidelity(graphs: Mapping[str, Path], sizes: Sequence[int | None]) -> dict[tuple[str, str], float]:
    """Relative L2 error ||fast - plain|| / ||plain|| of each fast variant's output (saved by ort_timing.time_graph)."""
    import numpy as np

    errors: dict[tuple[str, str], float] = {}
    for fast in graphs:
        plain = plain_label(fast)
        if plain is None or plain not in graphs:
            continue
        for size in sizes:
            paths = [Path(f"{graphs[v].with_suffix('')}-{size}.npy") for v in (fast, plain)]
            if all(p.is_file() for p in paths):
                a, b = (np.load(p).astype(np.float64) for p in paths)
                errors[(fast, str(size))] = float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
    return errors
