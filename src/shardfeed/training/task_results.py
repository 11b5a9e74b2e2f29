"""What each task adds to a run's metrics.json at the end of `train`, beyond the figures Keras
logged while fitting:

    classification   per-class validation recall, when the training classes are imbalanced
                     (training/imbalance.py)
    multi-label      each class's threshold, chosen for the best F1 on validation (0.5 without
                     one) and written to the run folder for `evaluate` and `predict`; validation's
                     mAP (training/multi_label.py)
    detection        COCO's scores on validation (`val_mAP`, `val_mAP@0.5`, ...; training/detector.py)
"""

from __future__ import annotations

import logging
from typing import Any

from shardfeed.format.manifest import Manifest
from shardfeed.format.schema import CLASSIFICATION, DETECTION, MULTI_LABEL
from shardfeed.training.detector import detection_scores
from shardfeed.training.imbalance import IMBALANCE_RATIO, imbalance_ratio, per_class_recall
from shardfeed.training.inputs import RunInputs
from shardfeed.training.multi_label import Thresholds, validation_thresholds
from shardfeed.training.run_folder import RunFolder

log = logging.getLogger("shardfeed")


def task_results(
    task: str,
    net: Any,
    inputs: RunInputs,
    manifest: Manifest,
    *,
    train_split: str,
    validation: str | None,
    class_names: list[str],
    folder: RunFolder,
) -> dict[str, Any]:
    """The `task`'s figures for metrics.json (module docstring), from the trained `net`."""
    if task == CLASSIFICATION:
        ratio = imbalance_ratio(manifest.split(train_split).class_counts)
        if validation is None or ratio <= IMBALANCE_RATIO:
            return {}
        recall = per_class_recall(net, inputs.evaluation(validation), class_names)
        return {"imbalance_ratio": ratio, "per_class_recall": recall}
    if task == MULTI_LABEL:
        chosen, found = Thresholds.default(class_names), dict[str, Any]()
        if validation is not None:
            chosen, found = validation_thresholds(net, inputs.evaluation(validation), validation, class_names)
        folder.write_thresholds(chosen)  # without validation: the default, said in thresholds.json
        return found
    if task == DETECTION and validation is not None:
        scores = detection_scores(net, inputs.evaluation(validation), class_names)
        log.info(
            "validation (%s): mAP@0.5 %.4f, mAP %.4f (COCO's, pycocotools)",
            validation,
            scores["mAP@0.5"],
            scores["mAP"],
        )
        return {f"val_{key}": value for key, value in scores.items()}
    return {}
