"""A model repository without manifest.json, described from its file names: the seed layout.

The seed repo on the Hub, `kny/FLUX.2-klein-4B-onnx-web`, ships no manifest.json, and a local folder may lack one
too. `klein-web fetch` (builder.repo.hub) and a local folder (builder.repo.local) describe such a repository from
the files it holds: every `{component}/{component}_{variant}.onnx` with its external-data files, and the files
that travel with the graphs (tokenizer, scheduler, licence, the step previews' map).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from builder.errors import ModelRepoError
from builder.repo.manifest import (
    COMPONENTS,
    CONTRACT,
    MANIFEST_NAME,
    OPTIONAL_COMPONENTS,
    PREVIEW_MAP_FILE,
    VARIANTS,
    GraphEntry,
    external_data_names,
    graph_path,
)

# The seed repo on the Hub ships no manifest.json; this is its layout, used by `fetch` and by the app.
SEED_GRAPHS: tuple[tuple[str, str, int, str, bool], ...] = (
    ("text_encoder", "q4", 2, "q4 MatMulNBits (block 32, symmetric, accuracy_level 4); token embedding fp16", True),
    ("transformer", "q4", 2, "q4 MatMulNBits (block 32, symmetric); modulation Gemms, norms, biases fp32", False),
    ("vae_decoder", "fp16", 1, "fp16 weights and compute, fp32 I/O", True),
)


def seed_graphs() -> list[GraphEntry]:
    return [
        GraphEntry(
            component=component,
            variant=variant,
            path=graph_path(component, variant),
            external_data=external_data_names(component, variant, n_data),
            precision=precision,
            inputs=CONTRACT[component][0],
            outputs=CONTRACT[component][1],
            requires_f16=f16,
        )
        for component, variant, n_data, precision, f16 in SEED_GRAPHS
    ]


def seed_layout_graphs(present: Collection[str], *, where: str) -> list[GraphEntry]:
    """The graphs a folder or repo without manifest.json holds in the seed layout (`present`: its file paths).

    Every `{component}/{component}_{variant}.onnx` found (optional components too), with its `.onnx_data`,
    `.onnx_data_1`, ... in order; ModelRepoError when a required component has no graph or data files have gaps.
    """
    seed = {(g.component, g.variant): g for g in seed_graphs()}
    graphs = []
    for component in (*COMPONENTS, *OPTIONAL_COMPONENTS):
        for variant in VARIANTS:
            path = graph_path(component, variant)
            if path not in present:
                continue
            base = f"{component}_{variant}.onnx_data"
            pattern = re.compile(rf"{re.escape(component)}/{re.escape(base)}(?:_([1-9]\d{{0,3}}))?")
            indices = sorted(int(m.group(1) or 0) for rel in present if (m := pattern.fullmatch(rel)))
            if indices != list(range(len(indices))):
                raise ModelRepoError(
                    f"{where}: the external-data files of {component}_{variant}.onnx have gaps: {indices}."
                )
            known = seed.get((component, variant))
            graphs.append(
                GraphEntry(
                    component=component,
                    variant=variant,
                    path=path,
                    external_data=external_data_names(component, variant, len(indices)),
                    precision=known.precision if known else variant,
                    inputs=CONTRACT[component][0],
                    outputs=CONTRACT[component][1],
                    requires_f16=known.requires_f16 if known else variant in ("fp16", "q4f16"),
                    cpu_nodes_without_f16=list(known.cpu_nodes_without_f16) if known else [],
                )
            )
        if component in COMPONENTS and not any(g.component == component for g in graphs):
            raise ModelRepoError(
                f"{where} has no {component} graph ({component}/{component}_<variant>.onnx) and no {MANIFEST_NAME}: "
                "it is not a klein-web model folder. Get one with `klein-web fetch --dir DIR`."
            )
    return graphs


# Files besides the graphs that a seed-layout repo's app needs or that must travel with it (licence terms).
EXTRA_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "NOTICE", "NOTICE.md", "NOTICE.txt")


def seed_layout_files(present: Collection[str], graphs: list[GraphEntry]) -> list[str]:
    """What a seed-layout repo's manifest lists: the graphs' files, tokenizer/*, scheduler/*, the licence and the
    step previews' map when it has one."""
    wanted = {rel for graph in graphs for rel in graph.files()}
    wanted |= {
        rel
        for rel in present
        if rel.startswith(("tokenizer/", "scheduler/")) or rel in EXTRA_FILES or rel == PREVIEW_MAP_FILE
    }
    return sorted(wanted)
