"""Class imbalance in training: the class weights remedy, and the per-class recall that shows
what accuracy hides (a small class the model never predicts).

The other remedy, class-balanced sampling, is a read option (`ReadOptions(balance="class")`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardfeed.format import manifest
from shardfeed.training.models import predicted as predicted_probabilities

IMBALANCE_RATIO = 3.0  # largest / smallest training class above which the summary shows per-class recall


def balanced_class_weights(m: manifest.Manifest, split: str) -> dict[int, float]:
    """Keras `class_weight` for `split`: n / (K x n_c) per class with records (scikit-learn's
    'balanced'), from the manifest's counts: nothing is read."""
    counts = m.split(split).class_counts
    names = m.labels or []
    present = {i: counts[name] for i, name in enumerate(names) if counts.get(name)}
    total, classes = sum(present.values()), len(present)
    return {i: total / (classes * n) for i, n in present.items()}


def imbalance_ratio(class_counts: dict[str, int]) -> float:
    """Largest over smallest class count (classes without records left out; 1.0 for none)."""
    counts = [n for n in class_counts.values() if n]
    return max(counts) / min(counts) if counts else 1.0


def per_class_recall(net: Any, dataset: Any, names: list[str]) -> dict[str, float]:
    """{class: share of its images the model labels as it} over (images, labels) batches."""
    labels, predicted = [], []
    for images, y in dataset:
        predicted.append(predicted_probabilities(net, images).argmax(axis=1))
        labels.append(y.numpy())
    y_true, y_pred = np.concatenate(labels), np.concatenate(predicted)
    return {names[c]: float((y_pred[y_true == c] == c).mean()) for c in range(len(names)) if (y_true == c).any()}
