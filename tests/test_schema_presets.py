"""`convert --schema`: each preset is read by the reader it targets, with that reader's own parsing
(its feature map, file glob and label arithmetic, restated here in TF2 from its source), and our
own readers still read it through the manifest."""

from __future__ import annotations

import glob
import os
from collections import Counter
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, IndexedRecords, convert, load, read_manifest
from shardfeed.errors import OptionError


def _convert(photo_tree: Path, out: Path, **options: object) -> Path:
    convert(str(photo_tree), str(out), ConvertOptions(shards=2, **options), workers=1, progress=False)  # type: ignore[arg-type]
    return out


def _expected(out: Path, split: str) -> Counter[str]:
    return Counter(read_manifest(str(out)).split(split).class_counts)


def keras_imagenet_labels(folder: Path, subset: str, num_classes: int) -> list[list[float]]:
    """jkjung-avt/keras_imagenet utils/dataset.py: files `{subset}-*`, image/encoded,
    image/class/label (default -1) and image/class/text parsed, label one-hot of (label - 1)
    ("The label in the tfrecords is 1~1000 (0 not used)"); the JPEG decoded with decode_jpeg."""
    import tensorflow as tf

    files = tf.io.matching_files(os.path.join(folder, f"{subset}-*"))
    feature_map = {
        "image/encoded": tf.io.FixedLenFeature([], dtype=tf.string, default_value=""),
        "image/class/label": tf.io.FixedLenFeature([], dtype=tf.int64, default_value=-1),
        "image/class/text": tf.io.FixedLenFeature([], dtype=tf.string, default_value=""),
    }

    def parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        parsed = tf.io.parse_single_example(serialized, feature_map)
        image = tf.image.convert_image_dtype(tf.image.decode_jpeg(parsed["image/encoded"], channels=3), tf.float32)
        return tf.shape(image), tf.one_hot(parsed["image/class/label"] - 1, num_classes, dtype=tf.float32)

    ds = tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset).map(parse)
    return [label.tolist() for _, label in ds.as_numpy_iterator()]


def test_inception_preset_is_read_by_keras_imagenet(photo_tree: Path, tmp_path: Path) -> None:
    out = _convert(photo_tree, tmp_path / "inception", schema="inception")
    m = read_manifest(str(out))
    assert m.label_offset == 1 and set(m.data["image_formats"]) == {"JPEG"}  # its reader decodes JPEG only
    k = len(m.labels or [])
    for split in ("train", "validation"):
        one_hots = keras_imagenet_labels(out, split, k)
        assert all(max(v) == 1.0 for v in one_hots)  # no all-zero label
        seen = Counter((m.labels or [])[v.index(1.0)] for v in one_hots)
        assert seen == _expected(out, split)
    default = _convert(photo_tree, tmp_path / "default")  # what the issue saw: 0-based labels
    broken = keras_imagenet_labels(default, "train", k)
    assert sum(max(v) == 0.0 for v in broken) == _expected(default, "train")[(m.labels or [])[0]]


def tfslim_split(folder: Path, split: str) -> tuple[int, dict[int, str], Counter[int]]:
    """kwotsin/create_tfrecords' TF-slim reader: num_samples counted over the files whose names
    start `flowers_{split}` (file pattern `flowers_%s_*.tfrecord`), labels_to_names from
    labels.txt lines `id:name` (dataset_utils.read_label_file), image/encoded + image/format
    (default 'jpg') + image/class/label parsed."""
    import tensorflow as tf

    pattern = os.path.join(folder, f"flowers_{split}_*.tfrecord")
    files = [f for f in sorted(glob.glob(pattern)) if os.path.basename(f).startswith(f"flowers_{split}")]
    num_samples = sum(1 for f in files for _ in tf.compat.v1.io.tf_record_iterator(f))
    labels_to_names = {}
    for line in (folder / "labels.txt").read_text().split("\n"):
        if line:
            index = line.index(":")
            labels_to_names[int(line[:index])] = line[index + 1 :]
    keys = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/format": tf.io.FixedLenFeature((), tf.string, default_value="jpg"),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64, default_value=tf.zeros([], dtype=tf.int64)),
    }
    ds = tf.data.TFRecordDataset(files).map(lambda s: tf.io.parse_single_example(s, keys)["image/class/label"])
    return num_samples, labels_to_names, Counter(int(x) for x in ds.as_numpy_iterator())


def test_tfslim_name_template_is_found_by_its_reader(photo_tree: Path, tmp_path: Path) -> None:
    template = "flowers_{split}_{shard:05d}-of-{num_shards:05d}.tfrecord"
    out = _convert(photo_tree, tmp_path / "slim", name_template=template)
    m = read_manifest(str(out))
    for split in ("train", "validation"):
        num_samples, names, labels = tfslim_split(out, split)
        assert num_samples == m.split(split).num_records > 0
        assert {names[i]: n for i, n in labels.items()} == _expected(out, split)
    default = _convert(photo_tree, tmp_path / "default")
    (default / "labels.txt").write_text((out / "labels.txt").read_text())
    assert tfslim_split(default, "train")[0] == 0  # what the issue saw: num_samples=0


def recipe_dataset_labels(folder: Path, split: str) -> Counter[int]:
    """The Keras cats-vs-dogs TFRecord recipe: files `*.tfrec`, features `image` (JPEG bytes,
    decode_jpeg) and `class` (int64)."""
    import tensorflow as tf

    feature_description = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "class": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(example: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(example, feature_description)
        return tf.image.decode_jpeg(example["image"], channels=3), example["class"]

    files = tf.io.gfile.glob(os.path.join(folder, f"{split}*.tfrec"))
    return Counter(int(label) for _, label in tf.data.TFRecordDataset(files).map(parse).as_numpy_iterator())


def test_recipe_preset_is_read_by_the_recipe(photo_tree: Path, tmp_path: Path) -> None:
    out = _convert(photo_tree, tmp_path / "recipe", schema="recipe")
    m = read_manifest(str(out))
    for split in ("train", "validation"):
        labels = recipe_dataset_labels(out, split)
        assert {(m.labels or [])[i]: n for i, n in labels.items()} == _expected(out, split)
    assert recipe_dataset_labels(_convert(photo_tree, tmp_path / "default"), "train") == Counter()  # no .tfrec
    # our own readers still read it, through the manifest's schema
    batch_labels = [int(x) for _, y in load(str(out), split="validation", batch_size=4, image_size=32) for x in y]
    assert Counter((m.labels or [])[i] for i in batch_labels) == _expected(out, "validation")
    assert IndexedRecords(str(out), "train").image(0).ndim == 3


def test_tfds_preset_is_read_by_tfds(photo_tree: Path, tmp_path: Path) -> None:
    import tensorflow_datasets as tfds

    out = _convert(photo_tree, tmp_path / "tfds", schema="tfds")
    m = read_manifest(str(out))
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["label"].names == m.labels
    for split in ("train", "validation"):
        examples = list(tfds.as_numpy(builder.as_dataset(split=split)))
        assert all(x["image"].ndim == 3 for x in examples)
        assert Counter((m.labels or [])[int(x["label"])] for x in examples) == _expected(out, split)


def test_unknown_preset() -> None:
    with pytest.raises(OptionError, match="schema must be one of"):
        ConvertOptions(schema="coco")
