"""`klein-web regress-merge OUT SHARD_DIR...`: the report folders of `regress --shard I/N` runs as one report.

The shards must be one run cut in N: the same cases file (its bytes), the same flags filling its gaps, the same
model repository (its manifest's hash) and the same --precision, every shard from 1 to N once, each complete.
Anything else is refused before OUT is touched. OUT gets every case's folder (in the cases file's order), one
report.json with the overall verdict, and browser.log: each shard's log in turn. The shards may have run on
different machines and browsers: report.json keeps each shard's browser and adapter.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeGuard

from builder import __version__
from builder.check.regress import report_folder
from builder.check.regress.cases import case_name_problem
from builder.check.regress.report import BROWSER_LOG_NAME, REPORT_NAME, Verdict
from builder.errors import InputError, KleinWebError
from builder.repo import paths
from builder.repo.files import atomic_write_bytes, check_output_folder
from builder.terminal import printable

Log = Callable[[str], None]
VERDICTS = {verdict.label: verdict for verdict in Verdict}

# What must be equal between shards, and what to do when it is not.
SAME = (
    ("cases_sha256", "the cases file", "run every shard with the same --cases file"),
    (
        "defaults",
        "the flags that fill the cases' gaps (--prompt, --seed, --size, --steps, --psnr-min, --reference*)",
        "run every shard with the same flags",
    ),
    ("repo", "the model repository", "run every shard on the same model folder (same manifest and files)"),
    ("precision", "--precision", "run every shard with the same --precision"),
    ("cases_total", "the number of cases", "run every shard with the same --cases file"),
)


@dataclass(frozen=True)
class ShardReport:
    folder: Path
    data: dict[str, Any]

    @property
    def run(self) -> dict[str, Any]:
        return dict(self.data["run"])

    @property
    def index(self) -> int:
        return int(self.run["shard"]["index"])

    @property
    def count(self) -> int:
        return int(self.run["shard"]["count"])


def read_shard(folder: Path) -> ShardReport:
    """The report.json of a `regress --shard` run in `folder`; InputError saying what the folder is instead."""
    path = Path(folder) / REPORT_NAME
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputError(
            f"{folder} holds no {REPORT_NAME}: it is not a finished regress report (an interrupted "
            "shard writes none); run that shard again."
        ) from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(
            f"{path} cannot be read as a regress report ({type(exc).__name__}); pass the --report "
            "folder of a `regress --shard I/N` run."
        ) from None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict) or not isinstance(run.get("shard"), dict) or not isinstance(data.get("cases"), list):
        raise InputError(
            f"{folder} is not the report of a `regress --shard I/N` run (its {REPORT_NAME} names no "
            "shard); pass the shards' --report folders."
        )
    check_fields(path, run, data["cases"])
    try:  # what the merged report.json carries over must be JSON again: no NaN or Infinity (1e999 reads as one)
        json.dumps(data, allow_nan=False)
    except ValueError:
        raise InputError(
            f"{path} holds a number JSON cannot carry (NaN or Infinity): not a report regress wrote; run that shard "
            "again."
        ) from None
    return ShardReport(Path(folder), data)


def check_fields(path: Path, run: dict[str, Any], cases: list[Any]) -> None:
    """Every field of a shard's report that the merge reads, as regress writes it (a report is data: a damaged or
    hand-made one is refused here, in one line, before OUT is touched)."""

    def refuse(what: str, value: object, expected: str) -> NoReturn:
        raise InputError(
            f"{path}: {what} is {_short(value)}, not {expected}: not a report regress wrote; run that shard again."
        )

    total, shard = run.get("cases_total"), run["shard"]
    if not _count(total):
        refuse("`run.cases_total`", total, "a number of cases")
    index, count = shard.get("index"), shard.get("count")
    if not _count(count) or count > total:
        refuse("`run.shard.count`", count, f"a number of shards from 1 to {total}")
    if not _count(index) or index > count:
        refuse("`run.shard.index`", index, f"a shard from 1 to {count}")
    if len(cases) > total:
        refuse("the number of cases", len(cases), f"at most {total}")
    for number, entry in enumerate(cases, start=1):
        where = f"case {number}"
        if not isinstance(entry, dict):
            refuse(where, entry, "a table of fields")
        for key in ("case", "folder"):
            if key not in entry:
                refuse(f"{where}'s `{key}`", None, "a case name")
        if case_name_problem(entry["case"]) is not None:
            refuse(f"{where}'s `case`", entry["case"], "a case name")
        position = entry.get("position")
        if not _count(position) or position > total:
            refuse(f"{where}'s `position`", position, f"a position in the cases file (1 to {total})")
        verdict = entry.get("verdict")
        if verdict not in VERDICTS:
            refuse(f"{where}'s `verdict`", verdict, f"one of {', '.join(VERDICTS)}")
        if not isinstance(entry.get("reason"), str):
            refuse(f"{where}'s `reason`", entry.get("reason"), "a text")


def _count(value: object) -> TypeGuard[int]:
    """A whole number from 1 (JSON's `true`, `1.0`, `"1"` and `1e999` are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_shards(shards: Sequence[ShardReport]) -> None:
    """InputError unless the shards are every part of one run, each complete."""
    first = shards[0]
    for other in shards[1:]:
        for key, what, fix in SAME:
            if other.run.get(key) != first.run.get(key):
                raise InputError(
                    f"{first.folder} and {other.folder} differ in {what} ({_short(first.run.get(key))} "
                    f"vs {_short(other.run.get(key))}): they are not shards of one run; {fix}."
                )
        if other.count != first.count:
            raise InputError(
                f"{first.folder} is shard {first.index}/{first.count} but {other.folder} is "
                f"{other.index}/{other.count}: run every shard with the same N in --shard I/N."
            )
    seen: dict[int, Path] = {}
    for shard in shards:
        if shard.index in seen:
            raise InputError(
                f"shard {shard.index}/{shard.count} is given twice ({seen[shard.index]} and "
                f"{shard.folder}); pass each shard's folder once."
            )
        seen[shard.index] = shard.folder
    # The first few missing shards, found without listing all N (a report's N is data).
    missing = [index for index in range(1, min(first.count, len(seen) + 5) + 1) if index not in seen]
    if missing:
        more = ", ..." if first.count > len(seen) + 5 else ""
        labels = ", ".join(f"{index}/{first.count}" for index in missing) + more
        raise InputError(
            f"shard(s) {labels} missing: run `klein-web regress ... --shard {missing[0]}/{first.count}` "
            "with the same cases and flags, and pass its --report folder too."
        )
    folders: dict[str, Path] = {}
    for shard in shards:
        for entry in shard.data["cases"]:
            source = case_folder(shard, entry["folder"])
            if not (source / REPORT_NAME).is_file():
                raise InputError(
                    f"{shard.folder}: case {entry['case']} has no {REPORT_NAME} (the shard was "
                    "interrupted or its folder changed); run that shard again."
                )
            # Compared without letter case, as regress compares case names: one folder of OUT each.
            key = str(entry["folder"]).casefold()
            if key in folders:
                raise InputError(
                    f"case folder {entry['folder']!r} is listed twice ({folders[key]} and {shard.folder}): the "
                    "shards are not one run's; run them again from one cases file."
                )
            folders[key] = shard.folder


def case_folder(shard: ShardReport, folder: object) -> Path:
    """A case's folder in `shard`, from its report: checked like a case name (one plain folder name, none of the
    run's own files), and a real folder inside the shard (no symlink out of it), since OUT gets a copy of it and
    merging again deletes that copy first."""
    problem = case_name_problem(folder)
    if problem is not None:
        raise InputError(
            f"{shard.folder / REPORT_NAME} names the case folder {folder!r}, which {problem}: not a report regress "
            "wrote; run that shard again."
        )
    assert isinstance(folder, str)
    try:
        path = paths.inside(shard.folder, folder, what=f"{shard.folder}: the case folder")
    except KleinWebError as exc:
        raise InputError(f"{exc} Run that shard again.") from None
    if path.is_symlink():
        raise InputError(f"{path} is a symlink, not a case folder regress wrote; run that shard again.")
    return path


def out_folder(out: Path, entry: dict[str, Any]) -> Path:
    """Where a case's folder goes in OUT (an earlier merge's copy there is replaced): inside OUT, symlinks resolved."""
    try:
        return paths.inside(out, str(entry["folder"]), what=f"OUT's folder of case {entry['folder']!r}")
    except KleinWebError as exc:
        raise InputError(f"{exc} Merge into a new folder.") from None


def check_apart(out: Path, shard_dirs: Sequence[Path]) -> None:
    """OUT and the shards must not hold each other: writing OUT would delete a shard's folders before they are
    read (or a shard's files would be merged into themselves)."""
    real_out = out.resolve()
    for folder in shard_dirs:
        real = Path(folder).resolve()
        if real == real_out:
            raise InputError(f"OUT {out} is one of the shards' folders; merge into another folder.")
        if real_out in real.parents:
            raise InputError(f"shard {folder} is inside OUT {out}; merge into a folder outside the shards.")
        if real in real_out.parents:
            raise InputError(f"OUT {out} is inside shard {folder}; merge into a folder outside the shards.")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def merge(out_dir: Path, shard_dirs: Sequence[Path], *, log: Log) -> int:
    """Merge the shards into `out_dir`; return the overall verdict's exit code (0 pass, 1 fail, 2 could not run)."""
    # 1. Check everything before OUT changes.
    if not shard_dirs:
        raise InputError("give the --report folders of the shards to merge: klein-web regress-merge OUT SHARD_DIR...")
    out = check_output_folder(Path(out_dir), what="OUT", create=False)
    report_folder.check_report_folder(out, what="OUT")
    check_apart(out, shard_dirs)
    shards = sorted((read_shard(Path(folder)) for folder in shard_dirs), key=lambda shard: shard.index)
    check_shards(shards)
    entries = sorted(
        ({**entry, "shard": shard.index} for shard in shards for entry in shard.data["cases"]),
        key=lambda entry: int(entry["position"]),
    )
    by_index = {shard.index: shard for shard in shards}
    copies = [(case_folder(by_index[entry["shard"]], entry["folder"]), out_folder(out, entry)) for entry in entries]

    # 2. Copy every case's folder, then the logs, then report.json last.
    out.mkdir(parents=True, exist_ok=True)
    report_folder.mark(out)
    (out / REPORT_NAME).unlink(missing_ok=True)  # until the merged one lands, the folder reads as incomplete
    for source, target in copies:
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
    logs = [
        f"===== shard {shard.index}/{shard.count}: {shard.folder} =====\n" + _read_text(shard.folder / BROWSER_LOG_NAME)
        for shard in shards
    ]
    atomic_write_bytes(out / BROWSER_LOG_NAME, "\n".join(logs).encode("utf-8"))
    worst = max((VERDICTS[entry["verdict"]] for entry in entries), default=Verdict.COULD_NOT_RUN)
    data = {
        "verdict": worst.label,
        "exit_code": worst.exit_code,
        "cases": entries,
        "shards": [
            {
                "shard": shard.index,
                "folder": str(shard.folder),
                "verdict": shard.data.get("verdict"),
                "browser": shard.data.get("browser"),
                "adapter": shard.data.get("adapter"),
                "klein_web": shard.data.get("klein_web"),
                "finished_at": shard.data.get("finished_at"),
            }
            for shard in shards
        ],
        "run": {**shards[0].run, "shard": None, "merged_from": len(shards)},
        "klein_web": __version__,
    }
    atomic_write_bytes(out / REPORT_NAME, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))
    for entry in entries:
        # The reason is a report's text: shown on one line, its control characters escaped, never obeyed.
        log(
            f"{entry['verdict'].upper():>13}  {entry['case']} (shard {entry['shard']}/{shards[0].count}): "
            f"{printable(entry['reason'], one_line=True)}"
        )
    log(
        f"overall: {worst.label.upper()} (exit {worst.exit_code}); {len(entries)} cases from {len(shards)} shards; "
        f"report in {out}"
    )
    return worst.exit_code


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no {path.name})\n"
