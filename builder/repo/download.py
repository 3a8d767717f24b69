"""Resumable, verified downloads of single files from the Hub, with byte progress (what `klein-web fetch` runs).

Each file goes to `DEST/.fetch/<path>.<hash>.incomplete` first and is resumed there with HTTP Range after a dropped
connection, a Ctrl-C or a crash; only a file whose size and hash match the Hub's is moved into place.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import BinaryIO

from builder.errors import FetchError
from builder.repo import paths
from builder.repo.sizes import gigabytes, megabytes
from builder.repo.verify import Digests, DigestStream

PARTIAL_DIR = ".fetch"  # DEST/.fetch/<path>.<hash>.incomplete holds resumable partial downloads
CHUNK = 1 << 20
RETRIES = 3  # in-run resumptions of one file after a dropped connection
TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 2.0


# The Hub's digests: a file's LFS sha256 and its git blob id (sha1). Both come from the server, so both are checked
# before either becomes part of a partial file's name.
SHA256 = re.compile(r"[0-9a-f]{64}")
GIT_SHA1 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # from LFS metadata
    git_sha1: str | None  # git blob id, checked for non-LFS files

    @property
    def key(self) -> str:
        """A content key, so a partial download of another revision's file is never resumed onto."""
        return (self.sha256 or self.git_sha1 or f"size{self.size}")[:16]


def listing_problem(path: object, size: object, sha256: object, git_sha1: object) -> str | None:
    """Why a server's description of one file cannot be used, or None: every field of it that becomes part of a
    path (its name, its digests) is checked like a path of ours first."""
    reason = paths.unsafe_reason(path)
    if reason is not None:
        return reason
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"has no size in bytes (got {size!r}), so it cannot be verified"
    if sha256 is not None and not (isinstance(sha256, str) and SHA256.fullmatch(sha256)):
        return f"has an LFS sha256 {sha256!r} that is not 64 hexadecimal digits"
    if git_sha1 is not None and not (isinstance(git_sha1, str) and GIT_SHA1.fullmatch(git_sha1)):
        return f"has a blobId {git_sha1!r} that is not 40 hexadecimal digits"
    return None


def partial_path(dest: Path, remote_file: RemoteFile) -> Path:
    """DEST/.fetch/<path>.<key>.incomplete, refused (ModelRepoError) unless it stays inside DEST/.fetch."""
    problem = listing_problem(remote_file.path, remote_file.size, remote_file.sha256, remote_file.git_sha1)
    if problem is not None:
        raise FetchError(f"{remote_file.path!r} {problem}; refusing to download it.")
    return paths.inside(dest, f"{PARTIAL_DIR}/{remote_file.path}.{remote_file.key}.incomplete", what="partial file")


def clean_stale_partials(dest: Path, wanted: list[RemoteFile], *, log: Callable[[str], None]) -> None:
    """Delete partial downloads no wanted file resumes (another revision's, a file the repo dropped)."""
    partial_root = dest / PARTIAL_DIR
    if partial_root.is_symlink() or not partial_root.is_dir():
        return
    keep = {partial_path(dest, remote_file) for remote_file in wanted}
    stale = [p for p in partial_root.rglob("*") if (p.is_file() or p.is_symlink()) and p not in keep]
    if stale:
        size = sum(p.lstat().st_size for p in stale)
        for path in stale:
            path.unlink(missing_ok=True)
        log(f"fetch: removed {len(stale)} stale partial download(s) ({megabytes(size)}) from {partial_root}")
    remove_empty_partial_dir(dest)


def have_bytes(dest: Path, remote_file: RemoteFile) -> int:
    """Bytes of this file already on disk: all of it when the final file has the right size, else the partial."""
    final = dest / remote_file.path
    if final.is_file() and final.stat().st_size == remote_file.size:
        return remote_file.size
    partial = partial_path(dest, remote_file)
    return min(partial.stat().st_size, remote_file.size) if partial.is_file() else 0


def download(repo: str, commit: str, remote_file: RemoteFile, dest: Path, progress: Progress) -> Digests:
    """Make `dest/path` the verified remote file; returns its digests (sha256 and its blocks', for the manifest).
    Resumes a partial file when there is one."""
    final = paths.inside(dest, remote_file.path, what="file")
    if final.is_file() and final.stat().st_size == remote_file.size:
        digest = _verify(final, remote_file)
        if digest is not None:
            progress.file_done(remote_file.size)
            return digest
        final.unlink()  # same size, wrong content: fetch it again
    partial = partial_path(dest, remote_file)
    partial.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(RETRIES + 1):
        have = partial.stat().st_size if partial.is_file() else 0
        if have >= remote_file.size:
            break
        try:
            _transfer(repo, commit, remote_file, partial, have, progress)
            break
        except urllib.error.HTTPError as exc:
            if exc.code not in (408, 429, 500, 502, 503, 504) or attempt == RETRIES:
                raise FetchError(
                    f"The Hub refused {remote_file.path} (HTTP {exc.code} {exc.reason}). "
                    "Run the same command again later to resume."
                ) from exc
            progress.log(f"fetch: {remote_file.path}: HTTP {exc.code}; retrying ({attempt + 1}/{RETRIES})")
        except (urllib.error.URLError, HTTPException, OSError) as exc:  # network only: file errors are FetchError
            if attempt == RETRIES:
                kept = partial.stat().st_size if partial.is_file() else 0
                raise FetchError(
                    f"Connection lost while downloading {remote_file.path} ({type(exc).__name__}: {exc}). "
                    f"{megabytes(kept)} of it are kept; run the same command again to resume."
                ) from exc
            progress.log(f"fetch: {remote_file.path}: {type(exc).__name__}: {exc}; resuming ({attempt + 1}/{RETRIES})")
        time.sleep(min(0.5 * 2.0**attempt, 4.0))
    digest = _verify(partial, remote_file)
    if digest is None:
        partial.unlink()
        raise FetchError(
            f"{remote_file.path} failed its size or hash check after download and was deleted. Run the "
            "same command again to download it anew."
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, final)
    progress.file_done(remote_file.size)
    return digest


def _transfer(repo: str, commit: str, remote_file: RemoteFile, partial: Path, start: int, progress: Progress) -> None:
    """Append the bytes from `start` on to `partial` (HTTP Range), raising network errors as they come."""
    from huggingface_hub import hf_hub_url

    # huggingface_hub.utils exports build_hf_headers lazily: a plain import without `as` or __all__, which
    # mypy's strict mode does not count as a re-export.
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    request = urllib.request.Request(hf_hub_url(repo, remote_file.path, revision=commit))
    for key, value in build_hf_headers().items():
        if key.lower() == "authorization":
            request.add_unredirected_header(key, value)  # never forwarded to the CDN a redirect points at
        else:
            request.add_header(key, value)
    request.add_header("Accept-Encoding", "identity")
    if start:
        request.add_header("Range", f"bytes={start}-")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        if start and response.status != 206:
            start = 0  # the server ignored the Range header: start over
        received = start
        with _open_partial(partial, start) as handle:
            while chunk := response.read1(CHUNK):  # what has arrived, so partial files grow steadily
                _write(handle, chunk, partial)
                received += len(chunk)
                progress.advance(len(chunk), remote_file.path, received, remote_file.size)
    if received != remote_file.size:
        raise HTTPException(f"the server sent {received} of {remote_file.size} bytes")


def _open_partial(partial: Path, start: int) -> BinaryIO:
    try:
        handle = open(partial, "r+b" if start else "wb")  # noqa: SIM115 - the caller's `with` closes it
        handle.seek(start)
        handle.truncate()
        return handle
    except OSError as exc:
        raise FetchError(f"Cannot write {partial} ({exc}). Check the folder's permissions and free space.") from exc


def _write(handle: BinaryIO, chunk: bytes, partial: Path) -> None:
    try:
        handle.write(chunk)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise FetchError(
                f"The disk filled up while writing {partial}. Free space, then run the same command again to resume."
            ) from exc
        raise FetchError(f"Cannot write {partial} ({exc}).") from exc


def _verify(path: Path, remote_file: RemoteFile) -> Digests | None:
    """The file's digests (verify.Digests: sha256 and its blocks') when size and the Hub's hash agree, else None."""
    if path.stat().st_size != remote_file.size:
        return None
    digests = DigestStream()
    git_sha1 = hashlib.sha1(f"blob {remote_file.size}\0".encode())  # the git blob id of the content
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK * 4):
            digests.update(block)
            git_sha1.update(block)
    made = digests.digests()
    if remote_file.sha256 is not None:
        ok = made.sha256 == remote_file.sha256
    else:
        ok = remote_file.git_sha1 is None or git_sha1.hexdigest() == remote_file.git_sha1
    return made if ok else None


def remove_empty_partial_dir(dest: Path) -> None:
    partial_root = dest / PARTIAL_DIR
    if not partial_root.is_dir():
        return
    for folder in sorted((p for p in partial_root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(partial_root.iterdir()):
        partial_root.rmdir()


class Progress:
    """Overall bytes, rate and ETA, logged at most every PROGRESS_EVERY_S seconds and at the end of each file."""

    def __init__(self, *, total: int, log: Callable[[str], None]) -> None:
        self.total = total
        self.log = log
        self.done = 0  # bytes of finished files, including ones already on disk
        self.transferred = 0  # bytes received in this run (for the rate)
        self.start = time.monotonic()
        self.last = 0.0

    def file_done(self, size: int) -> None:
        self.done += size

    def advance(self, count: int, path: str, received: int, size: int) -> None:
        self.transferred += count
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and received < size:
            return
        self.last = now
        done = self.done + received
        rate = self.transferred / max(now - self.start, 1e-6)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        self.log(
            f"fetch: {path} {megabytes(received)}/{megabytes(size)} | total {gigabytes(done)}/"
            f"{gigabytes(self.total)} ({100 * done / max(self.total, 1):.0f}%) {rate / 1e6:.1f} MB/s, "
            f"ETA {_duration(eta)}"
        )


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
