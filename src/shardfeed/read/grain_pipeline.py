"""A TensorFlow-free input pipeline for Keras 3 on JAX or PyTorch: Grain over `IndexedRecords`.

    ds = shardfeed.grain_dataset("data/flowers", batch_size=64, image_size=224, seed=0, epochs=10)
    model.fit(ds, epochs=10, steps_per_epoch=ds.steps_per_epoch)

Each element is one batch, (uint8 images [B, H, W, 3], int32 labels [B]) — or, beyond one
label, what `load` yields beside the images (boxes and labels padded with -1, masks, k-hot
vectors: read/grain_targets.py), moved with the pixels — made by a Grain `MapDataset` over
global batch numbers: batch g is step g % steps of epoch g // steps, so

    order          each epoch reads `order.global_order(N, seed, epoch)`, the permutation `load`'s
                   global shuffle reads (evaluation: file order), from the split's index files;
                   the last partial batch is dropped when training, as `load` drops it
    decode         JPEG at the DCT scale that keeps the crop at least the output size, the
                   crop window alone (read/window_decode.py: libjpeg's partial decode, as
                   `decode_and_crop_jpeg` does for `load`; simplejpeg's whole decode, cut, where
                   it cannot be built: the same pixels), other formats with Pillow; resized
                   bilinearly to the output size as `load` resizes (no antialiasing unless
                   asked), by OpenCV, straight into the batch
    augmentation   training: the random-resized crop (`Augment`'s area and aspect ranges, 10
                   tries, else the centre crop) and the horizontal flip; evaluation: the centre
                   crop of `crop_fraction` of the shorter side (0.875, as `load`); detection
                   reads the whole image, and `letterbox` fits it on black, as `load`
    randomness     per record, numbers hashed from (seed, epoch, position): a pure function,
                   so a run started at (start_epoch, start_step) makes exactly the batches an
                   uninterrupted run makes from there (exact resume without a checkpoint of state)

Batches are made on `num_threads` threads (simplejpeg, OpenCV and Pillow release the GIL),
in this process or, with `num_workers`, in each of that many Grain worker processes: threads
stopped at ~1,850 images/s on 4-16 cores with the earlier Pillow resize (the per-record Python
holds the GIL; not re-measured on many cores since), processes scale with cores (15 workers on
16 cores: 8,577 images/s steady, docs/benchmarks/gpu.md). Each worker makes every `num_workers`-th
batch and Grain hands them back in turn, so the order, the pixels and exact
resume are the same with workers as without. A script that leaves such an iteration early (or
never finishes it) exits cleanly: the iterators still open are closed, their workers stopped and
their shared memory released, before the interpreter tears down (`_close_at_exit`); Grain's own
clean-up at that point found its modules gone and left shared memory for the resource tracker to
report. Worker processes are spawned, so a script that starts them needs the usual
`if __name__ == "__main__":` guard (as PyTorch's DataLoader does).
The records, their order and the crop windows' distribution are `load`'s; the pixels are its
but for rounding (libjpeg-turbo's chroma upsampling differs by a few levels at colour edges
between TensorFlow's build and simplejpeg's, OpenCV's weights are fixed point: tested within one
level for 99.5% of values).
"""

from __future__ import annotations

import atexit
import functools
import gc
import io
import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

from shardfeed import lazy
from shardfeed.errors import OptionError
from shardfeed.format.image_format import sniff_format
from shardfeed.read import window_decode
from shardfeed.read.augment import Augment, resolve_augment
from shardfeed.read.grain_targets import Targets, View
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, DecodeOptions, ReadOptions
from shardfeed.read.order import global_order, record_uniforms
from shardfeed.read.plan import resolve

CROP_FRACTION = 0.875  # the evaluation centre crop, as `DecodeOptions.crop_fraction`
CROP_TRIES = 10  # random-resized crop attempts before the whole image, as TensorFlow's sampler
RANDOMS = 2 * CROP_TRIES + 3  # numbers drawn per record at most: the tries, the offsets, the flip


@dataclass(frozen=True)
class _Batches:
    """The batch maker: global batch number -> (images, targets). Picklable for Grain's workers."""

    records: IndexedRecords
    batch_size: int
    size: tuple[int, int]
    seed: int
    training: bool
    augment: Augment | None
    steps: int
    targets: Targets

    def __call__(self, number: int) -> tuple[np.ndarray, Any]:
        epoch, step = divmod(int(number), self.steps)
        n = len(self.records)
        order = _epoch_order(n, self.seed, epoch) if self.training else np.arange(n)
        positions = np.arange(step * self.batch_size, min((step + 1) * self.batch_size, n))
        randoms = record_uniforms(self.seed, epoch, positions, RANDOMS)
        images = np.empty((len(positions), *self.size, 3), np.uint8)
        targets = []
        for row, position in enumerate(positions):
            data, target = self.records.encoded(int(order[position]))
            view = self._image(data, iter(randoms[row]), images[row])
            targets.append(self.targets.placed(target, view))
        return images, self.targets.batched(targets)

    def _image(self, data: bytes, draws: Iterator[float], out: np.ndarray) -> View:
        """Writes one record's image into `out` (its row of the batch): cropped (randomly when
        augmenting), resized (or letterboxed), maybe flipped; returns the `View` that made it.
        `draws`: the record's numbers in [0, 1)."""
        height, width = _image_size(data)
        if self.augment is not None and self.augment.crop:
            window = _random_window(height, width, draws, self.augment)
        elif self.targets.whole_image:
            window = (0, 0, height, width)
        else:
            side = max(1, int(min(height, width) * (CROP_FRACTION if not self.training else 1.0)))
            window = ((height - side) // 2, (width - side) // 2, side, side)
        cut = _decoded_window(data, (height, width), window, self.size, exact=self.targets.exact)
        frame = self.targets.frame(window, self.size, self.augment)
        _resize_into(cut, frame, out, antialias=self.targets.decode.antialias)
        flipped = self.augment is not None and self.augment.flip and next(draws) < 0.5
        if flipped:
            _cv2().flip(out, 1, dst=out)  # in place, in C (NumPy's reversed copy of 3-byte pixels is ~6x slower)
        return View((height, width), window, frame, self.size, flipped)


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


def _decoded_window(
    data: bytes, shape: tuple[int, int], window: tuple[int, int, int, int], size: tuple[int, int], *, exact: bool
) -> np.ndarray:
    """The window of the image (of `shape`, from its header) as RGB pixels: a JPEG decoded at
    the smallest DCT scale that keeps the window at least `size` (1/2, 1/4, 1/8; not when
    `exact`: boxes and masks are placed on the full-resolution window, as `load` cuts them),
    the window alone where the crop-window decoder can be had (read/window_decode.py), else
    the whole image by simplejpeg, cut; anything else decoded by Pillow."""
    top, left, h, w = window
    if sniff_format(data) == "jpeg":
        scales = () if exact else (8, 4, 2)
        scale = next((s for s in scales if h // s >= size[0] and w // s >= size[1]), 1)
        height, width = shape
        scaled = -(-height // scale), -(-width // scale)  # libjpeg's scaled size: rounded up
        fy, fx = scaled[0] / height, scaled[1] / width
        y0, x0 = int(top * fy), int(left * fx)
        y1, x1 = max(y0 + 1, int((top + h) * fy)), max(x0 + 1, int((left + w) * fx))
        cut = window_decode.decode_window(data, scale, (y0, x0, y1 - y0, x1 - x0))
        if cut is not None:
            return cut
        pixels = simplejpeg.decode_jpeg(data, "RGB", min_height=scaled[0], min_width=scaled[1])
        return pixels[y0:y1, x0:x1]
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


def grain_dataset(
    path: str,
    *,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    image_size: int | tuple[int, int] = IMAGE_SIZE,
    seed: int | None = None,
    training: bool | None = None,
    augment: bool | Augment | None = None,
    epochs: int = 1,
    start_epoch: int = 0,
    start_step: int = 0,
    num_threads: int = 4,
    num_workers: int = 0,
    letterbox: bool = False,
    bounding_box_format: str = "xyxy",
    max_objects: int | None = None,
    antialias: bool = False,
) -> Any:
    """A Grain dataset of `epochs` epochs of batches of `split` (see the module docstring),
    starting at (start_epoch, start_step); `.steps_per_epoch` tells Keras the epoch's length.
    `num_workers` > 0 makes the batches in that many worker processes (`num_threads` threads
    each); a many-core host wants about one per core. `letterbox`, `bounding_box_format`,
    `max_objects` and `antialias` are `DecodeOptions`' (read/grain_targets.py: what each task's
    batches hold).

    The read is resolved by the same plan as `load` and `steps_per_epoch` (read/plan.py): the
    same split, training default (`split == "train"`), batches per epoch, and seed rule: without
    a seed each run draws its own order (as `load`), and a start inside the epochs needs one.

    Raises:
        OptionError: a split smaller than one batch when training, a start past the end or
            without a seed, a negative `num_workers` or fewer than one thread, a box format
            KerasHub does not name, an `Augment` asking for more than the crop and the flip.
    """
    grain = lazy.grain()
    _cv2()  # the resize's library: missing, one line now rather than an error in a worker
    if num_workers < 0 or num_threads < 1:
        raise OptionError(f"num_workers {num_workers}, num_threads {num_threads}: workers >= 0, threads >= 1")
    read = ReadOptions(shuffle="global", epoch=start_epoch, start_step=start_step)
    plan = resolve(path, split=split, read=read, training=training, seed=seed, batch_size=batch_size)
    steps = plan.batches_per_pass()
    first, last = start_epoch * steps + start_step, (start_epoch + epochs) * steps
    if not 0 <= start_step < steps or first >= last:
        raise OptionError(f"start_epoch {start_epoch}, start_step {start_step}: past the {epochs} epochs of {steps}")
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    augmenting = resolve_augment(augment, plan.training)
    if augmenting is not None and (
        augmenting.rotate or augmenting.translate or augmenting.noise or augmenting.color_jitter
    ):
        raise OptionError(
            "grain_dataset augments with the random-resized crop and the flip; rotate=, translate=, noise= and "
            "color_jitter= are load's"
        )
    records = IndexedRecords(path, split=split)
    decode = DecodeOptions(
        letterbox=letterbox, bounding_box_format=bounding_box_format, max_objects=max_objects, antialias=antialias
    )
    least = augmenting.min_visible if augmenting is not None and augmenting.crop else 0.0
    targets = Targets(records.manifest.header.task, decode, least)
    make = _Batches(records, batch_size, size, plan.base_seed, plan.training, augmenting, steps, targets)  # type: ignore[arg-type]
    ds = grain.MapDataset.range(first, last).map(make)
    ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=2 * num_threads))
    if num_workers:
        _let_workers_read_flags()
        ds = _closed_at_exit()(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers)))
    ds.steps_per_epoch = steps
    return ds


_open_iterators: weakref.WeakSet[Any] = weakref.WeakSet()


def _close_at_exit() -> None:
    """Closes every worker-fed iterator still open (`_closed_at_exit`), and the Grain iterators
    inside it (its interleave and per-worker iterators, which its own `close` leaves open), while
    the modules their clean-up needs are still there."""
    if not _open_iterators:
        return  # none made, or all gone already
    import grain

    for iterator in list(_open_iterators):
        iterator.close()
    for other in gc.get_objects():  # at exit: whatever Grain iterator is left would fail in __del__
        if isinstance(other, grain.DatasetIterator):
            other.close()
            # Grain 0.2's `close` reads module globals even when closed already, and `__del__`
            # calls it again during teardown, when those globals are gone: closed, it has
            # nothing left to do, so the second call does nothing.
            other.close = _nothing
    _release_batches_held()


def _release_batches_held() -> None:
    """Unlinks the shared memory of the worker-made batches the program still holds (`x, y =
    next(it)` in a script's globals), now that nothing will read them: their names leave the
    system, their mappings go with the process. Grain's `__del__` would do it at teardown, when
    its module's globals are gone and it fails ("Exception ignored", the resource tracker then
    reporting the memory as leaked), so it is made to do nothing from here on."""
    import mmap

    from grain.multiprocessing import SharedMemoryArray

    for other in gc.get_objects():
        if isinstance(other, SharedMemoryArray) and isinstance(other.base, mmap.mmap) and other._unlink_on_del:
            other.shm.unlink()
            other._unlink_on_del = False
    SharedMemoryArray.__del__ = _nothing_for


def _nothing() -> None:
    """A closed iterator's `close` at interpreter teardown."""


def _nothing_for(_: Any) -> None:
    """A shared-memory batch's `__del__` at interpreter teardown (released already)."""


@functools.cache
def _closed_at_exit() -> type:
    """The worker-fed dataset's type, made once Grain is imported (this module does not import it
    at start-up); making it registers `_close_at_exit`, which then runs before Grain's own exit
    handlers (they run last registered first) and before the interpreter's teardown."""
    import grain

    class ClosedAtExit(grain.IterDataset):
        """The worker-fed dataset; each iterator it makes is closed at interpreter exit if the
        program has not finished or closed it."""

        def __iter__(self) -> Any:
            iterator = self._parent.__iter__()
            _open_iterators.add(iterator)
            return iterator

        def __str__(self) -> str:
            return "ClosedAtExit"

    atexit.register(_close_at_exit)
    return ClosedAtExit


def _let_workers_read_flags() -> None:
    """Grain's worker processes read absl flags, which raise `UnparsedFlagAccessError` unless a
    program parsed them (`absl.app.run` does; a notebook or `python train.py` does not): mark
    them parsed, with their defaults, when nobody has."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
