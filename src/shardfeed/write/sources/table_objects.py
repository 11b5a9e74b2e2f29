"""Detection annotations in a Hugging Face table: the `objects` column of datasets laid out as
the Hub's detection datasets and its object detection guide (cppe-5) lay them out.

    objects: {"bbox": [[x, y, width, height], ...],     COCO's boxes, pixels of the image
              "category": [class id, ...],              a ClassLabel: its names are the classes
              "area": [...], "iscrowd": [...], "id": [...]}   optional, as COCO's

`datasets` stores a sequence of dicts as a dict of lists (`List`/`Sequence` of a dict feature);
a list of dicts is read too. Boxes are COCO's [x, y, width, height] (the layout of cppe-5 and of
the Hub guide); each is checked when its image is encoded, like COCO's (format/annotations.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardfeed.format.annotations import SourceObjects
from shardfeed.write.sources.coco import coco_box

OBJECTS_COLUMN = "objects"


def objects_column(features: Mapping[str, Any], names: list[str]) -> tuple[str, list[str] | None] | None:
    """The objects column of a table and its ClassLabel's names (None when the metadata has
    none), or None when the table has no `objects` column with boxes and categories."""
    if OBJECTS_COLUMN not in names:
        return None
    feature = features.get(OBJECTS_COLUMN) or {}
    inner = feature.get("feature", feature) if feature.get("_type") in ("Sequence", "List") else feature
    category = inner.get("category") or {}
    label = category.get("feature", category) if category.get("_type") in ("Sequence", "List") else category
    return OBJECTS_COLUMN, label.get("names") if isinstance(label, dict) else None


def row_objects(value: Any, number: int) -> SourceObjects | str:
    """One row's objects (boxes as (xmin, ymin, xmax, ymax) pixels), or why the cell is not
    annotations. `number` is the row's `image/source_id` (`annotations.key_number` of its key)."""
    if value is None:
        value = {"bbox": [], "category": []}
    if isinstance(value, list):  # a list of dicts: one per object
        value = {
            key: [o.get(key) for o in value if isinstance(o, dict)]
            for key in ("bbox", "category", "area", "iscrowd", "id")
        }
    if not isinstance(value, dict) or not isinstance(value.get("bbox"), list):
        return "its objects cell has no bbox list"
    boxes, categories = value["bbox"], value.get("category") or []
    if len(categories) != len(boxes):
        return f"its objects cell has {len(boxes)} boxes and {len(categories)} categories"
    corners = [coco_box(b) for b in boxes]
    if any(c is None for c in corners):
        return "a bbox of its objects is not four numbers [x, y, width, height]"
    if not all(isinstance(c, int) for c in categories):
        return "a category of its objects is not a class id"
    count = len(boxes)
    areas, crowd, ids = (_column(value, key, count) for key in ("area", "iscrowd", "id"))
    return SourceObjects(
        boxes=tuple(c for c in corners if c is not None),
        classes=tuple(int(c) for c in categories),
        is_crowd=tuple(bool(c) for c in crowd) if crowd is not None else (False,) * count,
        areas=tuple(float(a) if isinstance(a, (int, float)) else None for a in areas) if areas else (None,) * count,
        ids=tuple(int(i) for i in ids)
        if ids is not None and all(isinstance(i, int) for i in ids)
        else tuple(range(count)),
        source_id=number,
    )


def _column(value: Mapping[str, Any], key: str, count: int) -> list[Any] | None:
    """An optional per-object list of the cell, when it has one value per object."""
    column = value.get(key)
    return column if isinstance(column, list) and len(column) == count else None
