"""Multi-label scores as the field reports them: average precision per class and its mean (mAP),
thresholds chosen per class on validation, and F1 at those thresholds.

Average precision is scikit-learn's `average_precision_score` (the step-wise area under the
precision-recall curve, no interpolation: sum over score thresholds of (R_n - R_n-1) x P_n), so
figures compare with the literature and with a user's own check; mAP is the mean over the
classes that have at least one positive image in the split (as COCO and VOC leave out classes
without ground truth), the others listed as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardfeed.training.classification_metrics import MAX_PLOTTED_CLASSES
from shardfeed.training.models import scored

DEFAULT_THRESHOLD = 0.5  # a class's threshold when validation cannot choose one (no positives, or no validation)


@dataclass(frozen=True)
class Thresholds:
    """A multi-label run's per-class thresholds (thresholds.json in its folder), and the split
    they were chosen on (None: the default, no validation split)."""

    class_names: list[str]
    values: list[float]
    chosen_on: str | None

    @classmethod
    def default(cls, names: list[str]) -> Thresholds:
        return cls(names, [DEFAULT_THRESHOLD] * len(names), None)


def validation_thresholds(net: Any, ds: Any, split: str, names: list[str]) -> tuple[Thresholds, dict[str, Any]]:
    """Each class's threshold, chosen for the best F1 on `split` (its evaluation batches `ds`),
    and that split's mAP and F1 at them."""
    scores, truth = scored(net, ds)
    chosen = Thresholds(names, chosen_thresholds(truth, scores).tolist(), split)
    result = multi_label_metrics(scores, truth, names, np.asarray(chosen.values))
    return chosen, {"val_mAP": result["mAP"], "val_micro_f1": result["micro_f1"], "val_macro_f1": result["macro_f1"]}


def ranked_counts(truth: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One class's images ranked by score (highest first): the ranked scores, the index of the
    last image of each run of equal scores (a threshold admits a run whole), and the true
    positives admitted up to each of them. What average precision and the F1 per threshold read."""
    order = np.argsort(-np.asarray(scores), kind="mergesort")
    ranked, hits = np.asarray(scores)[order], np.asarray(truth, np.float64)[order]
    ends = np.r_[np.flatnonzero(np.diff(ranked)), len(ranked) - 1]
    return ranked, ends, np.cumsum(hits)[ends]


def average_precision(truth: np.ndarray, scores: np.ndarray) -> float | None:
    """One class's average precision over images (`truth` 0/1, `scores` higher = more likely);
    None without a positive image."""
    if np.asarray(truth, np.float64).sum() == 0:
        return None
    _, ends, true_positives = ranked_counts(truth, scores)
    precision = true_positives / (ends + 1)
    recall = true_positives / true_positives[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def chosen_thresholds(truth: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per class, the threshold with the best F1 on these images (`truth`, `scores`: [N, K]):
    halfway between the lowest score it admits and the next one below, so images scored like
    those validation admitted are admitted; DEFAULT_THRESHOLD for a class without positives."""
    thresholds = np.full(truth.shape[1], DEFAULT_THRESHOLD)
    for k in range(truth.shape[1]):
        positives = truth[:, k].sum()
        if positives == 0:
            continue
        ranked, ends, true_positives = ranked_counts(truth[:, k], scores[:, k])
        f1 = 2 * true_positives / (ends + 1 + positives)
        best = int(np.argmax(f1))
        below = ranked[ends[best] + 1] if ends[best] + 1 < len(ranked) else 0.0
        thresholds[k] = (ranked[ends[best]] + below) / 2
    return thresholds


def label_sets(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """[N, K] booleans: each image's classes, those scored at or above their threshold."""
    return np.asarray(scores) >= np.asarray(thresholds)[None, :]


def multi_label_metrics(
    scores: np.ndarray, truth: np.ndarray, names: list[str], thresholds: np.ndarray
) -> dict[str, Any]:
    """Loss (mean binary cross-entropy), mAP, per-class AP, and precision, recall and F1 at
    `thresholds` per class, micro (over every image-class pair) and macro (mean over classes)."""
    truth = np.asarray(truth, np.float64)
    eps = 1e-7
    clipped = np.clip(scores, eps, 1 - eps)
    loss = float(-np.mean(truth * np.log(clipped) + (1 - truth) * np.log(1 - clipped)))
    ap = {name: average_precision(truth[:, k], scores[:, k]) for k, name in enumerate(names)}
    scored = [v for v in ap.values() if v is not None]
    chosen = label_sets(scores, thresholds)
    hits = (chosen & (truth > 0)).sum(axis=0)
    said, real = chosen.sum(axis=0), truth.sum(axis=0)
    f1 = np.where(said + real > 0, 2 * hits / np.maximum(said + real, 1), np.nan)
    micro = 2 * hits.sum() / max(said.sum() + real.sum(), 1)
    per_class = {
        name: {
            "images": int(real[k]),
            "ap": ap[name],
            "threshold": float(thresholds[k]),
            "precision": float(hits[k] / said[k]) if said[k] else None,
            "recall": float(hits[k] / real[k]) if real[k] else None,
            "f1": None if np.isnan(f1[k]) else float(f1[k]),
        }
        for k, name in enumerate(names)
    }
    return {
        "examples": len(truth),
        "loss": loss,
        "mAP": float(np.mean(scored)) if scored else None,
        "classes_scored": len(scored),
        "micro_f1": float(micro),
        "macro_f1": float(np.nanmean(f1)) if not np.isnan(f1).all() else None,
        "exact_match": float((chosen == (truth > 0)).all(axis=1).mean()),
        "per_class": per_class,
        "class_names": names,
    }


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
