"""Segmentation: a class a pixel (training/segmentation.py holds its scores and pictures).

train      a U-Net (`SEGMENTER`, 'small_unet', or on a backbone: training/encoders.py), softmax per
           pixel, sparse categorical cross-entropy with 255 ignored, Keras' mean IoU over the
           classes (`mean_iou`); random-resized crops and flips, which masks follow
evaluate   mean IoU, per-class IoU and pixel accuracy; images drawn with their true and predicted masks
predict    a mask a file (a PNG of class ids, the file's size, in OUTPUT_masks beside the CSV: the
           image letterboxed whole into the model and the mask cut back out)
report     per class its pixels and IoU, and the images with their masks
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from shardfeed.format.schema import IGNORED_LABEL, SEGMENTATION
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.options import DecodeOptions
from shardfeed.tools import html_page as h
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import SEGMENTER, pixel_crossentropy, unet
from shardfeed.training.prediction_files import skipped_rows, write_csv
from shardfeed.training.run_folder import MASKS_GRID, RunFolder, RunRecord
from shardfeed.training.segmentation import draw_masks, masks_scored, predicted_masks
from shardfeed.training.tasks.base import Evaluation, ModelAsk, Objective, Prediction


class Segmentation(Objective):
    """A class a pixel (module docstring)."""

    task: ClassVar[str] = SEGMENTATION
    activation: ClassVar[str] = "softmax"
    metric: ClassVar[str] = "mean_iou"
    own_model: ClassVar[str | None] = SEGMENTER
    what: ClassVar[str] = "masks"
    size_multiple: ClassVar[int | None] = 8  # the small U-Net's 3 poolings

    def build(self, ask: ModelAsk) -> Any:
        return unet(ask.name, ask.class_names, ask.image_size, channels=ask.channels, weights=ask.weights)

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        if keras.backend.backend() == "torch":  # Keras' own fails there (training/models.py)
            loss = pixel_crossentropy()(ignore_class=IGNORED_LABEL)
        else:
            loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=IGNORED_LABEL)
        iou = keras.metrics.MeanIoU(classes, sparse_y_pred=False, ignore_class=IGNORED_LABEL, name=self.metric)
        return {"loss": loss, "metrics": [iou]}

    def augment(self, count: int, tiny_set: int) -> tuple[str, str] | None:
        if count < tiny_set:
            return None  # too few for any: as every task
        return "inception", "segmentation masks: random-resized crops and flips, which masks follow"

    def evaluate(self, net: Any, ds: Any, names: list[str], folder: RunFolder, run: Evaluation) -> dict[str, Any]:
        return masks_scored(net, ds, names, run.total, os.path.join(run.out, MASKS_GRID))

    def predict(self, net: Any, folder: RunFolder, record: RunRecord, names: list[str], ask: Prediction) -> list[dict]:
        """Masks as PNGs in the folder OUTPUT_masks beside the CSV, whose rows name them."""
        m = ask.manifest
        decode = DecodeOptions(channels=record.channels, letterbox=True)
        inputs = RunInputs(m, record.batch_size, record.image_size, decode=decode)
        masks_dir = os.path.splitext(ask.output)[0] + "_masks"
        limit = ask.grid_size if ask.grid else 0
        records = IndexedRecords(m, ask.split)
        rows, shown = predicted_masks(net, inputs, records, ask.split, names, masks_dir, ask.batch_size, limit)
        rows = sorted([*rows, *skipped_rows(m.path)], key=lambda r: r["file"])
        write_csv(ask.output, rows, ["file", "mask", "classes", "error"])
        if ask.grid:
            draw_masks(sorted(shown, key=lambda t: t[0]), names, ask.grid)
        return rows

    def per_class(self, result: dict[str, Any], split: str) -> str:
        """Per class: its pixels and IoU, and images with their masks."""
        rows = [
            [h.esc(name), f"{result['per_class_pixels'][name]:,}", "—" if iou is None else f"{iou:.3f}"]
            for name, iou in result["per_class_iou"].items()
        ]
        iou, accuracy = result["mean_iou"], result["pixel_accuracy"]
        summary = f"{split}: {result['examples']:,} images, mean IoU {iou or 0:.4f}, pixel accuracy {accuracy or 0:.4f}"
        table = h.table(["class", "pixels", "IoU"], rows, (1, 2))
        grid = h.png_file(os.path.join(result["output_dir"], MASKS_GRID))
        return h.section("Per class", f"<p>{h.esc(summary)}</p>", table, grid)
