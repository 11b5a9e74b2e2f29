"""evaluate: loss, accuracy, top-k, per-class accuracy and a confusion matrix for a trained run;
for a multi-label run mAP, per-class AP and F1 at the run's thresholds (training/multi_label.py);
for a segmentation run mean IoU, per-class IoU and pixel accuracy (training/segmentation.py); for
a detection run COCO's mAP, mAP@0.5, mAP@0.75, by size and per class (training/detector.py), with
the boxes in the frame the model sees (the image resized to the run's size, as `load` makes it)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from tqdm import tqdm

from shardfeed.deprecation import renamed
from shardfeed.errors import SourceError
from shardfeed.format import manifest
from shardfeed.format.schema import DETECTION, MULTI_LABEL, SEGMENTATION
from shardfeed.training.detector import detection_scores
from shardfeed.training.models import load_model, model_class_names, predicted
from shardfeed.training.multi_label import multi_label_metrics
from shardfeed.training.run_folder import AVERAGE_PRECISION, CONFUSION, MASKS_GRID, MODEL, RunFolder
from shardfeed.training.segmentation import draw_masks, pixel_confusion, segmentation_metrics

GRID_IMAGES = 6  # images drawn with their true and predicted masks


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
    data = path or record.data
    net = load_model(folder.model_file(model_file))
    names = record.class_names if record.task == DETECTION else model_class_names(net)
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
    if record.task == DETECTION:
        with tqdm(total=m.split(split).num_records, unit="img", desc=f"evaluate {split}", disable=None) as bar:
            result = detection_scores(net, _counted(ds, bar), names)
        result["examples"] = m.split(split).num_records
        folder.write_metrics(result, out)
        return {**result, "output_dir": out}
    if record.task == SEGMENTATION:
        result = _masks_scored(net, ds, names, m.split(split).num_records, os.path.join(out, MASKS_GRID))
        folder.write_metrics(result, out)
        return {**result, "output_dir": out}
    probs, labels = [], []
    with tqdm(total=m.split(split).num_records, unit="img", desc=f"evaluate {split}", disable=None) as bar:
        for images, y in ds:
            probs.append(predicted(net, images))
            labels.append(y.numpy())
            bar.update(len(labels[-1]))
    p, y = np.concatenate(probs), np.concatenate(labels)
    if record.task == MULTI_LABEL:
        thresholds = folder.read_thresholds(names)
        result = multi_label_metrics(p, y, names, np.asarray(thresholds.values))
        result["thresholds_chosen_on"] = thresholds.chosen_on
        folder.write_metrics(result, out)
        plot_average_precision(result, os.path.join(out, AVERAGE_PRECISION), split)
        return {**result, "output_dir": out}
    result = metrics_from_probabilities(p, y, names, top_k)
    folder.write_metrics(result, out)
    plot_confusion(
        np.array(result["confusion_matrix"]),
        names,
        os.path.join(out, CONFUSION),
        f"{split}: accuracy {result['accuracy']:.3f}",
    )
    result["output_dir"] = out
    return result


def _masks_scored(net: Any, ds: Any, names: list[str], total: int, grid: str) -> dict[str, Any]:
    """A segmentation model over a split: the pixel confusion matrix, batch by batch (never
    every probability map at once), its metrics, and the first images drawn with their masks."""
    confusion = np.zeros((len(names), len(names)), np.int64)
    shown: list[tuple[str, np.ndarray, np.ndarray | None, np.ndarray]] = []
    examples = 0
    with tqdm(total=total, unit="img", desc="evaluate", disable=None) as bar:
        for images, masks in ds:
            scores, truth = predicted(net, images), masks.numpy()
            confusion += pixel_confusion(truth, scores, len(names))
            for i in range(min(len(truth), GRID_IMAGES - len(shown))):
                shown.append((f"image {examples + i}", images[i].numpy(), truth[i], scores[i].argmax(axis=-1)))
            examples += len(truth)
            bar.update(len(truth))
    draw_masks(shown, names, grid)
    return segmentation_metrics(confusion, names, examples)


def _counted(batches: Any, bar: Any) -> Any:
    """`batches`, each counted on the progress `bar` as it passes."""
    for images, targets in batches:
        bar.update(len(images))
        yield images, targets


def _held_out(m: manifest.Manifest) -> str:
    split = m.held_out_split()
    if split is None:
        raise SourceError(f"{m.path} has no held-out split (it has {m.split_names}); pass split= (--split)")
    return split


def metrics_from_probabilities(p: np.ndarray, y: np.ndarray, names: list[str], top_k: int) -> dict[str, Any]:
    """Loss (mean cross-entropy), accuracy, top-k (for k < classes), per-class accuracy and the
    confusion matrix."""
    predicted = p.argmax(axis=1)
    confusion = np.zeros((len(names), len(names)), dtype=np.int64)
    np.add.at(confusion, (y, predicted), 1)
    per_class = {
        name: float(confusion[i, i] / confusion[i].sum()) if confusion[i].sum() else None
        for i, name in enumerate(names)
    }
    eps = 1e-7
    result: dict[str, Any] = {
        "examples": len(y),
        "loss": float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], eps, 1.0)))),
        "accuracy": float((predicted == y).mean()),
    }
    if 1 < top_k < len(names):
        top = np.argsort(-p, axis=1)[:, :top_k]
        result[f"top{top_k}_accuracy"] = float((top == y[:, None]).any(axis=1).mean())
    return {
        **result,
        "per_class_accuracy": per_class,
        "confusion_matrix": confusion.tolist(),
        "class_names": names,
    }


MAX_PLOTTED_CLASSES = 50  # beyond this a figure cannot show one row per class legibly


def most_confused(confusion: np.ndarray, count: int = MAX_PLOTTED_CLASSES) -> np.ndarray:
    """The `count` classes with the most errors (wrong predictions for them plus wrong
    predictions of them), in class order: the part of a large confusion matrix worth drawing."""
    errors = confusion.sum(axis=0) + confusion.sum(axis=1) - 2 * np.diag(confusion)
    return np.sort(np.argsort(-errors, kind="stable")[:count])


def plot_confusion(confusion: np.ndarray, names: list[str], path: str, title: str) -> None:
    """Draws the confusion matrix; for more than MAX_PLOTTED_CLASSES classes only the most
    confused ones (a 2,000-class figure at one row per class ran out of memory; metrics.json
    keeps the whole matrix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(names) > MAX_PLOTTED_CLASSES:
        keep = most_confused(confusion)
        title = f"{title}\n(the {len(keep)} classes with the most errors, of {len(names):,})"
        confusion, names = confusion[np.ix_(keep, keep)], [names[i] for i in keep]
    size = max(4.0, 0.45 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(confusion, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(names) <= 30:
        for (i, j), v in np.ndenumerate(confusion):
            if v:
                ax.text(
                    j,
                    i,
                    str(v),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if v > confusion.max() / 2 else "black",
                )
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_average_precision(result: dict[str, Any], path: str, split: str) -> None:
    """A multi-label evaluation's average precision per class, as bars (classes without a
    positive image in the split have none, and no bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_class = result["per_class"]
    names = [n for n in result["class_names"] if per_class[n]["ap"] is not None][:MAX_PLOTTED_CLASSES]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * len(names) + 2), 3.5))
    ax.bar(range(len(names)), [per_class[n]["ap"] for n in names], color="tab:blue")
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("average precision")
    ax.set_title(f"{split}: mAP {result['mAP']:.3f}" if result["mAP"] is not None else split)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
