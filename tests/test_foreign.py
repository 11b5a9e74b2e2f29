"""Other people's TFRecord folders: splits told from the file names, never mixed silently."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import crops, jpeg_bytes, photos

from shardfeed import ForeignKeys, ReadOptions, load, steps_per_epoch
from shardfeed.errors import ManifestError, SourceError
from shardfeed.read.foreign import split_in_name


def write_shard(path: Path, start: int, count: int) -> None:
    """Records as TF models' build_image_data.py writes them (JPEG bytes, 1-based labels, file names)."""
    import tensorflow as tf

    images = crops(photos()["chelsea"], count, seed=start)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, image in enumerate(images):
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg_bytes(image)])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1 + (start + i) % 2])),
                "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"{start + i}.jpg".encode()])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _folder(root: Path, names: dict[str, int]) -> Path:
    root.mkdir()
    start = 0
    for name, count in names.items():
        write_shard(root / name, start, count)
        start += 100
    return root


def _files(ds: object) -> list[str]:
    return sorted(n.decode() for batch in ds for n in batch[-1].numpy())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("train-00000-of-00002", "train"),
        ("validation-00001-of-00002", "validation"),
        ("flowers_validation_00001-of-00005.tfrecord", "validation"),
        ("mnist-test.tfrecord-00000-of-00001", "test"),
        ("cat_dog00-57.tfrec", None),
        ("trainval-00000-of-00004", None),
        ("data-0.tfrecord", None),
    ],
)
def test_the_split_a_file_name_carries(name: str, split: str | None) -> None:
    assert split_in_name(f"/some/where/{name}") == split


@pytest.mark.slow
@pytest.mark.parametrize(
    "names",
    [
        ("train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001"),  # Inception
        (
            "flowers_train_00000-of-00002.tfrecord",
            "flowers_train_00001-of-00002.tfrecord",
            "flowers_validation_00000-of-00001.tfrecord",
        ),  # TF-slim, beside labels.txt and the image tree
        (
            "beans-train.tfrecord-00000-of-00002",
            "beans-train.tfrecord-00001-of-00002",
            "beans-validation.tfrecord-00000-of-00001",
        ),  # TFDS
    ],
)
def test_a_foreign_folder_is_read_per_split(tmp_path: Path, names: tuple[str, ...]) -> None:
    """`load(folder, split=...)` on a build_image_data.py folder read every record of both splits
    (validation silently trained on); now each split is its own files, and steps agree."""

    folder = _folder(tmp_path / "f", dict(zip(names, (5, 4, 3), strict=True)))
    (folder / "labels.txt").write_text("1:cat\n2:dog\n")
    (folder / "photos" / "cat").mkdir(parents=True)
    (folder / "photos" / "cat" / "a.jpg").write_bytes(jpeg_bytes(np.ascontiguousarray(photos()["rocket"][:50, :50])))
    read = ReadOptions(with_filenames=True)
    train = _files(load(str(folder), split="train", training=False, batch_size=2, image_size=16, read=read))
    val = _files(load(str(folder), split="validation", training=False, batch_size=2, image_size=16, read=read))
    assert len(train) == 9 and len(val) == 3 and not set(train) & set(val)
    assert steps_per_epoch(str(folder), "validation", 2) == 2
    with pytest.raises(
        SourceError, match=r"no 'test' split in .*: its file names carry the splits \['train', 'validation'\]"
    ):
        load(str(folder), split="test", batch_size=2, image_size=16)


def test_a_folder_whose_splits_cannot_be_told_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "f", {"train-00000-of-00001": 3, "extra-00000-of-00001": 2})
    with pytest.raises(SourceError, match=r"cannot tell the splits .* others do not \(\['extra-00000-of-00001'\]\)"):
        load(str(folder), split="train", batch_size=2, image_size=16)


def test_names_without_splits_are_one_set(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "f", {"cat_dog00-3.tfrec": 3, "cat_dog01-2.tfrec": 2})
    assert steps_per_epoch(str(folder), "train", 1) == 5


@pytest.mark.slow
def test_one_based_labels_are_shifted_by_the_read_option(tmp_path: Path) -> None:
    """build_image_data.py writes labels 1..K (0 is background): Keras then refused label K as
    out of range [0, K). `ReadOptions(foreign=ForeignKeys(label_offset=1))` gives the model 0..K-1."""
    from shardfeed.errors import OptionError

    folder = _folder(tmp_path / "f", {"train-00000-of-00001": 6})

    def labels(read: ReadOptions) -> set[int]:
        ds = load(str(folder), training=False, batch_size=3, image_size=16, read=read)
        return {int(v) for _, batch_labels in ds for v in batch_labels.numpy()}

    with pytest.warns(UserWarning, match=r"run 1\.\.2 and none is 0: if they are 1-based"):
        assert labels(ReadOptions()) == {1, 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once the offset is given, either way
        assert labels(ReadOptions(foreign=ForeignKeys(label_offset=1))) == {0, 1}
        assert labels(ReadOptions(foreign=ForeignKeys(label_offset=0))) == {1, 2}
    sidecar = json.loads((folder / ".shardfeed-counts.json").read_text())
    assert sidecar["train-00000-of-00001"]["labels"] == {"image/class/label": [1, 2]}  # one pass, kept
    with pytest.raises(OptionError, match="label_offset must be a non-negative integer"):
        ReadOptions(foreign=ForeignKeys(label_offset=-1))


def _one_record_file(path: Path, features: dict[str, object]) -> str:
    import tensorflow as tf

    def feature(value: object) -> tf.train.Feature:
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))  # type: ignore[list-item]

    with tf.io.TFRecordWriter(str(path)) as writer:
        example = tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in features.items()}))
        writer.write(example.SerializeToString())
    return str(path)


@pytest.mark.parametrize(
    ("features", "read", "expected"),
    [
        (  # a label written as its class name
            {"image": b"", "label": b"cat"},
            {"image_key": "image", "label_key": "label"},
            "feature 'label' in {file} (record 0) is a bytes list of 1 value, not one int64 class id",
        ),
        (  # pixels as the bytes of a float32 array
            {"image": np.zeros((4, 4), np.float32).tobytes(), "label": 1},
            {"image_key": "image", "label_key": "label"},
            "feature 'image' in {file} (record 0) holds 64 bytes that are not an encoded image",
        ),
        (  # the image key names the label
            {"image": b"", "label": 1},
            {"image_key": "label", "label_key": ""},
            "feature 'label' in {file} (record 0) is an int64 list of 1 value, not one encoded image",
        ),
    ],
)
def test_type_mismatches_are_found_when_the_dataset_is_built(
    tmp_path: Path, features: dict[str, object], read: dict[str, str], expected: str
) -> None:
    """Found from the first record, before iteration: TF's error came at iteration time and named
    no file."""

    if features.get("image") == b"":
        features = {**features, "image": jpeg_bytes(crops(photos()["chelsea"], 1, seed=0)[0])}
    file = _one_record_file(tmp_path / "data.tfrecord", features)
    with pytest.raises(SourceError) as e:
        load(file, read=ReadOptions(foreign=ForeignKeys(**read)))
    assert expected.format(file=file) in str(e.value)


@pytest.mark.slow
def test_a_foreign_folder_is_pointed_at_adopt(tmp_path: Path) -> None:
    """What needs a manifest (IndexedRecords, train, report) says how to get one for foreign shards;
    verify and show read them as they are."""
    from shardfeed import IndexedRecords
    from shardfeed.tools import show, verify

    folder = _folder(tmp_path / "f", {"train-00000-of-00001": 3, "validation-00000-of-00001": 2})
    with pytest.raises(ManifestError, match="shardfeed adopt"):
        IndexedRecords(str(folder))
    report = verify(str(folder), progress=False, foreign=ForeignKeys(label_offset=1))
    assert report.ok and report.foreign and report.records == 5
    tiles = show(
        str(folder), None, split="validation", rows=1, cols=2, read=ReadOptions(foreign=ForeignKeys(label_offset=1))
    )
    assert sorted(t.caption for t in tiles) == ["0", "1"]


@pytest.mark.slow
def test_bench_takes_the_keys_of_foreign_records(tmp_path: Path) -> None:
    """The error used to say "pass image_key= in ReadConfig", a flag bench did not have."""
    import subprocess
    import sys

    file = _one_record_file(tmp_path / "cat_dog00-1.tfrec", {"image": jpeg_bytes(photos()["chelsea"]), "class": 1})
    bench = [
        sys.executable,
        "-m",
        "shardfeed",
        "bench",
        file,
        "--batch-size",
        "1",
        "--image-size",
        "32",
        "--eval",
        "--epochs",
        "4",
    ]
    refused = subprocess.run(bench, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "--image-key" in refused.stderr and "Traceback" not in refused.stderr
    done = subprocess.run([*bench, "--image-key", "image", "--label-key", "class"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "shardfeed.load" in done.stdout


def test_verify_names_a_damaged_foreign_record(tmp_path: Path) -> None:
    from shardfeed.format import tfrecord
    from shardfeed.tools import verify

    folder = _folder(tmp_path / "f", {"data.tfrecord": 3})
    shard = folder / "data.tfrecord"
    with open(shard, "rb") as f:
        offsets = [o for o, _ in tfrecord.iter_records(f)]
    data = bytearray(shard.read_bytes())
    data[offsets[2] + 30] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = verify(str(folder), progress=False)
    assert [str(p) for p in report.problems] == [
        f"dataset: {shard}: record 2 at byte {offsets[2]}: data checksum mismatch (corrupt shard)"
    ]
