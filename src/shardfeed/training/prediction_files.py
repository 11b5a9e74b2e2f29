"""What `predict` writes, whatever the task: the CSV (a row per input file, or per box), the rows
of the files `convert` could not read (report.json's reasons), and the grid of captioned tiles."""

from __future__ import annotations

import csv
import json
import os
from typing import Any

from shardfeed.format import layout


def skipped_rows(data: str) -> list[dict[str, Any]]:
    """A row per input file the converted folder `data` left out, with the reason (its report.json)."""
    path = os.path.join(data, layout.REPORT)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [{"file": s["file"], "error": s["reason"]} for s in json.load(f)["skipped"]]


def write_csv(path: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """`rows` under `columns` (floats with 6 decimals; a row's other keys left out)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})


def draw_tiles(tiles: list[Any], grid: str, title: str) -> None:
    """`predict`'s grid: the tiles four to a row (fewer when there are fewer) under `title`."""
    from shardfeed.tools.preview import draw_grid

    cols = min(4, max(1, len(tiles)))
    draw_grid(tiles, max(1, -(-len(tiles) // cols)), cols, grid, title)


def short(file: str, width: int = 24) -> str:
    """A file name that fits under a grid tile: its end, where names differ."""
    return file if len(file) <= width else "..." + file[-(width - 3) :]
