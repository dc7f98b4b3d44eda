"""The remedy's cost by prompt length as a figure the kit draws itself: an SVG image, two panels (time to first
token and end-to-end latency), each fixed arm's ratio to the unfixed arm per prompt-length bin, with the
unfixed arm's 1.0 as a dashed line. The bundle's report embeds it as a data: image (kit.bundle.report); it is
deterministic (numbers to fixed decimals, arms in the table's order) so that `kit verify` renders it again
byte for byte. Arm names come from a bundle: they are escaped, and the image holds text, lines and circles
only (no script, link, style sheet or foreign object)."""

from __future__ import annotations

from html import escape

from kit.core.terminal_text import printable
from kit.protocols.headline import Figure
from kit.protocols.remedy.results import RemedyResults

PANELS = (("ttft_ms", "time to first token"), ("latency_s", "end-to-end latency"))
COLOURS = ("#3b6ea5", "#c0392b", "#2e8b57", "#8e44ad", "#d35400", "#7f8c8d")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 360, 260, 52, 16, 34, 46  # one panel, pixels
NAME = "remedy cost by prompt length"
CAPTION = ("Each fix's cost as a ratio to the unfixed arm in the same prompt-length bin (prompt tokens): time to "
           "first token and end-to-end latency; above the dashed 1.0 line the fix is slower. From "
           "results/remedy.json.")


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11) -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif">{escape(printable(text))}</text>')


def _scale(values: list[float]) -> tuple[float, float]:
    """The y range of the panels: it holds 1.0 and every ratio, with a margin."""
    lo, hi = min([1.0, *values]), max([1.0, *values])
    pad = max((hi - lo) * 0.1, 0.05)
    return max(0.0, lo - pad), hi + pad


def _panel(t: RemedyResults, bins: list[str], key: str, title: str, x0: float, span: tuple[float, float]) -> str:
    lo, hi = span
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = inner_w / len(bins)

    def x(i: int) -> float:
        return x0 + LEFT + step * (i + 0.5)

    def y(value: float) -> float:
        return TOP + inner_h * (hi - value) / (hi - lo)

    parts = [_text(x0 + WIDTH / 2, 18, f"{title} (ratio to unfixed)", size=12),
             f'<rect x="{x0 + LEFT}" y="{TOP}" width="{inner_w}" height="{inner_h}" fill="none" stroke="#888"/>']
    for tick in (lo, 1.0, hi):
        parts.append(_text(x0 + LEFT - 4, y(tick) + 4, f"×{tick:.2f}", anchor="end", size=10))
    parts.append(f'<line x1="{x0 + LEFT}" y1="{y(1.0):.1f}" x2="{x0 + WIDTH - RIGHT}" y2="{y(1.0):.1f}" '
                 'stroke="#555" stroke-dasharray="4 3"/>')
    for i, label in enumerate(bins):
        parts.append(_text(x(i), TOP + inner_h + 16, label, size=10))
    parts.append(_text(x0 + LEFT + inner_w / 2, HEIGHT - 8, "prompt tokens", size=10))
    for a, arm in enumerate(t.arms[1:]):
        colour = COLOURS[a % len(COLOURS)]
        points = [(x(i), y(value)) for i, label in enumerate(bins)
                  if (row := arm.cost.get(label)) is not None and (value := row.ratio.get(key)) is not None]
        if len(points) > 1:
            parts.append(f'<polyline points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}" fill="none" '
                         f'stroke="{colour}" stroke-width="2"/>')
        parts.extend(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in points)
    return "".join(parts)


def cost_figure(t: RemedyResults) -> Figure | None:
    """The figure, or None when no fixed arm has a ratio in any bin (nothing to draw)."""
    bins = [label for label in t.bins if any(label in arm.cost for arm in t.arms)]
    values = [value for arm in t.arms[1:] for row in arm.cost.values() for key, _ in PANELS
              if (value := row.ratio.get(key)) is not None]
    if not bins or not values:
        return None
    span = _scale(values)
    legend_y = HEIGHT + 6
    width, height = WIDTH * len(PANELS), legend_y + 18 * len(t.arms[1:]) + 8
    parts = [_panel(t, bins, key, title, WIDTH * i, span) for i, (key, title) in enumerate(PANELS)]
    for a, arm in enumerate(t.arms[1:]):
        colour = COLOURS[a % len(COLOURS)]
        row_y = legend_y + 18 * a
        parts.append(f'<rect x="{LEFT}" y="{row_y}" width="12" height="12" fill="{colour}"/>')
        fix = " ".join([*arm.fixes, *arm.server_args])
        worst = f", worst slowdown ×{arm.worst_slowdown:.2f}" if arm.worst_slowdown is not None else ""
        parts.append(_text(LEFT + 18, row_y + 10, f"{arm.name} ({fix}){worst}" if fix and fix != arm.name
                           else f"{arm.name}{worst}", anchor="start"))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}"><rect width="{width}" height="{height}" fill="#fff"/>'
           f'{"".join(parts)}</svg>')
    return Figure(NAME, CAPTION, "image/svg+xml", svg.encode("utf-8"))
