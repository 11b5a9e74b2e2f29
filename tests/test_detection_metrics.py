"""COCO's detection scores through pycocotools: figures worked out by hand for boxes placed at
known overlaps, and the same figures from pycocotools run by hand on the documents we write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardfeed.training.detection_metrics import (
    ImageObjects,
    coco_ground_truth,
    coco_results,
    detection_metrics,
    image_errors,
    summary_line,
)

NAMES = ["square", "disc"]


def image(
    boxes: list[list[float]], classes: list[int], scores: list[float] | None = None, **kw: object
) -> ImageObjects:
    return ImageObjects(
        640,
        480,
        np.array(boxes, np.float64).reshape(-1, 4),
        np.array(classes, np.int64),
        None if scores is None else np.array(scores),
        **kw,  # type: ignore[arg-type]
    )


def overlaps() -> tuple[list[ImageObjects], list[ImageObjects]]:
    """Image 1: a large square (100 x 100) found as a box of IoU 0.62 (its top 62 rows); image 2:
    a medium disc (40 x 40) found exactly."""
    truth = [image([[0, 0, 100, 100]], [0]), image([[10, 10, 50, 50]], [1])]
    found = [image([[0, 0, 100, 62]], [0], [0.9]), image([[10, 10, 50, 50]], [1], [0.8])]
    return truth, found


def test_scores_of_boxes_at_known_overlaps() -> None:
    # IoU 0.62 passes the thresholds 0.50, 0.55 and 0.60 of the ten (0.50:0.05:0.95): the square's
    # AP is 3/10; the disc's, found exactly, is 1 at all ten.
    truth, found = overlaps()
    metrics = detection_metrics(truth, found, NAMES)
    assert metrics["per_class_ap"] == pytest.approx({"square": 0.3, "disc": 1.0})
    assert metrics["mAP"] == pytest.approx(0.65) and metrics["mAP@0.5"] == pytest.approx(1.0)
    assert metrics["mAP@0.75"] == pytest.approx(0.5)  # the disc only
    # areas: 10,000 px (>= 96²: large), 1,600 px (medium); no small object: no figure
    assert metrics["mAP_large"] == pytest.approx(0.3) and metrics["mAP_medium"] == pytest.approx(1.0)
    assert metrics["mAP_small"] is None and metrics["examples"] == 2 and metrics["objects"] == 2
    assert summary_line(metrics) == "mAP 0.6500  mAP@0.5 1.0000  mAP@0.75 0.5000"


def test_a_false_detection_ranked_first_halves_the_precision_and_crowds_forgive() -> None:
    truth = [image([[10, 10, 50, 50], [200, 200, 400, 400]], [0, 0], is_crowd=np.array([False, True]))]
    # one false box scored above the true one: at full recall the precision is 1/2, and
    # COCO's precision envelope makes it 1/2 at every recall level
    wrong_first = [image([[500, 300, 560, 360], [10, 10, 50, 50]], [0, 0], [0.9, 0.5])]
    assert detection_metrics(truth, wrong_first, NAMES)["per_class_ap"]["square"] == pytest.approx(0.5)
    # ranked below the true one it costs nothing; a box inside the crowd region is neither
    wrong_last = [image([[10, 10, 50, 50], [500, 300, 560, 360], [250, 250, 300, 300]], [0, 0, 0], [0.9, 0.5, 0.95])]
    metrics = detection_metrics(truth, wrong_last, NAMES)
    assert metrics["per_class_ap"] == {"square": pytest.approx(1.0), "disc": None} and metrics["objects"] == 1


def test_each_images_misses_and_false_detections_at_iou_half() -> None:
    """Worked by hand: IoU of [0,0,100,100] with [0,0,100,62] is 0.62 (a match at 0.5), with
    [0,0,100,45] 0.45 (none); a box of the wrong class matches nothing; a box inside a crowd
    region is not false; the crowd region is not missed."""
    truth = [
        image([[0, 0, 100, 100], [300, 300, 340, 340]], [0, 1]),  # found, and missed
        image([[0, 0, 100, 100]], [0]),  # found only too loosely: missed, and the box false
        image([[10, 10, 50, 50]], [1]),  # found as the wrong class: missed, and the box false
        image([[200, 200, 400, 400]], [0], is_crowd=np.array([True])),  # a crowd, a box in it
        image([], []),  # nothing there, nothing found
        image([[10, 10, 50, 50]], [0]),  # found twice: the second box is false
    ]
    found = [
        image([[0, 0, 100, 62]], [0], [0.9]),
        image([[0, 0, 100, 45]], [0], [0.9]),
        image([[10, 10, 50, 50]], [0], [0.8]),
        image([[220, 220, 300, 300]], [0], [0.7]),
        image([], [], []),
        image([[10, 10, 50, 50], [11, 10, 50, 50]], [0, 0], [0.9, 0.6]),
    ]
    errors = image_errors(truth, found, NAMES)
    assert [(e.missed, e.false) for e in errors] == [(1, 0), (1, 1), (1, 1), (0, 0), (0, 0), (0, 1)]
    assert [e.count for e in errors] == [1, 2, 2, 0, 0, 1]


def test_no_detection_scores_zero() -> None:
    truth, _ = overlaps()
    metrics = detection_metrics(truth, [image([], []), image([], [])], NAMES)
    assert metrics["mAP"] == 0.0 and metrics["per_class_ap"] == {"square": 0.0, "disc": 0.0}


def test_pycocotools_by_hand_on_our_documents_gives_the_same_figures(tmp_path: Path) -> None:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    rng = np.random.default_rng(3)
    truth, found = [], []
    for _ in range(30):  # random boxes, random hits and misses, both classes
        count = int(rng.integers(1, 5))
        x0, y0 = rng.uniform(0, 500, count), rng.uniform(0, 380, count)
        w, h = rng.uniform(8, 140, count), rng.uniform(8, 100, count)
        boxes = np.stack([x0, y0, x0 + w, y0 + h], axis=1)
        classes = rng.integers(0, 2, count)
        truth.append(image(boxes.tolist(), classes.tolist()))
        jitter = boxes + rng.normal(0, 6, boxes.shape)
        keep = rng.random(count) < 0.8
        found.append(image(jitter[keep].tolist(), classes[keep].tolist(), rng.uniform(0, 1, int(keep.sum())).tolist()))
    ours = detection_metrics(truth, found, NAMES)
    (tmp_path / "truth.json").write_text(json.dumps(coco_ground_truth(truth, NAMES)))
    (tmp_path / "found.json").write_text(json.dumps(coco_results(found)))
    ground = COCO(str(tmp_path / "truth.json"))
    by_hand = COCOeval(ground, ground.loadRes(str(tmp_path / "found.json")), "bbox")
    by_hand.evaluate()
    by_hand.accumulate()
    by_hand.summarize()
    keys = ["mAP", "mAP@0.5", "mAP@0.75", "mAP_small", "mAP_medium", "mAP_large"]
    assert [ours[k] for k in keys] == [float(v) for v in by_hand.stats[:6]]  # identical, not close
    assert 0.2 < ours["mAP"] < 0.9  # the jittered boxes are partly right: a figure that says something
