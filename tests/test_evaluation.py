"""The confusion matrix figure stays drawable whatever the number of classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardfeed.training.classification_metrics import MAX_PLOTTED_CLASSES, most_confused, plot_confusion


def test_most_confused_picks_the_classes_with_the_most_errors() -> None:
    confusion = np.diag([10, 10, 10, 10])
    confusion[1, 3] = 5  # class 1 taken for class 3
    confusion[2, 0] = 1
    assert most_confused(confusion, 2).tolist() == [1, 3]


@pytest.mark.slow
def test_two_thousand_classes_draw_a_bounded_figure(tmp_path: Path) -> None:
    """A 2,000-class run ended `evaluate` in MemoryError (std::bad_alloc): a 90,000-pixel figure."""
    rng = np.random.default_rng(0)
    classes = 2000
    confusion = np.diag(rng.integers(5, 10, classes))
    wrong = rng.integers(0, classes, (3000, 2))
    np.add.at(confusion, (wrong[:, 0], wrong[:, 1]), 1)
    names = [f"class_{i:04d}" for i in range(classes)]
    path = tmp_path / "confusion.png"
    plot_confusion(confusion, names, str(path), "validation")
    with Image.open(path) as im:
        assert max(im.size) <= 100 * (0.45 * MAX_PLOTTED_CLASSES + 2) + 200
