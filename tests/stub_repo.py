"""A model folder that passes every check of a command's start-up (schema, sizes) with tiny placeholder files."""

from __future__ import annotations

from pathlib import Path

from builder.repo import manifest, seed_layout


def write_stub_repo(path: Path) -> Path:
    """The seed layout's files as 2-byte placeholders (existing files are kept) and a manifest recording their sizes
    but no hashes, so start-up checks never read them."""
    graphs = seed_layout.seed_graphs()
    rels = sorted({rel for g in graphs for rel in g.files()} | {*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG})
    for rel in rels:
        if not (path / rel).exists():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(b"{}")
    manifest.write(
        path,
        manifest.Manifest(
            source="test",
            converter="test",
            graphs=graphs,
            files={rel: manifest.FileEntry(size=(path / rel).stat().st_size) for rel in rels},
        ),
    )
    return path
