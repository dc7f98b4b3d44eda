"""The cache-state strip: one cell per request (cold / hit / checkpoint / unknown), newest on the right,
with the latest request's prefill time and cached tokens spelled out."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from kit.tui.live_state import RequestCell

GLYPHS = {"cold": ("c", "blue"), "hit": ("H", "green"), "checkpoint": ("K", "magenta"), "unknown": ("?", "yellow")}


def strip_text(cells: list[RequestCell], width: int) -> Text:
    """The last requests that fit in `width` columns, then a legend line and the latest request."""
    text = Text()
    shown = cells[-max(width, 1):]
    for cell in shown:
        glyph, style = GLYPHS.get(cell.state, GLYPHS["unknown"])
        text.append(glyph, style=f"bold {style}" + ("" if cell.gate_ok else " reverse"))
    if not shown:
        text.append("no requests yet", style="dim")
    text.append("\n")
    for state, (glyph, style) in GLYPHS.items():
        text.append(f"{glyph}", style=f"bold {style}")
        text.append(f" {state}  ")
    text.append("reverse", style="reverse")
    text.append(" = gate violated")
    if cells:
        last = cells[-1]
        prefill = f"{last.prefill_ms:.0f} ms" if last.prefill_ms is not None else "? ms"
        cached = "?" if last.cached_tokens is None else str(last.cached_tokens)
        text.append(f"\nlast: {last.session} {last.unit} {last.phase}: {last.state}, prefill {prefill}, "
                    f"{cached} cached tokens")
    return text


class CacheStrip(Static):
    """Shows `strip_text` of the requests it is given."""

    DEFAULT_CSS = "CacheStrip { height: 3; }"

    def show(self, cells: list[RequestCell]) -> None:
        self.update(strip_text(cells, self.size.width or 60))
