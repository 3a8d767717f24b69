"""`regress --shard I/N`: every N-th case of a cases file, and what a run records so shards can be merged.

Shard I of N runs the cases at positions I, I+N, I+2N, ... (1-based, in the file's order). Each run's report.json
carries `run`: what must be equal for shards to be one run (the cases file's bytes, the flags that fill its gaps,
the model repository's manifest, the forced precision) and which shard it was.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.check.regress.cases import Case, RegressOptions
from builder.errors import InputError
from builder.repo import manifest

SHARD = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*")
# More digits than any cases file has cases (and int() of thousands of digits is refused by Python itself).
DIGITS_MAX = 9


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`I/N` with 1 <= I <= N; InputError saying what a shard is otherwise."""
    match = SHARD.fullmatch(text)
    if match is None:
        raise InputError(
            f"--shard {text!r}: give I/N, this run's shard and the number of shards, e.g. --shard 1/2 "
            "and --shard 2/2 on two machines."
        )
    if max(len(match.group(1)), len(match.group(2))) > DIGITS_MAX:
        raise InputError(
            f"--shard {text.strip()}: more shards than a cases file has cases; N is at most the number of cases, "
            "e.g. --shard 1/2."
        )
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise InputError(f"--shard {text}: the number of shards must be at least 1, e.g. --shard 1/2.")
    if not 1 <= index <= count:
        raise InputError(
            f"--shard {text}: the shard must be from 1 to {count} (shards count from 1), e.g. --shard 1/{count}."
        )
    return Shard(index, count)


def select(cases: list[Case], shard: Shard | None) -> list[tuple[int, Case]]:
    """(position in the cases file, 1-based; case) of every case this shard runs (all of them without a shard)."""
    numbered = list(enumerate(cases, start=1))
    if shard is None:
        return numbered
    # Every shard of a run is refused alike when some shard would run none: such a run could never be merged.
    if shard.count > len(cases):
        raise InputError(
            f"--shard {shard.label}: the cases file has {len(cases)} case(s), so shard {len(cases) + 1} "
            f"would run none; use at most {len(cases)} shards."
        )
    return numbered[shard.index - 1 :: shard.count]


def repo_identity(repo: manifest.Manifest) -> str:
    """sha256 of the model repository's manifest (every file's size and hash): the same repo on any machine."""
    return hashlib.sha256(json.dumps(repo.to_json(), sort_keys=True).encode("utf-8")).hexdigest()


def run_identity(
    options: RegressOptions, repo: manifest.Manifest, *, cases_total: int, shard: Shard | None
) -> dict[str, Any]:
    """What a merge compares between shards, and this run's shard (None: the whole cases file)."""
    cases_file = Path(options.cases_file) if options.cases_file is not None else None
    return {
        "cases_file": str(cases_file) if cases_file is not None else None,
        "cases_sha256": hashlib.sha256(cases_file.read_bytes()).hexdigest() if cases_file is not None else None,
        # The flags that fill the fields a case leaves out: different flags are different cases.
        "defaults": {
            "prompt": options.prompt,
            "seed": options.seed,
            "size": options.size,
            "steps": options.steps,
            "psnr_min": options.psnr_min,
            "reference_from_cpu": options.reference_from_cpu,
            "reference_sha256": (
                hashlib.sha256(Path(options.reference_png).read_bytes()).hexdigest()
                if options.reference_png is not None
                else None
            ),
        },
        "repo": {"source": repo.source, "manifest_sha256": repo_identity(repo)},
        "precision": options.precision,
        "cases_total": cases_total,
        "shard": asdict(shard) if shard is not None else None,
    }
