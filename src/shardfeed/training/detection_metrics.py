"""Detection scores as the field reports them: COCO's average precision, computed by pycocotools'
own `COCOeval` (not re-implemented), from boxes in pixels of each image as stored.

    mAP           AP averaged over IoU thresholds 0.50:0.05:0.95 (COCO's primary figure)
    mAP@0.5       AP at IoU 0.5 (Pascal VOC's figure)
    mAP@0.75      AP at IoU 0.75
    mAP small / medium / large    mAP over objects of area < 32², < 96², larger (the true
                  objects' `area`, COCO's own or the box's, as stored in the records)
    per-class AP  each class's AP over the ten thresholds (None: no true object of that class
                  and no prediction of it)

The ground truth is what the records hold (`image/object/*`: boxes, classes, is_crowd, area;
crowd regions neither count as misses nor penalise detections inside them, as in COCO); up to
100 detections an image are scored (COCO's maxDets). `coco_ground_truth` and `coco_results`
write the two COCO documents, so anyone can run pycocotools on them by hand and get the same
figures (`predict` writes the results document: COCO's detection results format).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardfeed import lazy

SIZES = ("small", "medium", "large")


@dataclass(frozen=True)
class ImageObjects:
    """One image's objects in pixels of the image as stored: `boxes` [N, 4] (xmin, ymin, xmax,
    ymax), `classes` [N] ids 0..K-1; for the truth `is_crowd` and `areas` (None: the boxes'),
    for predictions `scores` [N]."""

    width: int
    height: int
    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray | None = None
    is_crowd: np.ndarray | None = None
    areas: np.ndarray | None = None


def coco_ground_truth(images: Sequence[ImageObjects], names: Sequence[str]) -> dict[str, Any]:
    """The COCO annotations document of `images` (image ids 1..n in order, category ids 1..K:
    class id + 1; bbox [x, y, width, height])."""
    annotations: list[dict[str, Any]] = []
    for image_id, image in enumerate(images, start=1):
        boxes = np.asarray(image.boxes, np.float64).reshape(-1, 4)
        areas = image.areas if image.areas is not None else (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        for box, label, area, is_crowd in zip(boxes, image.classes, areas, _crowd(image), strict=True):
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": int(label) + 1,
                    "bbox": _xywh(box),
                    "area": float(area),
                    "iscrowd": int(bool(is_crowd)),
                }
            )
    return {
        "images": [{"id": i, "width": im.width, "height": im.height} for i, im in enumerate(images, start=1)],
        "annotations": annotations,
        "categories": [{"id": k + 1, "name": name} for k, name in enumerate(names)],
    }


def coco_results(predictions: Sequence[ImageObjects], image_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """COCO's detection results format: one {image_id, category_id, bbox, score} per box, the
    image ids 1..n in order unless given (a source's own COCO ids, for `predict`)."""
    ids = list(image_ids) if image_ids is not None else list(range(1, len(predictions) + 1))
    results: list[dict[str, Any]] = []
    for image_id, image in zip(ids, predictions, strict=True):
        boxes = np.asarray(image.boxes, np.float64).reshape(-1, 4)
        scores = image.scores if image.scores is not None else np.ones(len(boxes))
        for box, label, score in zip(boxes, image.classes, scores, strict=True):
            results.append(
                {"image_id": int(image_id), "category_id": int(label) + 1, "bbox": _xywh(box), "score": float(score)}
            )
    return results


def detection_metrics(
    truth: Sequence[ImageObjects], predictions: Sequence[ImageObjects], names: Sequence[str]
) -> dict[str, Any]:
    """COCO's figures (module docstring) of `predictions` against `truth`, image for image.

    Raises:
        MissingDependencyError: pycocotools is not installed (the `coco` extra).
    """
    scoring = _matched(truth, predictions, names)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        scoring.accumulate()
        scoring.summarize()
    stats = [None if v < 0 else float(v) for v in scoring.stats]
    return {
        "examples": len(truth),
        "objects": sum(int(np.sum(~_crowd(t))) for t in truth),
        "mAP": stats[0],
        "mAP@0.5": stats[1],
        "mAP@0.75": stats[2],
        **{f"mAP_{size}": stats[3 + i] for i, size in enumerate(SIZES)},
        "per_class_ap": _per_class(scoring.eval["precision"], names),
        "class_names": list(names),
    }


@dataclass(frozen=True)
class ImageErrors:
    """What one image's detections got wrong at IoU 0.5 (`image_errors`)."""

    missed: int  # true objects no detection of their class overlaps by IoU >= 0.5
    false: int  # detections that overlap no true object of their class so

    @property
    def count(self) -> int:
        return self.missed + self.false


def image_errors(
    truth: Sequence[ImageObjects], predictions: Sequence[ImageObjects], names: Sequence[str]
) -> list[ImageErrors]:
    """Each image's misses and false detections at IoU 0.5 (the report's worst images), as
    pycocotools matches them for mAP@0.5: per class, detections in score order each take the
    free true object they overlap most; crowd regions are neither missed nor make the
    detections inside them false; every detection counts (KerasHub's decoder keeps those of
    confidence 0.5 and above).

    Raises:
        MissingDependencyError: pycocotools is not installed (the `coco` extra).
    """
    scoring = _matched(truth, predictions, names)
    missed, false = np.zeros(len(truth), int), np.zeros(len(truth), int)
    everywhere, at_half = list(scoring.params.areaRng[0]), 0  # COCO's "all" sizes; iouThrs[0] is 0.5
    for entry in scoring.evalImgs:  # per (class, area range, image); None: neither truth nor detection
        if entry is None or list(entry["aRng"]) != everywhere:
            continue
        image = entry["image_id"] - 1
        missed[image] += int(np.sum((entry["gtMatches"][at_half] == 0) & ~np.asarray(entry["gtIgnore"], bool)))
        false[image] += int(np.sum((entry["dtMatches"][at_half] == 0) & ~entry["dtIgnore"][at_half]))
    return [ImageErrors(int(m), int(f)) for m, f in zip(missed, false, strict=True)]


def _matched(truth: Sequence[ImageObjects], predictions: Sequence[ImageObjects], names: Sequence[str]) -> Any:
    """pycocotools' `COCOeval` of `predictions` against `truth` (image ids 1..n), its
    per-image matching done (`evaluate`), not yet accumulated."""
    assert len(truth) == len(predictions), f"{len(truth)} images of truth, {len(predictions)} of predictions"
    coco_module = lazy.coco_eval()
    ground = coco_module.COCO()
    ground.dataset = coco_ground_truth(truth, names)
    results = coco_results(predictions)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        ground.createIndex()
        found = ground.loadRes(results) if results else coco_module.COCO()
        if not results:
            found.dataset = {"images": ground.dataset["images"], "annotations": [], "categories": []}
            found.createIndex()
        scoring = coco_module.COCOeval(ground, found, "bbox")
        scoring.evaluate()
    return scoring


def _per_class(precision: np.ndarray, names: Sequence[str]) -> dict[str, float | None]:
    """Each class's AP over the IoU thresholds, all areas, maxDets 100: COCOeval's `precision`
    [T, R, K, A, M] averaged where it is defined (-1: no true object of the class)."""
    out: dict[str, float | None] = {}
    for k, name in enumerate(names):
        values = precision[:, :, k, 0, -1]
        defined = values[values > -1]
        out[name] = float(defined.mean()) if defined.size else None
    return out


def summary_line(metrics: dict[str, Any]) -> str:
    """'mAP 0.xxxx  mAP@0.5 0.xxxx  mAP@0.75 0.xxxx' (n/a where nothing was scored)."""
    return "  ".join(f"{key} {_figure(metrics[key])}" for key in ("mAP", "mAP@0.5", "mAP@0.75"))


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _xywh(box: np.ndarray) -> list[float]:
    x0, y0, x1, y1 = (float(v) for v in box)
    return [x0, y0, x1 - x0, y1 - y0]


def _crowd(image: ImageObjects) -> np.ndarray:
    count = len(np.asarray(image.classes))
    return np.asarray(image.is_crowd, bool) if image.is_crowd is not None else np.zeros(count, bool)
