"""Multi-label CSV lists: several class names per image, stored as a list of ids in
image/class/label (names in image/class/text), loaded as k-hot vectors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import crops, jpeg_bytes, photos

from shardfeed import ConvertOptions, CsvSource, OptionError, ReadOptions, convert, load, steps_per_epoch
from shardfeed.format import manifest, schema
from shardfeed.format.example_proto import parse_example
from shardfeed.tools import show, verify

# file -> its classes, as a user's spreadsheet lists them (';' between names, spaces around)
TAGS = {
    "a.jpg": "cat; outdoor",
    "b.jpg": "dog",
    "c.jpg": "cat;dog;indoor",
    "d.jpg": "outdoor ; dog",
    "e.jpg": "indoor",
    "f.jpg": "cat;cat",  # a name twice: once
    "g.jpg": " ; ",  # no name at all: reported
}
NAMES = ["cat", "dog", "indoor", "outdoor"]


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tags")
    for name, photo in zip(TAGS, crops(photos()["coffee"], len(TAGS), seed=3), strict=True):
        (root / name).write_bytes(jpeg_bytes(photo))
    lines = ["path,label"] + [f'{name},"{tags}"' for name, tags in TAGS.items()]
    (root / "tags.csv").write_text("\n".join(lines) + "\n")
    return root / "tags.csv"


def expected_ids(name: str) -> list[int]:
    return sorted({NAMES.index(t.strip()) for t in TAGS[name].split(";") if t.strip()})


@pytest.fixture(scope="module")
def converted(listed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("multi") / "out"
    convert(CsvSource(str(listed), multi_label=True), str(out), ConvertOptions(split="train=1"), progress=False)
    return out


def test_every_name_of_a_cell_is_stored_as_a_list_of_ids(converted: Path) -> None:
    m = manifest.read(str(converted))
    assert m.header.task == "multi_label" and m.labels == NAMES
    assert m.split("train").class_counts == {"cat": 3, "dog": 3, "indoor": 2, "outdoor": 2}  # images per class
    from shardfeed import IndexedRecords

    rows = IndexedRecords(str(converted))
    for i in range(len(rows)):
        parsed = parse_example(rows.record(i))
        name = parsed[schema.FILENAME][0].decode()
        assert parsed[schema.LABEL] == expected_ids(name)
        assert [t.decode() for t in parsed[schema.TEXT]] == [NAMES[c] for c in expected_ids(name)]
    report = json.loads((converted / "report.json").read_text())
    assert report["skipped"] == [{"file": "g.jpg", "reason": "no class name in its label cell (tags.csv)"}]
    assert verify(str(converted), progress=False).ok


def test_load_gives_k_hot_labels_as_tensorflow_reads_the_lists(converted: Path) -> None:
    read = ReadOptions(with_filenames=True)
    batches = list(load(str(converted), batch_size=2, image_size=32, training=False, read=read))
    assert len(batches) == steps_per_epoch(str(converted), "train", 2, training=False) == 3
    for _, labels, names in batches:
        assert labels.dtype.name == "float32" and labels.shape[1:] == (4,)
        for hot, name in zip(labels.numpy(), names.numpy(), strict=True):
            want = np.zeros(4, np.float32)
            want[expected_ids(name.decode())] = 1.0
            assert hot.tolist() == want.tolist()


@pytest.mark.slow
def test_the_cli_converts_a_multi_label_list_and_show_names_every_class(listed: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "shardfeed", "convert", str(listed), str(out), "--multi-label", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert manifest.read(str(out)).header.task == "multi_label"
    captions = {t.key: t.caption for t in show(str(out), None, rows=2, cols=3)}
    assert captions["c.jpg"] == "cat, dog, indoor"
    augmented = show(str(out), None, rows=2, cols=3, augmented=True, image_size=48)  # k-hot back to names
    assert sorted(t.caption for t in augmented) == sorted(captions.values())
    separator = [
        sys.executable,
        "-m",
        "shardfeed",
        "convert",
        str(listed),
        str(tmp_path / "x"),
        "--label-separator",
        "|",
    ]
    refused = subprocess.run(separator, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "--label-separator applies with --multi-label" in refused.stderr


def test_what_needs_one_class_per_image_is_refused(converted: Path) -> None:
    with pytest.raises(OptionError, match="balance='class' samples by each image's one class"):
        load(str(converted), batch_size=2, seed=0, read=ReadOptions(balance="class"))


def test_tfds_reads_the_lists_of_ids(converted: Path) -> None:
    """TFDS itself, on our metadata: a Sequence of ClassLabel, names included."""
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(converted))
    label = builder.info.features["image/class/label"]
    assert label.feature.names == NAMES
    for example in builder.as_dataset(split="train"):
        name = example["image/filename"].numpy().decode()
        assert example["image/class/label"].numpy().tolist() == expected_ids(name)


def test_indexed_records_say_there_is_no_one_class_id(converted: Path) -> None:
    from shardfeed import IndexedRecords

    rows = IndexedRecords(str(converted))
    with pytest.raises(OptionError, match="holds multi_label labels, not one class id: read example"):
        rows.label(0)
    assert rows.example(0)[schema.LABEL]  # the ids are there
    for i in range(len(rows)):  # and rows[i] gives them k-hot, as load does
        ids = rows.example(i)[schema.LABEL]
        image, k_hot = rows[i]
        assert image.ndim == 3 and np.flatnonzero(k_hot).tolist() == sorted(ids if isinstance(ids, list) else [ids])


def test_info_counts_the_classes_found_together(converted: Path) -> None:
    from shardfeed.tools import info
    from shardfeed.tools.dataset_info import format_info

    data = info(str(converted))
    # a: cat+outdoor, c: cat+dog+indoor, d: dog+outdoor (b, e, f: one class each)
    want = {"cat + outdoor": 1, "cat + dog": 1, "cat + indoor": 1, "dog + indoor": 1, "dog + outdoor": 1}
    assert data["splits"]["train"]["images"]["classes_together"] == want
    assert "classes on one image (sample): " in format_info(data)
