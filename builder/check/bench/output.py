"""Where `browser-bench` and `load-bench` write their results, checked before anything is launched.

A run measures for minutes and writes its `<name>.json` and `<name>.md` into --out at the end (browser-bench also
after each variant), so a --out it cannot write to, or one whose files it must not replace, is found out first:
--out must be a folder that is or can be made writable, each result path a regular file or missing, and an
existing result JSON one an earlier run of the same command wrote (an object with `environment` and `rows`). A
markdown file is replaced only beside such a JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.errors import OutputError
from builder.repo.files import check_output_folder, check_replaceable


def is_earlier_result(path: Path) -> bool:
    """`path` holds a result JSON of a bench: an object with `environment` and `rows`."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "environment" in data and isinstance(data.get("rows"), list)


def check_out(out_dir: Path, *, json_name: str, markdown_name: str, what: str = "--out") -> Path:
    """OutputError unless the run can write `json_name` and `markdown_name` into `out_dir` without clobbering."""
    out_dir = check_output_folder(Path(out_dir), what=what, create=False)
    for name in (json_name, markdown_name):
        if (out_dir / name).is_dir() and not (out_dir / name).is_symlink():
            raise OutputError(
                f"{what} {out_dir}: {name} there is a folder, where the run writes its {name}. Pass "
                "another --out folder, or move that one; nothing was run."
            )
        check_replaceable(out_dir / name, what=f"{what} {out_dir}:")
    result, table = out_dir / json_name, out_dir / markdown_name
    if result.exists() and not is_earlier_result(result):
        raise OutputError(
            f"{what} {out_dir}: {json_name} there is not a result of an earlier run; it would be "
            f"replaced. Pass another --out folder, or move that file; nothing was run."
        )
    if table.exists() and not result.exists():
        raise OutputError(
            f"{what} {out_dir}: {markdown_name} there has no {json_name} beside it, so it is no "
            "earlier run's table; it would be replaced. Pass another --out folder, or move that file; "
            "nothing was run."
        )
    return out_dir
