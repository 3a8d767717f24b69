"""Containment of repo-relative paths: the one check every name from a manifest, the Hub or a graph goes through.

A model folder's file names come from places we do not control (a mirror's file list, a downloaded
manifest.json, a graph's external-data locations), so each is checked before it is joined to a folder:
forward-slash separated, no absolute path, no `..` or `.`, no backslash, no NUL, no empty segment, and the
resolved path (symlinks followed) still inside the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from builder.errors import ModelRepoError


def unsafe_reason(rel: object) -> str | None:
    """Why `rel` is not a safe repo-relative path, or None when it is."""
    if not isinstance(rel, str):
        return f"is a {type(rel).__name__}, not a string"
    if not rel:
        return "is empty"
    if "\x00" in rel:
        return "contains a NUL character"
    if "\\" in rel:
        return "contains a backslash"
    if rel.startswith("/"):
        return "is an absolute path"
    if len(rel) > 1024:
        return "is longer than 1024 characters"
    for part in rel.split("/"):
        if part == "":
            return "has an empty segment (`//` or a trailing `/`)"
        if part in (".", ".."):
            return f"has a `{part}` segment"
    if any(ord(ch) < 32 for ch in rel):
        return "contains a control character"
    return None


def check_relative(rel: object, *, what: str) -> str:
    """`rel` itself when it is a safe repo-relative path, else ModelRepoError naming `what` (e.g. `files key`)."""
    reason = unsafe_reason(rel)
    if reason is not None:
        raise ModelRepoError(f"{what} {rel!r} {reason}; a model file must be a relative path inside the model folder.")
    return str(rel)


def inside(root: Path, rel: str, *, what: str = "path") -> Path:
    """`root/rel` after checking `rel` and that the path, symlinks resolved, stays inside `root`."""
    check_relative(rel, what=what)
    real_root = os.path.realpath(root)
    candidate = os.path.realpath(os.path.join(real_root, *rel.split("/")))
    if os.path.commonpath([candidate, real_root]) != real_root:
        raise ModelRepoError(f"{what} {rel!r} resolves to {candidate}, outside {root} (a symlink?); refusing it.")
    return Path(root).joinpath(*rel.split("/"))
