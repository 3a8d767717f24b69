"""Checking model files against their manifest: sizes always, sha256 through a cache so repeat runs are fast.

A file's sha256 (and its blocks', manifest.Blocks) is remembered in a small JSON cache keyed by its real path, size,
mtime_ns, ctime_ns and inode; any write to the file changes its ctime (which, unlike the mtime, cannot be set back),
so a changed file is hashed again. The cache lives in the user's cache folder (`$KLEIN_WEB_CACHE_DIR/sha256.json`,
else `$XDG_CACHE_HOME/klein-web/sha256.json`, default `~/.cache/...`), not in the model folder, which may be
read-only or served. It is only a shortcut: every entry is type-checked when read, a cache that does not parse is
ignored (and rewritten), and it is written atomically, so concurrent runs can at worst lose entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from builder.errors import KleinWebError, ModelRepoError
from builder.repo import paths as repo_paths
from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import BLOCK_SIZE, MANIFEST_NAME, Blocks, FileEntry, Manifest
from builder.repo.sizes import gigabytes

PROGRESS_EVERY_S = 2.0
PROGRESS_MIN_BYTES = 200 * 1000 * 1000  # hashing less than this takes under a second: no progress lines
CACHE_VERSION = 2  # 2: each entry has its blocks' digests too
SHA256 = re.compile(r"[0-9a-f]{64}")

Log = Callable[[str], None]


def cache_path() -> Path:
    """$KLEIN_WEB_CACHE_DIR/sha256.json, else $XDG_CACHE_HOME/klein-web/sha256.json (default ~/.cache)."""
    own = os.environ.get("KLEIN_WEB_CACHE_DIR")
    if own:
        return Path(own) / "sha256.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "klein-web" / "sha256.json"


STAMP_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")


def _stamp(path: Path) -> dict[str, int]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


@dataclass(frozen=True)
class Digests:
    """A file's SHA-256, and the SHA-256 of each of its BLOCK_SIZE blocks (manifest.Blocks)."""

    sha256: str
    blocks: Blocks


def _cached_blocks(value: object) -> Blocks | None:
    if not (isinstance(value, dict) and value.get("size") == BLOCK_SIZE and isinstance(value.get("sha256"), list)):
        return None
    digests = value["sha256"]
    if not all(isinstance(d, str) and SHA256.fullmatch(d) for d in digests):
        return None
    return Blocks(size=BLOCK_SIZE, sha256=tuple(digests))


class HashCache:
    """realpath -> {size, mtime_ns, ctime_ns, ino, sha256, blocks}; an entry counts only while every stamp still
    matches."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self.entries: dict[str, dict[str, object]] = {}
        self.changed = False
        try:
            data = json.loads(self.path.read_bytes().decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return  # none yet, or corrupt: start empty
        if (
            not isinstance(data, dict)
            or data.get("version") != CACHE_VERSION
            or not isinstance(data.get("files"), dict)
        ):
            return
        for key, entry in data["files"].items():
            if (
                isinstance(key, str)
                and isinstance(entry, dict)
                and all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool) for k in STAMP_KEYS)
                and isinstance(entry.get("sha256"), str)
                and SHA256.fullmatch(entry["sha256"])
                and _cached_blocks(entry.get("blocks")) is not None
            ):
                self.entries[key] = entry

    def get(self, path: Path) -> Digests | None:
        entry = self.entries.get(os.path.realpath(path))
        if entry is None:
            return None
        try:
            stamp = _stamp(path)
        except OSError:
            return None
        blocks = _cached_blocks(entry["blocks"])
        if blocks is None or not all(entry[k] == v for k, v in stamp.items()):
            return None
        return Digests(sha256=str(entry["sha256"]), blocks=blocks)

    def put(self, path: Path, stamp: dict[str, int], digests: Digests) -> None:
        blocks = {"size": digests.blocks.size, "sha256": list(digests.blocks.sha256)}
        self.entries[os.path.realpath(path)] = {**stamp, "sha256": digests.sha256, "blocks": blocks}
        self.changed = True

    def remember(self, path: Path, digests: Digests) -> None:
        """Record digests computed elsewhere (as a file was written) for `path` as it is now."""
        self.put(path, _stamp(path), digests)

    def save(self) -> None:
        if not self.changed:
            return
        live = {}
        for key, entry in self.entries.items():  # drop files that are gone or changed, so the cache stays small
            try:
                if all(entry[k] == v for k, v in _stamp(Path(key)).items()):
                    live[key] = entry
            except OSError:
                pass
        # A read-only home only costs speed.
        with contextlib.suppress(KleinWebError):
            atomic_write_bytes(
                self.path, json.dumps({"version": CACHE_VERSION, "files": live}).encode("utf-8"), what="hash cache"
            )
        self.changed = False


class HashProgress:
    """Bytes hashed, rate and ETA, like `fetch` logs its downloads."""

    def __init__(self, total: int, log: Log) -> None:
        self.total, self.log, self.done = total, log, 0
        self.start = self.last = time.monotonic()
        self.quiet = total < PROGRESS_MIN_BYTES

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.quiet or (now - self.last < PROGRESS_EVERY_S and self.done < self.total):
            return
        self.last = now
        rate = self.done / max(now - self.start, 1e-6)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        self.log(
            f"sha256: {gigabytes(self.done)}/{gigabytes(self.total)} ({100 * self.done / max(self.total, 1):.0f}%)"
            f" {rate / 1e6:.0f} MB/s, ETA {eta:.0f} s"
        )


class DigestStream:
    """A file's Digests, fed its bytes in order, in pieces of any size. The whole file's digest is fed on a second
    thread while this one feeds the block digests (hashlib lets go of the GIL), so both cost about what one does."""

    def __init__(self) -> None:
        self.whole = hashlib.sha256()
        self.block = hashlib.sha256()
        self.filled = 0
        self.blocks: list[str] = []
        self.pool = ThreadPoolExecutor(max_workers=1)

    def update(self, data: bytes) -> None:
        whole = self.pool.submit(self.whole.update, data)
        view = memoryview(data)
        while view:
            piece = view[: BLOCK_SIZE - self.filled]
            self.block.update(piece)
            self.filled += len(piece)
            view = view[len(piece) :]
            if self.filled == BLOCK_SIZE:
                self.blocks.append(self.block.hexdigest())
                self.block, self.filled = hashlib.sha256(), 0
        whole.result()

    def digests(self) -> Digests:
        """The digests of the bytes fed so far (the stream is done with)."""
        self.pool.shutdown()
        blocks = [*self.blocks, self.block.hexdigest()] if self.filled else self.blocks
        return Digests(sha256=self.whole.hexdigest(), blocks=Blocks(BLOCK_SIZE, tuple(blocks)))


def file_digests(path: Path, progress: HashProgress | None = None) -> Digests:
    """The file's SHA-256 and its blocks', in one read."""
    stream = DigestStream()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK_SIZE):
            stream.update(block)
            if progress is not None:
                progress.advance(len(block))
    return stream.digests()


def hashes(files: Iterable[Path], *, log: Log, cache: HashCache | None = None) -> dict[Path, Digests]:
    """The digests of each file, from the cache where its stamp still matches, else read (with progress)."""
    cache = cache or HashCache()
    result: dict[Path, Digests] = {}
    todo: list[tuple[Path, dict[str, int]]] = []
    for path in files:
        cached = cache.get(path)
        if cached is not None:
            result[path] = cached
        else:
            todo.append((path, _stamp(path)))
    if todo:
        total = sum(stamp["size"] for _p, stamp in todo)
        progress = HashProgress(total, log)
        if not progress.quiet:
            log(
                f"sha256: checking {len(todo)} file(s), {gigabytes(total)} (remembered for the next runs in "
                f"{cache.path})"
            )
        for path, stamp in todo:
            digest = file_digests(path, progress)
            result[path] = digest
            if _stamp(path) == stamp:  # unchanged while we read it
                cache.put(path, stamp, digest)
        cache.save()
    return result


def complete_files(repo_dir: Path, manifest: Manifest) -> list[str]:
    """The listed files that are present with the manifest's size (what a still-downloading folder already has)."""
    complete = []
    for rel, entry in sorted(manifest.files.items()):
        full = repo_paths.inside(Path(repo_dir), rel, what="model file")
        if full.is_file() and full.stat().st_size == entry.size:
            complete.append(rel)
    return complete


def check_files(
    repo_dir: Path, manifest: Manifest, rels: list[str] | None = None, *, log: Log, check_sha256: bool = True
) -> None:
    """Every listed file exists with the manifest's size and sha256. Raises ModelRepoError naming the file."""
    repo_dir = Path(repo_dir)
    rels = sorted(manifest.files) if rels is None else list(rels)
    located: dict[str, Path] = {}
    for rel in rels:
        entry = manifest.files.get(rel)
        if entry is None:
            raise ModelRepoError(f"{rel} is not listed in {repo_dir / MANIFEST_NAME}; the manifest is stale.")
        full = repo_paths.inside(repo_dir, rel, what="model file")
        if not full.is_file():
            raise ModelRepoError(f"Model file {full} is missing. Run `klein-web fetch` again to complete the folder.")
        size = full.stat().st_size
        if size != entry.size:
            raise ModelRepoError(
                f"Model file {full} has {size} bytes but the manifest says {entry.size}: it is truncated or "
                "corrupt. Delete it and run `klein-web fetch` again (or re-convert the model)."
            )
        located[rel] = full
    if not check_sha256:
        return
    wanted = {rel: full for rel, full in located.items() if manifest.files[rel].sha256}
    digests = hashes(wanted.values(), log=log)
    for rel, full in wanted.items():
        expected = manifest.files[rel].sha256
        if digests[full].sha256 != expected:
            raise ModelRepoError(
                f"Model file {full} fails its sha256 check: the manifest says {expected}, the file has "
                f"{digests[full].sha256}. It is corrupt or was changed: delete it and run `klein-web fetch` again, "
                "or re-convert the model with `klein-web convert`."
            )


def describe_files(
    repo_dir: Path, rels: list[str], *, with_sha256: bool = True, log: Log = lambda _m: None
) -> dict[str, FileEntry]:
    """Size (and sha256, with its blocks') of each repo-relative path, for a manifest."""
    located = {rel: repo_paths.inside(Path(repo_dir), rel, what="model file") for rel in sorted(rels)}
    if not with_sha256:
        return {rel: FileEntry(size=full.stat().st_size) for rel, full in located.items()}
    digests = hashes(located.values(), log=log)
    return {
        rel: FileEntry(size=full.stat().st_size, sha256=digests[full].sha256, blocks=digests[full].blocks)
        for rel, full in located.items()
    }
