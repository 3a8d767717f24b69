"""Which folders a command may replace or delete files in: new ones, empty ones, and its own.

A command that writes several files into a folder the user names, replacing or deleting what is there
(`fetch --dir`, `regress --report`, `regress-merge OUT`, `build --out`, `serve --dist` when it builds,
`make-tiny OUT`), first asks `Owner.why_not(folder)`. The folder is the command's when it is missing, empty,
carries the command's marker file, or holds the command's earlier output in a form the command recognises (a
klein-web manifest.json, a build record, a regress report.json: outputs written before the marker existed). The
marker is written before the command's first file (`Owner.mark`), so a run interrupted half-way is recognised
when it runs again. Anything else is refused before a byte is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder.repo.files import atomic_write_bytes


def _never(_folder: Path) -> bool:
    return False


@dataclass(frozen=True)
class Owner:
    """One command's claim on its output folders."""

    marker: str  # the file that marks a folder as the command's, e.g. `.klein-web-fetch`
    text: str  # what the marker file says to a person who finds it
    output: str  # what the command's folders are, for messages: "a model repository"
    # An earlier output of the command without the marker (it is recognised by its own files).
    earlier: Callable[[Path], bool] = field(default=_never)

    def why_not(self, folder: Path) -> str | None:
        """None when the command may write into `folder`; else what `folder` is, to put in a one-line refusal."""
        folder = Path(folder)
        if folder.is_symlink() and not folder.is_dir():
            return "a dangling symlink"
        if not folder.exists():
            return None
        if not folder.is_dir():
            return "a file, not a folder"
        try:
            if not any(folder.iterdir()) or (folder / self.marker).is_file() or self.earlier(folder):
                return None
        except OSError as exc:
            return f"a folder that cannot be read ({exc.strerror})"
        return f"a non-empty folder that is not {self.output} (no {self.marker})"

    def mark(self, folder: Path) -> None:
        """Mark `folder` as the command's, before its first file lands there."""
        if not (Path(folder) / self.marker).is_file():
            atomic_write_bytes(Path(folder) / self.marker, self.text.encode("utf-8"), what="marker")
