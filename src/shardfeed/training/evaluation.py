"""evaluate: a trained run's figures on a split, with the run's evaluation preprocessing; what they
are is the run's task's (training/tasks/): loss, accuracy, top-k, per-class accuracy and a
confusion matrix for classes; mAP, per-class AP and F1 at the run's thresholds for multi-label;
mean IoU, per-class IoU and pixel accuracy for masks; COCO's mAP, mAP@0.5, mAP@0.75, by size and
per class for boxes (in the frame the model sees: the image resized to the run's size)."""

from __future__ import annotations

import os
from typing import Any

from shardfeed.deprecation import renamed
from shardfeed.errors import SourceError
from shardfeed.format import manifest
from shardfeed.training.models import load_model
from shardfeed.training.run_folder import MODEL, RunFolder
from shardfeed.training.tasks import Evaluation, objective_for


@renamed(data="path")
def evaluate(
    run_dir: str,
    path: str | None = None,
    *,
    split: str | None = None,
    top_k: int = 5,
    batch_size: int | None = None,
    model_file: str = MODEL,
    output_dir: str | None = None,
) -> dict[str, Any]:
    """Evaluates a run's model on a split, with the run's evaluation preprocessing.

    Writes metrics.json and confusion_matrix.png (multi-label: average_precision.png;
    segmentation: masks.png, images with their true and predicted masks) to `output_dir`
    (default RUN_DIR/eval-<split>).
    `path` is the converted folder (default: the one the run trained on; old name `data=`).
    `split` defaults to the data's held-out split (validation, else val/valid/test/eval/dev); top-k
    accuracy is reported only for k below the number of classes (above, it is always 1.0).
    """
    folder = RunFolder(run_dir)
    record = folder.read_record()
    data = path or record.path
    net = load_model(folder.model_file(model_file))
    objective = objective_for(record.task)
    names = objective.class_names(record, net)
    m = manifest.read(data)
    if m.labels != names[: len(m.labels or [])]:  # a model trained on a mixture may know more classes
        raise SourceError(
            f"the model's classes {names[:5]}... differ from the data's {(m.labels or [])[:5]}...; "
            "evaluate on data converted with the same classes"
        )
    split = split or _held_out(m)
    ds = record.inputs(m).evaluation(split, batch_size=batch_size)
    out = output_dir or folder.eval_dir(split)
    os.makedirs(out, exist_ok=True)
    evaluation = Evaluation(split, m.split(split).num_records, out, top_k)
    result = objective.evaluate(net, ds, names, folder, evaluation)
    folder.write_metrics(result, out)
    return {**result, "output_dir": out}


def _held_out(m: manifest.Manifest) -> str:
    split = m.held_out_split()
    if split is None:
        raise SourceError(f"{m.path} has no held-out split (it has {m.split_names}); pass split= (--split)")
    return split
