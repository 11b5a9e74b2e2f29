"""Input layouts: every source on real images, and the errors users hit."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardfeed.write.items import Discovery
from shardfeed.write.sources import (
    ArraySource,
    CsvSource,
    FilenameSource,
    FolderSource,
    SourceError,
    UnlabeledSource,
    listed,
    resolve_source,
)


def test_class_folders_sorted_labels_any_depth(photo_tree: Path, tmp_path: Path) -> None:
    root = shutil.copytree(photo_tree, tmp_path / "tree")
    nested = root / "coffee" / "more" / "deeper"
    nested.mkdir(parents=True)
    shutil.copy(root / "coffee" / "000.jpg", nested / "x.jpg")
    (root / ".DS_Store").write_bytes(b"junk")
    found = FolderSource(str(root)).discover()
    assert found.class_names == ["astronaut", "chelsea", "coffee", "rocket"]
    assert not found.presplit and found.skipped == []
    deep = next(i for i in found.items if i.key == "coffee/more/deeper/x.jpg")
    assert deep.label == 2 and deep.size > 0
    assert [i.key for i in found.items] == sorted(i.key for i in found.items)


def test_presplit_tree_keeps_its_splits(photo_tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "split"
    shutil.copytree(photo_tree / "coffee", root / "train" / "coffee")
    shutil.copytree(photo_tree / "rocket", root / "train" / "rocket")
    shutil.copytree(photo_tree / "rocket", root / "val" / "rocket")
    (root / "train" / "stray.jpg").write_bytes(b"x")
    found = FolderSource(str(root)).discover()
    assert found.presplit and found.class_names == ["coffee", "rocket"]
    assert {i.split for i in found.items} == {"train", "val"}
    assert found.skipped == [("train/stray.jpg", "not inside a class folder (file directly in the split folder)")]


def test_labels_from_file_names(photo_tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "flat"
    root.mkdir()
    for i, src in enumerate(sorted((photo_tree / "chelsea").glob("*.jpg"))[:3]):
        shutil.copy(src, root / f"cat.{i}.jpg")
        shutil.copy(src, root / f"dog.{i}.jpg")
    shutil.copy(src, root / "nolabel.jpg")
    found = FilenameSource(str(root)).discover()
    assert found.class_names == ["cat", "dog"] and len(found.items) == 6
    assert found.skipped[0][0] == "nolabel.jpg" and "does not match" in found.skipped[0][1]
    custom = FilenameSource(str(root), r"^(\w+)\.\d").discover()
    assert custom.class_names == ["cat", "dog"]
    with pytest.raises(SourceError, match="exactly one group"):
        FilenameSource(str(root), r"^\w+$")
    with pytest.raises(SourceError, match="not a valid regex"):
        FilenameSource(str(root), r"(")


def test_csv_list_with_split_column_and_problems(photo_tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "csv"
    shutil.copytree(photo_tree / "coffee", root / "img")
    lines = [
        "file\tclass\tsubset",
        "img/000.jpg\tb\ttrain",
        "img/001.jpg\ta\tval",
        "img/001.jpg\ta\tval",
        "img/missing.jpg\ta\ttrain",
        "img/002.jpg\t\ttrain",
        "img/003.jpg\tb",
    ]
    (root / "list.tsv").write_text("\n".join(lines) + "\n")
    found = CsvSource(
        str(root / "list.tsv"), path_column="file", label_column="class", split_column="subset"
    ).discover()
    assert found.class_names == ["a", "b"] and found.presplit
    assert [(i.key, i.label, i.split) for i in found.items] == [
        ("img/000.jpg", 1, "train"),
        ("img/001.jpg", 0, "val"),
    ]
    reasons = dict(found.skipped)
    assert "listed twice" in reasons["img/001.jpg"]
    assert "does not exist" in reasons["img/missing.jpg"]
    assert "empty label" in reasons["img/002.jpg"]
    assert "has 2 columns" in reasons["list.tsv:7"]


def test_csv_errors_name_the_column_and_fix(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("path,label\na.jpg,x\n")
    with pytest.raises(
        SourceError,
        match=r"column 'class' not in CSV header \['path', 'label'\] \(line 1 of train.csv\); "
        r"pass label_column= \(--label-column\)",
    ):
        CsvSource(str(tmp_path / "train.csv"), label_column="class").discover()
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SourceError, match="is empty"):
        CsvSource(str(tmp_path / "empty.csv")).discover()


def test_integer_csv_labels_sort_numerically(photo_tree: Path, tmp_path: Path) -> None:
    shutil.copytree(photo_tree / "coffee", tmp_path / "img")
    rows = "\n".join(f"img/{i:03d}.jpg,{label}" for i, label in enumerate([10, 2, 1]))
    (tmp_path / "l.csv").write_text("path,label\n" + rows + "\n")
    assert CsvSource(str(tmp_path / "l.csv")).discover().class_names == ["1", "2", "10"]


def test_npz_with_keras_style_splits(digits: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    images, labels = digits
    np.savez(
        tmp_path / "mnist.npz",
        x_train=images[:50],
        y_train=labels[:50],
        x_test=images[50:70],
        y_test=labels[50:70],
    )
    found = ArraySource(str(tmp_path / "mnist.npz")).discover()
    assert found.presplit and found.class_names == [str(i) for i in range(10)]
    assert sum(i.split == "test" for i in found.items) == 20
    assert found.items[0].key.startswith("mnist.npz:x_test[")


def test_npy_pair_and_array_errors(digits: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    images, labels = digits
    np.save(tmp_path / "x.npy", images[:10])
    np.save(tmp_path / "y.npy", labels[:10])
    found = ArraySource(
        str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y.npy"), class_names=list("abcdefghij")
    ).discover()
    assert len(found.items) == 10 and found.class_names is not None and found.class_names[0] == "a"
    with pytest.raises(SourceError, match=r"pass the labels \.npy too"):
        ArraySource(str(tmp_path / "x.npy")).discover()
    np.save(tmp_path / "f.npy", images[:10].astype(np.float32))
    with pytest.raises(SourceError, match="must be uint8"):
        ArraySource(str(tmp_path / "f.npy"), labels_path=str(tmp_path / "y.npy")).discover()
    np.save(tmp_path / "y5.npy", labels[:5])
    with pytest.raises(SourceError, match=r"10 images .* but 5 labels"):
        ArraySource(str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y5.npy")).discover()
    np.savez(tmp_path / "o.npz", pixels=images[:3], y=labels[:3])
    with pytest.raises(SourceError, match=r"array 'images' not in o.npz, which holds \['pixels', 'y'\]"):
        ArraySource(str(tmp_path / "o.npz")).discover()
    assert len(ArraySource(str(tmp_path / "o.npz"), images_key="pixels", labels_key="y").discover().items) == 3


def test_unlabeled_folder(photo_tree: Path) -> None:
    found = UnlabeledSource(str(photo_tree / "rocket")).discover()
    assert found.class_names is None and all(i.label == -1 for i in found.items) and len(found.items) == 11


def test_resolve_source_by_path(photo_tree: Path, tmp_path: Path) -> None:
    assert isinstance(resolve_source(str(photo_tree)), FolderSource)
    assert isinstance(resolve_source(str(photo_tree), labels_from="filenames"), FilenameSource)
    assert isinstance(resolve_source(str(photo_tree), labels_from="none"), UnlabeledSource)
    assert isinstance(resolve_source("x.tsv"), CsvSource)
    assert isinstance(resolve_source("x.npz"), ArraySource)
    with pytest.raises(SourceError, match="labels_from must be one of"):
        resolve_source(str(photo_tree), labels_from="magic")
    with pytest.raises(SourceError, match="does not exist"):
        FolderSource(str(tmp_path / "nope")).discover()


def test_listing_pauses_the_cycle_collector_and_restores_it(photo_tree: Path, tmp_path: Path) -> None:
    """`listed` lists with Python's cycle collector off, and leaves it as it found it, on or off,
    after a listing that fails too."""
    seen: list[bool] = []

    class Watched(FolderSource):
        def discover(self) -> Discovery:
            seen.append(gc.isenabled())
            return super().discover()

    assert gc.isenabled()
    try:
        assert len(listed(Watched(str(photo_tree))).items) == len(FolderSource(str(photo_tree)).discover().items)
        assert gc.isenabled()
        gc.disable()
        listed(Watched(str(photo_tree)))
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(SourceError):
        listed(CsvSource(str(tmp_path / "missing.csv")))
    assert gc.isenabled() and seen == [False, False]
