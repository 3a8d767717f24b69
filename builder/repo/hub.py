"""`klein-web fetch`: download a web model repository from the Hugging Face Hub, resumably, and write its manifest.

1. Ask the Hub for the revision's commit and every file's size and hashes (`HfApi.model_info(files_metadata=True)`).
2. Pick what the app needs: the repo's manifest.json when it has one, else the graphs found in the seed layout
   (`{component}/{component}_{variant}.onnx` + `.onnx_data*`), plus tokenizer/*, scheduler/* and the licence.
3. Check free disk space for what is still missing, before downloading anything.
4. Download file by file from `/{repo}/resolve/{commit}/{path}` into `DEST/.fetch/` partial files, resuming
   them with HTTP Range after a dropped connection, a Ctrl-C or a crash; log bytes, rate and ETA.
5. Verify each file's size and hash (LFS sha256, or the git blob sha1 of small files), move it into place.
6. Write manifest.json last, so a folder with a manifest is always complete.

Why not `hf_hub_download`: huggingface_hub 2.x downloads into a per-process temporary file and deletes it when
the download fails or is interrupted, so a 5.6 GB download could not resume across runs. Metadata, URLs and
auth headers still come from huggingface_hub; the bytes travel over the standard library's urllib.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import BinaryIO

from builder import __version__
from builder.errors import FetchError, KleinWebError
from builder.repo import manifest

PARTIAL_DIR = ".fetch"  # DEST/.fetch/<path>.<hash>.incomplete holds resumable partial downloads
EXTRA_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "NOTICE", "NOTICE.md", "NOTICE.txt")
CHUNK = 1 << 20
RETRIES = 3  # in-run resumptions of one file after a dropped connection
TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 2.0


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


def fetch(repo: str, *, revision: str, dest: Path, log: Callable[[str], None]) -> Path:
    """Download `repo` at `revision` into `dest` and write `dest/manifest.json`. Returns `dest`."""
    dest = Path(dest)
    try:
        # 1. Commit and file metadata
        commit, remote = _repo_files(repo, revision)
        log(f"fetch: {repo} @ {revision} = commit {commit[:12]}, {len(remote)} files in the repo")

        # 2. What the app needs
        repo_manifest = _remote_manifest(repo, commit, remote, dest) if manifest.MANIFEST_NAME in remote else None
        graphs = repo_manifest.graphs if repo_manifest else _seed_layout_graphs(repo, remote)
        wanted = _wanted_files(repo, remote, graphs, repo_manifest)

        # 3. Disk space for what is not there yet
        missing_bytes = sum(f.size - _have_bytes(dest, f) for f in wanted)
        _check_disk_space(dest, missing_bytes)
        total = sum(f.size for f in wanted)
        log(f"fetch: {len(wanted)} files, {_gb(total)} in all, {_gb(missing_bytes)} to download into {dest}")

        # 4 + 5. Download and verify (the old manifest goes first: the folder is incomplete until step 6)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / manifest.MANIFEST_NAME).unlink(missing_ok=True)
        progress = _Progress(total=total, log=log)
        sha256: dict[str, str] = {}
        for index, remote_file in enumerate(wanted, 1):
            log(f"fetch: [{index}/{len(wanted)}] {remote_file.path} ({_mb(remote_file.size)})")
            sha256[remote_file.path] = _download(repo, commit, remote_file, dest, progress)

        # 6. Manifest, written atomically and only now
        files = {f.path: manifest.FileEntry(size=f.size, sha256=sha256[f.path]) for f in wanted}
        result = manifest.Manifest(
            source=f"{repo}@{commit}",
            converter=repo_manifest.converter if repo_manifest else "unknown (Hub repo without manifest.json; "
            f"seed layout assumed by klein-web {__version__} fetch)",
            files=files,
            graphs=graphs,
        )
        manifest.write(dest, result)
        _remove_empty_partial_dir(dest)
        log(f"fetch: done, {_gb(total)} verified in {dest}")
        return dest
    except KeyboardInterrupt:
        raise FetchError(
            f"Download interrupted. Partial files are kept in {dest / PARTIAL_DIR}; run the same `klein-web fetch` "
            "command again to resume."
        ) from None


# --------------------------------------------------------------------------------------------------------------------
# 1. Metadata
# --------------------------------------------------------------------------------------------------------------------


def _repo_files(repo: str, revision: str) -> tuple[str, dict[str, RemoteFile]]:
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = constants.ENDPOINT
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError as exc:
        raise FetchError(f"Repository {repo!r} is gated: accept its terms on the Hub and log in with `hf auth login`.") from exc
    except RepositoryNotFoundError as exc:
        raise FetchError(
            f"Repository {repo!r} was not found on {endpoint}. Check the name (e.g. kny/FLUX.2-klein-4B-onnx-web); "
            "if it is private, log in with `hf auth login`."
        ) from exc
    except RevisionNotFoundError as exc:
        raise FetchError(
            f"Revision {revision!r} does not exist in {repo!r}. Use a branch, tag or commit of that repository "
            "(the default is main)."
        ) from exc
    except HFValidationError as exc:
        raise FetchError(f"{repo!r} is not a valid repository id ({exc}); it looks like owner/name.") from exc
    except HfHubHTTPError as exc:
        raise FetchError(f"The Hub at {endpoint} answered with an error for {repo!r}: {exc}. Try again later.") from exc
    except Exception as exc:  # connection refused, DNS, TLS, timeouts, offline mode: all "cannot reach"
        raise FetchError(
            f"Cannot reach the Hub at {endpoint} ({type(exc).__name__}: {exc}). Check your network connection, "
            "proxy settings or HF_ENDPOINT, then run the command again."
        ) from exc
    if not info.sha or info.siblings is None:
        raise FetchError(f"The Hub at {endpoint} returned no commit or file list for {repo!r} @ {revision!r}.")
    files = {}
    for sibling in info.siblings:
        if sibling.size is None:
            raise FetchError(f"The Hub returned no size for {sibling.rfilename} in {repo!r}; cannot verify it.")
        files[sibling.rfilename] = RemoteFile(
            path=sibling.rfilename,
            size=int(sibling.size),
            sha256=sibling.lfs["sha256"] if sibling.lfs else None,
            git_sha1=sibling.blob_id,
        )
    return info.sha, files


# --------------------------------------------------------------------------------------------------------------------
# 2. What the app needs
# --------------------------------------------------------------------------------------------------------------------


def _remote_manifest(repo: str, commit: str, remote: dict[str, RemoteFile], dest: Path) -> manifest.Manifest:
    """Download and parse the repo's own manifest.json (in a temp folder: it is not ours to claim completeness)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".manifest-") as tmp:
        _download(repo, commit, remote[manifest.MANIFEST_NAME], Path(tmp), _Progress(total=0, log=lambda _m: None))
        try:
            return manifest.load(Path(tmp))
        except KleinWebError as exc:
            raise FetchError(f"The manifest.json of {repo!r} cannot be used: {exc}") from exc


def _seed_layout_graphs(repo: str, remote: dict[str, RemoteFile]) -> list[manifest.GraphEntry]:
    """Graphs present in a repo without manifest, described like builder.repo.manifest.seed_graphs()."""
    seed = {(g.component, g.variant): g for g in manifest.seed_graphs()}
    graphs = []
    for component in manifest.COMPONENTS:
        for variant in manifest.VARIANTS:
            path = manifest.graph_path(component, variant)
            if path not in remote:
                continue
            data = _external_data(component, variant, remote)
            known = seed.get((component, variant))
            graphs.append(manifest.GraphEntry(
                component=component,
                variant=variant,
                path=path,
                external_data=data,
                precision=known.precision if known else variant,
                inputs=manifest.CONTRACT[component][0],
                outputs=manifest.CONTRACT[component][1],
                requires_f16=known.requires_f16 if known else variant in ("fp16", "q4f16"),
                cpu_nodes_without_f16=list(known.cpu_nodes_without_f16) if known else [],
            ))
        if not any(g.component == component for g in graphs):
            raise FetchError(
                f"{repo!r} has no {component} graph ({component}/{component}_<variant>.onnx): it is not a klein-web "
                "model repository. The default is kny/FLUX.2-klein-4B-onnx-web."
            )
    return graphs


def _external_data(component: str, variant: str, remote: dict[str, RemoteFile]) -> list[str]:
    """`name.onnx_data`, `name.onnx_data_1`, ... as present in the repo, in order and without gaps."""
    base = f"{component}_{variant}.onnx_data"
    pattern = re.compile(rf"{re.escape(component)}/{re.escape(base)}(?:_(\d+))?")
    indices = sorted(int(m.group(1) or 0) for path in remote if (m := pattern.fullmatch(path)))
    if indices != list(range(len(indices))):
        raise FetchError(f"The external-data files of {component}_{variant}.onnx on the Hub have gaps: {indices}.")
    return manifest.external_data_names(component, variant, len(indices))


def _wanted_files(
    repo: str, remote: dict[str, RemoteFile], graphs: list[manifest.GraphEntry], repo_manifest: manifest.Manifest | None
) -> list[RemoteFile]:
    paths = {path for graph in graphs for path in graph.files()}
    paths |= {p for p in remote if p.startswith(("tokenizer/", "scheduler/")) or p in EXTRA_FILES}
    if repo_manifest is not None:
        paths |= set(repo_manifest.files)
    missing = sorted(p for p in paths | {*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG} if p not in remote)
    if missing:
        raise FetchError(f"{repo!r} lacks files the app needs: {', '.join(missing)}.")
    if repo_manifest is not None:
        for path, entry in repo_manifest.files.items():
            if entry.size != remote[path].size:
                raise FetchError(f"{repo!r}: manifest.json says {path} has {entry.size} bytes, the Hub says "
                                 f"{remote[path].size}. The repository is inconsistent; ask its maintainer.")
    # Small files first: a quick failure on a config is better than after 5 GB.
    return sorted((remote[p] for p in paths), key=lambda f: (f.size, f.path))


# --------------------------------------------------------------------------------------------------------------------
# 3. Disk space
# --------------------------------------------------------------------------------------------------------------------


def _have_bytes(dest: Path, remote_file: RemoteFile) -> int:
    """Bytes of this file already on disk: all of it when the final file has the right size, else the partial."""
    final = dest / remote_file.path
    if final.is_file() and final.stat().st_size == remote_file.size:
        return remote_file.size
    partial = _partial_path(dest, remote_file)
    return min(partial.stat().st_size, remote_file.size) if partial.is_file() else 0


def _check_disk_space(dest: Path, needed: int) -> None:
    probe = dest
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the nearest existing folder is on the disk DEST will be on
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise FetchError(
            f"Not enough disk space in {dest}: the download needs {_gb(needed)} more, but only {_gb(free)} is free. "
            "Free some space or choose another folder with --dir."
        )


# --------------------------------------------------------------------------------------------------------------------
# 4 + 5. Download with resume, verify
# --------------------------------------------------------------------------------------------------------------------


def _partial_path(dest: Path, remote_file: RemoteFile) -> Path:
    return dest / PARTIAL_DIR / f"{remote_file.path}.{remote_file.key}.incomplete"


def _download(repo: str, commit: str, remote_file: RemoteFile, dest: Path, progress: _Progress) -> str:
    """Make `dest/path` the verified remote file; returns its sha256. Resumes a partial file when there is one."""
    final = dest / remote_file.path
    if final.is_file() and final.stat().st_size == remote_file.size:
        digest = _verify(final, remote_file)
        if digest is not None:
            progress.file_done(remote_file.size)
            return digest
        final.unlink()  # same size, wrong content: fetch it again
    partial = _partial_path(dest, remote_file)
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
                raise FetchError(f"The Hub refused {remote_file.path} (HTTP {exc.code} {exc.reason}). "
                                 "Run the same command again later to resume.") from exc
            progress.log(f"fetch: {remote_file.path}: HTTP {exc.code}; retrying ({attempt + 1}/{RETRIES})")
        except (urllib.error.URLError, HTTPException, OSError) as exc:  # network only: file errors are FetchError
            if attempt == RETRIES:
                kept = partial.stat().st_size if partial.is_file() else 0
                raise FetchError(
                    f"Connection lost while downloading {remote_file.path} ({type(exc).__name__}: {exc}). "
                    f"{_mb(kept)} of it are kept; run the same command again to resume."
                ) from exc
            progress.log(f"fetch: {remote_file.path}: {type(exc).__name__}: {exc}; resuming ({attempt + 1}/{RETRIES})")
        time.sleep(min(0.5 * 2.0**attempt, 4.0))
    digest = _verify(partial, remote_file)
    if digest is None:
        partial.unlink()
        raise FetchError(f"{remote_file.path} failed its size or hash check after download and was deleted. Run the "
                         "same command again to download it anew.")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, final)
    progress.file_done(remote_file.size)
    return digest


def _transfer(repo: str, commit: str, remote_file: RemoteFile, partial: Path, start: int, progress: _Progress) -> None:
    """Append the bytes from `start` on to `partial` (HTTP Range), raising network errors as they come."""
    from huggingface_hub import hf_hub_url
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
            raise FetchError(f"The disk filled up while writing {partial}. Free space, then run the same command "
                             "again to resume.") from exc
        raise FetchError(f"Cannot write {partial} ({exc}).") from exc


def _verify(path: Path, remote_file: RemoteFile) -> str | None:
    """The file's sha256 when size and the Hub's hash agree, else None."""
    if path.stat().st_size != remote_file.size:
        return None
    sha256 = hashlib.sha256()
    git_sha1 = hashlib.sha1(f"blob {remote_file.size}\0".encode())  # the git blob id of the content
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK * 4):
            sha256.update(block)
            git_sha1.update(block)
    if remote_file.sha256 is not None:
        ok = sha256.hexdigest() == remote_file.sha256
    else:
        ok = remote_file.git_sha1 is None or git_sha1.hexdigest() == remote_file.git_sha1
    return sha256.hexdigest() if ok else None


def _remove_empty_partial_dir(dest: Path) -> None:
    partial_root = dest / PARTIAL_DIR
    if not partial_root.is_dir():
        return
    for folder in sorted((p for p in partial_root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(partial_root.iterdir()):
        partial_root.rmdir()


# --------------------------------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------------------------------


class _Progress:
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
        self.log(f"fetch: {path} {_mb(received)}/{_mb(size)} | total {_gb(done)}/{_gb(self.total)} "
                 f"({100 * done / max(self.total, 1):.0f}%) {rate / 2**20:.1f} MB/s, ETA {_duration(eta)}")


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def _gb(size: int) -> str:
    return f"{size / 2**30:.2f} GB"


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
