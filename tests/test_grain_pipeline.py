"""`grain_dataset`: the TensorFlow-free pipeline for Keras on JAX/PyTorch, run by Keras where
TensorFlow is not installed (a view of the venv without it); its order is `load`'s global
order, its batches after a restart at (epoch, step) are the uninterrupted run's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardfeed import ConvertOptions, IndexedRecords, ReadOptions, convert, grain_dataset, load
from shardfeed.read.native import window_decode
from shardfeed.read.order import global_order

pytest.importorskip("grain")


@pytest.fixture(scope="module")
def site_without_tensorflow(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A view of this venv's site-packages without TensorFlow (links to everything else): with
    `python -S` and this on PYTHONPATH, TensorFlow is not installed as far as Python can tell."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    view = tmp_path_factory.mktemp("site")
    for entry in site.iterdir():
        if not entry.name.startswith(("tensorflow", "_tensorflow", "tf_keras", "tensorboard")) or entry.name.startswith(
            ("tensorflow_datasets", "tensorflow_metadata")
        ):
            (view / entry.name).symlink_to(entry)
    return str(view)


@pytest.fixture(scope="module")
def data(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grain") / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=3, split="train=0.75,validation=0.25"), workers=1)
    return out


def _epochs(ds: object) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.asarray(x), np.asarray(y)) for x, y in ds]  # type: ignore[attr-defined]


def test_each_epoch_reads_the_global_order_and_a_restart_makes_the_same_batches(data: Path) -> None:
    records = IndexedRecords(str(data), split="train")
    n = len(records)
    batches = _epochs(grain_dataset(str(data), batch_size=4, image_size=32, seed=7, epochs=2))
    steps = n // 4
    assert len(batches) == 2 * steps and all(x.shape == (4, 32, 32, 3) and x.dtype == np.uint8 for x, _ in batches)
    for epoch in range(2):
        labels = np.concatenate([y for _, y in batches[epoch * steps : (epoch + 1) * steps]])
        want = [records.label(int(i)) for i in global_order(n, 7, epoch)[: steps * 4]]
        assert labels.tolist() == want
    resumed = _epochs(
        grain_dataset(str(data), batch_size=4, image_size=32, seed=7, epochs=1, start_epoch=1, start_step=3)
    )
    assert len(resumed) == steps - 3
    for (x, y), (x2, y2) in zip(resumed, batches[steps + 3 :], strict=True):
        assert (x == x2).all() and (y == y2).all()


def test_the_order_is_loads_global_order(data: Path) -> None:
    read = ReadOptions(shuffle="global", with_filenames=True)
    from_load = np.concatenate([b[1].numpy() for b in load(str(data), batch_size=4, image_size=32, seed=3, read=read)])
    from_grain = np.concatenate([y for _, y in _epochs(grain_dataset(str(data), batch_size=4, image_size=32, seed=3))])
    assert from_grain.tolist() == from_load.tolist()


def test_evaluation_reads_every_record_in_file_order(data: Path) -> None:
    records = IndexedRecords(str(data), split="validation")
    batches = _epochs(grain_dataset(str(data), split="validation", batch_size=4, image_size=24))
    labels = np.concatenate([y for _, y in batches])
    assert labels.tolist() == [records.label(i) for i in range(len(records))]
    again = _epochs(grain_dataset(str(data), split="validation", batch_size=4, image_size=24))
    assert all((a[0] == b[0]).all() for a, b in zip(batches, again, strict=True))  # no randomness


@pytest.mark.parametrize("antialias", [False, True])
def test_evaluation_pixels_are_loads(data: Path, antialias: bool) -> None:
    """The centre crops, resized as `load` resizes them (bilinear, half-pixel centres; Pillow's
    widened filter as TensorFlow's `antialias=True`), are `load`'s pixels (TensorFlow's decoder
    and resize, computed independently): exactly, where the compiled batch decoder decodes them
    (read/native/window_decode.py); with antialiasing (decoded whole by simplejpeg, resized by Pillow)
    but for rounding: libjpeg-turbo's chroma upsampling differs by a few levels at colour edges
    between the two builds, Pillow's weights are fixed point. A window one pixel off, or a row
    left unwritten, is tens of levels on average."""
    from shardfeed import DecodeOptions

    split = dict(split="validation", batch_size=4, image_size=160)  # windows < 2x160: no DCT scaling in either
    ours = np.concatenate([x for x, _ in _epochs(grain_dataset(str(data), antialias=antialias, **split))])  # type: ignore[arg-type]
    theirs = np.concatenate([x.numpy() for x, _ in load(str(data), decode=DecodeOptions(antialias=antialias), **split)])  # type: ignore[arg-type]
    assert ours.shape == theirs.shape == (11, 160, 160, 3)
    if not antialias and window_decode.available():  # the batch decoder: load's decode and resize, value for value
        np.testing.assert_array_equal(ours, theirs)
    diff = np.abs(ours.astype(int) - theirs.astype(int))
    assert diff.mean() < 0.3 and (diff > 1).mean() < 0.005, (diff.mean(), (diff > 1).mean())


def test_the_flip_mirrors_the_image_exactly(data: Path) -> None:
    """Flip alone (no crop): each image is the unflipped run's or its exact mirror, both occur."""
    from shardfeed import Augment

    options = dict(batch_size=4, image_size=48, seed=2)
    plain = np.concatenate(
        [x for x, _ in _epochs(grain_dataset(str(data), augment=Augment(crop=False, flip=False), **options))]
    )  # type: ignore[arg-type]
    flips = np.concatenate([x for x, _ in _epochs(grain_dataset(str(data), augment=Augment(crop=False), **options))])  # type: ignore[arg-type]
    same = [(a == b).all() for a, b in zip(flips, plain, strict=True)]
    mirrored = [(a == b[:, ::-1]).all() for a, b in zip(flips, plain, strict=True)]
    assert all(s != m for s, m in zip(same, mirrored, strict=True))  # one or the other (no symmetric image)
    assert 0 < sum(mirrored) < len(flips)


@pytest.mark.slow
def test_worker_processes_make_the_same_batches_in_the_same_order(data: Path) -> None:
    """Two Grain worker processes (each every other batch) give the batches threads give, and a
    restart at (epoch 1, step 2) under workers is the uninterrupted run from there."""
    options = dict(batch_size=4, image_size=32, seed=5)
    threads = _epochs(grain_dataset(str(data), epochs=2, **options))  # type: ignore[arg-type]
    workers = _epochs(grain_dataset(str(data), epochs=2, num_workers=2, num_threads=1, **options))  # type: ignore[arg-type]
    assert len(workers) == len(threads) > 4
    for (x, y), (x2, y2) in zip(workers, threads, strict=True):
        assert (y == y2).all() and (x == x2).all()
    steps = len(threads) // 2
    resumed = _epochs(grain_dataset(str(data), epochs=1, start_epoch=1, start_step=2, num_workers=2, **options))  # type: ignore[arg-type]
    assert len(resumed) == steps - 2
    for (x, y), (x2, y2) in zip(resumed, threads[steps + 2 :], strict=True):
        assert (y == y2).all() and (x == x2).all()


def test_it_is_resolved_by_loads_plan(data: Path) -> None:
    """The count `steps_per_epoch` gives, each run its own order without a seed (as `load`), and
    a start inside the epochs refused without one (the order to resume would be unknown)."""
    from shardfeed import OptionError, steps_per_epoch

    for split in ("train", "validation"):
        ds = grain_dataset(str(data), split=split, batch_size=4, image_size=16)
        assert ds.steps_per_epoch == steps_per_epoch(str(data), split, 4)
    runs = {np.concatenate([x for x, _ in _epochs(grain_dataset(str(data), batch_size=4, image_size=16))]).tobytes()}
    runs |= {np.concatenate([x for x, _ in _epochs(grain_dataset(str(data), batch_size=4, image_size=16))]).tobytes()}
    assert len(runs) == 2
    with pytest.raises(OptionError, match="need a seed"):
        grain_dataset(str(data), batch_size=4, start_epoch=1)


def test_a_negative_worker_count_is_one_line(data: Path) -> None:
    from shardfeed import ShardfeedError

    with pytest.raises(ShardfeedError, match="num_workers -1"):
        grain_dataset(str(data), num_workers=-1)


LEFT_EARLY = """import sys
import shardfeed
ds = shardfeed.grain_dataset(sys.argv[1], batch_size=4, image_size=32, seed=0, epochs=50, num_workers=2)
it = iter(ds)
held = next(it)  # a batch kept in the script's globals until the interpreter's teardown
print(held[0].shape, next(it)[0].shape, flush=True)
"""


@pytest.mark.slow
def test_leaving_a_worker_fed_iteration_early_exits_promptly(data: Path) -> None:
    """A script that stops after 2 of 50 epochs' batches ends, workers and all (no hang at exit),
    and quietly: no Grain iterator or shared-memory batch (one still held in its globals)
    failing in `__del__` at teardown, no shared memory left for the resource tracker to report
    (all printed before the iterators were closed and the held batches released at exit)."""
    done = subprocess.run([sys.executable, "-c", LEFT_EARLY, str(data)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["(4,", "32,", "32,", "3)"] * 2
    assert "Exception ignored" not in done.stderr and "leaked" not in done.stderr, done.stderr[-3000:]


SCRIPT = """import importlib.util, os, sys
os.environ["KERAS_BACKEND"] = sys.argv[2]
assert importlib.util.find_spec("tensorflow") is None
import keras, shardfeed
ds = shardfeed.grain_dataset(sys.argv[1], batch_size=4, image_size=32, seed=0, epochs=2, num_workers=int(sys.argv[3]))
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                          keras.layers.Dense(4, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
history = model.fit(ds, epochs=2, steps_per_epoch=ds.steps_per_epoch, verbose=0)
print(keras.backend.backend(), len(history.history["loss"]), "tensorflow" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "workers"), [("jax", 2), ("torch", 0)])
def test_keras_fits_it_without_tensorflow(backend: str, workers: int, data: Path, site_without_tensorflow: str) -> None:
    import importlib.util

    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    src = str(Path(__file__).resolve().parents[1] / "src")
    done = subprocess.run(
        [sys.executable, "-S", "-c", SCRIPT, str(data), backend, str(workers)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": f"{site_without_tensorflow}:{src}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [backend, "2", "False"]


@pytest.mark.slow
def test_the_scaled_windows_and_dct_scales_are_loads() -> None:
    """grain's window at the DCT scale (`grain.batches.scaled_view`, Python ints) is `load`'s
    (read/geometry.py over TensorFlow's ops, as read/decode/ calls it) for windows of every size,
    place and image; the scale is the largest of 1/8, 1/4, 1/2 that keeps the window at least
    the output's size (counted here independently)."""
    import tensorflow as tf

    from shardfeed.read.geometry import DCT_SCALES, dct_index, scaled_window, tf_ops
    from shardfeed.read.grain.batches import scaled_view
    from shardfeed.read.targets import View

    rng = np.random.default_rng(0)
    size = (56, 40)
    for _ in range(300):
        shape = (int(rng.integers(1, 1200)), int(rng.integers(1, 1200)))
        h, w = int(rng.integers(1, shape[0] + 1)), int(rng.integers(1, shape[1] + 1))
        window = (int(rng.integers(0, shape[0] - h + 1)), int(rng.integers(0, shape[1] - w + 1)), h, w)
        ours, ratio = scaled_view(View(shape, window, (*size, 0, 0), size, False), exact=False)
        assert ratio == next(s for s in (8, 4, 2, 1) if s == 1 or (h // s >= size[0] and w // s >= size[1]))
        window_t = tf.constant(window)
        assert ratio == DCT_SCALES[int(dct_index(window_t[2], window_t[3], size, tf_ops()))], (shape, window)
        theirs = tf.stack(scaled_window(window_t, tf.constant([*shape, 3]), tf.constant(ratio), tf_ops()))
        assert ours == tuple(theirs.numpy().tolist()), (shape, window, ratio)
        assert all(isinstance(v, int) for v in ours)
        assert scaled_view(View(shape, window, (*size, 0, 0), size, False), exact=True) == (window, 1)
