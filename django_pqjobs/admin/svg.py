"""What the console's SVG pictures share: the sizes of the text they draw, the admin's colours
(light and dark themes), and :func:`clean`, which makes any outside text safe and short to
draw. The pictures: ``timelinesvg.py``, ``graphsvg.py``, ``activesvg.py``; what the pages
read for them: ``pictures.py``."""

from __future__ import annotations

from ..printable import printable

LABEL_CHARS = 34  # drawn beside a bar or in a node
TITLE_CHARS = 200  # of a tooltip's outside text

# The admin's colours (light and dark themes) where it has them, as the throughput chart.
BACKGROUND = "fill: var(--darkened-bg, #f7fafc)"
TEXT = "fill: var(--body-quiet-color, #4a5568)"
STRONG_TEXT = "fill: var(--body-fg, #333)"
LINE = "stroke: var(--body-quiet-color, #4a5568)"
GRID = "stroke: var(--hairline-color, #e2e8f0)"

UNKNOWN_COLOUR = "#4a5568"


def clean(text: object, limit: int = LABEL_CHARS, keep_end: bool = False) -> str:
    """``text`` safe to draw: printable (control characters, NULs and lone surrogates
    escaped), at most ``limit`` characters (cut with "…", at the end, or at the start with
    ``keep_end``: a dotted job type is told by its last parts). Escaping for markup is
    ``format_html``'s."""
    raw = str(text)
    long = len(raw) > limit
    if long:
        raw = raw[-limit:] if keep_end else raw[:limit]
    shown = printable(raw)
    if long or len(shown) > limit:
        shown = "…" + shown[-(limit - 1) :] if keep_end else shown[: limit - 1] + "…"
    return shown
