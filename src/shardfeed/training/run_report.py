"""`shardfeed report RUN_DIR`: one self-contained HTML page about a training run.

Loss and accuracy per epoch (train and validation, from log.csv), the confusion matrix and
per-class precision/recall on the held-out split (evaluated now, with the run's preprocessing),
the worst-classified held-out images with their predicted and true classes, and the settings.
A multi-label run's: per class its AP, threshold, precision, recall and F1, and the images whose
label sets are wrong, worst class first. A segmentation run's: per class its pixels and IoU, and
images with their true and predicted masks. A detection run's: each class's AP, and the images with
the most misses and false detections, drawn with their true and their detected boxes.
`curves.png` (written by `train`) is the same curves as a picture.
"""

from __future__ import annotations

import csv
import os
from dataclasses import asdict
from typing import Any

import numpy as np

from shardfeed.deprecation import renamed
from shardfeed.format import manifest
from shardfeed.format.schema import DETECTION, MULTI_LABEL, SEGMENTATION
from shardfeed.read.options import ReadOptions
from shardfeed.tools import html_page as h
from shardfeed.tools.preview import drawn_boxes
from shardfeed.training.detection_metrics import ImageErrors, ImageObjects, image_errors, summary_line
from shardfeed.training.detector import detections, truths
from shardfeed.training.evaluation import evaluate
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import load_model, predicted
from shardfeed.training.run_folder import AVERAGE_PRECISION, CONFUSION, LOG, MASKS_GRID, REPORT, RunFolder

WORST = 16


@renamed(data="path")
def run_report(run_dir: str, output: str | None = None, *, path: str | None = None, split: str | None = None) -> str:
    """Writes the report (default RUN_DIR/report.html) and returns its path; `path` is the
    converted folder evaluated (default: the one the run trained on; old name `data=`)."""
    record = RunFolder(run_dir).read_record()
    data = path or record.data
    split = split or record.validation_split or manifest.read(data).held_out_split() or record.train_split
    result = evaluate(run_dir, data, split=split)
    sections = [
        _curves(run_dir),
        _per_class(result, split),
        _worst(run_dir, data, split),
        h.section("Settings", h.table(["setting", "value"], [[h.esc(k), h.esc(v)] for k, v in _settings(run_dir)])),
    ]
    output = output or RunFolder(run_dir).file(REPORT)
    with open(output, "w", encoding="utf-8") as f:
        f.write(h.page(f"shardfeed training run: {run_dir}", sections))
    return output


def read_log(run_dir: str) -> dict[str, list[float]]:
    """log.csv as {column: values per epoch}."""
    path = RunFolder(run_dir).file(LOG)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = list(csv.DictReader(f))
    columns = [k for k in (rows[0].keys() if rows else []) if k != "epoch"]
    return {
        k: [_number(r.get(k)) for r in rows]
        for k in columns
        if any(_number(r.get(k)) == _number(r.get(k)) for r in rows)
    }


def _number(text: str | None) -> float:
    """A log.csv cell as a float; NaN for Keras' 'NA' (a metric missing in that epoch)."""
    try:
        return float(text) if text else float("nan")
    except ValueError:
        return float("nan")


def plot_curves(run_dir: str, output: str) -> None:
    """curves.png: loss and accuracy per epoch, train and validation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = read_log(run_dir)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, metric in zip(axes, ("loss", _quality(log)), strict=True):
        for key, style in ((metric, "-"), (f"val_{metric}", "--")):
            if log.get(key):
                ax.plot(range(1, len(log[key]) + 1), log[key], style, label=key)
        ax.set_xlabel("epoch")
        ax.set_title(metric)
        ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def _quality(log: dict[str, list[float]]) -> str:
    """The logged metric that says how good the model is: accuracy, or a multi-label run's
    `auc_pr`, or a segmentation run's `mean_iou` (training/objectives.py); a detection run logs
    losses alone, of which its classification loss (`cls_logits_loss`, KerasHub's name) is the
    one beside the total worth a chart (its mAP is computed at the end, not per epoch)."""
    found = ("auc_pr", "mean_iou", "cls_logits_loss")
    return next((name for name in found if name in log and "accuracy" not in log), "accuracy")


def _curves(run_dir: str) -> str:
    log = read_log(run_dir)
    charts = [
        f"<h3>{name}</h3>" + h.line_chart({k: log[k] for k in (name, f"val_{name}") if log.get(k)})
        for name in ("loss", _quality(log))
        if log.get(name)
    ]
    return h.section("Per epoch (train: training mode; val: inference mode)", *charts)


def _per_class(result: dict[str, Any], split: str) -> str:
    if "mAP@0.5" in result:
        return _per_class_boxes(result, split)
    if "mAP" in result:
        return _per_class_tags(result, split)
    if "mean_iou" in result:
        return _per_class_masks(result, split)
    confusion = np.array(result["confusion_matrix"])
    names = result["class_names"]
    rows = []
    for i, name in enumerate(names):
        true, predicted = confusion[i].sum(), confusion[:, i].sum()
        recall = f"{confusion[i, i] / true:.3f}" if true else "—"
        precision = f"{confusion[i, i] / predicted:.3f}" if predicted else "—"
        rows.append([h.esc(name), f"{true:,}", precision, recall])
    summary = f"{split}: {result['examples']:,} images, accuracy {result['accuracy']:.4f}, loss {result['loss']:.4f}"
    matrix = h.png_file(os.path.join(result["output_dir"], CONFUSION))
    table = h.table(["class", "images", "precision", "recall"], rows, (1, 2, 3))
    undefined = any("—" in row for row in rows)
    note = '<p class="note">—: no image predicted as that class (precision) or none in it (recall)</p>'
    return h.section("Per class", f"<p>{h.esc(summary)}</p>", table, note if undefined else "", matrix)


def _per_class_tags(result: dict[str, Any], split: str) -> str:
    """A multi-label evaluation per class: images, AP, the threshold and what it gives."""

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


def _per_class_boxes(result: dict[str, Any], split: str) -> str:
    """A detection evaluation: COCO's figures, and each class's AP."""
    rows = [[h.esc(name), "—" if ap is None else f"{ap:.3f}"] for name, ap in result["per_class_ap"].items()]
    summary = f"{split}: {result['examples']:,} images, {summary_line(result)} (COCO's, pycocotools)"
    note = '<p class="note">AP: averaged over IoU 0.5-0.95, as COCO\'s mAP; —: no object of that class</p>'
    return h.section("Per class", f"<p>{h.esc(summary)}</p>", h.table(["class", "AP"], rows, (1,)), note)


def _per_class_masks(result: dict[str, Any], split: str) -> str:
    """A segmentation evaluation per class: its pixels and IoU, and images with their masks."""
    rows = [
        [h.esc(name), f"{result['per_class_pixels'][name]:,}", "—" if iou is None else f"{iou:.3f}"]
        for name, iou in result["per_class_iou"].items()
    ]
    iou, accuracy = result["mean_iou"], result["pixel_accuracy"]
    summary = f"{split}: {result['examples']:,} images, mean IoU {iou or 0:.4f}, pixel accuracy {accuracy or 0:.4f}"
    table = h.table(["class", "pixels", "IoU"], rows, (1, 2))
    grid = h.png_file(os.path.join(result["output_dir"], MASKS_GRID))
    return h.section("Per class", f"<p>{h.esc(summary)}</p>", table, grid)


def _worst(run_dir: str, data: str, split: str) -> str:
    """The held-out images the model got most wrong (lowest probability of the true class)."""
    folder = RunFolder(run_dir)
    record = folder.read_record()
    if record.task == SEGMENTATION:  # the per-class section's grid shows the masks
        return ""
    net = load_model(folder.model_file())
    if record.task == DETECTION:
        return _worst_boxes(net, record.inputs(data), split, record.class_names)
    names = record.class_names
    found: list[tuple[float, np.ndarray, str, str, str]] = []
    tagged = record.task == MULTI_LABEL
    limits = np.asarray(folder.read_thresholds(names).values) if tagged else None
    for images, labels, files in record.inputs(data).evaluation(split, read=ReadOptions(with_filenames=True)):
        probs = predicted(net, images)
        for i, p in enumerate(probs):
            file = files[i].numpy().decode()
            if limits is not None:  # the image's worst class: the score farthest from its truth
                truth = labels[i].numpy() > 0
                guessed = p >= limits
                if (guessed != truth).any():
                    said, real = (";".join(np.array(names)[m]) or "(none)" for m in (guessed, truth))
                    found.append((1 - float(np.abs(truth - p).max()), images[i].numpy(), file, said, real))
                continue
            true, guess = int(labels[i]), int(np.argmax(p))
            if guess != true:
                found.append((float(p[true]), images[i].numpy(), file, names[guess], names[true]))
        found = sorted(found, key=lambda x: x[0])[:WORST]
    if not found:
        return h.section("Worst classified", f"<p>every {h.esc(split)} image is classified correctly</p>")
    tiles = [
        h.figure(h.thumbnail(img), f"{file}: predicted {guess}, true {true} (p={p:.2f})")
        for p, img, file, guess, true in found
    ]
    return h.section(f"Worst classified ({split})", f'<div class="grid">{"".join(tiles)}</div>')


def _worst_boxes(net: Any, inputs: RunInputs, split: str, names: list[str]) -> str:
    """The held-out images with the most misses and false detections at IoU 0.5 (pycocotools'
    matching: `detection_metrics.image_errors`), each as the model saw it, once with its true
    boxes and once with the detected ones; only the WORST worst are held."""
    found: list[tuple[int, str, np.ndarray, ImageObjects, ImageObjects, ImageErrors]] = []
    for images, targets, files in inputs.evaluation(split, read=ReadOptions(with_filenames=True)):
        pixels, truth, detected = np.asarray(images), truths(images, targets), detections(net, images)
        for i, errors in enumerate(image_errors(truth, detected, names)):
            if errors.count:
                found.append((-errors.count, files[i].numpy().decode(), pixels[i], truth[i], detected[i], errors))
        found = sorted(found, key=lambda x: x[:2])[:WORST]
    if not found:
        return h.section("Worst detected", f"<p>every {h.esc(split)} object is found, and nothing else (IoU 0.5)</p>")
    tiles = []
    for _, file, image, truth_here, detected_here, errors in found:
        for objects, said in (
            (truth_here, "true"),
            (detected_here, f"found: {errors.missed} missed, {errors.false} false"),
        ):
            tile = drawn_boxes(file, image, objects.boxes.tolist(), objects.classes.tolist(), names)
            tiles.append(h.figure(h.thumbnail(tile.image, 160), f"{file} {said}: {tile.caption}"))
    note = "each image twice: its true boxes, then the detected ones; misses and false detections at IoU 0.5"
    return h.section(
        f"Worst detected ({split})", f'<p class="note">{note}</p>', f'<div class="grid">{"".join(tiles)}</div>'
    )


def _settings(run_dir: str) -> list[tuple[str, Any]]:
    folder = RunFolder(run_dir)
    settings = asdict(folder.read_record())
    settings.pop("class_names", None)
    metrics = folder.read_metrics()
    settings.update({f"result.{k}": v for k, v in metrics.items() if isinstance(v, (int, float, str))})
    return list(settings.items())
