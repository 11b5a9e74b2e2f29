"""Segmentation scores as the field reports them: the pixel confusion matrix over a split, each
class's intersection over union, their mean (mean IoU) and pixel accuracy; and the pictures
`evaluate` and `predict` draw (image, true mask, predicted mask).

Pixels marked 255 in the true mask (ignored, as Model Garden's ignore_label) count for nothing.
Mean IoU is the mean over the classes that appear in the truth or the prediction (a class
neither has no IoU), as Keras' `MeanIoU` computes it over the same pixels.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from shardfeed.format.schema import IGNORED_LABEL as IGNORED


def pixel_confusion(truth: np.ndarray, scores: np.ndarray, classes: int) -> np.ndarray:
    """[classes, classes] counts of (true class, predicted class) over a batch's pixels:
    `truth` [B, H, W] ids, `scores` [B, H, W, K] probabilities (the prediction is the argmax)."""
    truth = np.asarray(truth).astype(np.int64)
    guessed = np.asarray(scores).argmax(axis=-1)
    counted = truth != IGNORED
    pairs = truth[counted] * classes + guessed[counted]
    return np.bincount(pairs, minlength=classes * classes).reshape(classes, classes)


def segmentation_metrics(confusion: np.ndarray, names: list[str], examples: int) -> dict[str, Any]:
    """Mean IoU, per-class IoU (None where neither truth nor prediction has the class), pixel
    accuracy, and the confusion matrix."""
    hits = np.diag(confusion).astype(np.float64)
    union = confusion.sum(axis=0) + confusion.sum(axis=1) - hits
    iou = {name: float(hits[k] / union[k]) if union[k] else None for k, name in enumerate(names)}
    scored = [v for v in iou.values() if v is not None]
    pixels = int(confusion.sum())
    return {
        "examples": examples,
        "pixels": pixels,
        "mean_iou": float(np.mean(scored)) if scored else None,
        "pixel_accuracy": float(hits.sum() / pixels) if pixels else None,
        "per_class_iou": iou,
        "per_class_pixels": {name: int(confusion[k].sum()) for k, name in enumerate(names)},
        "confusion_matrix": confusion.tolist(),
        "class_names": names,
    }


def draw_masks(rows: list[tuple[str, np.ndarray, np.ndarray | None, np.ndarray]], names: list[str], path: str) -> None:
    """A grid of (name, image, true mask or None, predicted mask): each image beside its masks
    tinted over it (tools/preview.py's colours)."""
    from shardfeed.tools.preview import Tile, draw_grid, tinted

    tiles: list[Tile] = []
    for name, image, truth, guessed in rows:
        tiles.append(Tile(name, name, image))
        if truth is not None:
            tiles.append(replace(tinted(name, image, truth, names), caption="true: " + tinted_caption(truth, names)))
        shown = tinted(name, image, guessed, names)
        tiles.append(replace(shown, caption="predicted: " + tinted_caption(guessed, names)))
    cols = 3 if rows and rows[0][2] is not None else 2
    title = "image, true mask, predicted mask" if cols == 3 else "image, predicted mask"
    draw_grid(tiles, max(1, -(-len(tiles) // cols)), cols, path, title)


def tinted_caption(mask: np.ndarray, names: list[str]) -> str:
    """The classes a mask shows, in words."""
    return ", ".join(_present(mask, names)) or "(background)"


def restored_mask(guessed: np.ndarray, height: int, width: int) -> np.ndarray:
    """A mask predicted on a letterboxed input (the image fitted whole into the model's size)
    as a mask of the image itself: the letterbox's frame cut out and resized nearest-neighbour
    to `height` x `width`, so that it lies on the file's pixels."""
    from PIL import Image

    from shardfeed.read.geometry import letterbox_frame

    frame_h, frame_w, top, left = letterbox_frame(height, width, guessed.shape[:2])
    cut = np.ascontiguousarray(guessed[top : top + frame_h, left : left + frame_w].astype(np.uint8))
    return np.asarray(Image.fromarray(cut).resize((width, height), Image.Resampling.NEAREST))


def predicted_masks(
    net: Any,
    inputs: Any,
    records: Any,
    split: str,
    names: list[str],
    masks_dir: str,
    batch_size: int | None,
    grid_size: int,
) -> tuple[list[dict[str, Any]], list[tuple[str, np.ndarray, np.ndarray | None, np.ndarray]]]:
    """`predict` for a segmentation run: each image of `split` letterboxed whole into the model
    (`inputs`: the run's, with letterbox), its predicted mask restored to the file's own size
    and written as a PNG of class ids under `masks_dir` (the file's name, .png); a row per image
    (file, mask, the classes it shows), and the `grid_size` images whose names sort first with
    their masks, for a grid (only those are held, whatever the folder's size)."""
    from PIL import Image

    from shardfeed.format import schema
    from shardfeed.read.options import ReadOptions
    from shardfeed.tools.preview import keep_first
    from shardfeed.training.models import predicted

    rows: list[dict[str, Any]] = []
    shown: list[tuple[str, np.ndarray, np.ndarray | None, np.ndarray]] = []
    index = 0
    for batch in inputs.evaluation(split, batch_size=batch_size, read=ReadOptions(with_filenames=True)):
        images, files = batch[0], batch[-1]  # (images, [masks,] files): a folder of images has no masks
        for image, scores, file in zip(images.numpy(), predicted(net, images), files.numpy(), strict=True):
            example = records.example(index)
            index += 1
            guessed = scores.argmax(axis=-1)
            mask = restored_mask(guessed, int(example[schema.HEIGHT]), int(example[schema.WIDTH]))
            name = os.path.splitext(file.decode())[0] + ".png"
            os.makedirs(os.path.dirname(os.path.join(masks_dir, name)), exist_ok=True)
            Image.fromarray(mask).save(os.path.join(masks_dir, name))
            rows.append({"file": file.decode(), "mask": name, "classes": ";".join(_present(mask, names))})
            keep_first(shown, (file.decode(), image, None, guessed), grid_size)
    return rows, shown


def _present(mask: np.ndarray, names: list[str]) -> list[str]:
    """The classes a mask shows, background (0) and ignored pixels aside."""
    return [names[c] for c in np.unique(mask) if 0 < c < len(names)]


GRID_IMAGES = 6  # images `evaluate` draws with their true and predicted masks


def masks_scored(net: Any, ds: Any, names: list[str], total: int, grid: str) -> dict[str, Any]:
    """A segmentation model over a split: the pixel confusion matrix, batch by batch (never
    every probability map at once), its metrics, and the first images drawn with their masks."""
    from tqdm import tqdm

    from shardfeed.training.models import predicted

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
