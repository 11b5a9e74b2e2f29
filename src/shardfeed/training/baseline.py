"""The first baseline a user would try: scikit-learn's `SVC()` on tiny grayscale thumbnails.

A trained CNN that scores below this on the same split is not worth its training time, so the
demo prints both. Images are read back from the shards (`IndexedRecords`, no TensorFlow),
turned gray and shrunk to `size` x `size` pixels, and fed to `SVC()` with its default settings.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from shardfeed.lazy import MissingDependencyError
from shardfeed.read.indexed import IndexedRecords


def thumbnails(data: str, split: str, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """`data[split]` as (N, size*size) float features in 0..1 and (N,) labels."""
    records = IndexedRecords(data, split)
    features, labels = [], []
    for i in range(len(records)):
        image, label = records[i]
        gray = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).convert("L")
        small = gray.resize((size, size), Image.Resampling.BOX)
        features.append(np.asarray(small, np.float32).ravel() / 255.0)
        labels.append(label)
    return np.stack(features), np.asarray(labels)


def svc_accuracy(data: str, train_split: str = "train", test_split: str = "validation", size: int = 8) -> float:
    """Accuracy on `test_split` of `sklearn.svm.SVC()` fitted on `train_split` thumbnails.

    Raises:
        MissingDependencyError: scikit-learn is not installed.
    """
    try:
        from sklearn.svm import SVC
    except ImportError as e:
        raise MissingDependencyError("the baseline needs scikit-learn: pip install scikit-learn") from e
    x_train, y_train = thumbnails(data, train_split, size)
    x_test, y_test = thumbnails(data, test_split, size)
    return float(SVC().fit(x_train, y_train).score(x_test, y_test))
