"""Which folder `klein-web fetch --dir` may write into: never one holding someone else's files.

fetch replaces manifest.json, tokenizer/*, scheduler/* and the graphs, and removes partial files in `.fetch/`, so
DEST must be missing, empty, or a model repository: one an earlier fetch marked with MARKER (written before the
first download, so an interrupted fetch resumes), one with a klein-web manifest.json (`fetch` or `convert`
output), the seed layout `hf download` writes, or one holding only what a killed fetch leaves (`.fetch/` with
`*.incomplete` partial files, `.manifest.partial-*` staging folders). Anything else is refused before a byte is
written (builder.repo.owned_folder's rule, which the other commands' output folders follow too).
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.errors import FetchError, KleinWebError
from builder.repo import manifest
from builder.repo.download import PARTIAL_DIR
from builder.repo.owned_folder import Owner

MARKER = ".klein-web-fetch"
LEFTOVER = re.compile(r"\.manifest\.(partial|old)-\d+-\w+")
MARKER_TEXT = "A model repository downloaded by `klein-web fetch`; running it again updates this folder.\n"


def check_path_text(text: str) -> Path:
    """`--dir` as given: an empty value would mean the current folder, which nobody means by it."""
    if not text.strip():
        raise FetchError("--dir is empty; pass the folder to download the model into, e.g. --dir models/klein-4b.")
    return Path(text)


def is_model_repository(dest: Path) -> bool:
    """`dest` holds a klein-web manifest.json, the seed layout, or only what a killed fetch leaves."""
    if (dest / manifest.MANIFEST_NAME).is_file():
        try:
            manifest.load(dest)
            return True
        except KleinWebError:
            return False  # say a web app's manifest.json: its folder is someone's project
    return seed_layout(dest) or only_fetch_leftovers(dest)


OWNER = Owner(MARKER, MARKER_TEXT, "a model repository", earlier=is_model_repository)


def seed_layout(dest: Path) -> bool:
    """Every component's graph is where the seed repo (and `hf download` of it) puts it."""
    return all(
        any((dest / manifest.graph_path(component, variant)).is_file() for variant in manifest.VARIANTS)
        for component in manifest.COMPONENTS
    )


def only_fetch_leftovers(dest: Path) -> bool:
    """`dest` holds nothing but a killed fetch's partial downloads and staging folders."""
    for entry in dest.iterdir():
        if entry.name == PARTIAL_DIR and entry.is_dir() and not entry.is_symlink():
            if any(
                path.is_symlink() or (path.is_file() and not path.name.endswith(".incomplete"))
                for path in entry.rglob("*")
            ):
                return False
        elif not (LEFTOVER.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink()):
            return False
    return True


def check_destination(dest: Path) -> None:
    """FetchError, before anything is written, unless `dest` is missing, empty or a model repository."""
    what = OWNER.why_not(dest)
    if what is None:
        return
    if not dest.is_dir():
        raise FetchError(f"--dir {dest} is {what}; pass a new or empty folder. Nothing was written.")
    raise FetchError(
        f"--dir {dest} is {what}; fetching would overwrite or delete files in it. "
        f"Pass a new or empty folder, e.g. --dir {dest / 'klein-4b'}; nothing was written."
    )


def mark(dest: Path) -> None:
    """Mark `dest` as fetch's, so a later or resumed fetch may update it."""
    OWNER.mark(dest)
