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

from shardfeed.deprecation import renamed
from shardfeed.format import manifest
from shardfeed.tools import html_page as h
from shardfeed.training.evaluation import evaluate
from shardfeed.training.run_folder import LOG, REPORT, RunFolder
from shardfeed.training.tasks import objective_for


@renamed(data="path")
def run_report(run_dir: str, output: str | None = None, *, path: str | None = None, split: str | None = None) -> str:
    """Writes the report (default RUN_DIR/report.html) and returns its path; `path` is the
    converted folder evaluated (default: the one the run trained on; old name `data=`)."""
    record = RunFolder(run_dir).read_record()
    data = path or record.path
    split = split or record.validation_split or manifest.read(data).held_out_split() or record.train_split
    result = evaluate(run_dir, data, split=split)
    sections = [
        _curves(run_dir),
        objective_for(record.task).per_class(result, split),
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
    `auc_pr`, or a segmentation run's `mean_iou` (training/tasks/); a detection run logs
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


def _worst(run_dir: str, data: str, split: str) -> str:
    """The held-out images the model got most wrong, as the run's task judges them."""
    folder = RunFolder(run_dir)
    record = folder.read_record()
    return objective_for(record.task).worst(folder, record.inputs(data), split, record.class_names)


def _settings(run_dir: str) -> list[tuple[str, Any]]:
    folder = RunFolder(run_dir)
    settings = asdict(folder.read_record())
    settings.pop("class_names", None)
    metrics = folder.read_metrics()
    settings.update({f"result.{k}": v for k, v in metrics.items() if isinstance(v, (int, float, str))})
    return list(settings.items())
