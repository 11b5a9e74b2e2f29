"""The end-of-training checks that the figures a run reports are the saved model's.

Keras' training accuracy is measured in training mode (augmented images, dropout, BatchNorm on
batch statistics); the model runs in inference mode. `train` re-scores up to `INFERENCE_SAMPLE`
training images in inference mode and warns when that, the printed figure and the validation
accuracy disagree (docs/training.md, 'Honest numbers'); `kept_weights` says which epoch's weights
model.keras holds, and which epoch scored best on validation.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from shardfeed.training.inputs import RunInputs
from shardfeed.training.run_folder import RunFolder
from shardfeed.training.tasks import Objective

log = logging.getLogger("shardfeed")
INFERENCE_SAMPLE = 1024  # training images re-scored in inference mode at the end
DISAGREEMENT = 0.15  # training-mode vs inference-mode accuracy gap worth a warning


def inference_check(
    net: Any, inputs: RunInputs, split: str, batch_size: int, metric: str = "accuracy"
) -> dict[str, Any]:
    """Re-scores up to INFERENCE_SAMPLE images of `split` in inference mode, and warns when that,
    the training-mode figure Keras printed, and the validation figure disagree (`metric`: the
    objective's, training/tasks/; accuracy for classes).

    With BatchNorm the training-mode figure can be far above the model's (0.89 while fitting,
    0.20 in inference mode, seen on a short run); validation figures are always inference-mode.
    """
    sample = inputs.evaluation(split).take(math.ceil(INFERENCE_SAMPLE / batch_size))
    inference = float(net.evaluate(sample, verbose=0, return_dict=True)[metric])
    final = final_metrics(net)
    for message in disagreements(final.get(metric), inference, final.get(f"val_{metric}"), metric):
        log.warning("warning: %s (docs/training.md, 'Honest numbers')", message)
    return {f"train_{metric}_inference": inference}


def disagreements(
    fitted: float | None, inference: float, validation: float | None, metric: str = "accuracy"
) -> list[str]:
    """What the three figures of `metric` say when they are more than DISAGREEMENT apart."""
    messages = []
    if fitted is not None and fitted - inference > DISAGREEMENT:
        messages.append(
            f"training {metric} was {fitted:.3f} while fitting but the model scores {inference:.3f} on training "
            "images in inference mode: BatchNorm's moving statistics have not caught up with the weights (too few "
            "steps, or a learning rate too high); trust the validation figures, train longer"
        )
    elif fitted is not None and inference - fitted > DISAGREEMENT:
        messages.append(
            f"training {metric} was {fitted:.3f} while fitting (augmented images, dropout) and {inference:.3f} in "
            "inference mode: the augmentation is much harder than the task; if validation is low too, try a "
            "milder --augment"
        )
    if validation is not None and inference - validation > DISAGREEMENT:
        messages.append(
            f"the model scores {inference:.3f} on training images but {validation:.3f} on validation: it overfits "
            "(more data or augmentation, fewer epochs) or the splits differ"
        )
    return messages


def final_metrics(net: Any) -> dict[str, float]:
    """The last epoch's logged metrics (empty when no epoch ran)."""
    history = getattr(net, "history", None)
    if not history or not history.history:
        return {}
    return {k: float(v[-1]) for k, v in history.history.items()}


def saved_model_validation(net: Any, val_ds: Any, recomputed: int, metric: str = "accuracy") -> dict[str, float]:
    """The validation figures of the model as saved, when BatchNorm's statistics were recomputed
    at the end of training (after the last validation inside fit, which saw a cheaper estimate):
    then the summary, metrics.json and `evaluate` give the same score. Empty when nothing
    changed after the last validation."""
    if val_ds is None or not recomputed:
        return {}
    scores = net.evaluate(val_ds, verbose=0, return_dict=True)
    return {f"val_{metric}": float(scores[metric]), "val_loss": float(scores["loss"])}


def kept_weights(
    folder: RunFolder, objective: Objective, metrics: dict[str, Any], validation: str | None
) -> dict[str, Any]:
    """Which weights model.keras holds, said: always the last epoch's, as Keras' fit leaves them.

    The best validation epoch is saved as checkpoints/best.keras but not swapped in: it was
    chosen on the validation split, so its figure there overstates what the model scores on new
    images (the figure an `EarlyStopping(restore_best_weights=True)` run reports). When the best
    epoch beats the last, the log says so and where its file is. `metrics`: the run's final ones.
    """
    metric, mode = objective.metric, objective.mode
    best = folder.best_epoch(f"val_{metric}", mode) if validation else None
    if best is None:
        return {"kept_weights": "last"}
    epoch, value = best
    last = metrics.get(f"val_{metric}")
    if last is not None and (value > last if mode == "max" else value < last):
        log.info(
            "model.keras: the last epoch's weights (validation %s %.4f); epoch %d scored %.4f and is saved as "
            "checkpoints/best.keras, not used: picked on the %r split, its figure there is optimistic (score it on "
            "another split: evaluate RUN --model-file checkpoints/best.keras --split NAME)",
            metric,
            last,
            epoch,
            value,
            validation,
        )
    return {"kept_weights": "last", "best_epoch": epoch, f"best_epoch_val_{metric}": value}
