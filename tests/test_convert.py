"""convert end to end on real images: round trip through TensorFlow, determinism, resume, bad input."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import crops, jpeg_bytes, photos, shard_bytes

from shardfeed import ConvertError, ConvertOptions, ImageOptions, SourceError, convert, read_manifest
from shardfeed.format import tfrecord
from shardfeed.format.manifest import ManifestError

SPEC = {
    "image/encoded": "string",
    "image/format": "string",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/filename": "string",
    "image/key/sha256": "string",
}


def read_split(out: Path, split: str, *, labelled: bool = True, compression: str | None = None) -> list[dict]:
    """Every record of a split, parsed in batches with plain tf.io.parse_example."""
    import tensorflow as tf

    m = read_manifest(str(out))
    spec = {k: tf.io.FixedLenFeature([], getattr(tf, t)) for k, t in SPEC.items()}
    if labelled:
        spec["image/class/label"] = tf.io.FixedLenFeature([], tf.int64)
        spec["image/class/text"] = tf.io.FixedLenFeature([], tf.string)
    ds = tf.data.TFRecordDataset(m.shard_paths(split), compression_type="GZIP" if compression else "").batch(16)
    rows = []
    for batch in ds:
        parsed = {k: v.numpy() for k, v in tf.io.parse_example(batch, spec).items()}
        for i in range(len(parsed["image/filename"])):
            rows.append({k: v[i] for k, v in parsed.items()})
    return rows


def test_round_trip_preserves_every_file_and_label(photo_tree: Path, tmp_path: Path) -> None:
    import tensorflow as tf

    out = tmp_path / "out"
    result = convert(str(photo_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    m = result.manifest
    assert m.split_names == ["train", "validation"] and m.labels == [
        "astronaut",
        "chelsea",
        "coffee",
        "rocket",
    ]
    rows = read_split(out, "train") + read_split(out, "validation")
    got = Counter((r["image/filename"].decode(), r["image/class/text"].decode()) for r in rows)
    expected = Counter((f"{p.parent.name}/{p.name}", p.parent.name) for p in photo_tree.rglob("*") if p.is_file())
    assert got == expected and result.num_written == 44 == result.num_inputs
    for r in rows:  # stored bytes are the original file, and decode to the recorded shape
        original = (photo_tree / r["image/filename"].decode()).read_bytes()
        assert r["image/encoded"] == original
        shape = tf.io.decode_image(r["image/encoded"]).shape
        assert shape == (r["image/height"], r["image/width"], r["image/channels"])
        assert m.labels[r["image/class/label"]] == r["image/class/text"].decode()
    train = m.split("train")
    assert [s.file for s in train.shards] == ["train-00000-of-00002", "train-00001-of-00002"]
    # 80% of 44 is 35.2: 35 train images (as the whole set rounds), 8 or 9 from each class of 11
    assert train.num_records == 35 and sum(train.class_counts.values()) == 35
    assert sorted(train.class_counts.values()) == [8, 9, 9, 9]
    assert (out / "labels.txt").read_text() == "0:astronaut\n1:chelsea\n2:coffee\n3:rocket\n"
    assert not (out / ".shardfeed").exists()
    for shard in train.shards:  # counts, bytes, checksums and the DALI index agree with the file
        path = out / shard.file
        assert path.stat().st_size == shard.num_bytes
        pairs = tfrecord.parse_index((out / shard.index_file).read_text())
        assert len(pairs) == shard.num_records == len(list(tfrecord.read_records(str(path))))
        assert pairs[-1][0] + pairs[-1][1] == shard.num_bytes
        import hashlib

        assert hashlib.sha256(path.read_bytes()).hexdigest() == shard.sha256


def test_records_are_shuffled_across_classes(photo_tree: Path, tmp_path: Path) -> None:
    convert(str(photo_tree), str(tmp_path / "o"), ConvertOptions(split="train=1"), workers=1, progress=False)
    labels = [int(r["image/class/label"]) for r in read_split(tmp_path / "o", "train")]
    runs = sum(1 for a, b in itertools.pairwise(labels) if a != b)
    assert runs > 20  # 44 records of 4 classes: sorted order would give 3 changes


def test_same_inputs_same_bytes_for_any_worker_count(photo_tree: Path, tmp_path: Path) -> None:
    a = convert(str(photo_tree), str(tmp_path / "a"), ConvertOptions(shards=3, seed=7), workers=1, progress=False)
    b = convert(str(photo_tree), str(tmp_path / "b"), ConvertOptions(shards=3, seed=7), workers=2, progress=False)
    assert a.manifest.data == b.manifest.data
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")
    convert(str(photo_tree), str(tmp_path / "c"), ConvertOptions(shards=3, seed=8), workers=2, progress=False)
    assert shard_bytes(tmp_path / "a") != shard_bytes(tmp_path / "c")


def test_rerun_is_a_no_op_and_other_settings_are_refused(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    convert(str(photo_tree), str(out), workers=1, progress=False)
    before = shard_bytes(out)
    again = convert(str(photo_tree), str(out), workers=2, progress=False)
    assert again.already_complete and "nothing to do" in again.summary()
    with pytest.raises(
        ConvertError, match=r"other settings or inputs \(seed: 0 -> 5\); pass overwrite=True \(--overwrite\)"
    ):
        convert(str(photo_tree), str(out), ConvertOptions(seed=5), workers=1, progress=False)
    assert shard_bytes(out) == before
    redone = convert(
        str(photo_tree), str(out), ConvertOptions(seed=5, shards=2), workers=1, overwrite=True, progress=False
    )
    assert not redone.already_complete and redone.manifest.data["settings"]["seed"] == 5
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "dataset_info.json",
        "features.json",
        "image.class.label.labels.txt",
        "index",
        "labels.txt",
        "manifest.json",
        "report.json",
        "train-00000-of-00002",
        "train-00001-of-00002",
        "validation-00000-of-00002",
        "validation-00001-of-00002",
    ]


def test_foreign_folder_is_not_written_into(photo_tree: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ConvertError, match="is not empty and holds no shardfeed conversion"):
        convert(str(photo_tree), str(tmp_path), workers=1, progress=False)


def _slow_corpus(root: Path, count: int = 240) -> Path:
    """Real photo crops, enough that converting with a resize takes a second or two."""
    for c, (name, photo) in enumerate(photos().items()):
        (root / name).mkdir(parents=True)
        for i, crop in enumerate(crops(photo, count // 4, seed=50 + c)):
            (root / name / f"{i:04d}.jpg").write_bytes(jpeg_bytes(crop))
    return root


CONVERT_ARGS = ["--shards", "24", "--resize", "96", "--format", "png", "--workers", "1", "-q"]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    src = _slow_corpus(tmp_path / "src")
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "shardfeed", "convert", str(src), str(out), *CONVERT_ARGS]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = out / ".shardfeed" / "parts"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(parts.glob("*.json")) if parts.exists() else []) < 3:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "conversion finished before it could be killed"
    with pytest.raises(ManifestError, match=r"holds an unfinished conversion .* re-run the same `shardfeed convert`"):
        read_manifest(str(out))
    resumed = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "resumed:" in resumed.stdout
    clean = tmp_path / "clean"
    subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(src), str(clean), *CONVERT_ARGS],
        check=True,
    )
    # report.html is a page about the folder and names it in its title; everything else is data
    assert (out / "report.html").exists()
    view = {"report.html"}
    assert {k: v for k, v in shard_bytes(out).items() if k not in view} == {
        k: v for k, v in shard_bytes(clean).items() if k not in view
    }
    assert not list(out.glob("*.incomplete"))


def test_every_input_is_in_a_shard_or_the_report(odd_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = convert(str(odd_tree), str(out), ConvertOptions(split="train=1"), workers=2, progress=False)
    report = json.loads((out / "report.json").read_text())
    written = {r["image/filename"].decode() for r in read_split(out, "train")}
    skipped = {s["file"]: s["reason"] for s in report["skipped"]}
    inputs = {str(p.relative_to(odd_tree)) for p in odd_tree.rglob("*") if p.is_file()}
    assert written | set(skipped) == inputs and not written & set(skipped)
    assert {k for k in inputs if "bad_" in k} == set(skipped)
    assert "empty file" in skipped["cat/bad_empty.jpg"]
    assert "not inside a class folder" in skipped["bad_loose_file.jpg"]
    converted = {c["file"] for c in report["converted"]}
    assert converted == {k for k in inputs if "odd_" in k}
    assert report["warnings"][0]["file"] == "dog/warn_damaged.jpg"
    conversions = result.manifest.data["conversions"]
    assert conversions["CMYK JPEG"] == 1 and conversions["EXIF rotation"] == 1 and conversions["gif format"] == 1
    assert result.num_skipped == len(skipped) == result.manifest.data["num_skipped"]


def test_strict_fails_naming_the_file(odd_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match=r"bad_loose_file.jpg: not inside a class folder .*--strict"):
        convert(str(odd_tree), str(tmp_path / "o"), strict=True, workers=1, progress=False)
    clean = tmp_path / "clean"
    shutil.copytree(odd_tree / "cat", clean / "cat")
    with pytest.raises(ConvertError, match=r"cat/bad_\w+\.jpg: .*--strict"):
        convert(str(clean), str(tmp_path / "o2"), strict=True, workers=1, progress=False)


def test_duplicates_reported_leakage_flagged_and_dedupe_drops(photo_tree: Path, tmp_path: Path) -> None:
    src = shutil.copytree(photo_tree, tmp_path / "src")
    for i in range(10):
        shutil.copy(src / "coffee" / f"{i:03d}.jpg", src / "coffee" / f"copy_{i:03d}.jpg")
    near = bytearray((src / "coffee" / "000.jpg").read_bytes())
    assert near[6:11] == b"JFIF\x00"
    near[15] ^= 0x01  # JFIF pixel density: same size, same pixels, different bytes: not a copy
    (src / "coffee" / "near_000.jpg").write_bytes(bytes(near))
    out = tmp_path / "o"
    convert(str(src), str(out), workers=1, progress=False)
    report = json.loads((out / "report.json").read_text())
    assert len(report["duplicates"]) == 10
    assert any(d["leak"] for d in report["duplicates"])  # some pair lands in train and validation
    deduped = convert(str(src), str(tmp_path / "d"), ConvertOptions(dedupe=True), workers=2, progress=False)
    d_report = json.loads((tmp_path / "d" / "report.json").read_text())
    assert sorted(x["file"] for x in d_report["dropped_duplicates"]) == [f"coffee/copy_{i:03d}.jpg" for i in range(10)]
    assert d_report["duplicates"] == [] and deduped.num_written == 45


def test_by_class_writes_one_shard_set_per_class(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    convert(str(photo_tree), str(out), ConvertOptions(by_class=True, shards=2), workers=1, progress=False)
    m = read_manifest(str(out))
    files = [s.file for s in m.split("train").shards]
    assert files[:2] == ["train-astronaut-00000-of-00002", "train-astronaut-00001-of-00002"] and len(files) == 8
    for shard in m.split("train").shards:
        labels = {r["image/class/text"].decode() for r in _read_files(out / shard.file)}
        assert labels == {shard.file.split("-")[1]}


def _read_files(path: Path) -> list[dict]:
    from shardfeed.format.example_proto import parse_example

    rows = [parse_example(r) for r in tfrecord.read_records(str(path))]
    return [{k: v[0] for k, v in r.items()} for r in rows]


def test_gzip_label_offset_and_template(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    convert(
        str(photo_tree),
        str(out),
        ConvertOptions(
            compression="gzip",
            label_offset=1,
            split="train=1",
            name_template="{split}-{shard:05d}-of-{num_shards:05d}.tfrecord.gz",
        ),
        workers=1,
        progress=False,
    )
    assert (out / "train-00000-of-00001.tfrecord.gz").exists()
    rows = read_split(out, "train", compression="gzip")
    assert len(rows) == 44 and {int(r["image/class/label"]) for r in rows} == {1, 2, 3, 4}
    assert (out / "labels.txt").read_text().startswith("1:astronaut\n")


def test_resize_crop_reencode(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = convert(
        str(photo_tree),
        str(out),
        ConvertOptions(split="train=1", image=ImageOptions(resize=64, center_crop=56, image_format="jpeg", quality=80)),
        workers=2,
        progress=False,
    )
    rows = read_split(out, "train")
    assert {(int(r["image/height"]), int(r["image/width"])) for r in rows} == {(56, 56)}
    assert {r["image/format"] for r in rows} == {b"JPEG"}
    # every image was re-encoded by the settings: the summary says so ("0 converted" before)
    assert f"{len(rows)} re-encoded (--resize 64, --center-crop 56, --format jpeg)" in result.summary()


def test_shard_size_splits_into_several_shards(photo_tree: Path, tmp_path: Path) -> None:
    result = convert(
        str(photo_tree),
        str(tmp_path / "o"),
        ConvertOptions(shard_size="200KB", split="train=1"),
        workers=1,
        progress=False,
    )
    shards = result.manifest.split("train").shards
    total = sum(s.num_bytes for s in shards)
    assert len(shards) == -(-sum(p.stat().st_size for p in photo_tree.rglob("*.*")) // 200_000)
    assert total / len(shards) < 250_000


def test_numpy_arrays_round_trip_exactly(digits: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    import tensorflow as tf

    images, labels = digits
    np.savez(
        tmp_path / "d.npz",
        x_train=images[:80],
        y_train=labels[:80],
        x_test=images[80:100],
        y_test=labels[80:100],
    )
    for encoding in ("png", "raw"):
        out = tmp_path / encoding
        convert(
            str(tmp_path / "d.npz"),
            str(out),
            ConvertOptions(image=ImageOptions(array_encoding=encoding)),
            workers=1,
            progress=False,
        )
        rows = read_split(out, "test")
        assert len(rows) == 20
        for r in rows:
            index = int(r["image/filename"].decode().split("[")[1].rstrip("]"))
            if encoding == "png":
                pixels = tf.io.decode_png(r["image/encoded"]).numpy()[..., 0]
            else:
                pixels = np.frombuffer(r["image/encoded"], np.uint8).reshape(8, 8)
            assert np.array_equal(pixels, images[80 + index])
            assert int(r["image/class/label"]) == labels[80 + index]


def test_csv_and_filename_and_unlabeled_sources_convert(photo_tree: Path, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for p in sorted(photo_tree.glob("*/*.jpg")):
        shutil.copy(p, flat / f"{p.parent.name}.{p.stem}.jpg")
    from shardfeed import FilenameSource

    by_name = convert(FilenameSource(str(flat)), str(tmp_path / "n"), workers=1, progress=False)
    assert by_name.manifest.labels == ["astronaut", "chelsea", "coffee", "rocket"] and by_name.num_written == 40
    shutil.copytree(photo_tree, tmp_path / "tree")
    lines = [
        f"tree/{p.parent.name}/{p.name},{p.parent.name},{'val' if p.stem < '002' else 'train'}"
        for p in sorted(photo_tree.glob("*/*.jpg"))
    ]
    csv_path = tmp_path / "list.csv"
    csv_path.write_text("path,label,split\n" + "\n".join(lines) + "\n")
    from_csv = convert(str(csv_path), str(tmp_path / "c"), workers=1, progress=False)
    assert from_csv.manifest.split("val").num_records == 8 and from_csv.manifest.split("train").num_records == 32
    from shardfeed import UnlabeledSource

    result = convert(UnlabeledSource(str(photo_tree / "rocket")), str(tmp_path / "u"), workers=1, progress=False)
    assert result.manifest.split_names == ["test"] and result.manifest.labels is None
    rows_u = read_split(tmp_path / "u", "test", labelled=False)
    assert len(rows_u) == 11 and not (tmp_path / "u" / "labels.txt").exists()


def test_presplit_source_rejects_a_split_option(tmp_path: Path, photo_tree: Path) -> None:
    shutil.copytree(photo_tree / "coffee", tmp_path / "s" / "train" / "coffee")
    shutil.copytree(photo_tree / "rocket", tmp_path / "s" / "validation" / "rocket")
    with pytest.raises(ConvertError, match=r"already split into \['train', 'validation'\]; drop the split option"):
        convert(
            str(tmp_path / "s"),
            str(tmp_path / "o"),
            ConvertOptions(split="train=0.5,val=0.5"),
            workers=1,
            progress=False,
        )
    kept = convert(str(tmp_path / "s"), str(tmp_path / "o"), workers=1, progress=False)
    assert kept.manifest.split_names == ["train", "validation"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"shards": 2, "shard_size": "1MB"}, ValueError, "shards or shard_size, not both"),
        ({"compression": "zip"}, ValueError, r"compression must be one of \[None, 'gzip'\]"),
        ({"label_offset": -1}, ValueError, "label_offset must be a non-negative"),
        ({"workers": 0}, ValueError, "workers must be >= 1"),
        (
            {"shards": "train=2"},
            ConvertError,
            r"shards given for splits \['train'\] but the splits are",
        ),
        ({"name_template": "{split}.rec"}, ValueError, "must use"),
    ],
)
def test_option_errors(photo_tree: Path, tmp_path: Path, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        run = {k: kwargs.pop(k) for k in ("workers",) if k in kwargs}
        convert(str(photo_tree), str(tmp_path / "o"), ConvertOptions(**kwargs), progress=False, **run)


def test_empty_source_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "src" / "a").mkdir(parents=True)
    with pytest.raises(SourceError, match="no images found"):
        convert(str(tmp_path / "src"), str(tmp_path / "o"), progress=False)


def test_manifest_version_is_checked(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    convert(str(photo_tree), str(out), workers=1, progress=False)
    data = json.loads((out / "manifest.json").read_text())
    data["version"] = 99
    (out / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="has manifest version 99; this shardfeed reads version 1"):
        read_manifest(str(out))
    with pytest.raises(ManifestError, match=r"split 'test' not in .*; it has \['train', 'validation'\]"):
        data["version"] = 1
        (out / "manifest.json").write_text(json.dumps(data))
        read_manifest(str(out)).split("test")


def test_a_conversion_that_writes_no_image_is_an_error_naming_the_reasons(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "notes.jpg").write_bytes(b"plain text, not a JPEG")
    with pytest.raises(
        ConvertError, match=r"no image could be converted .* all 2 inputs were skipped \(2 not an image"
    ):
        convert(str(tmp_path / "src"), str(tmp_path / "out"), ConvertOptions(split="train=1"), workers=1)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_images_are_read_a_group_ahead_of_their_records_in_order(
    photo_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`encode_unhashed` reads READ_AHEAD images before it makes their records (fewer once they
    hold READ_AHEAD_BYTES), and the records come out as one image at a time makes them, in
    order, an unusable image among them included."""
    from shardfeed.write import encode
    from shardfeed.write.sources import FolderSource

    source = tmp_path / "source"
    shutil.copytree(photo_tree, source)
    (source / "astronaut" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    discovery = FolderSource(str(source)).discover()
    items = sorted(discovery.items, key=lambda i: i.key)[:20]
    assert any(i.key.endswith("broken.jpg") for i in items)
    spec = encode.EncodingSpec.of(discovery, ConvertOptions(near_radius=None))
    one_at_a_time = [encode.encode_items([item], spec)[0] for item in items]
    assert isinstance(one_at_a_time[[i.key for i in items].index("astronaut/broken.jpg")], encode.SkippedItem)

    steps: list[str] = []
    read, record = encode.read_image, encode.encode_read
    monkeypatch.setattr(encode, "read_image", lambda *a: steps.append("read") or read(*a))
    monkeypatch.setattr(encode, "encode_read", lambda *a: steps.append("record") or record(*a))
    for ahead, budget, pattern in ((3, 1 << 30, "RRRWWW"), (8, 1, "RW")):
        monkeypatch.setattr(encode, "READ_AHEAD", ahead)
        monkeypatch.setattr(encode, "READ_AHEAD_BYTES", budget)
        steps.clear()
        made_records = [u.record if isinstance(u, encode.Unhashed) else u for u in encode.encode_unhashed(items, spec)]
        assert made_records == one_at_a_time
        made = "".join("R" if s == "read" else "W" for s in steps)
        assert made.startswith(pattern * 2) and made.count("R") == len(items)
