"""Non-local paths go through TensorFlow's filesystems: tested on the in-memory ram:// one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import shard_bytes

from shardfeed import ConvertOptions, convert, load, read_manifest
from shardfeed.tools import info, verify


@pytest.fixture()
def tf():  # type: ignore[no-untyped-def]
    import tensorflow

    return tensorflow


def _upload(tf, local: Path, remote: str) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(local.rglob("*")):
        target = f"{remote}/{path.relative_to(local)}"
        if path.is_dir():
            tf.io.gfile.makedirs(target)
        else:
            tf.io.gfile.makedirs(target.rsplit("/", 1)[0])
            with tf.io.gfile.GFile(target, "wb") as f:
                f.write(path.read_bytes())


@pytest.mark.slow
def test_convert_into_ram_then_load_verify_info(tf, photo_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = "ram://shardfeed-test/out"
    result = convert(str(photo_tree), out, ConvertOptions(shards=2), workers=2, progress=False)
    assert result.num_written == 44
    names = set(tf.io.gfile.listdir(out))
    assert {"manifest.json", "labels.txt", "report.json", "train-00000-of-00002"} <= names
    assert not any(n.startswith(".shardfeed") for n in names)
    local = convert(str(photo_tree), str(tmp_path / "local"), ConvertOptions(shards=2), workers=1, progress=False)
    assert read_manifest(out).data == local.manifest.data
    with tf.io.gfile.GFile(f"{out}/train-00001-of-00002", "rb") as f:
        assert f.read() == (tmp_path / "local" / "train-00001-of-00002").read_bytes()
    images = sum(int(b[0].shape[0]) for b in load(out, split="train", training=False, batch_size=8, image_size=16))
    assert images == 35  # 80% of 44, as the whole set rounds
    assert verify(out, workers=1, progress=False).ok
    assert info(out)["records"] == 44
    assert convert(str(photo_tree), out, ConvertOptions(shards=2), workers=1, progress=False).already_complete


def test_source_on_ram_gives_the_same_shards(tf, photo_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _upload(tf, photo_tree, "ram://shardfeed-src/photos")
    a = convert(
        "ram://shardfeed-src/photos", str(tmp_path / "from_ram"), ConvertOptions(shards=2), workers=1, progress=False
    )
    b = convert(str(photo_tree), str(tmp_path / "from_disk"), ConvertOptions(shards=2), workers=1, progress=False)
    differ = {"manifest.json", "report.json", "dataset_info.json"}  # they name the source folder
    from_ram = {k: v for k, v in shard_bytes(tmp_path / "from_ram").items() if k not in differ}
    assert from_ram == {k: v for k, v in shard_bytes(tmp_path / "from_disk").items() if k not in differ}
    for m in (a.manifest.data, b.manifest.data):
        m["source"].pop("path")
    assert a.manifest.data == b.manifest.data


def test_foreign_tfrecords_on_ram(tf, photo_tree: Path) -> None:  # type: ignore[no-untyped-def]
    convert(
        str(photo_tree),
        "ram://shardfeed-foreign/out",
        ConvertOptions(split="train=1", shards=3),
        workers=1,
        progress=False,
    )
    ds = load("ram://shardfeed-foreign/out/train-*", training=False, batch_size=4, image_size=16)
    assert sum(int(b[0].shape[0]) for b in ds) == 44
    assert tf.io.gfile.exists("ram://shardfeed-foreign/out/.shardfeed-counts.json")


def test_numpy_source_on_ram(tf, digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import io

    import numpy as np

    images, labels = digits
    buffer = io.BytesIO()
    np.savez(buffer, x_train=images[:20], y_train=labels[:20])
    with tf.io.gfile.GFile("ram://shardfeed-np/d.npz", "wb") as f:
        f.write(buffer.getvalue())
    result = convert("ram://shardfeed-np/d.npz", str(tmp_path / "o"), workers=1, progress=False)
    assert result.num_written == 20 and result.manifest.split_names == ["train"]
