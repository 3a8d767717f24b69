"""`klein-web fetch`: download a web model repository from the Hugging Face Hub, resumably, and write its manifest.

0. Check that DEST can be written and holds nothing but a model repository (builder.repo.fetch_dest), before the
   Hub is asked anything.
1. Ask the Hub for the revision's commit and every file's size and hashes (`HfApi.model_info(files_metadata=True)`).
   Each listed name, and each digest that names a partial file, must pass builder.repo.paths' checks
   (download.listing_problem), so a hostile mirror cannot make us write outside DEST.
2. Pick what the app needs: the repo's manifest.json when it has one, else the graphs found in the seed layout
   (`{component}/{component}_{variant}.onnx` + `.onnx_data*`), plus tokenizer/*, scheduler/* and the licence.
3. Remove partial downloads no wanted file resumes (another revision's, left by a killed run), then check free
   disk space for what is still missing, before downloading anything.
4. Download file by file from `/{repo}/resolve/{commit}/{path}` into `DEST/.fetch/` partial files, resuming
   them with HTTP Range after a dropped connection, a Ctrl-C or a crash; log bytes, rate and ETA
   (builder.repo.download).
5. Verify each file's size and hash (LFS sha256, or the git blob sha1 of small files), move it into place.
6. Write manifest.json last, so a folder with a manifest is always complete.

Why not `hf_hub_download`: huggingface_hub 2.x downloads into a per-process temporary file and deletes it when
the download fails or is interrupted, so a 5.6 GB download could not resume across runs. Metadata, URLs and
auth headers still come from huggingface_hub; the bytes travel over the standard library's urllib.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from builder import __version__
from builder.errors import FetchError, KleinWebError, ModelRepoError
from builder.repo import fetch_dest, manifest, seed_layout, verify
from builder.repo.download import (
    PARTIAL_DIR,
    Progress,
    RemoteFile,
    clean_stale_partials,
    download,
    have_bytes,
    listing_problem,
    remove_empty_partial_dir,
)
from builder.repo.files import check_output_folder, clean_stale_staging, make_staging
from builder.repo.sizes import gigabytes, megabytes


def fetch(repo: str, *, revision: str, dest: Path, log: Callable[[str], None]) -> Path:
    """Download `repo` at `revision` into `dest` and write `dest/manifest.json`. Returns `dest`."""
    dest = Path(dest)
    try:
        # 0. The folder must be ours (or new) and writable before anything is asked of the Hub.
        fetch_dest.check_destination(dest)
        check_output_folder(dest, what="--dir")
        clean_stale_staging(dest, ("manifest",), log=log)

        # 1. Commit and file metadata
        commit, remote = _repo_files(repo, revision)
        log(f"fetch: {repo} @ {revision} = commit {commit[:12]}, {len(remote)} files in the repo")

        # 2. What the app needs
        repo_manifest = _remote_manifest(repo, commit, remote, dest) if manifest.MANIFEST_NAME in remote else None
        graphs = repo_manifest.graphs if repo_manifest else _seed_layout_graphs(repo, remote)
        wanted = _wanted_files(repo, remote, graphs, repo_manifest)

        # 3. Disk space for what is not there yet (after removing partial files no wanted file will resume)
        fetch_dest.mark(dest)
        clean_stale_partials(dest, wanted, log=log)
        missing_bytes = sum(f.size - have_bytes(dest, f) for f in wanted)
        _check_disk_space(dest, missing_bytes)
        total = sum(f.size for f in wanted)
        log(
            f"fetch: {len(wanted)} files, {gigabytes(total)} in all, {gigabytes(missing_bytes)} to download into {dest}"
        )

        # 4 + 5. Download and verify (the old manifest goes first: the folder is incomplete until step 6)
        (dest / manifest.MANIFEST_NAME).unlink(missing_ok=True)
        progress = Progress(total=total, log=log)
        digests: dict[str, verify.Digests] = {}
        for index, remote_file in enumerate(wanted, 1):
            log(f"fetch: [{index}/{len(wanted)}] {remote_file.path} ({megabytes(remote_file.size)})")
            digests[remote_file.path] = download(repo, commit, remote_file, dest, progress)

        # 6. Manifest, written atomically and only now, with each file's block hashes (for the app's downloader).
        # The digests are remembered, so the next command's check of the folder reads nothing again.
        cache = verify.HashCache()
        for path, made in digests.items():
            cache.remember(dest / path, made)
        cache.save()
        files = {
            f.path: manifest.FileEntry(size=f.size, sha256=digests[f.path].sha256, blocks=digests[f.path].blocks)
            for f in wanted
        }
        result = manifest.Manifest(
            source=f"{repo}@{commit}",
            converter=repo_manifest.converter
            if repo_manifest
            else f"unknown (Hub repo without manifest.json; seed layout assumed by klein-web {__version__} fetch)",
            files=files,
            graphs=graphs,
            loras=repo_manifest.loras if repo_manifest else [],
        )
        manifest.write(dest, result)
        remove_empty_partial_dir(dest)
        log(f"fetch: done, {gigabytes(total)} verified in {dest}")
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
        raise FetchError(
            f"Repository {repo!r} is gated: accept its terms on the Hub and log in with `hf auth login`."
        ) from exc
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
        sha256 = sibling.lfs.get("sha256") if sibling.lfs else None
        # A hostile mirror (or HF_ENDPOINT) must not make us write outside --dir: every field that becomes part of
        # a path (the name, the digests naming partial files) is checked first.
        reason = listing_problem(sibling.rfilename, sibling.size, sha256, sibling.blob_id)
        if reason is not None:
            raise FetchError(
                f"The Hub at {endpoint} lists a file {sibling.rfilename!r} in {repo!r} that {reason}; "
                "refusing to download from it. Check HF_ENDPOINT."
            )
        assert sibling.size is not None  # listing_problem checked it
        files[sibling.rfilename] = RemoteFile(
            path=sibling.rfilename, size=sibling.size, sha256=sha256, git_sha1=sibling.blob_id
        )
    return info.sha, files


# --------------------------------------------------------------------------------------------------------------------
# 2. What the app needs
# --------------------------------------------------------------------------------------------------------------------


def _remote_manifest(repo: str, commit: str, remote: dict[str, RemoteFile], dest: Path) -> manifest.Manifest:
    """Download and parse the repo's own manifest.json (in a temp folder: it is not ours to claim completeness)."""
    tmp = make_staging(dest, "manifest")
    try:
        download(repo, commit, remote[manifest.MANIFEST_NAME], tmp, Progress(total=0, log=lambda _m: None))
        try:
            return manifest.load(tmp)
        except KleinWebError as exc:
            raise FetchError(f"The manifest.json of {repo!r} cannot be used: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _seed_layout_graphs(repo: str, remote: dict[str, RemoteFile]) -> list[manifest.GraphEntry]:
    """Graphs present in a repo without manifest: the layout rules local seed-layout folders use too."""
    try:
        return seed_layout.seed_layout_graphs(set(remote), where=repr(repo))
    except ModelRepoError as exc:
        raise FetchError(f"{exc} The default is kny/FLUX.2-klein-4B-onnx-web.") from exc


def _wanted_files(
    repo: str, remote: dict[str, RemoteFile], graphs: list[manifest.GraphEntry], repo_manifest: manifest.Manifest | None
) -> list[RemoteFile]:
    paths = set(seed_layout.seed_layout_files(remote, graphs))
    if repo_manifest is not None:
        paths |= set(repo_manifest.files)
    missing = sorted(p for p in paths | {*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG} if p not in remote)
    if missing:
        raise FetchError(f"{repo!r} lacks files the app needs: {', '.join(missing)}.")
    if repo_manifest is not None:
        for path, entry in repo_manifest.files.items():
            if entry.size != remote[path].size:
                raise FetchError(
                    f"{repo!r}: manifest.json says {path} has {entry.size} bytes, the Hub says "
                    f"{remote[path].size}. The repository is inconsistent; ask its maintainer."
                )
    # Small files first: a quick failure on a config is better than after 5 GB.
    return sorted((remote[p] for p in paths), key=lambda f: (f.size, f.path))


# --------------------------------------------------------------------------------------------------------------------
# 3. Disk space
# --------------------------------------------------------------------------------------------------------------------


def _check_disk_space(dest: Path, needed: int) -> None:
    probe = dest
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the nearest existing folder is on the disk DEST will be on
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise FetchError(
            f"Not enough disk space in {dest}: the download needs {gigabytes(needed)} more, but only "
            f"{gigabytes(free)} is free. Free some space or choose another folder with --dir."
        )
