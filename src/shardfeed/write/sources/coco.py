"""COCO object detection annotations as a source: `instances_*.json` and its images folder.

    annotations.json   {"images": [{id, file_name, width, height}],
                        "annotations": [{id, image_id, category_id, bbox: [x, y, w, h], iscrowd, area}],
                        "categories": [{id, name}]}
    images/            the files the "images" entries name (file_name, relative to it)

Categories become class ids 0..K-1 in the order of their COCO ids (COCO's 1..90 with gaps:
person is 0), their names labels.txt. Each image keeps all its annotations, checked when the
image is encoded (format/annotations.py): boxes partly outside clipped and counted, the others
skipped with the reason. Images without annotations are kept (COCO has about 1% of them).
What cannot be used is reported, never dropped silently: an image entry without its file, an
annotation of an image or category that is not listed, or one without a usable bbox. An image
reached through a link that leaves the images folder is reported, not read, unless `outside_files`
(`--outside-files`).
With `masks` (`convert --masks`, pycocotools installed: the `coco` extra) each object's polygons
or RLE (`segmentation`) become its instance mask, `image/object/mask`, drawn on the file's pixels
and moved with them; an object whose mask cannot be made is skipped with the reason.
"""

from __future__ import annotations

import json
import posixpath
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from shardfeed import lazy
from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio
from shardfeed.format.annotations import SourceObjects
from shardfeed.format.schema import DETECTION, MASK_TYPES
from shardfeed.write.items import Discovery, Item, file_item, linked_out, split_in_name


def looks_like_coco(path: str) -> bool:
    """A .json file (COCO's annotations are one)."""
    return path.lower().endswith(".json")


class CocoSource:
    """A COCO annotations file and the folder of its images (module docstring)."""

    kind = "coco"

    def __init__(
        self, annotations: str, images: str | None = None, masks: bool = False, *, outside_files: bool = False
    ) -> None:
        self.annotations = annotations
        self.root = images or posixpath.dirname(annotations) or "."
        self.masks = masks
        self.outside_files = outside_files  # read images that links place outside the images folder
        self._outside = linked_out(self.root, outside_files)

    def discover(self) -> Discovery:
        if self.masks:
            lazy.coco_mask()  # said once, here, not once per image by the workers
        data = self._read()
        names, category_ids = self._categories(data)
        skipped: list[tuple[str, str]] = []
        by_image: dict[int, list[tuple[dict[str, Any], Box]]] = defaultdict(list)
        listed, ambiguous = self._images(data["images"], skipped)
        split = split_in_name(self.annotations)  # instances_val2017.json: the val split
        for index, annotation in enumerate(data["annotations"]):
            image_id = annotation.get("image_id")
            if _is_id(image_id) and image_id in ambiguous:
                skipped.append((self._annotation(annotation, index), f"image_id {image_id}: {ambiguous[image_id]}"))
                continue
            category_id = annotation.get("category_id")
            usable = _is_id(image_id) and image_id in listed and _is_id(category_id) and category_id in category_ids
            if usable and (box := coco_box(annotation.get("bbox"))) is not None:
                by_image[int(image_id)].append((annotation, box))
                continue
            skipped.append(self._unusable(annotation, index, listed, category_ids))
        items: list[Item] = []
        for image_id, entry in sorted(listed.items(), key=lambda pair: str(pair[1].get("file_name"))):
            key = entry.get("file_name")
            if refusal := confinement.entry_refusal(key):  # a downloaded file names only its own folder's files
                skipped.append((f"{posixpath.basename(self.annotations)}: image {image_id}", refusal))
                continue
            key = confinement.normalised_entry(str(key))
            if refusal := self._outside(key):
                skipped.append((key, refusal))
                continue
            objects = _objects(by_image.get(image_id, []), category_ids, image_id, self.masks)
            item = file_item(self.root, key, -1, split, objects)  # one stat: (0, 0) when it cannot be had
            if item.mtime_ns == 0 and item.size == 0 and not fileio.exists(fileio.join(self.root, key)):
                skipped.append(
                    (key, f"listed in {posixpath.basename(self.annotations)} (image {image_id}) but not found")
                )
                continue
            items.append(item)
        masks = tuple(MASK_TYPES.items()) if self.masks else ()
        presplit = split is not None  # one split, kept as it is unless --split divides it
        return Discovery(
            self.kind, self.root, items, self.root, names, skipped, presplit, task=DETECTION, object_features=masks
        )

    def _images(
        self, images: list[dict[str, Any]], skipped: list[tuple[str, str]]
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        """Image id -> entry for the images whose id and file each name one entry, and id -> why
        for the others: two entries with one id (the earlier was lost and its boxes went on the
        later's pixels) or one file under two ids (written twice with different boxes). Those
        entries go to `skipped` with the reason, and so do their annotations (`discover`)."""
        # ids and file names are whole numbers and text here (`shape_problem`)
        ambiguous = {
            i: f"id {i} names {n} entries of images: which one its annotations belong to cannot be told"
            for i, n in Counter(e["id"] for e in images).items()
            if n > 1
        }
        ids_of: dict[str, set[int]] = defaultdict(set)
        for entry in images:
            ids_of[entry["file_name"]].add(entry["id"])
        for name, ids in ids_of.items():
            if len(ids) == 1:
                continue
            for i in ids:
                ambiguous.setdefault(
                    i, f"file {name!r} is listed under ids {sorted(ids)}: one file, two sets of annotations"
                )
        where = posixpath.basename(self.annotations)
        skipped += [
            (f"{where}: image {e['id']} ({e['file_name']})", ambiguous[e["id"]]) for e in images if e["id"] in ambiguous
        ]
        return {e["id"]: e for e in images if e["id"] not in ambiguous}, ambiguous

    def _unusable(
        self, annotation: dict[str, Any], index: int, listed: dict[int, Any], category_ids: dict[Any, int]
    ) -> tuple[str, str]:
        """(where, why) for an annotation that names no listed image or category, or has no
        usable bbox (the report's entry for it)."""
        where = self._annotation(annotation, index)
        image_id, category_id = annotation.get("image_id"), annotation.get("category_id")
        if not _is_id(image_id) or image_id not in listed:
            return where, f"image_id {image_id!r:.80} is not in images"
        if not _is_id(category_id) or category_id not in category_ids:
            return where, f"category_id {category_id!r:.80} is not in categories"
        return where, f"bbox {annotation.get('bbox')!r:.80} is not [x, y, width, height]"

    def _annotation(self, annotation: dict[str, Any], index: int) -> str:
        """How report.json names an annotation: the file and its id (its place where it has none)."""
        return f"{posixpath.basename(self.annotations)}: annotation {str(annotation.get('id', index))[:80]}"

    def _read(self) -> dict[str, Any]:
        """The annotations file, its three lists checked.

        Raises:
            SourceError: not JSON, or without images/annotations/categories lists.
        """
        try:  # a regular file, sized first: a FIFO hung, /dev/zero never ended
            raw = fileio.read_regular(self.annotations, confinement.MAX_JSON_BYTES, "a COCO annotations file needs")
            data = json.loads(raw)
        except (OSError, ValueError, RecursionError) as e:
            raise SourceError(f"{self.annotations}: not a readable COCO annotations file: {e}") from None
        if not isinstance(data, dict):
            raise SourceError(
                f"{self.annotations}: a COCO annotations file is a JSON object; this is a {type(data).__name__}"
            )
        missing = [k for k in ("images", "annotations", "categories") if not isinstance(data.get(k), list)]
        if missing:
            raise SourceError(f"{self.annotations}: a COCO annotations file has lists {missing}; it has {sorted(data)}")
        if problem := shape_problem(data):
            raise SourceError(f"{self.annotations}: {problem}")
        return dict(data)

    def _categories(self, data: dict[str, Any]) -> tuple[list[str], dict[Any, int]]:
        """Class names in COCO id order, and COCO category id -> class id."""
        repeated = sorted(i for i, n in Counter(c["id"] for c in data["categories"]).items() if n > 1)
        if repeated:
            raise SourceError(f"{self.annotations}: category ids repeat: {repeated}; each category once")
        categories = sorted(data["categories"], key=lambda c: int(c["id"]))
        names = [str(c["name"]) for c in categories]
        if len(set(names)) != len(names):
            raise SourceError(
                f"{self.annotations}: category names repeat: {sorted({n for n in names if names.count(n) > 1})}"
            )
        return names, {c["id"]: i for i, c in enumerate(categories)}


def _is_id(value: Any) -> bool:
    """A COCO id: a whole number as json reads one (True and False are not)."""
    return type(value) is int


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


# What the reader takes of each entry of the three lists: (field, test, what the test wants)
_SHAPES: dict[str, tuple[tuple[str, Callable[[Any], bool], str], ...]] = {
    "images": (("id", _is_id, "a whole number"), ("file_name", _is_text, "text")),
    "categories": (("id", _is_id, "a whole number"), ("name", _is_text, "text")),
    "annotations": (),  # their fields are checked one by one, each bad one a reported annotation
}


def shape_problem(data: dict[str, Any]) -> str | None:
    """The first entry of a COCO file's images, categories and annotations lists that is not the
    shape the reader takes (`_SHAPES`), as 'JSON path: what was expected', or None. Checked
    before anything is read from them (a string id, a list for an entry or a missing name were
    tracebacks)."""
    for key, fields in _SHAPES.items():
        for index, entry in enumerate(data[key]):
            if not isinstance(entry, dict):
                return f"{key}[{index}]: expected an object, got {type(entry).__name__}"
            for field, test, wanted in fields:
                if not test(entry.get(field)):
                    return f"{key}[{index}].{field}: expected {wanted}, got {entry.get(field)!r:.80}"
    return None


Box = tuple[float, float, float, float]
_NUMBER = (int, float)  # what a COCO number may be, as json reads it


def coco_box(bbox: Any) -> Box | None:
    """COCO's [x, y, width, height] as (xmin, ymin, xmax, ymax); None when it is not four numbers
    (NaN and inverted boxes pass here: the check at encoding reports them with the image). Hub
    tables' `objects` boxes are COCO's too (table_objects.py)."""
    if not isinstance(bbox, list) or len(bbox) != 4:
        return None
    x, y, w, h = bbox
    if not (isinstance(x, _NUMBER) and isinstance(y, _NUMBER) and isinstance(w, _NUMBER) and isinstance(h, _NUMBER)):
        return None
    x, y = float(x), float(y)
    return (x, y, x + float(w), y + float(h))


def _objects(
    annotations: list[tuple[dict[str, Any], Box]], category_ids: dict[Any, int], image_id: int, masks: bool
) -> SourceObjects:
    """One image's annotations (each with its box as (xmin, ymin, xmax, ymax)), in the order of
    their ids; with `masks`, each one's segmentation as compact JSON for its instance mask."""
    if len(annotations) > 1:
        annotations = sorted(annotations, key=lambda pair: pair[0].get("id", 0))
    boxes, classes, is_crowd, areas, ids = [], [], [], [], []
    for i, (annotation, box) in enumerate(annotations):  # one pass: COCO files hold millions
        area = annotation.get("area")
        boxes.append(box)
        classes.append(category_ids[annotation["category_id"]])
        is_crowd.append(bool(annotation.get("iscrowd", 0)))
        areas.append(float(area) if isinstance(area, _NUMBER) else None)
        ids.append(int(annotation.get("id", i)))
    return SourceObjects(
        boxes=tuple(boxes),
        classes=tuple(classes),
        is_crowd=tuple(is_crowd),
        areas=tuple(areas),
        ids=tuple(ids),
        source_id=image_id,
        segmentations=tuple(_segmentation(a) for a, _ in annotations) if masks else None,
    )


def _segmentation(annotation: dict[str, Any]) -> str:
    """An annotation's `segmentation` as compact JSON ('' where it has none: reported then)."""
    value = annotation.get("segmentation")
    return json.dumps(value, separators=(",", ":")) if value else ""
