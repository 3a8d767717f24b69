"""Text from elsewhere (a report, a server, the browser, a file name) made safe to print on a terminal.

A terminal obeys control characters: an escape sequence in a shard report's `reason` could recolour, clear or
retitle the user's terminal, a carriage return overwrite the line before it, and bidirectional controls reorder
what is shown. `printable` writes every such character the way Python writes it in a string literal (`\\x1b`,
`\\u202e`), so the text is shown, never obeyed.
"""

from __future__ import annotations

# How the common control characters are written, as in a Python string literal.
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Unicode's bidirectional embeddings, overrides and isolates, and the line and paragraph separators.
INVISIBLE = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with every control character escaped; newlines and tabs too when `one_line`."""
    kept = "" if one_line else "\n\t"
    return "".join(
        ch if ch in kept or not (ord(ch) < 32 or 127 <= ord(ch) < 160 or ch in INVISIBLE) else _escaped(ch)
        for ch in text
    )


def _escaped(ch: str) -> str:
    code = ord(ch)
    if ch in NAMED:
        return NAMED[ch]
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"
