"""What a run learns, by the data's task: one `Objective` a task (tasks/base.py), `OBJECTIVES` the
registry; `train`, `evaluate`, `predict` and `report` ask it instead of comparing task names.

    classification   tasks/classification.py: softmax, cross-entropy, accuracy
    multi_label      tasks/multi_label.py: a sigmoid per class, binary cross-entropy, auc_pr, thresholds
    segmentation     tasks/segmentation.py: a U-Net, per-pixel cross-entropy, mean IoU
    detection        tasks/detection.py: KerasHub's RetinaNet, its losses, COCO's mAP at the end

A new task is a module here beside its `TaskSpec` (format/tasks.py) and its targets
(docs/architecture.md, "adding a task").
"""

from __future__ import annotations

from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.schema import CLASSIFICATION
from shardfeed.format.tasks import DEFAULT_TASK
from shardfeed.training.models import MODELS
from shardfeed.training.tasks.base import Evaluation, ModelAsk, Objective, Prediction, Trained
from shardfeed.training.tasks.classification import Classification
from shardfeed.training.tasks.detection import Detection
from shardfeed.training.tasks.multi_label import MultiLabel
from shardfeed.training.tasks.segmentation import Segmentation

__all__ = ["OBJECTIVES", "Evaluation", "ModelAsk", "Objective", "Prediction", "Trained", "build_model", "objective_for"]

OBJECTIVES: dict[str, Objective] = {o.task: o for o in (Classification(), MultiLabel(), Segmentation(), Detection())}


def objective_for(task: str | None, path: str = "this folder") -> Objective:
    """The objective of a run on `path`, a folder of `task` records (None: classification).

    Raises:
        OptionError: a task `train` has no model for.
    """
    objective = OBJECTIVES.get(task or DEFAULT_TASK)
    if objective is None:
        raise OptionError(f"{path} holds {task} records, which `train` has no model for; load({path!r}) feeds them")
    return objective


def build_model(
    name: str,
    class_names: list[str],
    image_size: tuple[int, int],
    *,
    channels: int = 3,
    weights: str | None = None,
    activation: str | None = None,
    task: str = CLASSIFICATION,
) -> Any:
    """A model for `task`, taking uint8 [H, W, C] images: for classes, class probabilities out
    (float32, also under mixed precision), one distribution over the classes (softmax) or, with
    activation='sigmoid' or a multi-label `task`, one probability per class; for masks, class
    probabilities per pixel, [H, W, K]; for boxes, KerasHub's detector, not compiled (it
    compiles with its own losses).

    Args:
        name: 'small_cnn' (the cats-vs-dogs recipe's CNN) or a keras.applications backbone
            (`BACKBONES`), with its own preprocessing inside the model; 'small_unet' (masks) and
            'retinanet' (boxes) for their task. A backbone for a segmentation or detection
            `task` is that model's encoder (training/encoders.py).
        weights: None or 'none' (random initialisation), 'imagenet' (Keras downloads and caches
            them; without a network: an OptionError naming the file and where to put it), or a
            local file: backbone weights without the top (e.g. *_notop.h5) or the whole model's.

    Raises:
        OptionError: unknown model name, or one that does not learn `task`'s labels; weights
            that cannot be had or do not fit the model.
    """
    if name not in MODELS:
        raise OptionError(f"model must be one of {list(MODELS)}, got {name!r}")
    objective = objective_for(task)
    if objective.model_for(name) != name:  # 'small_cnn' for masks or boxes (a dense model for classes raised)
        raise OptionError(f"{name} is a classifier; {task} is learned by {objective.own_model} or on a backbone")
    weights = None if weights in (None, "none") else weights
    return objective.build(ModelAsk(name, class_names, image_size, channels, weights, activation))
