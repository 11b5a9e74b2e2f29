"""Detection: boxes with a class each (training/detector.py: the model and its scores).

train      KerasHub's RetinaNet (`DETECTOR`, 'retinanet'; on a backbone: training/encoders.py),
           its focal and smooth-L1 losses; Keras logs the loss alone (`loss`: lower is better);
           boxes padded to the most objects an image of the run's splits holds; flips (a crop
           cuts objects away); more epochs and a larger batch than the others (from random
           weights); sizes whose objects no anchor reaches refused before fitting; at the end
           COCO's scores on validation (`val_mAP`, `val_mAP@0.5`, ...)
evaluate   COCO's mAP, mAP@0.5, mAP@0.75, by size and per class, with the boxes in the frame the
           model sees (the image resized to the run's size, as `load` makes it)
predict    a row a box, in the file's own pixels (a file with none: a row with none), and the
           same boxes as COCO's results document, OUTPUT_coco.json
report     each class's AP; the images with the most misses and false detections, drawn with
           their true and their detected boxes
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
from tqdm import tqdm

from shardfeed.format.manifest import Manifest
from shardfeed.format.schema import DETECTION
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.options import DecodeOptions, ReadOptions
from shardfeed.tools import html_page as h
from shardfeed.tools.preview import drawn_boxes
from shardfeed.training.detection_metrics import ImageErrors, ImageObjects, coco_results, image_errors, summary_line
from shardfeed.training.detector import (
    DETECTOR,
    REACH_IMAGES,
    STRIDE,
    box_rows,
    check_anchor_reach,
    compile_args,
    detection_scores,
    detections,
    predicted_boxes,
    truths,
)
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import detector, load_model
from shardfeed.training.options import DETECTION_BATCH_SIZE, DETECTION_EPOCHS
from shardfeed.training.prediction_files import draw_tiles, skipped_rows, write_csv
from shardfeed.training.run_folder import RunFolder, RunRecord
from shardfeed.training.tasks.base import WORST, Evaluation, ModelAsk, Objective, Prediction, Trained

log = logging.getLogger("shardfeed")


class Detection(Objective):
    """Boxes with a class each (module docstring)."""

    task: ClassVar[str] = DETECTION
    activation: ClassVar[str] = ""  # KerasHub's heads
    metric: ClassVar[str] = "loss"
    own_model: ClassVar[str | None] = DETECTOR
    what: ClassVar[str] = "boxes"
    size_multiple: ClassVar[int | None] = STRIDE
    epochs: ClassVar[int] = DETECTION_EPOCHS
    batch_size: ClassVar[int] = DETECTION_BATCH_SIZE
    defaults_why: ClassVar[str] = "for boxes: a detector from random weights needs them"

    def build(self, ask: ModelAsk) -> Any:
        return detector(ask.name, ask.class_names, ask.image_size, channels=ask.channels, weights=ask.weights)

    def decode(self, decode: DecodeOptions, facts: Manifest | None, splits: Sequence[str | None]) -> DecodeOptions:
        """Boxes padded to the most objects an image of `splits` holds (the manifest's fact), so
        every batch has one shape and XLA, JAX and PyTorch compile the step once, not again for
        each new count; left to each batch where the facts are not known (`facts` None: a
        mixture of folders; a folder written before the count was kept), so no object is ever cut."""
        if facts is None:
            return decode
        counts = [facts.split(name).objects for name in splits if name is not None]
        known = [c.most for c in counts if c is not None and c.most is not None]
        if not known or len(known) < len(counts):
            return decode
        return replace(decode, max_objects=max(1, *known))

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        """The detector's own losses, and no metric Keras could log per batch."""
        return compile_args()

    def augment(self, count: int, tiny_set: int) -> tuple[str, str] | None:
        """The setting the detector was measured with, whatever the count."""
        return "flip", "boxes: flips, which keep every object whole (a crop cuts some away)"

    def check_data(self, inputs: RunInputs, split: str, batch_size: int, image_size: tuple[int, int]) -> None:
        """A size whose objects no anchor reaches: refused (training/detector.py)."""
        check_anchor_reach(inputs.evaluation(split).take(-(-REACH_IMAGES // batch_size)), image_size)

    def results(self, run: Trained) -> dict[str, Any]:
        if run.validation is None:
            return {}
        scores = detection_scores(run.net, run.inputs.evaluation(run.validation), run.class_names)
        log.info(
            "validation (%s): mAP@0.5 %.4f, mAP %.4f (COCO's, pycocotools)",
            run.validation,
            scores["mAP@0.5"],
            scores["mAP"],
        )
        return {f"val_{key}": value for key, value in scores.items()}

    def class_names(self, record: RunRecord, net: Any) -> list[str]:
        """The run's (KerasHub's detector has no `ClassNames` layer)."""
        return record.class_names

    def evaluate(self, net: Any, ds: Any, names: list[str], folder: RunFolder, run: Evaluation) -> dict[str, Any]:
        with tqdm(total=run.total, unit="img", desc=f"evaluate {run.split}", disable=None) as bar:
            result = detection_scores(net, _counted(ds, bar), names)
        return {**result, "examples": run.total}

    def predict(self, net: Any, folder: RunFolder, record: RunRecord, names: list[str], ask: Prediction) -> list[dict]:
        """A CSV row per box in the file's own pixels, and the same boxes as COCO's results
        document (OUTPUT_coco.json: image ids 1..n in the CSV's file order, category ids class
        id + 1, bbox [x, y, width, height])."""
        m, limit = ask.manifest, ask.grid_size if ask.grid else 0
        records = IndexedRecords(m, ask.split)
        placed, tiles = predicted_boxes(net, record.inputs(m), records, ask.split, names, ask.batch_size, limit)
        rows = [row for name, found in placed for row in box_rows(name, found, names)]
        rows = sorted([*rows, *skipped_rows(m.path)], key=lambda r: (r["file"], -r.get("score", 0.0)))
        write_csv(ask.output, rows, ["file", "class", "score", "xmin", "ymin", "xmax", "ymax", "error"])
        files = sorted({r["file"] for r in rows})  # image ids 1..n in the CSV's file order
        ids = {file: i for i, file in enumerate(files, start=1)}
        results = coco_results([found for _, found in placed], [ids[name] for name, _ in placed])
        for result in results:
            result["file_name"] = files[result["image_id"] - 1]
        with open(os.path.splitext(ask.output)[0] + "_coco.json", "w") as f:
            json.dump(results, f)
        if ask.grid:
            draw_tiles(tiles, ask.grid, f"detections of {os.path.basename(ask.output)}")
        return rows

    def per_class(self, result: dict[str, Any], split: str) -> str:
        """COCO's figures, and each class's AP."""
        rows = [[h.esc(name), "—" if ap is None else f"{ap:.3f}"] for name, ap in result["per_class_ap"].items()]
        summary = f"{split}: {result['examples']:,} images, {summary_line(result)} (COCO's, pycocotools)"
        note = '<p class="note">AP: averaged over IoU 0.5-0.95, as COCO\'s mAP; —: no object of that class</p>'
        return h.section("Per class", f"<p>{h.esc(summary)}</p>", h.table(["class", "AP"], rows, (1,)), note)

    def worst(self, folder: RunFolder, inputs: RunInputs, split: str, names: list[str]) -> str:
        """The held-out images with the most misses and false detections at IoU 0.5 (pycocotools'
        matching: `detection_metrics.image_errors`), each as the model saw it, once with its true
        boxes and once with the detected ones; only the WORST worst are held."""
        net = load_model(folder.model_file())
        found: list[tuple[int, str, np.ndarray, ImageObjects, ImageObjects, ImageErrors]] = []
        for images, targets, files in inputs.evaluation(split, read=ReadOptions(with_filenames=True)):
            pixels, truth, detected = np.asarray(images), truths(images, targets), detections(net, images)
            for i, errors in enumerate(image_errors(truth, detected, names)):
                if errors.count:
                    found.append((-errors.count, files[i].numpy().decode(), pixels[i], truth[i], detected[i], errors))
            found = sorted(found, key=lambda x: x[:2])[:WORST]
        if not found:
            return h.section(
                "Worst detected", f"<p>every {h.esc(split)} object is found, and nothing else (IoU 0.5)</p>"
            )
        tiles = []
        for _, file, image, truth_here, detected_here, errors in found:
            for objects, said in (
                (truth_here, "true"),
                (detected_here, f"found: {errors.missed} missed, {errors.false} false"),
            ):
                tile = drawn_boxes(file, image, objects.boxes.tolist(), objects.classes.tolist(), names)
                tiles.append(h.figure(h.thumbnail(tile.image, 160), f"{file} {said}: {tile.caption}"))
        note = "each image twice: its true boxes, then the detected ones; misses and false detections at IoU 0.5"
        return h.section(
            f"Worst detected ({split})", f'<p class="note">{note}</p>', f'<div class="grid">{"".join(tiles)}</div>'
        )


def _counted(batches: Any, bar: Any) -> Any:
    """`batches`, each counted on the progress `bar` as it passes."""
    for images, targets in batches:
        bar.update(len(images))
        yield images, targets
