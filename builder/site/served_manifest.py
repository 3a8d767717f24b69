"""The manifest `serve` builds for a model folder without manifest.json, kept in step with the folder's files.

A seed-layout folder (`hf download` of the Hub repo) has no manifest.json, so serve describes its files itself
(sizes and sha256 read from them: builder.repo.local). The files may change while serve runs (a new download, a
file replaced by hand); a manifest describing the old files would make a returning visitor's cached model look
current and a new visitor's download fail its checksums. So each request for the manifest first compares the
folder's files (names, sizes, modification and change times, inodes) with those the manifest was built from, and
rebuilds it when any differ. Rebuilding hashes the files again (seconds for GBs of weights), so it runs in a worker
thread, one check at a time; the requests that come meanwhile wait on the event loop, holding no worker thread (the
files' reads need those), and take the outcome of the first check that starts after they came.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from starlette.concurrency import run_in_threadpool

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
        self.turn = asyncio.Lock()  # one check at a time; the others wait for it on the event loop
        self.checks = 0  # checks started so far
        self.files = fingerprint(root)
        self.body = manifest.to_bytes(first)
        self.problem: str | None = None  # why the last check found no model folder

    async def current(self) -> bytes:
        """The manifest of the files there now (ModelRepoError when they no longer make a model folder)."""
        asked = self.checks
        async with self.turn:
            if self.checks == asked:  # no check began since this request came: the files may have changed since
                self.checks += 1
                await run_in_threadpool(self.check)
            if self.problem is not None:
                raise ModelRepoError(self.problem)
            return self.body

    def check(self) -> None:
        """Compare the files with those described; describe them again when they differ (in a worker thread)."""
        now = fingerprint(self.root)
        if now == self.files:  # the files the body describes (put back as they were, if they had changed)
            self.problem = None
            return
        self.log(
            f"models: the files in {self.root} changed; describing them again for /models/{manifest.MANIFEST_NAME}"
        )
        try:
            loaded = local.open_folder(self.root, log=self.log)
        except ModelRepoError as exc:
            self.problem = (
                f"the model folder {self.root} changed and is no longer complete: {exc} Complete it, then reload "
                "the page."
            )
            return
        self.body = manifest.to_bytes(loaded)
        self.problem = None
        self.files = now  # as seen before hashing: a change made during the hashing shows next time
