"""TFDS opens converted folders: `tfds.builder_from_directory` on our metadata, checked with TFDS itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardfeed import ConvertOptions, IndexedRecords, convert, read_manifest

tfds = pytest.importorskip("tensorflow_datasets")
tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def out(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tfds") / "out"
    convert(str(photo_tree), str(folder), ConvertOptions(shards=3, seed=1), workers=2, progress=False)
    return folder


def test_tfds_reads_every_record_with_our_labels_and_pixels(out: Path) -> None:
    m = read_manifest(str(out))
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["image/class/label"].names == m.labels
    for split in m.split_names:
        assert builder.info.splits[split].num_examples == m.split(split).num_records
        ours = IndexedRecords(str(out), split)
        by_name = {ours.example(i)["image/filename"].decode(): i for i in range(len(ours))}
        seen = 0
        for example in tfds.as_numpy(builder.as_dataset(split=split)):
            index = by_name[example["image/filename"].decode()]
            label = ours[index][1]
            assert int(example["image/class/label"]) == label
            assert example["image/class/text"].decode() == m.labels[label]
            assert example["image/class/synset"].decode() == m.labels[label]
            stored = tf.io.decode_image(ours.example(index)["image/encoded"], channels=3).numpy()
            assert np.array_equal(example["image/encoded"], stored)  # our bytes, decoded by TF
            seen += 1
        assert seen == len(ours)


def test_dataframe_and_examples_grid(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    builder = tfds.builder_from_directory(str(out))
    frame = tfds.as_dataframe(builder.as_dataset(split="train").take(3), builder.info)
    assert len(frame) == 3 and "image/class/label" in frame.columns
    figure = tfds.show_examples(builder.as_dataset(split="train"), builder.info, rows=1, cols=2)
    assert figure is not None


def test_metadata_is_deterministic_and_follows_the_manifest(photo_tree: Path, out: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    convert(str(photo_tree), str(again), ConvertOptions(shards=3, seed=1), workers=1, progress=False)
    for name in ("dataset_info.json", "features.json", "image.class.label.labels.txt"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    info = json.loads((out / "dataset_info.json").read_text())
    m = read_manifest(str(out))
    assert [s["name"] for s in info["splits"]] == m.split_names
    assert [int(n) for n in info["splits"][0]["shardLengths"]] == [s.num_records for s in m.split("train").shards]


def test_label_offset_and_unlabeled_data(photo_tree: Path, tmp_path: Path) -> None:
    offset = tmp_path / "offset"
    convert(str(photo_tree), str(offset), ConvertOptions(shards=1, label_offset=1), workers=1, progress=False)
    builder = tfds.builder_from_directory(str(offset))
    names = builder.info.features["image/class/label"].names
    assert names[0] == "unused_0" and names[1:] == read_manifest(str(offset)).labels
    example = next(iter(tfds.as_numpy(builder.as_dataset(split="train"))))
    assert names[int(example["image/class/label"])] == example["image/class/text"].decode()
    from shardfeed.write.sources import UnlabeledSource

    unlabeled = tmp_path / "unlabeled"
    convert(UnlabeledSource(str(photo_tree)), str(unlabeled), workers=1, progress=False)
    plain = tfds.builder_from_directory(str(unlabeled))
    assert "image/class/label" not in plain.info.features
    assert plain.info.splits["test"].num_examples == read_manifest(str(unlabeled)).split("test").num_records


def test_no_metadata_where_tfds_cannot_read(photo_tree: Path, tmp_path: Path) -> None:
    gz = tmp_path / "gz"
    result = convert(str(photo_tree), str(gz), ConvertOptions(shards=1, compression="gzip"), workers=1, progress=False)
    assert not (gz / "dataset_info.json").exists()
    assert "no TFDS metadata (dataset_info.json): TFDS does not read gzip-compressed TFRecords" in result.summary()
