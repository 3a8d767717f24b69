"""`python -m builder`: the same command line as `klein-web`."""

from __future__ import annotations

from builder.cli import main

main()
