"""Text for a terminal or a log line: untrusted text made safe, and counts with their noun.

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


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """``1 claim``, ``0 claims``, ``2 claims``, ``1.5 seconds``: ``count`` with ``noun`` in
    the singular or the plural (``plural``, else ``noun`` + "s")."""
    shown = str(int(count)) if count == int(count) else f"{count:.3f}".rstrip("0").rstrip(".")
    return f"{shown} {noun if shown == '1' else plural or noun + 's'}"
