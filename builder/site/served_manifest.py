"""The manifest `serve` builds for a model folder without manifest.json, kept in step with the folder's files.

A seed-layout folder (`hf download` of the Hub repo) has no manifest.json, so serve describes its files itself
(sizes and sha256 read from them: builder.repo.local). The files may change while serve runs (a new download, a
file replaced by hand); a manifest describing the old files would make a returning visitor's cached model look
current and a new visitor's download fail its checksums. So each request for the manifest first compares the
folder's files (names, sizes, modification and change times, inodes) with those the manifest was built from, and
rebuilds it when any differ. Rebuilding hashes the files again, so it runs in a worker thread, once at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from builder.errors import ModelRepoError
from builder.repo import local, manifest

Fingerprint = tuple[tuple[str, int, int, int, int], ...]


def fingerprint(root: Path) -> Fingerprint:
    """(path, size, mtime_ns, ctime_ns, inode) of every file `local.present_files` lists."""
    entries = []
    for rel in local.present_files(root):
        try:
            info = os.stat(root / rel)
        except OSError:
            continue  # removed meanwhile: its absence is the change
        entries.append((rel, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
    return tuple(entries)


class ServedManifest:
    """The bytes served at /models/manifest.json for a folder without one, rebuilt when its files change."""

    def __init__(self, root: Path, first: manifest.Manifest, *, log: Callable[[str], None]) -> None:
        self.root = root
        self.log = log
        self.lock = threading.Lock()
        self.files = fingerprint(root)
        self.body = manifest.to_bytes(first)

    def current(self) -> bytes:
        """The manifest of the files there now (ModelRepoError when they no longer make a model folder)."""
        with self.lock:
            now = fingerprint(self.root)
            if now != self.files:
                self.log(
                    f"models: the files in {self.root} changed; describing them again for /models/"
                    f"{manifest.MANIFEST_NAME}"
                )
                try:
                    loaded = local.open_folder(self.root, log=self.log)
                except ModelRepoError as exc:
                    raise ModelRepoError(
                        f"the model folder {self.root} changed and is no longer complete: {exc} "
                        "Complete it, then reload the page."
                    ) from None
                self.body = manifest.to_bytes(loaded)
                self.files = now  # as seen before hashing: a change made during the hashing shows next time
            return self.body
