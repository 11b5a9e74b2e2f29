"""adopt: other programs' TFRecord folders, written here with those programs' own keys, names and
label bases, become folders every command reads like a converted one."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zygote
from conftest import crops, jpeg_bytes, photos

from shardfeed import ForeignKeys, IndexedRecords, ReadOptions, adopt, load, steps_per_epoch
from shardfeed.errors import ManifestError, SourceError
from shardfeed.format import manifest, tfrecord
from shardfeed.tools.adopt import AdoptOptions

CLASSES = list(photos())  # 4 real photos, one class each


def _example(features: dict[str, object]) -> bytes:
    """A tf.train.Example from {key: bytes | int | list[float]}, as the recipes build them."""
    import tensorflow as tf

    def feature(value: object) -> tf.train.Feature:
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(value)))  # type: ignore[call-overload]

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


Written = dict[str, Counter[tuple[str, int]]]  # split -> (sha256 of the image, 0-based class) counts


def _write(
    root: Path, names: dict[str, tuple[str, int]], record: Callable[[np.ndarray, int, int], dict[str, object]]
) -> tuple[Path, Written]:
    """Shards `root/name` for {name: (split, images)}, 3 crops per class of the real photos, each
    record built by `record(image, class, serial)`; returns what each split holds."""
    import tensorflow as tf

    root.mkdir(parents=True)
    written: Written = {}
    serial = 0
    for name, (split, per_class) in names.items():
        with tf.io.TFRecordWriter(str(root / name)) as writer:
            for c, photo in enumerate(CLASSES):
                for image in crops(photos()[photo], per_class, seed=serial):
                    features = record(image, c, serial)
                    serial += 1
                    writer.write(_example(features))
                    key = _image_digest(features)
                    written.setdefault(split, Counter())[(key, c)] += 1
    return root, written


def _image_digest(features: dict[str, object]) -> str:
    image = next(v for k, v in features.items() if k in ("image/encoded", "image", "image_raw"))
    data = image if isinstance(image, bytes) else np.asarray(image, np.float32).tobytes()
    return hashlib.sha256(data).hexdigest()


def inception(image: np.ndarray, c: int, serial: int) -> dict[str, object]:
    """TF models' inception/data/build_image_data.py `_convert_to_example`: labels 1..K."""
    return {
        "image/height": image.shape[0],
        "image/width": image.shape[1],
        "image/colorspace": b"RGB",
        "image/channels": 3,
        "image/class/label": c + 1,
        "image/class/text": CLASSES[c].encode(),
        "image/format": b"JPEG",
        "image/filename": f"{CLASSES[c]}_{serial}.JPEG".encode(),
        "image/encoded": jpeg_bytes(image),
    }


def tfslim(image: np.ndarray, c: int, serial: int) -> dict[str, object]:
    """TF-slim datasets/dataset_utils.image_to_tfexample (kwotsin's create_tfrecords): 0-based."""
    return {
        "image/encoded": jpeg_bytes(image),
        "image/format": b"jpg",
        "image/class/label": c,
        "image/height": image.shape[0],
        "image/width": image.shape[1],
    }


def recipe(image: np.ndarray, c: int, serial: int) -> dict[str, object]:
    """The cats-vs-dogs Keras recipe: `image` JPEG bytes and `class`."""
    return {"image": jpeg_bytes(image), "class": c}


def mnist_floats(image: np.ndarray, c: int, serial: int) -> dict[str, object]:
    """The MNIST float-list recipe: 28x28 gray pixels in 0..1 as a float list, and `label`."""
    gray = np.asarray(image[::4, ::4].mean(axis=-1)[:28, :28], np.float32) / 255.0
    return {"image": gray.ravel().tolist(), "label": c}


def _digest_of(example: dict[str, object], keys: tuple[str, ...]) -> str:
    image = next(example[k] for k in keys if k in example)
    if isinstance(image, bytes):
        return hashlib.sha256(image).hexdigest()
    return hashlib.sha256(np.asarray(image, np.float32).tobytes()).hexdigest()


def _read_back(folder: Path, split: str) -> Counter[tuple[str, int]]:
    """(image digest, 0-based label) of every record of a split, read through IndexedRecords."""
    records = IndexedRecords(str(folder), split)
    keys = (records.keys.image_key,)
    return Counter((_digest_of(records.example(i), keys), records.label(i)) for i in range(len(records)))


@pytest.fixture(scope="module")
def inception_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Written]:
    names = {
        "train-00000-of-00002": ("train", 2),
        "train-00001-of-00002": ("train", 2),
        "validation-00000-of-00001": ("validation", 1),
    }
    root, written = _write(tmp_path_factory.mktemp("inception") / "data", names, inception)
    adopt(str(root), options=AdoptOptions(foreign=ForeignKeys(label_offset=1)), progress=False)
    return root, written


@pytest.mark.slow
def test_inception_folder_per_split(inception_folder: tuple[Path, Written]) -> None:
    root, written = inception_folder
    m = manifest.read(str(root))
    assert m.labels == CLASSES and m.label_offset == 1 and m.data["label_range"] == [1, 4]
    for split in ("train", "validation"):
        assert _read_back(root, split) == written[split]
        ds = load(str(root), split=split, batch_size=5, image_size=32, training=False)
        labels = Counter(int(x) for _, y in ds for x in y)
        assert labels == Counter(c for (_, c), n in written[split].items() for _ in range(n))
    assert not set(written["train"]) & set(written["validation"])  # no leakage
    import tensorflow_datasets as tfds  # Inception's keys and names: TFDS reads the adopted folder too

    builder = tfds.builder_from_directory(str(root))
    assert builder.info.features["image/class/label"].names == ["unused_0", *CLASSES]
    assert sum(1 for _ in builder.as_dataset(split="validation")) == sum(written["validation"].values())


def test_kwotsin_layout_with_labels_txt_and_image_tree(tmp_path: Path) -> None:
    names = {
        "flowers_train_00000-of-00002.tfrecord": ("train", 2),
        "flowers_train_00001-of-00002.tfrecord": ("train", 1),
        "flowers_validation_00000-of-00001.tfrecord": ("validation", 1),
    }
    root, written = _write(tmp_path / "kw", names, tfslim)
    (root / "labels.txt").write_text("".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES)))
    (root / "photos" / "daisy").mkdir(parents=True)
    (root / "photos" / "daisy" / "1.jpg").write_bytes(jpeg_bytes(crops(photos()["rocket"], 1, seed=1)[0]))
    result = adopt(str(root), progress=False)
    assert result.splits == {"train": 12, "validation": 4} and result.warnings == []
    assert manifest.read(str(root)).labels == CLASSES  # from TF-slim's labels.txt
    assert (root / "labels.txt").read_text() == "".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES))
    for split in ("train", "validation"):
        assert _read_back(root, split) == written[split]


def test_recipe_keys_and_mnist_floats_with_out(tmp_path: Path) -> None:
    root, written = _write(tmp_path / "cd", {"cat_dog00-12.tfrec": ("train", 3)}, recipe)
    out = tmp_path / "adopted"
    result = adopt(
        str(root / "*.tfrec"),
        str(out),
        AdoptOptions(foreign=ForeignKeys(image_key="image", label_key="class")),
        progress=False,
    )
    assert result.splits == {"train": 12}
    assert os.path.samefile(root / "cat_dog00-12.tfrec", out / "cat_dog00-12.tfrec")  # a hard link, not a copy
    assert _read_back(out, "train") == written["train"]
    assert not (root / "manifest.json").exists()  # the source is left untouched

    mroot, mwritten = _write(
        tmp_path / "mnist", {"train.tfrecords": ("train", 2), "test.tfrecords": ("test", 1)}, mnist_floats
    )
    adopt(str(mroot), options=AdoptOptions(foreign=ForeignKeys(image_key="image", label_key="label")), progress=False)
    m = manifest.read(str(mroot))
    assert m.keys.pixels_as_floats and m.data["image_formats"] == {"RAW": 12}
    assert IndexedRecords(str(mroot), "test").image(0).shape == (28, 28, 1)
    assert _read_back(mroot, "test") == mwritten["test"]
    batch = next(iter(load(str(mroot), split="train", batch_size=4, image_size=28, training=False)))
    assert batch[0].shape == (4, 28, 28, 3)


def test_tfds_written_folder(tmp_path: Path) -> None:
    """Shards written by TFDS itself (a tiny builder prepared here, no download)."""
    import tensorflow_datasets as tfds

    class TinyPhotos(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> tfds.core.DatasetInfo:
            features = tfds.features.FeaturesDict(
                {"image": tfds.features.Image(shape=(None, None, 3)), "label": tfds.features.ClassLabel(names=CLASSES)}
            )
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager: object) -> dict[str, object]:
            return {"train": self._generate_examples(0, 3), "test": self._generate_examples(100, 1)}

        def _generate_examples(self, seed: int, per_class: int):  # type: ignore[no-untyped-def]
            for c, name in enumerate(CLASSES):
                for i, image in enumerate(crops(photos()[name], per_class, seed=seed + c)):
                    yield f"{name}-{seed}-{i}", {"image": image, "label": c}

    builder = TinyPhotos(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare()
    folder = Path(builder.data_dir)
    adopt(str(folder), options=AdoptOptions(foreign=ForeignKeys(image_key="image", label_key="label")), progress=False)
    for split, per_class in (("train", 3), ("test", 1)):
        expected = Counter(int(x["label"]) for x in tfds.as_numpy(builder.as_dataset(split=split)))
        assert Counter(lab for _, lab in _read_back(folder, split).elements()) == expected
        assert sum(expected.values()) == per_class * len(CLASSES)
    assert manifest.read(str(folder)).split_names == ["test", "train"]


@pytest.mark.slow
def test_every_command_on_an_adopted_folder(inception_folder: tuple[Path, Written], tmp_path: Path) -> None:
    root, _ = inception_folder
    run = [sys.executable, "-m", "shardfeed"]
    small = ("--batch-size", "4", "--image-size", "32")
    commands = [
        ["info", str(root)],
        ["verify", "-q", str(root)],
        ["show", str(root), "--output", str(tmp_path / "grid.png")],
        ["report", str(root), "-o", str(tmp_path / "report.html")],
        ["bench", str(root), "--batch-size", "4", "--image-size", "32"],
        ["train", str(root), "--out", str(tmp_path / "run"), "--model", "small_cnn", "--epochs", "1", *small],
        ["evaluate", str(tmp_path / "run"), "--split", "validation"],
    ]
    for command in commands:
        done = zygote.run(run + command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
    info = subprocess.run([*run, "info", str(root)], capture_output=True, text=True, timeout=120).stdout
    assert "labels: stored 1..4, label_offset 1: `load` gives 0..3" in info
    assert (tmp_path / "grid.png").stat().st_size > 0


@pytest.mark.slow
def test_global_order_exact_resume_and_even_splits(inception_folder: tuple[Path, Written]) -> None:
    root = str(inception_folder[0])

    def labels(read: ReadOptions) -> list[int]:
        ds = load(root, batch_size=2, image_size=16, training=True, augment=False, seed=5, read=read)
        return [int(x) for _, y in ds for x in y]

    whole = labels(ReadOptions(shuffle="global"))
    assert labels(ReadOptions(shuffle="global", start_step=3)) == whole[6:]
    shares = [
        labels(ReadOptions(shuffle="global", num_workers=3, worker_index=i, even="pad", drop_remainder=False))
        for i in range(3)
    ]
    assert len({len(s) for s in shares}) == 1
    assert steps_per_epoch(root, batch_size=2, read=ReadOptions(shuffle="global")) == len(whole) // 2


@pytest.mark.slow
def test_rerun_is_a_no_op_and_a_changed_shard_is_detected(tmp_path: Path) -> None:
    root, _ = _write(
        tmp_path / "inc",
        {"train-00000-of-00001": ("train", 1), "validation-00000-of-00001": ("validation", 1)},
        inception,
    )
    adopt(str(root), options=AdoptOptions(foreign=ForeignKeys(label_offset=1)), progress=False)
    stamp = (root / "manifest.json").stat().st_mtime_ns
    again = adopt(str(root), options=AdoptOptions(foreign=ForeignKeys(label_offset=1)), progress=False)
    assert not again.written and (root / "manifest.json").stat().st_mtime_ns == stamp
    shard = root / "validation-00000-of-00001"
    records = list(tfrecord.read_records(str(shard)))
    shard.write_bytes(b"".join(tfrecord.frame(r) for r in records[:-1]))  # one record fewer
    with pytest.raises(SourceError, match=r"the manifest says.*shardfeed adopt .* again"):
        load(str(root), split="validation")
    changed = adopt(str(root), options=AdoptOptions(foreign=ForeignKeys(label_offset=1)), progress=False)
    assert changed.written and any("validation-00000-of-00001" in c and "bytes" in c for c in changed.changes)
    assert manifest.read(str(root)).split("validation").num_records == len(records) - 1


def test_damaged_records_are_named_and_nothing_is_written(tmp_path: Path) -> None:
    root, _ = _write(tmp_path / "inc", {"train-00000-of-00001": ("train", 2)}, inception)
    shard = root / "train-00000-of-00001"
    data = bytearray(shard.read_bytes())
    with open(shard, "rb") as f:
        offsets = [o for o, _ in tfrecord.iter_records(f)]
    data[offsets[3] + 40] ^= 0xFF  # inside record 3's data: its CRC fails
    shard.write_bytes(bytes(data))
    with pytest.raises(SourceError) as e:
        adopt(str(root), progress=False)
    assert f"{shard}: record 3 at byte {offsets[3]}: data checksum mismatch" in str(e.value)
    assert not (root / "manifest.json").exists() and not (root / "index").exists()


def test_label_base_warnings_and_refusals(tmp_path: Path) -> None:
    root, _ = _write(tmp_path / "inc", {"train-00000-of-00001": ("train", 1)}, inception)
    result = adopt(str(root), progress=False)
    assert any("1-based" in w and "--label-offset 1" in w for w in result.warnings)
    slim, _ = _write(tmp_path / "slim", {"train-00000-of-00001": ("train", 1)}, tfslim)
    with pytest.raises(SourceError, match="below the label offset 1"):
        adopt(str(slim), options=AdoptOptions(foreign=ForeignKeys(label_offset=1)), progress=False)


def test_what_adopt_refuses(photo_shards: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="shardfeed conversion already"):
        adopt(str(photo_shards), progress=False)
    root, _ = _write(tmp_path / "cd", {"cat_dog00-12.tfrec": ("train", 1)}, recipe)
    with pytest.raises(SourceError, match="--out"):
        adopt(str(root / "*.tfrec"), progress=False)
    with pytest.raises(SourceError, match="not in the records"):
        adopt(str(root), progress=False)  # default keys: the message lists 'class' and 'image'
    mixed, _ = _write(
        tmp_path / "mixed", {"train-00000-of-00001": ("train", 1), "extra.tfrecord": ("train", 1)}, inception
    )
    with pytest.raises(SourceError, match="cannot tell the splits"):
        adopt(str(mixed), progress=False)
    adopt(
        str(mixed),
        options=AdoptOptions(split_pattern=r"^(train|extra)", foreign=ForeignKeys(label_offset=1)),
        progress=False,
    )
    assert manifest.read(str(mixed)).split_names == ["extra", "train"]
    shutil.rmtree(mixed)
