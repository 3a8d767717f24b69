"""A local model folder as every command opens it: with its manifest.json, or in the seed layout without one.

`hf download kny/FLUX.2-klein-4B-onnx-web --local-dir DIR` gives the seed layout with no manifest.json (the Hub repo
has none). Such a folder works like one `klein-web fetch` wrote: its manifest is built in memory from the files
present, with their sizes and sha256 read from the files themselves (said in a log line, since nothing then
vouches for the content), through the same layout rules `fetch` uses for a Hub repo without manifest.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from builder import __version__
from builder.errors import ModelRepoError
from builder.repo import manifest, seed_layout, verify

Log = Callable[[str], None]


def present_files(repo_dir: Path) -> list[str]:
    """Repo-relative paths of the regular files in `repo_dir`, hidden names and outward symlinks left out."""
    root = os.path.realpath(repo_dir)
    found = []
    for folder, dirs, names in os.walk(repo_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith("."):
                continue
            full = os.path.join(folder, name)
            real = os.path.realpath(full)
            if os.path.commonpath([real, root]) == root and os.path.isfile(real):
                found.append(Path(full).relative_to(repo_dir).as_posix())
    return sorted(found)


def has_seed_layout(repo_dir: Path) -> bool:
    present = set(present_files(repo_dir))
    return all(any(manifest.graph_path(c, v) in present for v in manifest.VARIANTS) for c in manifest.COMPONENTS)


def open_folder(repo_dir: Path, *, log: Log) -> manifest.Manifest:
    """The folder's manifest: manifest.json validated, or one built from a seed-layout folder's files."""
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise ModelRepoError(
            f"Model folder {repo_dir} does not exist. Create one with `klein-web fetch --dir {repo_dir}`."
        )
    if (repo_dir / manifest.MANIFEST_NAME).exists():
        return manifest.load(repo_dir)
    present = present_files(repo_dir)
    if not has_seed_layout(repo_dir):
        raise ModelRepoError(
            f"{repo_dir} is not a model folder: it has no {manifest.MANIFEST_NAME} and not the seed layout "
            "(text_encoder/text_encoder_q4.onnx, transformer/transformer_q4.onnx, vae_decoder/vae_decoder_fp16.onnx "
            f"+ data, tokenizer/, scheduler/). Get one with `klein-web fetch --dir {repo_dir}`."
        )
    graphs = seed_layout.seed_layout_graphs(set(present), where=str(repo_dir))
    rels = seed_layout.seed_layout_files(present, graphs)
    missing = [rel for rel in (*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG) if rel not in rels]
    missing += [rel for graph in graphs for rel in graph.files() if rel not in present]
    if missing:
        raise ModelRepoError(
            f"{repo_dir} (seed layout, no {manifest.MANIFEST_NAME}) lacks {', '.join(missing)}. "
            f"Complete it with `klein-web fetch --dir {repo_dir}`."
        )
    log(f"no {manifest.MANIFEST_NAME}: sizes and hashes taken from the files in {repo_dir}")
    return manifest.Manifest(
        source=f"local folder {repo_dir.resolve()}",
        converter=f"unknown (seed layout without {manifest.MANIFEST_NAME}, described by klein-web {__version__})",
        files=verify.describe_files(repo_dir, rels, log=log),
        graphs=graphs,
    )


def open_and_check(repo_dir: Path, *, log: Log, rels: list[str] | None = None) -> manifest.Manifest:
    """`open_folder`, then sizes and sha256 of `rels` (default: every listed file) checked against it."""
    repo = open_folder(repo_dir, log=log)
    verify.check_files(repo_dir, repo, rels, log=log)
    return repo
