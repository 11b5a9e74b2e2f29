"""What a run learns, by the data's task: the head's activation, the loss, the metrics Keras logs
while fitting, and the one metric that checkpoints, the end-of-training checks and summaries
read (`metric`; validation's is `val_<metric>`).

    classification   softmax, sparse categorical cross-entropy, accuracy (top-5 past 5 classes)
    multi-label      sigmoid per class, binary cross-entropy (Keras' on k-hot vectors), the area
                     under each class's precision-recall curve averaged over classes (`auc_pr`:
                     Keras' `AUC(curve="PR", multi_label=True)`, an interpolated estimate of
                     mAP; `evaluate` gives mAP itself, training/multi_label.py) and binary accuracy

Detection and segmentation records feed `load` and `grain_dataset`; `train` refuses them with
the reason until their models are built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.schema import CLASSIFICATION, MULTI_LABEL

TOP_K = 5  # top-k accuracy is logged past this many classes (with fewer it is always 1.0: noise)


@dataclass(frozen=True)
class Objective:
    """One task's head, loss and metrics (module docstring)."""

    task: str
    activation: str  # the head's: "softmax" or "sigmoid"
    metric: str  # the logged metric that says how good the model is ("accuracy", "auc_pr")

    def loss(self, keras: Any) -> Any:
        if self.task == MULTI_LABEL:
            return keras.losses.BinaryCrossentropy()
        return keras.losses.SparseCategoricalCrossentropy()

    def metrics(self, keras: Any, classes: int) -> list[Any]:
        if self.task == MULTI_LABEL:
            return [
                keras.metrics.AUC(curve="PR", multi_label=True, num_labels=classes, name=self.metric),
                keras.metrics.BinaryAccuracy(name="binary_accuracy"),
            ]
        metrics: list[Any] = ["accuracy"]
        if classes > TOP_K:
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=TOP_K, name=f"top{TOP_K}"))
        return metrics


def objective_for(task: str, path: str) -> Objective:
    """The objective of a run on `path`, a folder of `task` records.

    Raises:
        OptionError: a task `train` has no model for yet (detection, segmentation).
    """
    if task == CLASSIFICATION:
        return Objective(task, "softmax", "accuracy")
    if task == MULTI_LABEL:
        return Objective(task, "sigmoid", "auc_pr")
    raise OptionError(
        f"{path} holds {task} records: `train` learns one class per image or several (multi-label) so far; "
        f"load({path!r}) feeds them to a model of your own (KerasHub's detectors and segmenters take its batches)"
    )
