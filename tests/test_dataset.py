"""load: real shards from real images read back through tf.data, and model.fit on them."""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shardfeed import (
    ConvertOptions,
    DecodeOptions,
    ForeignKeys,
    ImageOptions,
    ReadOptions,
    convert,
    load,
    read_manifest,
    steps_per_epoch,
)
from shardfeed.errors import CorruptRecordError, SourceError
from shardfeed.format.manifest import side_bucket
from shardfeed.read.augment import Augment


def _all(ds) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in ds], strict=True)
    return np.concatenate(images), np.concatenate(labels)


def _digests(images: np.ndarray) -> Counter[str]:
    return Counter(hashlib.sha256(image.tobytes()).hexdigest() for image in images)


@pytest.mark.slow
def test_one_epoch_sees_every_record_exactly_once(photo_shards: Path) -> None:
    m = read_manifest(str(photo_shards))
    reference, ref_labels = _all(load(str(photo_shards), split="train", training=False, batch_size=5, image_size=64))
    shuffled, labels = _all(
        load(
            str(photo_shards),
            split="train",
            training=True,
            augment=False,
            batch_size=5,
            image_size=64,
            read=ReadOptions(drop_remainder=False, shuffle_buffer=7),
        )
    )
    assert len(reference) == len(shuffled) == m.split("train").num_records == 33
    assert len(_digests(reference)) == 33  # every image distinct, so equal multisets mean exactly once
    assert _digests(reference) == _digests(shuffled)
    names = m.labels or []
    assert Counter(names[i] for i in labels) == Counter(m.split("train").class_counts)
    assert Counter(ref_labels.tolist()) == Counter(labels.tolist())


@pytest.mark.slow
def test_shapes_dtypes_and_cardinality(photo_shards: Path) -> None:
    ds = load(str(photo_shards), split="train", batch_size=8, image_size=(48, 40))
    assert ds.element_spec[0].shape.as_list() == [8, 48, 40, 3] and ds.element_spec[0].dtype.name == "uint8"
    assert int(ds.cardinality()) == steps_per_epoch(str(photo_shards), "train", 8) == 4
    images, labels = next(iter(ds))
    assert labels.dtype.name == "int64" and images.numpy().max() > 0
    val = load(
        str(photo_shards),
        split="validation",
        batch_size=8,
        image_size=32,
        decode=DecodeOptions(dtype="float32", channels=1),
    )
    assert (
        int(val.cardinality())
        == steps_per_epoch(str(photo_shards), "validation", 8, read=ReadOptions(drop_remainder=False))
        == 2
    )
    x, _ = next(iter(val))
    assert x.shape[1:] == (32, 32, 1) and x.dtype.name == "float32" and float(x.numpy().max()) <= 255.0


def test_eval_preprocessing_is_a_centre_crop_of_the_original(photo_tree: Path, photo_shards: Path) -> None:
    from PIL import Image

    ds = load(
        str(photo_shards),
        split="validation",
        batch_size=1,
        image_size=64,
        decode=DecodeOptions(crop_fraction=1.0, dct_method="INTEGER_ACCURATE", map_fn=None),
    )
    image, label = next(iter(ds))
    m = read_manifest(str(photo_shards))
    candidates = sorted((photo_tree / (m.labels or [])[int(label[0])]).glob("*"))
    best = min(
        np.abs(np.asarray(_centre(Image.open(p).convert("RGB"), 64), float) - image.numpy()[0]).mean()
        for p in candidates
    )
    assert best < 8.0  # one of the class's photos, centre square, resized


def _centre(im, size):  # type: ignore[no-untyped-def]
    side = min(im.size)
    left, top = (im.width - side) // 2, (im.height - side) // 2
    return im.crop((left, top, left + side, top + side)).resize((size, size), 2)


@pytest.mark.slow
def test_seeded_pipelines_give_identical_batches(photo_shards: Path) -> None:
    kwargs = dict(
        split="train", batch_size=4, image_size=32, seed=11, augment=Augment(rotate=10, noise=2.0, color_jitter=0.3)
    )
    a, la = _all(load(str(photo_shards), **kwargs))
    b, lb = _all(load(str(photo_shards), **kwargs))
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    c, _ = _all(load(str(photo_shards), **{**kwargs, "seed": 12}))
    assert not np.array_equal(a, c)


def test_translate_shifts_each_image_by_whole_pixels_within_the_bound(photo_shards: Path) -> None:
    common = dict(split="validation", batch_size=4, image_size=32, training=False, seed=3)
    plain, _ = _all(load(str(photo_shards), **common, augment=Augment(crop=False, flip=False)))
    moved, _ = _all(load(str(photo_shards), **common, augment=Augment(crop=False, flip=False, translate=0.125)))
    shifts = []
    for a, b in zip(plain.astype(int), moved.astype(int), strict=True):
        # the inner 20x20 of the shifted image equals the plain image's at some (dy, dx) within 4 px
        matches = [
            (dy, dx)
            for dy in range(-4, 5)
            for dx in range(-4, 5)
            if np.abs(b[6:26, 6:26] - a[6 - dy : 26 - dy, 6 - dx : 26 - dx]).max() <= 1
        ]
        assert matches, "an augmented image is not a whole-pixel shift of the original"
        shifts.append(matches[0])
    assert len(set(shifts)) > 1 and any(s != (0, 0) for s in shifts)
    with pytest.raises(ValueError, match="translate"):
        Augment(translate=0.5)


@pytest.mark.slow
def test_workers_read_disjoint_whole_shards_covering_everything(photo_shards: Path) -> None:
    total = Counter()
    for index in range(2):
        _, labels = _all(
            load(
                str(photo_shards),
                split="train",
                training=False,
                batch_size=4,
                image_size=16,
                read=ReadOptions(num_workers=2, worker_index=index),
            )
        )
        assert (
            len(labels)
            == steps_per_epoch(
                str(photo_shards), "train", 4, read=ReadOptions(drop_remainder=False, num_workers=2, worker_index=index)
            )
            * 4
            - (4 - len(labels) % 4) % 4
        )
        total.update(labels.tolist())
    assert sum(total.values()) == 33
    with pytest.raises(ValueError, match="4 shards cannot be split across 5 workers"):
        load(str(photo_shards), split="train", read=ReadOptions(num_workers=5, worker_index=0))


def test_distribute_datasets_from_function(photo_shards: Path) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: load(str(photo_shards), split="train", batch_size=4, image_size=16, input_context=ctx)
    )
    batches = [strategy.experimental_local_results(x)[0] for x, _ in dist]
    assert len(batches) == 8 and batches[0].shape == (4, 16, 16, 3)


@pytest.mark.slow
def test_keras_fit_with_manifest_steps(digit_shards: Path) -> None:
    import keras

    train = load(
        str(digit_shards),
        split="train",
        batch_size=16,
        image_size=32,
        repeat=True,
        seed=0,
        augment=Augment(crop=False, flip=False),
    )
    steps = steps_per_epoch(str(digit_shards), "train", 16)
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Rescaling(1 / 255.0),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(train, steps_per_epoch=steps, epochs=2, verbose=0)
    assert steps == 15 and len(history.history["loss"]) == 2
    val = load(str(digit_shards), split="validation", batch_size=16, image_size=32)
    assert np.isfinite(model.evaluate(val, verbose=0)[0])


@pytest.mark.slow
def test_foreign_tfrecords_three_recipes(photo_tree: Path, digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import tensorflow as tf

    def feature(value):  # type: ignore[no-untyped-def]
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        if isinstance(value, list):
            return tf.train.Feature(float_list=tf.train.FloatList(value=value))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def write(path: Path, rows: list[dict]) -> None:
        with tf.io.TFRecordWriter(str(path)) as w:
            for row in rows:
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(feature={k: feature(v) for k, v in row.items()})
                    ).SerializeToString()
                )

    jpegs = sorted(photo_tree.glob("*/*.jpg"))
    write(tmp_path / "cat_dog-0.tfrec", [{"image": p.read_bytes(), "class": i % 2} for i, p in enumerate(jpegs[:10])])
    write(tmp_path / "cat_dog-1.tfrec", [{"image": p.read_bytes(), "class": i % 2} for i, p in enumerate(jpegs[10:16])])
    images, labels = digits
    write(
        tmp_path / "mnist.tfrecords",
        [
            {
                "img_string": (images[i].astype(float) / 16.0 * 16 / 255).ravel().tolist(),
                "height": 8,
                "width": 8,
                "label": int(labels[i]),
            }
            for i in range(20)
        ],
    )
    cats = load(
        str(tmp_path / "cat_dog*.tfrec"),
        training=False,
        batch_size=4,
        image_size=32,
        read=ReadOptions(foreign=ForeignKeys(image_key="image", label_key="class")),
    )
    x, y = _all(cats)
    assert len(x) == 16 and set(y.tolist()) == {0, 1} and int(cats.cardinality()) == 4
    assert (tmp_path / ".shardfeed-counts.json").exists()
    mnist = load(
        str(tmp_path / "mnist.tfrecords"),
        training=False,
        batch_size=5,
        image_size=8,
        read=ReadOptions(foreign=ForeignKeys(image_key="img_string", label_key="label")),
        decode=DecodeOptions(crop_fraction=1.0, channels=1),
    )
    mx, my = _all(mnist)
    assert mx.shape == (20, 8, 8, 1) and my.tolist() == labels[:20].tolist()
    assert np.abs(mx[..., 0].astype(int) - images[:20].astype(int)).max() <= 1
    with pytest.raises(
        ValueError,
        match=r"feature 'label' not in the records of .*; they have \['class', 'image'\]; pass ForeignKeys\(label_key",
    ):
        load(
            str(tmp_path / "cat_dog*.tfrec"),
            read=ReadOptions(foreign=ForeignKeys(image_key="image", label_key="label")),
        )
    with pytest.raises(ValueError, match="no TFRecord files match"):
        load(str(tmp_path / "nothing*.tfrec"))


def test_our_shards_without_the_manifest(photo_shards: Path) -> None:
    files = sorted(str(p) for p in photo_shards.glob("train-*"))
    x, _ = _all(load(files, training=False, batch_size=3, image_size=16))
    assert len(x) == 33


def _damage(out: Path, how: str) -> None:
    shard = out / "train-00001-of-00004"
    data = bytearray(shard.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 2]
    shard.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_corrupt_shard_error_names_the_file_and_can_be_skipped(photo_shards: Path, tmp_path: Path, how: str) -> None:
    """Damage done while a dataset is read (after `load` checked the files) ends in an error
    naming the shard; skip_corrupt reads the rest."""
    import tensorflow as tf

    out = shutil.copytree(photo_shards, tmp_path / "d")
    ds = load(str(out), split="train", training=False, batch_size=4, image_size=16)
    _damage(out, how)
    with pytest.raises(
        CorruptRecordError,
        match=r"^shard .*train-00001-of-00004 is corrupt or truncated: read (\d+) of its 8 records; "
        r"the damage is at record \1 \(from 0\)",
    ) as raised:
        _all(ds)
    # shardfeed's own error, one line; still TensorFlow's class too, for code that catches that
    assert isinstance(raised.value, tf.errors.InvalidArgumentError) and "\n" not in str(raised.value)
    x, _ = _all(
        load(str(out), split="train", training=False, batch_size=4, image_size=16, read=ReadOptions(skip_corrupt=True))
    )
    assert 25 <= len(x) < 33


def test_a_shard_changed_before_load_is_refused_at_once(photo_shards: Path, tmp_path: Path) -> None:
    out = shutil.copytree(photo_shards, tmp_path / "d")
    _damage(out, "truncate")
    with pytest.raises(SourceError, match=r"train-00001-of-00004 is [\d,]+ bytes, the manifest says [\d,]+"):
        load(str(out), split="train", training=False, batch_size=4, image_size=16)


@pytest.mark.slow
def test_cache_filter_and_map_hooks(photo_shards: Path, tmp_path: Path) -> None:
    import tensorflow as tf

    cached = load(
        str(photo_shards), split="train", training=False, batch_size=4, image_size=16, read=ReadOptions(cache=True)
    )
    assert len(_all(cached)[0]) == 33 and len(_all(cached)[0]) == 33
    on_disk = load(
        str(photo_shards),
        split="train",
        training=False,
        batch_size=4,
        image_size=16,
        read=ReadOptions(cache=str(tmp_path / "cache")),
    )
    assert len(_all(on_disk)[0]) == 33 and list(tmp_path.glob("cache*"))
    only_zero = load(
        str(photo_shards),
        split="train",
        training=False,
        batch_size=4,
        image_size=16,
        read=ReadOptions(filter_fn=lambda f: tf.equal(f["image/class/label"], 0)),
    )
    assert set(_all(only_zero)[1].tolist()) == {0}
    doubled = load(
        str(photo_shards),
        split="train",
        training=False,
        batch_size=4,
        image_size=16,
        decode=DecodeOptions(dtype="float32", map_fn=lambda x, y: (x * 0.0, y + 100)),
    )
    x, y = _all(doubled)
    assert float(x.max()) == 0.0 and y.min() >= 100


def test_unlabeled_shards_yield_images_only(photo_tree: Path, tmp_path: Path) -> None:
    from shardfeed import UnlabeledSource

    convert(UnlabeledSource(str(photo_tree / "rocket")), str(tmp_path / "u"), workers=1, progress=False)
    ds = load(str(tmp_path / "u"), split="test", batch_size=4, image_size=16)
    batches = list(ds)
    assert sum(int(b.shape[0]) for b in batches) == 11 and batches[0].dtype.name == "uint8"


def test_png_raw_and_gray_records_take_the_same_path(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    images, labels = digits
    np.savez(tmp_path / "d.npz", images=images[:24], labels=labels[:24])
    for encoding in ("png", "raw"):
        convert(
            str(tmp_path / "d.npz"),
            str(tmp_path / encoding),
            ConvertOptions(split="train=1", image=ImageOptions(array_encoding=encoding)),
            workers=1,
            progress=False,
        )
    png, ly = _all(
        load(str(tmp_path / "png"), training=False, batch_size=8, image_size=8, decode=DecodeOptions(crop_fraction=1.0))
    )
    raw, lr = _all(
        load(str(tmp_path / "raw"), training=False, batch_size=8, image_size=8, decode=DecodeOptions(crop_fraction=1.0))
    )
    assert png.shape == (24, 8, 8, 3) and np.array_equal(png, raw) and np.array_equal(ly, lr)
    assert np.array_equal(
        png[0, ..., 0], images[int(np.argmax([np.array_equal(png[0, ..., 0], im) for im in images[:24]]))]
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "test"}, r"split 'test' not in .*; it has \['train', 'validation'\]"),
        ({"image_size": 0}, "image_size must be a positive int"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"dtype": "float16"}, r"dtype must be one of \['uint8', 'float32'\]"),
        ({"channels": 4}, "channels must be 1 or 3"),
        ({"crop_fraction": 0}, r"crop_fraction must be in \(0, 1\]"),
    ],
)
def test_option_errors(photo_shards: Path, kwargs: dict, message: str) -> None:
    decode = {k: kwargs.pop(k) for k in ("dtype", "channels", "crop_fraction") if k in kwargs}
    with pytest.raises(ValueError, match=message):
        load(str(photo_shards), decode=DecodeOptions(**decode), **kwargs)


@pytest.mark.slow
def test_large_photos_decode_at_reduced_dct_scale(tmp_path: Path) -> None:
    """A 1,920x1,440 photo read at 64 px: DCT scaling (1/8 here) is closer to an antialiased resize
    of the full image than decoding at full size and resizing with bilinear; False turns it off."""
    import skimage.data
    from PIL import Image

    photo = skimage.data.retina()[..., :3]  # 1,411 px of real detail, upscaled to phone size
    big = np.asarray(Image.fromarray(photo).resize((1920, 1440), Image.Resampling.LANCZOS))
    (tmp_path / "src" / "eye").mkdir(parents=True)
    Image.fromarray(big).save(tmp_path / "src" / "eye" / "0.jpg", quality=90)
    convert(str(tmp_path / "src"), str(tmp_path / "out"), ConvertOptions(split="validation=1"), progress=False)
    reference = np.asarray(
        Image.open(tmp_path / "src" / "eye" / "0.jpg").crop((240, 0, 1680, 1440)).resize((64, 64), 2)
    )

    def error(scaling: bool) -> float:
        decode = DecodeOptions(crop_fraction=1.0, dct_scaling=scaling)
        images, _ = next(iter(load(str(tmp_path / "out"), split="validation", image_size=64, decode=decode)))
        return float(np.abs(images.numpy()[0].astype(float) - reference).mean())

    scaled, full = error(True), error(False)
    assert scaled < 0.75 * full, (scaled, full)  # measured 2.05 vs 3.66


@pytest.mark.slow
def test_manifest_knowledge_skips_per_image_checks_without_changing_pixels(photo_tree: Path, tmp_path: Path) -> None:
    """The manifest counts formats and the longest side; an all-JPEG split whose images are all
    under twice the output size is read without the format sniff and the DCT-scale choice, and
    gives the same pixels as a reader that does not know (an old manifest)."""
    import json

    out = tmp_path / "out"
    convert(str(photo_tree), str(out), ConvertOptions(image=ImageOptions(image_format="jpeg")), progress=False)
    data = json.loads((out / "manifest.json").read_text())
    sizes = [image_size_of(p) for p in photo_tree.rglob("*.*")]
    sides = [max(size) for size in sizes]
    assert data["image_formats"] == {"JPEG": 44} and data["image_max_side"] == max(sides)
    buckets = Counter(str(side_bucket(min(size))) for size in sizes)
    assert data["image_short_sides"] == dict(sorted(buckets.items(), key=lambda kv: int(kv[0])))
    kwargs = dict(split="validation", batch_size=64, image_size=max(sides) // 2 + 1)
    known, _ = next(iter(load(str(out), **kwargs)))
    del data["image_formats"], data["image_max_side"], data["image_short_sides"]
    (out / "manifest.json").write_text(json.dumps(data))
    unknown, _ = next(iter(load(str(out), **kwargs)))
    assert np.array_equal(known.numpy(), unknown.numpy())


def test_side_buckets_are_half_octaves() -> None:
    got = {side: side_bucket(side) for side in (0, 1, 2, 3, 5, 7, 11, 12, 499, 512, 767, 768, 3024, 4032)}
    assert got == {
        0: 0,
        1: 1,
        2: 2,
        3: 3,
        5: 4,
        7: 6,
        11: 8,
        12: 12,
        499: 384,
        512: 512,
        767: 512,
        768: 768,
        3024: 2048,
        4032: 3072,
    }


def test_the_side_histogram_decides_whether_the_dct_scale_choice_is_built() -> None:
    """The per-image scale choice costs ~8% of a small photo's decode, so it is built only when a
    tenth of the images or more can decode scaled; older manifests fall back on the longest side,
    foreign files (nothing known) always build it."""
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess, may_scale

    def built(schema: Schema, size: int = 224, scaling: bool = True) -> bool:
        return may_scale(schema, Preprocess((size, size), None, DecodeOptions(dct_scaling=scaling)))

    small = Schema(all_jpeg=True, max_side=499, short_sides=((256, 95), (384, 5)))
    assert not built(small)  # its longest side alone (499 >= 2 x 224) would have built it
    assert built(small, size=128)  # 256 >= 2 x 128
    assert built(Schema(short_sides=((256, 90), (512, 10))))
    assert not built(Schema(short_sides=((256, 91), (512, 9))))
    assert built(Schema(max_side=499)) and not built(Schema(max_side=447))  # an older manifest
    assert built(Schema()) and not built(Schema(), scaling=False)


def image_size_of(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        return im.size


@pytest.mark.slow
def test_map_fn_takes_images_and_labels_and_file_names_pass_by(photo_shards: Path) -> None:
    """The README's map_fn with with_filenames=True: called with (images, labels), the names kept
    (it was called with three arguments and failed inside TensorFlow)."""
    import numpy as np
    import tensorflow as tf

    from shardfeed import DecodeOptions, ReadOptions, load

    def normalise(images, labels):  # type: ignore[no-untyped-def]
        return tf.cast(images, tf.float32) / 255.0, labels + 100

    common = {"split": "validation", "batch_size": 4, "image_size": 32, "training": False}
    plain = list(load(str(photo_shards), read=ReadOptions(with_filenames=True), **common))
    mapped = list(
        load(str(photo_shards), read=ReadOptions(with_filenames=True), decode=DecodeOptions(map_fn=normalise), **common)
    )
    assert len(plain) == len(mapped) and all(len(batch) == 3 for batch in mapped)
    for (images, labels, names), (m_images, m_labels, m_names) in zip(plain, mapped, strict=True):
        assert np.array_equal(names.numpy(), m_names.numpy())
        assert np.array_equal(labels.numpy() + 100, m_labels.numpy())
        np.testing.assert_allclose(images.numpy() / 255.0, m_images.numpy(), rtol=1e-6)


@pytest.mark.slow
def test_the_flip_is_a_fair_coin_apart_from_the_crop_and_photometric_flips_alike() -> None:
    """`flip_seed` (one xor, where a fold_in and a split took four ops) must still give a
    fair coin, unrelated to the record's crop (drawn from the seed pair itself), for the seed
    pairs both readers make: (seed, position) by index, random pairs by shard; and the flip
    inside `photometric` (other augmentation on) must flip the same records as the flip alone."""
    import tensorflow as tf

    from shardfeed.read.augment import flip_seed, photometric, random_crop_window

    rng = np.random.default_rng(5)
    pairs = [(11, p) for p in range(1500)] + [tuple(rng.integers(-(2**62), 2**62, 2).tolist()) for _ in range(1500)]
    seeds = tf.constant(pairs, tf.int64)
    flips = np.array([bool(tf.random.stateless_uniform([], seed=flip_seed(s)) < 0.5) for s in seeds])
    shape = tf.constant([300, 400, 3])
    lefts = np.array([int(random_crop_window(shape, s, Augment())[1]) for s in seeds])
    for part in (slice(0, 1500), slice(1500, None)):
        assert 0.45 < flips[part].mean() < 0.55
        assert abs(np.corrcoef(flips[part], lefts[part])[0, 1]) < 0.1
    ramp = tf.constant([[[0.0], [255.0]]])  # dark on the left: flipped when the left is bright
    for s, flipped in zip(seeds[:64], flips[:64], strict=True):
        alone = tf.image.stateless_random_flip_left_right(ramp, flip_seed(s))
        jittered = photometric(ramp, s, Augment(flip=True, color_jitter=0.1))
        assert bool(alone[0, 0, 0] > alone[0, 1, 0]) == flipped == bool(jittered[0, 0, 0] > jittered[0, 1, 0])
