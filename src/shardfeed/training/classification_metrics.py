"""Classification scores as `evaluate` reports them: loss (mean cross-entropy), accuracy, top-k,
per-class accuracy and the confusion matrix, and its picture (the most confused classes only,
past `MAX_PLOTTED_CLASSES`: metrics.json keeps the whole matrix)."""

from __future__ import annotations

from typing import Any

import numpy as np


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
