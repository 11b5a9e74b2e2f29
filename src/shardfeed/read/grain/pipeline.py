"""A TensorFlow-free input pipeline for Keras 3 on JAX or PyTorch: Grain over `IndexedRecords`.

    ds = shardfeed.grain_dataset("data/flowers", batch_size=64, image_size=224, seed=0, epochs=10)
    model.fit(ds, epochs=10, steps_per_epoch=ds.steps_per_epoch)

Each element is one batch, (uint8 images [B, H, W, 3], int32 labels [B]) — or, beyond one
label, what `load` yields beside the images (boxes and labels padded with -1, masks, k-hot
vectors: read/targets/), moved with the pixels — made by a Grain `MapDataset` over
global batch numbers: batch g is step g % steps of epoch g // steps, so

    order          each epoch reads `order.global_order(N, seed, epoch)`, the permutation `load`'s
                   global shuffle reads (evaluation: file order), from the split's index files;
                   the last partial batch is dropped when training, as `load` drops it
    decode         JPEG at the DCT scale that keeps the crop at least the output size, the
                   crop window alone, cut as `load`'s `decode_and_crop_jpeg` cuts it, resized
                   bilinearly by `load`'s fused resize and flipped, straight into the batch: a
                   whole batch's JPEGs in one call of the compiled decoder (read/native/window_decode.py,
                   libjpeg's partial decode), so the pixels of a window are `load`'s, value for
                   value; other formats decoded by Pillow, resized by the same resize. Letterboxes
                   and `antialias` (Pillow's widened filter) go one record at a time, resized by
                   OpenCV or Pillow; where the library cannot be built, simplejpeg decodes each
                   image whole and OpenCV resizes it (within a level of `load`'s pixels)
    augmentation   training: the random-resized crop (`Augment`'s area and aspect ranges, 10
                   tries, else the centre crop) and the horizontal flip; evaluation: the centre
                   crop of `crop_fraction` of the shorter side (0.875, as `load`); detection
                   reads the whole image, and `letterbox` fits it on black, as `load`
    randomness     per record, numbers hashed from (seed, epoch, position): a pure function,
                   so a run started at (start_epoch, start_step) makes exactly the batches an
                   uninterrupted run makes from there (exact resume without a checkpoint of state)

Batches are made on `num_threads` threads (the compiled decoder, simplejpeg, OpenCV and Pillow
release the GIL), in this process or, with `num_workers`, in each of that many Grain worker
processes: threads stopped at ~1,850 images/s on 4-16 cores with the earlier Pillow resize (the
per-record Python holds the GIL; not re-measured on many cores since), processes scale with
cores (15 workers on 16 cores: 8,577 images/s steady, docs/benchmarks/gpu.md). Each worker makes
every `num_workers`-th batch and Grain hands them back in turn, so the order, the pixels and exact
resume are the same with workers as without. A script that leaves such an iteration early (or
never finishes it) exits cleanly: the iterators still open are closed, their workers stopped and
their shared memory released, before the interpreter tears down (`_close_at_exit`); Grain's own
clean-up at that point found its modules gone and left shared memory for the resource tracker to
report. Worker processes are spawned, so a script that starts them needs the usual
`if __name__ == "__main__":` guard (as PyTorch's DataLoader does).
The records, their order and the crop windows' distribution are `load`'s (the windows
themselves are drawn from grain's own numbers); with the compiled library, so are the pixels of
a given window and flip (tests/test_grain_pipeline.py, tests/test_batch_decode.py).
"""

from __future__ import annotations

import atexit
import functools
import gc
import weakref
from typing import Any

from shardfeed import lazy
from shardfeed.errors import OptionError
from shardfeed.read.augment import Augment, resolve_augment
from shardfeed.read.grain.batches import Batches
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, DecodeOptions, ReadOptions
from shardfeed.read.plan import resolve
from shardfeed.read.targets import Placing, targets_of


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
    crowd_targets: bool = False,
) -> Any:
    """A Grain dataset of `epochs` epochs of batches of `split` (see the module docstring),
    starting at (start_epoch, start_step); `.steps_per_epoch` tells Keras the epoch's length.
    `num_workers` > 0 makes the batches in that many worker processes (`num_threads` threads
    each); a many-core host wants about one per core. `letterbox`, `bounding_box_format`,
    `max_objects`, `antialias` and `crowd_targets` are `DecodeOptions`' (read/targets/:
    what each task's batches hold).

    The read is resolved by the same plan as `load` and `steps_per_epoch` (read/plan.py): the
    same split, training default (`split == "train"`), batches per epoch, and seed rule: without
    a seed each run draws its own order (as `load`), and a start inside the epochs needs one.

    Raises:
        OptionError: a split smaller than one batch when training, a start past the end or
            without a seed, a negative `num_workers` or fewer than one thread, a box format
            KerasHub does not name, an `Augment` asking for more than the crop and the flip.
    """
    grain = lazy.grain()
    lazy.opencv()  # the resize's library: missing, one line now rather than an error in a worker
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
        letterbox=letterbox,
        bounding_box_format=bounding_box_format,
        max_objects=max_objects,
        antialias=antialias,
        crowd_targets=crowd_targets,
    )
    least = augmenting.min_visible if augmenting is not None and augmenting.crop else 0.0
    targets = targets_of(records.manifest.header.task)
    placing = Placing(decode, least, drop_crowd=plan.training and not crowd_targets)
    make = Batches(records, batch_size, size, plan.base_seed, plan.training, augmenting, steps, targets, placing)  # type: ignore[arg-type]
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
