"""What `grain_dataset` yields beside a batch's images, for each task, placed by the same crop
window, resize (or letterbox) and flip as the pixels, by `load`'s rules (read/decode.py):

    classification   int32 class ids [B]
    multi-label      float32 k-hot [B, K]
    segmentation     uint8 masks [B, H, W] of class ids: the window cut at full resolution,
                     resized nearest-neighbour, letterbox padding 255 (ignored), flipped
    detection        {"boxes": float32 [B, N, 4] in `DecodeOptions.bounding_box_format`,
                     "labels": int32 [B, N]}, padded with -1 to the batch's most objects (or
                     `max_objects`); boxes clipped to the window, those with less than
                     `Augment.min_visible` of their area left in it dropped

Records come from `IndexedRecords.target` (boxes in pixels of the stored image, the mask at its
size), so the geometry here is the window's arithmetic alone, in NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from shardfeed.format.schema import CLASSIFICATION, DETECTION, IGNORED_LABEL, MULTI_LABEL, SEGMENTATION
from shardfeed.read.augment import Augment
from shardfeed.read.boxes import box_columns, letterbox_numbers
from shardfeed.read.options import DecodeOptions

IGNORED = IGNORED_LABEL  # a mask's letterbox padding


@dataclass(frozen=True)
class View:
    """How one output image was made from its stored image."""

    shape: tuple[int, int]  # the stored image's (height, width)
    window: tuple[int, int, int, int]  # the cut: top, left, height, width, in its pixels
    frame: tuple[int, int, int, int]  # the picture in the output: height, width, top, left
    size: tuple[int, int]  # the output's (height, width)
    flipped: bool


@dataclass(frozen=True)
class Targets:
    """One task's targets: placed per record (`placed`), stacked per batch (`batched`)."""

    task: str
    decode: DecodeOptions
    min_visible: float  # detection, when cropping: `Augment.min_visible`; else 0
    drop_crowd: bool = False  # detection: crowd regions left out (training, `DecodeOptions.crowd_targets` off)

    @property
    def exact(self) -> bool:
        """Whether the window is cut at full resolution (boxes and masks are placed on it)."""
        return self.task in (DETECTION, SEGMENTATION)

    @property
    def whole_image(self) -> bool:
        """Whether an image not randomly cropped is read whole (detection's evaluation keeps
        every object in view; a letterbox shows the whole image) instead of its centre square."""
        return self.task == DETECTION or self.decode.letterbox

    def frame(self, window: tuple[int, int, int, int], size: tuple[int, int], augment: Augment | None) -> tuple:
        """Where the window's picture lies in the output: all of it, or letterboxed (asked for,
        and not randomly cropped)."""
        if self.decode.letterbox and (augment is None or not augment.crop):
            return letterbox_numbers(window[2], window[3], size)
        return (*size, 0, 0)

    def placed(self, target: Any, view: View) -> Any:
        """A record's target (`IndexedRecords.target`) as `view` shows its image."""
        if self.task == DETECTION:
            if self.drop_crowd and target["is_crowd"].any():
                kept = ~target["is_crowd"]
                return self._boxes(target["boxes"][kept], target["labels"][kept], view)
            return self._boxes(target["boxes"], target["labels"], view)
        if self.task == SEGMENTATION:
            return _mask(target, view)
        return target

    def batched(self, targets: list[Any]) -> Any:
        """A batch's placed targets as arrays of one shape."""
        if self.task == DETECTION:
            most = self.decode.max_objects or max((len(labels) for _, labels in targets), default=0)
            boxes = np.full((len(targets), most, 4), -1, np.float32)
            labels = np.full((len(targets), most), -1, np.int32)
            for row, (kept_boxes, kept_labels) in enumerate(targets):
                boxes[row, : len(kept_labels)], labels[row, : len(kept_labels)] = kept_boxes, kept_labels
            return {"boxes": boxes, "labels": labels}
        if self.task in (SEGMENTATION, MULTI_LABEL):
            return np.stack(targets)
        assert self.task == CLASSIFICATION, self.task
        return np.asarray(targets, np.int32)

    def _boxes(self, boxes: np.ndarray, labels: np.ndarray, view: View) -> tuple[np.ndarray, np.ndarray]:
        """Boxes (pixels of the stored image, xyxy) as fractions of the window, clipped; those
        with too little left dropped; then in output pixels (inside the letterbox's frame),
        flipped, in the asked format; at most `max_objects`, in stored order."""
        top, left, h, w = view.window
        edges = (boxes.astype(np.float64) - [left, top, left, top]) / [w, h, w, h]
        before = (edges[:, 2] - edges[:, 0]) * (edges[:, 3] - edges[:, 1])
        edges = np.clip(edges, 0.0, 1.0)
        after = (edges[:, 2] - edges[:, 0]) * (edges[:, 3] - edges[:, 1])
        keep = (after > 0) & (after >= self.min_visible * before)
        frame_h, frame_w, frame_top, frame_left = view.frame
        x0, x1 = edges[keep, 0] * frame_w + frame_left, edges[keep, 2] * frame_w + frame_left
        y0, y1 = edges[keep, 1] * frame_h + frame_top, edges[keep, 3] * frame_h + frame_top
        out_h, out_w = view.size
        if view.flipped:
            x0, x1 = out_w - x1, out_w - x0
        placed = np.stack(box_columns(x0, y0, x1, y1, self.decode.bounding_box_format, (out_h, out_w)), axis=-1)
        most = self.decode.max_objects or len(placed)
        return placed[:most].astype(np.float32), np.asarray(labels)[keep][:most].astype(np.int32)


def _mask(mask: np.ndarray, view: View) -> np.ndarray:
    """A segmentation mask cut by the view's window, resized nearest-neighbour into its frame
    (the letterbox's padding ignored), flipped with the image."""
    top, left, h, w = view.window
    frame_h, frame_w, frame_top, frame_left = view.frame
    cut = Image.fromarray(np.ascontiguousarray(mask[top : top + h, left : left + w]))
    placed = np.full(view.size, IGNORED, np.uint8)
    placed[frame_top : frame_top + frame_h, frame_left : frame_left + frame_w] = np.asarray(
        cut.resize((frame_w, frame_h), Image.Resampling.NEAREST), np.uint8
    )
    return placed[:, ::-1].copy() if view.flipped else placed
