"""Multi-label: a set of classes an image (training/multi_label.py holds its scores).

train      a sigmoid per class, binary cross-entropy (Keras' on k-hot vectors), the area under each
           class's precision-recall curve averaged over classes (`auc_pr`: Keras'
           `AUC(curve="PR", multi_label=True)`, an interpolated estimate of mAP) and binary
           accuracy; at the end each class's threshold, chosen for the best F1 on validation (0.5
           without one), written to the run folder for `evaluate` and `predict`, and validation's mAP
evaluate   mAP, per-class AP and F1 at the run's thresholds, AP drawn as bars
predict    a row a file: the classes at or above their thresholds, and every class's score
report     per class its AP, threshold, precision, recall and F1; the images whose label sets are
           wrong, worst class first
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from shardfeed.format.schema import MULTI_LABEL
from shardfeed.tools import html_page as h
from shardfeed.training.multi_label import (
    Thresholds,
    multi_label_metrics,
    plot_average_precision,
    validation_thresholds,
)
from shardfeed.training.run_folder import AVERAGE_PRECISION, RunFolder
from shardfeed.training.tasks.base import Evaluation, Trained
from shardfeed.training.tasks.classification import Classification


class MultiLabel(Classification):
    """A set of classes an image (module docstring): a classifier with a sigmoid per class."""

    task: ClassVar[str] = MULTI_LABEL
    activation: ClassVar[str] = "sigmoid"
    metric: ClassVar[str] = "auc_pr"
    class_weights: ClassVar[bool] = False

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        metrics = [
            keras.metrics.AUC(curve="PR", multi_label=True, num_labels=classes, name=self.metric),
            keras.metrics.BinaryAccuracy(name="binary_accuracy"),
        ]
        return {"loss": keras.losses.BinaryCrossentropy(), "metrics": metrics}

    def results(self, run: Trained) -> dict[str, Any]:
        chosen, found = Thresholds.default(run.class_names), dict[str, Any]()
        if run.validation is not None:
            batches = run.inputs.evaluation(run.validation)
            chosen, found = validation_thresholds(run.net, batches, run.validation, run.class_names)
        run.folder.write_thresholds(chosen)  # without validation: the default, said in thresholds.json
        return found

    def evaluate(self, net: Any, ds: Any, names: list[str], folder: RunFolder, run: Evaluation) -> dict[str, Any]:
        p, y = self.scored(net, ds, run)
        thresholds = folder.read_thresholds(names)
        result = multi_label_metrics(p, y, names, np.asarray(thresholds.values))
        result["thresholds_chosen_on"] = thresholds.chosen_on
        plot_average_precision(result, os.path.join(run.out, AVERAGE_PRECISION), run.split)
        return result

    def rows_for(self, folder: RunFolder, names: list[str], top_k: int) -> Any:
        """A file's row: the classes at or above their thresholds, and every class's score."""
        thresholds = folder.read_thresholds(names).values

        def tags(file: str, p: np.ndarray) -> dict[str, Any]:
            chosen = [name for name, score, t in zip(names, p, thresholds, strict=True) if score >= t]
            scores = {f"score:{n}": float(v) for n, v in zip(names, p, strict=True)}
            return {"file": file, "labels": ";".join(chosen), **scores}

        return tags

    def columns(self, names: list[str], top_k: int) -> list[str]:
        """The CSV's columns: the label set and each class's score."""
        return ["file", "labels", *(f"score:{n}" for n in names), "error"]

    def per_class(self, result: dict[str, Any], split: str) -> str:
        """Per class: images, AP, the threshold and what it gives."""

        def shown(value: float | None) -> str:
            return "—" if value is None else f"{value:.3f}"

        rows = [
            [h.esc(name), f"{c['images']:,}", shown(c["ap"]), f"{c['threshold']:.3f}"]
            + [shown(c[k]) for k in ("precision", "recall", "f1")]
            for name, c in result["per_class"].items()
        ]
        scored = shown(result["mAP"])
        summary = f"{split}: {result['examples']:,} images, mAP {scored}, micro F1 {result['micro_f1']:.4f}"
        table = h.table(["class", "images", "AP", "threshold", "precision", "recall", "F1"], rows, (1, 2, 3, 4, 5, 6))
        bars = h.png_file(os.path.join(result["output_dir"], AVERAGE_PRECISION))
        note = '<p class="note">—: no image of that class in the split (AP, recall) or none predicted (precision)</p>'
        return h.section("Per class", f"<p>{h.esc(summary)}</p>", table, note, bars)

    def wrong(self, folder: RunFolder, names: list[str]) -> Any:
        """An image is wrong when its label set is; how wrong: its worst class's score, farthest
        from its truth."""
        limits = np.asarray(folder.read_thresholds(names).values)

        def judged(p: np.ndarray, label: np.ndarray) -> tuple[float, str, str] | None:
            truth, guessed = label > 0, p >= limits
            if not (guessed != truth).any():
                return None
            said, real = (";".join(np.array(names)[m]) or "(none)" for m in (guessed, truth))
            return 1 - float(np.abs(truth - p).max()), said, real

        return judged
