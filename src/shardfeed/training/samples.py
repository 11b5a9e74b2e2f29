"""Built-in sample data: real image folders made from data sets that Python packages ship."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from shardfeed.lazy import MissingDependencyError


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 real handwritten digits as uint8 (N, 8, 8) images and int labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise MissingDependencyError("the sample data needs scikit-learn: pip install scikit-learn") from e
    data = load_digits()
    images = np.clip(data.images * (255.0 / 16.0), 0, 255).round().astype(np.uint8)
    return images, data.target.astype(np.int64)


def write_digits_folders(root: str, *, size: int = 32, holdout: int = 100) -> tuple[str, str]:
    """Writes the digits as PNG files: root/labeled/<digit>/<n>.png and root/unlabeled/<n>.png.

    The last `holdout` digits go, without labels, to the unlabeled folder (a test set for
    prediction). Images are upscaled to `size` pixels so they look like small photos.

    Returns:
        (labeled folder, unlabeled folder)
    """
    images, labels = digits_arrays()
    labeled, unlabeled = os.path.join(root, "labeled"), os.path.join(root, "unlabeled")
    cut = len(images) - holdout
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        folder = os.path.join(labeled, str(label)) if i < cut else unlabeled
        os.makedirs(folder, exist_ok=True)
        big = Image.fromarray(image).resize((size, size), Image.Resampling.BILINEAR)
        big.save(os.path.join(folder, f"{i:04d}.png"))
    return labeled, unlabeled
