"""File sizes as log lines print them: decimal GB and MB, the units the Hub lists files in."""

from __future__ import annotations


def gigabytes(size: int | None) -> str:
    return "unknown" if size is None else f"{size / 1e9:.2f} GB"


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
