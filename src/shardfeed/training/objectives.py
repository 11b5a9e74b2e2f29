"""What a run learns, by the data's task: the head's activation, the loss, the metrics Keras logs
while fitting, and the one metric that checkpoints, the end-of-training checks and summaries
read (`metric`; validation's is `val_<metric>`).

    classification   softmax, sparse categorical cross-entropy, accuracy (top-5 past 5 classes)
    multi-label      sigmoid per class, binary cross-entropy (Keras' on k-hot vectors), the area
                     under each class's precision-recall curve averaged over classes (`auc_pr`:
                     Keras' `AUC(curve="PR", multi_label=True)`, an interpolated estimate of
                     mAP; `evaluate` gives mAP itself, training/multi_label.py) and binary accuracy
    segmentation     a U-Net (`models.SEGMENTER`, 'small_unet', or on a backbone:
                     training/encoders.py), softmax per pixel, sparse categorical cross-entropy
                     with 255 ignored, Keras' mean IoU over the classes (`mean_iou`; `evaluate`
                     gives per-class IoU, training/segmentation.py)
    detection        KerasHub's RetinaNet (`detector.DETECTOR`, 'retinanet', training/detector.py;
                     on a backbone: training/encoders.py), its focal and smooth-L1 losses; Keras
                     logs the loss alone (`loss`: lower is better), COCO's mAP is computed at the
                     end and by `evaluate`
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.manifest import Manifest
from shardfeed.format.schema import CLASSIFICATION, DETECTION, IGNORED_LABEL, MULTI_LABEL, SEGMENTATION
from shardfeed.read.options import DecodeOptions
from shardfeed.training.backbones import BACKBONES
from shardfeed.training.detector import DETECTOR, compile_args
from shardfeed.training.models import SEGMENTER, pixel_crossentropy
from shardfeed.training.options import AUTO

IGNORED = IGNORED_LABEL
TOP_K = 5  # top-k accuracy is logged past this many classes (with fewer it is always 1.0: noise)


@dataclass(frozen=True)
class Objective:
    """One task's head, loss and metrics (module docstring)."""

    task: str
    activation: str  # the head's: "softmax" or "sigmoid" ("" for the detector: KerasHub's heads)
    metric: str  # the logged metric that says how good the model is ("accuracy", "auc_pr", "mean_iou", "loss")

    @property
    def mode(self) -> str:
        """Whether `metric` is better higher ("max") or lower ("min": the loss)."""
        return "min" if self.metric == "loss" else "max"

    def model_for(self, asked: str) -> str:
        """The model this task trains when `asked` is asked for: a segmentation run's is the
        U-Net, a detection run's the RetinaNet ('small_cnn', the default, means them), each on a
        keras.applications backbone when one is named (training/encoders.py); 'auto' is left
        to `model_choice.choose_model`.

        Raises:
            OptionError: a classifier asked for masks or boxes, or the U-Net or the detector
                for another task.
        """
        own = {SEGMENTATION: SEGMENTER, DETECTION: DETECTOR}.get(self.task)
        if own is None:
            if asked in (SEGMENTER, DETECTOR):
                learned = "segmentation masks" if asked == SEGMENTER else "detection boxes"
                raise OptionError(f"{asked} learns {learned}; this data holds {self.task} labels")
            return asked
        if asked in (AUTO, *BACKBONES):
            return asked
        if asked not in ("small_cnn", own):
            what = "segmentation masks" if self.task == SEGMENTATION else "detection boxes"
            raise OptionError(
                f"{what} are learned by {own}, not {asked!r} (--model {own}, or a backbone for its encoder: "
                f"{', '.join(BACKBONES)})"
            )
        return own

    def decode(self, decode: DecodeOptions, facts: Manifest | None, splits: Sequence[str | None]) -> DecodeOptions:
        """How the run's images are read: a detection run's boxes padded to the most objects an
        image of `splits` holds (the manifest's fact), so every batch has one shape and XLA, JAX
        and PyTorch compile the step once, not again for each new count; left to each batch
        where the facts are not known (`facts` None: a mixture of folders; a folder written
        before the count was kept), so no object is ever cut."""
        if self.task != DETECTION or facts is None:
            return decode
        counts = [facts.split(name).objects for name in splits if name is not None]
        known = [c.most for c in counts if c is not None and c.most is not None]
        if not known or len(known) < len(counts):
            return decode
        return replace(decode, max_objects=max(1, *known))

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        """What `compile` takes beside the optimizer: the loss and the metrics (the detector's
        own losses, and no metric Keras could log per batch)."""
        if self.task == DETECTION:
            return compile_args()
        return {"loss": self.loss(keras), "metrics": self.metrics(keras, classes)}

    def loss(self, keras: Any) -> Any:
        if self.task == MULTI_LABEL:
            return keras.losses.BinaryCrossentropy()
        if self.task == SEGMENTATION and keras.backend.backend() == "torch":  # Keras' own fails there
            return pixel_crossentropy()(ignore_class=IGNORED)
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
        OptionError: a task `train` has no model for.
    """
    if task == CLASSIFICATION:
        return Objective(task, "softmax", "accuracy")
    if task == MULTI_LABEL:
        return Objective(task, "sigmoid", "auc_pr")
    if task == SEGMENTATION:
        return Objective(task, "softmax", "mean_iou")
    if task == DETECTION:
        return Objective(task, "", "loss")
    raise OptionError(f"{path} holds {task} records, which `train` has no model for; load({path!r}) feeds them")
