"""A self-contained HTML page: inline CSS, inline SVG charts, images as data URIs, no JavaScript.

Every piece of text goes through `esc` (file and class names come from users' folders: a class
named `<script>` must show as text; a bucket URL may carry credentials, which never show).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from shardfeed.redaction import redact

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td.n,th.n{text-align:right}.grid{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;width:112px;font-size:11px;word-break:break-all}
td figure{display:inline-block;vertical-align:top;margin-right:4px}
figure img{width:112px;height:112px;object-fit:contain;background:#eee}
.note{color:#555}.warn{color:#a40}
"""


def esc(value: Any) -> str:
    """`value` as HTML text, with the secrets URLs in it carry hidden (a page is shared)."""
    return html.escape(redact(str(value)), quote=True)


def page(title: str, sections: Sequence[str]) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body>\n<h1>{esc(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def section(title: str, *parts: str) -> str:
    return f"<h2>{esc(title)}</h2>\n" + "\n".join(parts)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f'<th class="{"n" if i in numeric else ""}">{esc(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"n" if i in numeric else ""}">{cell}</td>' for i, cell in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def thumbnail(image: np.ndarray | Image.Image, size: int = 112) -> str:
    """An <img> with the image shrunk to `size` px and inlined as JPEG data."""
    im = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image).squeeze().astype(np.uint8))
    if im.format == "JPEG":  # a file not decoded yet: at the DCT scale that keeps 2 x size (5x faster)
        im.draft("RGB", (2 * size, 2 * size))
    im = im.convert("RGB")
    im.thumbnail((size, size))
    buffer = io.BytesIO()
    im.save(buffer, "JPEG", quality=80)
    return f'<img alt="" src="data:image/jpeg;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def png_file(path: str) -> str:
    with open(path, "rb") as f:
        return f'<img alt="" style="max-width:100%" src="data:image/png;base64,{base64.b64encode(f.read()).decode()}">'


def figure(image_html: str, caption: str) -> str:
    return f"<figure>{image_html}<figcaption>{esc(caption)}</figcaption></figure>"


def bar_chart(labels: Sequence[str], values: Sequence[float], *, unit: str = "", width: int = 640) -> str:
    """Horizontal bars, one per label, with the value written beside each."""
    top = max(values, default=0) or 1
    row, label_w = 18, min(240, 8 + 7 * max((len(str(x)) for x in labels), default=1))
    bars = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y, w = i * row, (width - label_w - 90) * value / top
        bars.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" font-size="12">{esc(label)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="#4a7fb5"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" font-size="12">{value:,.0f}{esc(unit)}</text>'
        )
    return f'<svg width="{width}" height="{row * len(labels) + 4}" role="img">{"".join(bars)}</svg>'


def histogram(values: Sequence[float], *, bins: int = 20, unit: str = "", width: int = 640) -> str:
    """A vertical-bar histogram of `values` with its range and median written under it."""
    if not values:
        return '<p class="note">no values</p>'
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins)
    top, height, bar_w = max(int(counts.max()), 1), 120, width / bins
    rects = "".join(
        f'<rect x="{i * bar_w:.1f}" y="{height - height * c / top:.1f}" width="{bar_w - 1:.1f}" '
        f'height="{height * c / top:.1f}" fill="#4a7fb5"><title>{edges[i]:,.0f}-{edges[i + 1]:,.0f}: {c}</title></rect>'
        for i, c in enumerate(counts)
    )
    note = f"{min(values):,.0f}{unit} to {max(values):,.0f}{unit}, median {float(np.median(values)):,.0f}{unit}"
    return f'<svg width="{width}" height="{height}" role="img">{rects}</svg><p class="note">{esc(note)}</p>'


def line_chart(series: dict[str, Sequence[float]], *, width: int = 480, height: int = 200) -> str:
    """Lines over epochs (x = 1..N, numbered on an epoch axis), one per series, with a legend."""
    colors = ("#4a7fb5", "#d0763c", "#3c9d5d", "#8e5cb5")
    points = [v for vs in series.values() for v in vs if v == v]
    if not points:
        return '<p class="note">no values</p>'
    low, high = min(points), max(points)
    span, n = (high - low) or 1.0, max(len(vs) for vs in series.values())
    left, right, top, bottom = 44, width - 16, 12, height - 36  # the plot area; the epoch axis below it

    def x(i: int) -> float:
        return left + (right - left) * (i / max(n - 1, 1))

    paths, legend = [], []
    for k, (name, vs) in enumerate(series.items()):
        xy = [
            f"{x(i):.1f},{bottom - (bottom - top) * (v - low) / span:.1f}"
            for i, v in enumerate(vs)
            if v == v  # NaN: the metric is missing that epoch
        ]
        color = colors[k % len(colors)]
        paths.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(xy)}"/>')
        legend.append(f'<span style="color:{color}">■ {esc(name)}</span>')
    step = -(-n // 10)  # at most ~10 numbered epochs
    ticks = sorted({*range(0, n, step), n - 1})
    axis = (
        f'<text x="2" y="{top + 4}" font-size="11">{high:.3g}</text>'
        f'<text x="2" y="{bottom + 4}" font-size="11">{low:.3g}</text>'
        f'<line x1="{left}" y1="{bottom + 6}" x2="{right}" y2="{bottom + 6}" stroke="#999"/>'
        + "".join(
            f'<text x="{x(i):.1f}" y="{bottom + 20}" font-size="11" text-anchor="middle">{i + 1}</text>' for i in ticks
        )
        + f'<text x="{right}" y="{height - 2}" font-size="11" text-anchor="end">epoch</text>'
    )
    return f'<svg width="{width}" height="{height}" role="img">{axis}{"".join(paths)}</svg><p>{" ".join(legend)}</p>'
