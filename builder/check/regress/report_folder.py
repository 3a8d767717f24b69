"""Which folder `klein-web regress --report` may write into, and which case names its files leave free.

A run writes report.json, candidate.png, reference.png, diff.png and browser.log into the report folder (with
several cases, one sub-folder per case name), replacing files of those names. So the folder must be missing,
empty, or an earlier report: one carrying MARKER (written before the run's first file), or one whose report.json
is a klein-web regress report (builder.repo.owned_folder's rule). Anything else is refused before the browser
starts. A case must not be named like
one of the run's own files, or its folder and that file would collide.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.check.regress.report import BROWSER_LOG_NAME, CANDIDATE_NAME, DIFF_NAME, REFERENCE_NAME, REPORT_NAME
from builder.errors import InputError
from builder.repo.owned_folder import Owner

MARKER = ".klein-web-regress"
MARKER_TEXT = "A report of `klein-web regress`; running it again with this --report replaces its files.\n"
# Every name a run writes into a report folder (compared case-insensitively: some file systems are).
RUN_FILES = (REPORT_NAME, BROWSER_LOG_NAME, CANDIDATE_NAME, REFERENCE_NAME, DIFF_NAME, MARKER)


def is_earlier_report(folder: Path) -> bool:
    """`folder` holds a report.json a regress run wrote (a verdict and klein-web's version)."""
    try:
        data = json.loads((folder / REPORT_NAME).read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "verdict" in data and "klein_web" in data


OWNER = Owner(MARKER, MARKER_TEXT, "an earlier regress report", earlier=is_earlier_report)


def check_report_folder(folder: Path, *, what: str = "--report") -> None:
    """InputError, before anything runs, unless `folder` is missing, empty or an earlier report."""
    why = OWNER.why_not(folder)
    if why is None or not folder.is_dir():
        return  # a file there is refused by check_output_folder
    raise InputError(
        f"{what} {folder} is {why}; a run would overwrite its {', '.join(RUN_FILES[:5])}. Pass a new or "
        f"empty folder, e.g. {what} {folder / 'regress'}; nothing was written."
    )


def mark(folder: Path) -> None:
    """Mark `folder` as a report, before the run's first file lands in it."""
    OWNER.mark(folder)


def colliding_name(name: str) -> str | None:
    """The run's own file `name` would collide with, or None."""
    return next((own for own in RUN_FILES if own.lower() == name.lower()), None)
