"""Writing results safely: regular files only, replaced atomically, with the user's umask; staging folders.

Every file klein-web writes (graphs, manifest.json, PNGs, reports) goes through `atomic_write_bytes`: a temp
file in the same folder, renamed over the target, so a crash never leaves half a file. Renaming over a device
(`--out /dev/full` as root) or a symlink would replace that node itself, so both are refused. mkstemp creates
files 0600; a model folder or report is meant to be read by a web server running as another user, so the
file gets the mode a plain `open()` would give it (0644 under umask 022).

Staging folders (`.NAME.partial-PID-XXXX`, `.NAME.old-PID-XXXX`) carry the id of the process that made them, so
the next run can tell one left behind by a killed process from one a concurrent run is still filling.

A finished folder replaces an earlier one in two renames (`replace_folder`): the earlier one into
`.NAME.old-PID-XXXX/previous`, then the new one into place. At every instant the earlier or the new folder is at
its place or recoverable: an interrupted swap puts the earlier one back, and a killed one leaves it in `previous`,
which the next run's `clean_stale_staging` moves back when nothing took its place (it deletes only what the
finished swap marked `replaced`, or a `previous` whose place holds the very folder the swap moved in).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from builder.errors import OutputError
from builder.repo.sizes import megabytes

# A staging folder without a readable owner (made by another tool version) counts as stale after this long.
STALE_AFTER_S = 15 * 60
STAGING_KINDS = ("partial", "old")
# Inside `.NAME.old-PID-XXXX`: the folder the swap moved aside, renamed to REPLACED once the new one is in place
# (only then is it garbage), and which folder the swap moves in (its device and inode), so the next run can tell.
PREVIOUS = "previous"
REPLACED = "replaced"
SWAP_RECORD = "swap.json"


# Write errors that are the machine's, not the file's: the user can free space or raise a limit and run again.
DISK_ERRORS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file would be larger than the file-size limit (ulimit -f)",
}


def disk_problem(exc: OSError) -> str | None:
    """What a full disk, a used-up quota or the file-size limit (`ulimit -f`) means for `exc`, or None."""
    return DISK_ERRORS.get(exc.errno or 0)


def current_umask() -> int:
    """The process umask. Linux reports it in /proc; elsewhere it can only be read by setting it, which for an
    instant changes it for every thread, so that is the fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_replaceable(path: Path, *, what: str) -> None:
    """`path` may be created or replaced: missing, or a regular file (not a symlink, folder or device)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError as exc:
        raise OutputError(f"{what} {path}: a part of the path above it is a file, not a folder.") from exc
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot be inspected ({exc.strerror}).") from exc
    if stat.S_ISLNK(mode):
        raise OutputError(
            f"{what} {path} is a symlink; klein-web does not replace links. Pass the real path or a new file name."
        )
    if stat.S_ISDIR(mode):
        raise OutputError(f"{what} {path} is a folder; pass a file path, e.g. {Path(path) / 'out.png'}.")
    if not stat.S_ISREG(mode):
        raise OutputError(
            f"{what} {path} is not a regular file (a device, pipe or socket); klein-web only writes "
            "regular files. Pass a file path."
        )


def atomic_write_bytes(path: Path, data: bytes, *, what: str = "output") -> None:
    """Write `data` to the regular file `path` through a temp file + rename, with the umask's mode."""
    path = Path(path)
    check_replaceable(path, what=what)
    ensure_folder(path.parent, what=what)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"Cannot write {what} {path} ({exc.strerror}); check the folder's permissions.") from exc
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        check_replaceable(path, what=what)  # again right before the rename: it may have changed meanwhile
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        problem = disk_problem(exc)
        if problem is not None:
            raise OutputError(f"Cannot write {what} {path}: {problem}. Free some space or raise the limit.") from exc
        raise OutputError(f"Cannot write {what} {path} ({exc.strerror}).") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ensure_folder(folder: Path, *, what: str) -> None:
    """Create `folder` (and parents) or say clearly why it cannot be."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise OutputError(f"{what}: {folder} exists and is not a folder.") from exc
    except NotADirectoryError as exc:
        raise OutputError(f"{what}: a part of {folder} is a file, not a folder.") from exc
    except OSError as exc:
        raise OutputError(f"{what}: cannot create the folder {folder} ({exc.strerror}).") from exc


def probe_writable(folder: Path, *, what: str) -> None:
    """Create and delete a file in `folder`: the only reliable test (read-only mounts, /proc, immutable flags)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".klein-write-test-")
    except OSError as exc:
        raise OutputError(
            f"{what}: cannot write in {folder} ({exc.strerror}). Choose a folder you can write to."
        ) from exc
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def check_output_file(path: Path, *, what: str = "--out") -> Path:
    """Before any slow work: `path` can be written as a regular file (its folder is created if needed)."""
    path = Path(path)
    if str(path) == "" or path.name in ("", ".", ".."):
        raise OutputError(f"{what} {str(path)!r} does not name a file; pass e.g. out.png.")
    check_replaceable(path, what=what)
    ensure_folder(path.parent, what=what)
    probe_writable(path.parent, what=what)
    return path


def check_output_folder(folder: Path, *, what: str, create: bool = True) -> Path:
    """Before any slow work: files can be written in `folder`. create=False leaves a missing folder missing (it
    is made when the first file is written) and tests its nearest existing parent instead."""
    folder = Path(folder)
    if folder.is_symlink() and not folder.is_dir():
        raise OutputError(f"{what} {folder} is a dangling symlink.")
    if create:
        ensure_folder(folder, what=what)
        probe_writable(folder, what=what)
        return folder
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"{what}: {existing} is a file, not a folder; cannot write {folder}.")
    probe_writable(existing, what=what)
    return folder


def private_to_umask(folder: Path) -> None:
    """mkdtemp makes folders 0700; a model repo or report is meant to be served and read by others."""
    folder.chmod(0o777 & ~current_umask())


def make_staging(parent: Path, name: str, kind: str = "partial") -> Path:
    """A fresh `.NAME.KIND-PID-XXXX` folder in `parent` (same file system as the target: renames are atomic)."""
    ensure_folder(parent, what=str(parent))
    try:
        folder = Path(tempfile.mkdtemp(dir=parent, prefix=f".{name}.{kind}-{os.getpid()}-"))
    except OSError as exc:
        raise OutputError(f"Cannot create a staging folder in {parent} ({exc.strerror}).") from exc
    private_to_umask(folder)
    return folder


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _is_stale(path: Path, owner: str | None, now: float) -> bool:
    if owner is not None:
        return not _owner_alive(int(owner))
    try:
        return now - path.lstat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def clean_stale_staging(parent: Path, names: tuple[str, ...], *, log: Callable[[str], None]) -> list[Path]:
    """Remove `.NAME.partial-*` / `.NAME.old-*` folders in `parent` left by a killed run; says what went. A folder a
    killed swap moved aside is put back first when nothing took its place (recover_swap)."""
    if not Path(parent).is_dir():
        return []
    pattern = re.compile(r"\.(?P<name>.+)\.(?:" + "|".join(STAGING_KINDS) + r")-(?:(?P<pid>\d+)-)?[A-Za-z0-9_]+")
    removed = []
    now = time.time()
    for entry in sorted(Path(parent).iterdir()):
        match = pattern.fullmatch(entry.name)
        if not match or match.group("name") not in names or entry.is_symlink() or not entry.is_dir():
            continue
        if match.group("pid") == str(os.getpid()) or not _is_stale(entry, match.group("pid"), now):
            continue
        if not recover_swap(entry, Path(parent) / match.group("name"), log=log):
            continue
        size = _tree_bytes(entry)
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
            log(f"removed {entry} ({megabytes(size)}), left behind by an interrupted run")
    return removed


def recover_swap(entry: Path, target: Path, *, log: Callable[[str], None]) -> bool:
    """For a stale staging folder `entry` of `target`: put back the folder a killed swap moved aside into it, when
    `target` is gone. True when what is left in `entry` may be deleted; False when it holds the only copy of an
    earlier folder whose place another folder took since (it is kept, and said so)."""
    previous = entry / PREVIOUS
    if previous.is_symlink() or not previous.is_dir():
        return True
    if not (target.exists() or target.is_symlink()):
        try:
            previous.rename(target)
        except OSError as exc:
            raise OutputError(
                f"Cannot put {target} back from {previous}, where an interrupted run moved it ({exc.strerror}); "
                "move it back by hand."
            ) from exc
        log(f"restored {target}, which an interrupted run had moved aside into {entry}")
        return True
    if _swapped_in(entry, target) is not False:
        return True  # the swap finished its second rename: `previous` is the earlier folder, replaced
    log(
        f"kept {previous}: an interrupted run moved the earlier {target} there, and {target} is now another "
        "folder; move the one you want to keep into place."
    )
    return False


def _swapped_in(entry: Path, target: Path) -> bool | None:
    """Whether `target` is the folder the swap in `entry` moved in (None: the swap recorded nothing)."""
    try:
        record = json.loads((entry / SWAP_RECORD).read_bytes())
        moved = (int(record["device"]), int(record["inode"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        info = target.lstat()
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == moved


def replace_folder(stage: Path, out: Path) -> None:
    """Move the finished staging folder to `out`, replacing an earlier one only once the new one is complete.

    Two renames through `.OUT.old-PID-XXXX/previous`; interrupted between them (an exception, Ctrl-C), the earlier
    folder is put back; killed between them, the next run's clean_stale_staging puts it back."""
    if not (out.exists() or out.is_symlink()):
        stage.rename(out)
        return
    old = make_staging(out.parent, out.name, "old")
    info = stage.lstat()
    atomic_write_bytes(old / SWAP_RECORD, json.dumps({"device": info.st_dev, "inode": info.st_ino}).encode())
    try:
        out.rename(old / PREVIOUS)
        stage.rename(out)
    except BaseException:
        _put_back(old, out)
        raise
    (old / PREVIOUS).rename(old / REPLACED)  # from here on the earlier folder is garbage
    shutil.rmtree(old, ignore_errors=True)


def _put_back(old: Path, out: Path) -> None:
    """After a failed swap: the earlier folder back at `out` when it was moved aside. Should that fail too, it stays
    in `old` for the next run."""
    previous = old / PREVIOUS
    with contextlib.suppress(OSError):
        if previous.is_dir() and not (out.exists() or out.is_symlink()):
            previous.rename(out)
        if not previous.exists():
            shutil.rmtree(old, ignore_errors=True)
