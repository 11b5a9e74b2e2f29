"""The DALI decode path (read/dali.py) in DALI's CPU mode: the same label multiset per epoch and
the same steps per epoch as `load`, and refusals of what it cannot honour. Skipped, with the
reason, where DALI is not installed (`make dali`); the refusals run everywhere."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import zygote

from shardfeed import load, steps_per_epoch
from shardfeed.errors import OptionError
from shardfeed.read import dali
from shardfeed.read.augment import Augment
from shardfeed.read.options import DecodeOptions, ReadOptions

HAVE_DALI = dali.installed()
needs_dali = pytest.mark.skipif(not HAVE_DALI, reason="NVIDIA DALI is not installed (make dali)")
DALI_CPU = DecodeOptions(decoder="dali", device="cpu")


def _labels(ds: object) -> tuple[collections.Counter[int], list[int]]:
    counts: collections.Counter[int] = collections.Counter()
    sizes = []
    for _, labels in ds:  # type: ignore[attr-defined]
        counts.update(labels.numpy().tolist())
        sizes.append(len(labels))
    return counts, sizes


@needs_dali
def test_evaluation_reads_each_record_once_with_the_cpu_paths_batches(photo_shards: Path) -> None:
    for split in ("train", "validation"):
        once: dict[str, Any] = {"split": split, "batch_size": 4, "image_size": 32, "training": False}
        reference, ref_sizes = _labels(load(str(photo_shards), **once))
        ds = load(str(photo_shards), **once, decode=DALI_CPU)
        counts, sizes = _labels(ds)
        assert counts == reference and sizes == ref_sizes  # the last batch cut to its real records
        assert int(ds.cardinality()) == steps_per_epoch(str(photo_shards), split, 4, training=False)
    images, _ = next(iter(ds))
    assert images.shape[1:] == (32, 32, 3) and images.dtype.name == "uint8"


@needs_dali
def test_training_epochs_hold_each_record_at_most_once_and_as_many_steps(photo_shards: Path) -> None:
    reference, _ = _labels(load(str(photo_shards), split="train", batch_size=4, image_size=32, training=False))
    steps = steps_per_epoch(str(photo_shards), "train", 4)  # the incomplete batch dropped, as `load` does
    ds = load(str(photo_shards), split="train", batch_size=4, image_size=32, seed=0, repeat=True, decode=DALI_CPU)
    batches = [labels.numpy().tolist() for _, labels in ds.take(2 * steps)]
    assert all(len(b) == 4 for b in batches)
    for epoch in range(2):
        counts = collections.Counter(x for b in batches[epoch * steps : (epoch + 1) * steps] for x in b)
        assert sum(counts.values()) == steps * 4 and not counts - reference  # a sub-multiset of the split
    one = load(str(photo_shards), split="train", batch_size=4, image_size=32, seed=0, decode=DALI_CPU)
    assert int(one.cardinality()) == steps == sum(1 for _ in one)


@needs_dali
def test_keras_fits_on_the_dali_path(photo_shards: Path) -> None:
    import keras

    ds = load(str(photo_shards), split="train", batch_size=8, image_size=32, seed=0, decode=DALI_CPU)
    net = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten()])
    net.add(keras.layers.Dense(4, activation="softmax"))
    net.compile("adam", "sparse_categorical_crossentropy")
    history = net.fit(ds, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"read": ReadOptions(shuffle="global")}, "shuffle='global'"),
        ({"read": ReadOptions(with_filenames=True)}, "with_filenames"),
        ({"augment": Augment(rotate=10)}, "augmentation beyond crop and flip"),
    ],
)
def test_what_the_dali_path_cannot_honour_is_refused(photo_shards: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(OptionError, match=f"decoder='dali' cannot honour .*{message}"):
        load(str(photo_shards), batch_size=4, image_size=32, seed=0, decode=DALI_CPU, **kwargs)


def test_the_gpu_device_without_a_gpu_says_so(photo_shards: Path) -> None:
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is visible here")
    with pytest.raises(OptionError, match="needs a GPU and TensorFlow sees none; pass DecodeOptions"):
        load(str(photo_shards), batch_size=4, image_size=32, decode=DecodeOptions(decoder="dali"))
    with pytest.raises(OptionError, match="decoder must be one of"):
        DecodeOptions(decoder="nvjpeg")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "bench"])
def test_decode_on_gpu_without_a_gpu_is_one_line(photo_shards: Path, tmp_path: Path, command: str) -> None:
    import sys

    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is visible here")
    cmd = [sys.executable, "-m", "shardfeed", command, str(photo_shards), "--decode-on", "gpu"]
    cmd += ["--image-size", "32", "--batch-size", "8"]
    if command == "train":
        cmd += ["--out", str(tmp_path / "r"), "--epochs", "1"]
    done = zygote.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: decoder='dali' with device='gpu' needs a GPU and TensorFlow sees none" in done.stderr


@needs_dali
def test_bench_with_a_model_measures_the_dali_feed_beside_load(photo_shards: Path) -> None:
    """Where a GPU and DALI are present `bench --model` measures both decode paths against the model;
    here dali_feed=True runs that branch in DALI's CPU mode: both feeds in fresh processes."""
    import shardfeed
    from shardfeed.training import build_model

    net = build_model("small_cnn", ["a", "b", "c", "d"], (32, 32))
    result = shardfeed.tools.bench(str(photo_shards), batch_size=8, image_size=32, model=net, dali_feed=True, rounds=1)
    assert result["settings"]["rounds"] == 1 and len(result["dali"]["runs"]) == 1
    rate = result["model"]["images_per_second"]
    for feed in ("shardfeed", "dali"):
        share = result["feeds"][feed]
        assert share["images_per_second"] == result[feed]["images_per_second"] > 0
        assert share["of_model"] == pytest.approx(share["images_per_second"] / rate)
    assert result["gpu_decode"].startswith("GPU decode feeds ")
    ours = result["shardfeed"]  # CPU time can be 0 at os.times' 10 ms resolution: the formula, not the value
    cpu_per_image = ours["cpu_cores_used"] / ours["images_per_second"]
    assert result["model"]["cores_for_0.95"] == pytest.approx(0.95 * rate * cpu_per_image)
