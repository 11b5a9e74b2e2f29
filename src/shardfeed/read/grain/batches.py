"""`grain_dataset`'s batches: global batch number -> (images, targets), made in this process's
threads or in a Grain worker (read/grain/pipeline.py says what a batch holds).

    order          the epoch's `order.global_order` (evaluation: file order), batch by batch
    windows        per record, from numbers hashed from (seed, epoch, position)
                   (`order.record_uniforms`): the random-resized crop as TensorFlow's sampler
                   draws it, the centre crop, or the whole image; the flip
    pixels         a batch's JPEGs decoded, resized and flipped into the batch by one call of
                   the compiled decoder (read/native/window_decode.py: `load`'s cut, DCT scale and fused
                   resize, so `load`'s values); what it cannot take (other formats, letterboxes,
                   antialiasing, a JPEG its libjpeg refuses, or no library) one record at a time
    targets        each record's boxes, mask or labels placed as its view of the image
                   (read/targets/)
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

from shardfeed import lazy
from shardfeed.format.image_format import sniff_format
from shardfeed.read.augment import Augment
from shardfeed.read.geometry import DCT_SCALES, dct_index, letterbox_frame, scaled_window
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.native import window_decode
from shardfeed.read.options import FAST_DCT
from shardfeed.read.order import global_order, record_uniforms
from shardfeed.read.targets import Placing, Targets, View

CROP_FRACTION = 0.875  # the evaluation centre crop, as `DecodeOptions.crop_fraction`
CROP_TRIES = 10  # random-resized crop attempts before the whole image, as TensorFlow's sampler
RANDOMS = 2 * CROP_TRIES + 3  # numbers drawn per record at most: the tries, the offsets, the flip


@dataclass(frozen=True)
class Batches:
    """The batch maker: global batch number -> (images, targets). Picklable for Grain's workers."""

    records: IndexedRecords
    batch_size: int
    size: tuple[int, int]
    seed: int
    training: bool
    augment: Augment | None
    steps: int
    targets: Targets  # the task's (read/targets/)
    placing: Placing  # how they are placed: the decode options, min_visible, crowds

    def __call__(self, number: int) -> tuple[np.ndarray, Any]:
        epoch, step = divmod(int(number), self.steps)
        n = len(self.records)
        order = _epoch_order(n, self.seed, epoch) if self.training else np.arange(n)
        positions = np.arange(step * self.batch_size, min((step + 1) * self.batch_size, n))
        randoms = record_uniforms(self.seed, epoch, positions, RANDOMS)
        images = np.empty((len(positions), *self.size, 3), np.uint8)
        encoded = [self.records.encoded(int(order[position])) for position in positions]
        views = [self._view(data, iter(randoms[row])) for row, (data, _) in enumerate(encoded)]
        for row in self._batch_decoded([data for data, _ in encoded], views, images):
            self._pixels(encoded[row][0], views[row], images[row])
        placing = self.placing
        placed = [self.targets.placed(t, view, placing) for (_, t), view in zip(encoded, views, strict=True)]
        return images, self.targets.batched(placed, placing)

    def _view(self, data: bytes, draws: Iterator[float]) -> View:
        """How one record's image is made: its crop (random when augmenting), where the picture
        lies in the output (all of it, or letterboxed), whether it is mirrored. `draws`: the
        record's numbers in [0, 1)."""
        height, width = _image_size(data)
        if self.augment is not None and self.augment.crop:
            window = _random_window(height, width, draws, self.augment)
        elif self.targets.whole_image or self.placing.decode.letterbox:  # every object in view; a whole letterbox
            window = (0, 0, height, width)
        else:
            side = max(1, int(min(height, width) * (CROP_FRACTION if not self.training else 1.0)))
            window = ((height - side) // 2, (width - side) // 2, side, side)
        frame = self._frame(window)
        flipped = self.augment is not None and self.augment.flip and next(draws) < 0.5
        return View((height, width), window, frame, self.size, flipped)

    def _frame(self, window: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """Where the window's picture lies in the output: all of it, or letterboxed (asked for,
        and not randomly cropped)."""
        if self.placing.decode.letterbox and (self.augment is None or not self.augment.crop):
            return letterbox_frame(window[2], window[3], self.size)
        return (*self.size, 0, 0)

    def _batch_decoded(self, data: list[bytes], views: list[View], images: np.ndarray) -> list[int]:
        """Decodes the batch's JPEGs that fill their output (not letterboxed, no antialiasing)
        into `images` by one call of the compiled batch decoder (read/native/window_decode.py): each
        window cut and decoded as `load`'s `decode_and_crop_jpeg` decodes it at the same DCT
        scale, resized and flipped by `load`'s fused resize, so the pixels of a view are `load`'s
        own. Returns the rows left to decode one by one (all, where the decoder cannot be had)."""
        whole = (*self.size, 0, 0)
        rows = [
            row
            for row, view in enumerate(views)
            if view.frame == whole and not self.placing.decode.antialias and sniff_format(data[row]) == "jpeg"
        ]
        if not rows:
            return list(range(len(views)))
        windows, ratios = zip(*(scaled_view(views[row], exact=self.targets.exact) for row in rows), strict=True)
        flips = np.array([views[row].flipped for row in rows], np.uint8)
        every = len(rows) == len(views)
        out = images if every else np.empty((len(rows), *images.shape[1:]), np.uint8)
        ok = window_decode.decode_resize(
            [data[row] for row in rows], windows, ratios, flips, out, self.placing.decode.dct_method in FAST_DCT
        )
        if ok is None:
            return list(range(len(views)))
        if not every:
            images[rows] = out
        decoded = {row for row, good in zip(rows, ok, strict=True) if good}
        return [row for row in range(len(views)) if row not in decoded]

    def _pixels(self, data: bytes, view: View, out: np.ndarray) -> None:
        """Writes one record's image into `out` (its row of the batch) as `view` says: cut,
        resized (or letterboxed), maybe flipped, one record at a time (`_batch_decoded`'s
        leftovers: other formats, letterboxes, antialiasing, JPEGs its libjpeg refuses)."""
        cut = _decoded_window(data, view, exact=self.targets.exact)
        plain = view.frame == (*self.size, 0, 0) and not self.placing.decode.antialias
        if plain and window_decode.resize_into(cut, out, view.flipped):  # load's fused resize and flip
            return
        _resize_into(cut, view.frame, out, antialias=self.placing.decode.antialias)
        if view.flipped:
            _cv2().flip(out, 1, dst=out)  # in place, in C (NumPy's reversed copy of 3-byte pixels is ~6x slower)


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """`global_order`, computed once per epoch (per thread's worth of batches, not per batch)."""
    return global_order(n, seed, epoch)


def _image_size(data: bytes) -> tuple[int, int]:
    """(height, width) from the header."""
    if sniff_format(data) == "jpeg":
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        return int(height), int(width)
    with Image.open(io.BytesIO(data)) as im:
        return im.height, im.width


def _random_window(height: int, width: int, draws: Iterator[float], augment: Augment) -> tuple[int, int, int, int]:
    """[top, left, height, width] of a random-resized crop: area and aspect drawn as TensorFlow's
    bounding-box sampler draws them; after CROP_TRIES misses, the whole image."""
    area = height * width
    (a_low, a_high), (r_low, r_high) = augment.area_range, augment.aspect_ratio_range
    for _ in range(CROP_TRIES):
        target = area * (a_low + (a_high - a_low) * next(draws))
        ratio = math.exp(math.log(r_low) + (math.log(r_high) - math.log(r_low)) * next(draws))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(next(draws) * (height - h + 1)), int(next(draws) * (width - w + 1)), h, w
    return 0, 0, height, width


def scaled_view(view: View, *, exact: bool) -> tuple[tuple[int, int, int, int], int]:
    """(the view's window in the pixels of the image decoded at 1/ratio, ratio): the DCT scale
    `load` picks (`geometry.dct_index`; 1 when `exact`: boxes and masks are cut at full
    resolution) and its window there (`geometry.scaled_window`), by the same arithmetic."""
    _, _, h, w = view.window
    ratio = 1 if exact else DCT_SCALES[dct_index(h, w, view.size)]
    if ratio == 1:
        return view.window, 1
    return scaled_window(view.window, view.shape, ratio), ratio


def _decoded_window(data: bytes, view: View, *, exact: bool) -> np.ndarray:
    """The view's window of the image as RGB pixels: a JPEG decoded at the smallest DCT scale
    that keeps the window at least the output size, the window at that scale as `load` places it
    (`scaled_view`; `exact`: at full resolution, as boxes and masks are placed on it), the
    window alone where the crop-window decoder can be had (read/native/window_decode.py), else the
    whole image by simplejpeg, cut; anything else decoded by Pillow."""
    if sniff_format(data) == "jpeg":
        (y0, x0, h, w), scale = scaled_view(view, exact=exact)
        cut = window_decode.decode_window(data, scale, (y0, x0, h, w))
        if cut is not None:
            return cut
        height, width = view.shape
        pixels = simplejpeg.decode_jpeg(data, "RGB", min_height=-(-height // scale), min_width=-(-width // scale))
        return pixels[y0 : y0 + h, x0 : x0 + w]
    top, left, h, w = view.window
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))[top : top + h, left : left + w]


def _resize_into(cut: np.ndarray, frame: tuple[int, int, int, int], out: np.ndarray, *, antialias: bool) -> None:
    """`cut` resized bilinearly into its frame of `out` ([height, width, top, left]: all of
    `out`, or letterboxed on black). By default as `load` resizes (`tf.image.resize`, bilinear,
    half-pixel centres, no antialiasing): OpenCV's INTER_LINEAR, the same two taps a side in
    fixed point (within one level of TensorFlow's), written straight into the batch;
    `antialias`: Pillow's bilinear filter widened to the scale, as `antialias=True`."""
    height, width, top, left = frame
    whole = (height, width) == out.shape[:2]
    if antialias:
        resized = np.asarray(
            Image.fromarray(np.ascontiguousarray(cut)).resize((width, height), Image.Resampling.BILINEAR)
        )
    elif whole:
        _cv2().resize(cut, (width, height), dst=out, interpolation=_cv2().INTER_LINEAR)
        return
    else:
        resized = _cv2().resize(cut, (width, height), interpolation=_cv2().INTER_LINEAR)
    if not whole:  # letterboxed: the picture on black
        out[...] = 0
    out[top : top + height, left : left + width] = resized


@functools.cache
def _cv2() -> Any:
    """OpenCV, imported once (in each worker process too)."""
    return lazy.opencv()
