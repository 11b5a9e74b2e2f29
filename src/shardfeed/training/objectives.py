"""What a run learns, by the data's task: the head's activation, the loss, the metrics Keras logs
while fitting, and the one metric that checkpoints, the end-of-training checks and summaries
read (`metric`; validation's is `val_<metric>`).

    classification   softmax, sparse categorical cross-entropy, accuracy (top-5 past 5 classes)
    multi-label      sigmoid per class, binary cross-entropy (Keras' on k-hot vectors), the area
                     under each class's precision-recall curve averaged over classes (`auc_pr`:
                     Keras' `AUC(curve="PR", multi_label=True)`, an interpolated estimate of
                     mAP; `evaluate` gives mAP itself, training/multi_label.py) and binary accuracy
    segmentation     a small U-Net (`models.SEGMENTER`, 'small_unet'), softmax per pixel, sparse categorical
                     cross-entropy with 255 ignored, Keras' mean IoU over the classes
                     (`mean_iou`; `evaluate` gives per-class IoU, training/segmentation.py)

Detection records feed `load` and `grain_dataset`; `train` refuses them with the reason until
its detector is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.schema import CLASSIFICATION, IGNORED_LABEL, MULTI_LABEL, SEGMENTATION
from shardfeed.training.models import SEGMENTER
from shardfeed.training.options import AUTO

IGNORED = IGNORED_LABEL
TOP_K = 5  # top-k accuracy is logged past this many classes (with fewer it is always 1.0: noise)


@dataclass(frozen=True)
class Objective:
    """One task's head, loss and metrics (module docstring)."""

    task: str
    activation: str  # the head's: "softmax" or "sigmoid"
    metric: str  # the logged metric that says how good the model is ("accuracy", "auc_pr", "mean_iou")

    def model_for(self, asked: str) -> str:
        """The model this task trains when `asked` is asked for: a segmentation run's is the
        U-Net ('auto' and the default 'small_cnn' mean it).

        Raises:
            OptionError: a classifier asked for masks, or the U-Net for classes.
        """
        if self.task != SEGMENTATION:
            if asked == SEGMENTER:
                raise OptionError(f"{SEGMENTER} learns segmentation masks; this data holds {self.task} labels")
            return asked
        if asked not in (AUTO, "small_cnn", SEGMENTER):
            raise OptionError(f"segmentation masks are learned by {SEGMENTER}, not {asked!r} (--model {SEGMENTER})")
        return SEGMENTER

    def loss(self, keras: Any) -> Any:
        if self.task == MULTI_LABEL:
            return keras.losses.BinaryCrossentropy()
        if self.task == SEGMENTATION:
            return keras.losses.SparseCategoricalCrossentropy(ignore_class=IGNORED)
        return keras.losses.SparseCategoricalCrossentropy()

    def metrics(self, keras: Any, classes: int) -> list[Any]:
        if self.task == MULTI_LABEL:
            return [
                keras.metrics.AUC(curve="PR", multi_label=True, num_labels=classes, name=self.metric),
                keras.metrics.BinaryAccuracy(name="binary_accuracy"),
            ]
        if self.task == SEGMENTATION:
            iou = keras.metrics.MeanIoU(classes, sparse_y_pred=False, ignore_class=IGNORED, name=self.metric)
            return [iou]
        metrics: list[Any] = ["accuracy"]
        if classes > TOP_K:
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=TOP_K, name=f"top{TOP_K}"))
        return metrics


def objective_for(task: str, path: str) -> Objective:
    """The objective of a run on `path`, a folder of `task` records.

    Raises:
        OptionError: a task `train` has no model for yet (detection).
    """
    if task == CLASSIFICATION:
        return Objective(task, "softmax", "accuracy")
    if task == MULTI_LABEL:
        return Objective(task, "sigmoid", "auc_pr")
    if task == SEGMENTATION:
        return Objective(task, "softmax", "mean_iou")
    raise OptionError(
        f"{path} holds {task} records: `train` learns classes, multi-label tags and segmentation masks so far; "
        f"load({path!r}) feeds them to a model of your own (KerasHub's detectors take its batches)"
    )
