"""The scikit-learn baseline the demo prints beside its CNN."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardfeed import ConvertOptions, convert
from shardfeed.training.baseline import svc_accuracy, thumbnails


def test_svc_on_thumbnails_of_the_same_split(digits_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert(str(digits_tree), str(out), ConvertOptions(shards=2, seed=0), workers=1, progress=False)
    features, labels = thumbnails(str(out), "validation")
    assert features.shape == (len(labels), 64) and features.min() >= 0 and features.max() <= 1
    assert set(np.unique(labels)) <= set(range(10))
    assert svc_accuracy(str(out)) > 0.8  # real digits: chance is 0.1
