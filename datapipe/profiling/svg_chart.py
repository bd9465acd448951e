"""Inline SVG charts with real axes: a plotting frame, round tick values, tick labels and axis
titles with units. The profile page draws its charts with these (no scripts, no network)."""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

AXIS, GRID, FONT = "#333", "#e3e3e3", 12


@dataclass(frozen=True)
class Frame:
    """A chart `width` x `height` pixels, its plotting area inside the margins, mapping data
    x in [x0, x1] and y in [0, y1] onto it (y grows upwards)."""

    width: int
    height: int
    x0: float
    x1: float
    y1: float
    left: int = 78
    right: int = 24
    top: int = 16
    bottom: int = 48

    def x(self, value: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.left + (value - self.x0) / span * (self.width - self.left - self.right)

    def y(self, value: float) -> float:
        return self.height - self.bottom - value / (self.y1 or 1.0) * self.plot_height

    @property
    def plot_height(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def plot_width(self) -> float:
        return self.width - self.left - self.right


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """0 and round steps (1, 2 or 5 times a power of ten) up to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / (most - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def integer_ticks(low: int, high: int, most: int = 12) -> list[int]:
    """Whole numbers in [low, high] at a round spacing (1, 2 or 5 times a power of ten)."""
    span = max(1, high - low)
    step = next(m * 10 ** p for p in itertools.count() for m in (1, 2, 5)
                if span / (m * 10 ** p) <= most - 1)
    first = -(-low // step) * step  # the first multiple of step from low on
    return list(range(first, high + 1, step)) or [low]


def text(x: float, y: float, content: str, *, anchor: str = "start", size: int = FONT,
         cls: str = "", extra: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{klass}'
            f'{extra}>{html.escape(content)}</text>')


def axes(frame: Frame, x_ticks: Sequence[float], y_ticks: Sequence[float], x_title: str,
         y_title: str, x_label: Callable[[float], str], y_label: Callable[[float], str]) -> str:
    """Both axes: lines, ticks with labels, light grid lines at the y ticks, and titles."""
    base, left = frame.y(0), frame.left
    parts = [f'<line x1="{left}" y1="{base:.1f}" x2="{frame.width - frame.right}" '
             f'y2="{base:.1f}" stroke="{AXIS}"/>',
             f'<line x1="{left}" y1="{frame.top}" x2="{left}" y2="{base:.1f}" stroke="{AXIS}"/>']
    for v in y_ticks:
        y = frame.y(v)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{frame.width - frame.right}" '
                     f'y2="{y:.1f}" stroke="{GRID}"/>' if v else "")
        parts.append(f'<line x1="{left - 5}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" '
                     f'stroke="{AXIS}"/>')
        parts.append(text(left - 8, y + 4, y_label(v), anchor="end", cls="y-tick"))
    for v in x_ticks:
        x = frame.x(v)
        parts.append(f'<line x1="{x:.1f}" y1="{base:.1f}" x2="{x:.1f}" y2="{base + 5:.1f}" '
                     f'stroke="{AXIS}"/>')
        parts.append(text(x, base + 18, x_label(v), anchor="middle", cls="x-tick"))
    parts.append(text(left + frame.plot_width / 2, frame.height - 8, x_title, anchor="middle",
                      cls="axis-title x-title"))
    mid = frame.top + frame.plot_height / 2
    if y_title:
        parts.append(text(16, mid, y_title, anchor="middle", cls="axis-title y-title",
                          extra=f' transform="rotate(-90 16 {mid:.1f})"'))
    return "".join(p for p in parts if p)


def svg(frame: Frame, body: str, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{frame.width}" '
            f'height="{frame.height}" role="img" aria-label="{html.escape(label)}">'
            f'{body}</svg>')
