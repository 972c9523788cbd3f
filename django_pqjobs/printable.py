"""Untrusted text made safe for a terminal or a log line.

Job types, queue names, worker ids and error messages can come from anywhere (a row
inserted by SQL, a handler's exception). Printed as they are, an ANSI escape could recolour
the operator's terminal and a newline could forge a log line.
"""

from __future__ import annotations


def printable(text: object) -> str:
    """``text`` with control characters escaped as in ``repr`` (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def one_line(text: str, limit: int = 200) -> str:
    """The first non-blank line of ``text``, printable, cut to ``limit`` characters."""
    line = next((part for part in text.strip().splitlines() if part.strip()), "")
    line = printable(line)
    return line if len(line) <= limit else line[: limit - 1] + "…"
