"""Hugging Face datasets as sources, written by the `datasets` library itself from real photos:
Hub-layout Parquet (`to_parquet` per split), `save_to_disk` of a DatasetDict, one Parquet file,
images given by path; after conversion each split holds exactly the (image bytes, class) pairs
written."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zygote
from conftest import discovered_and_converted, shard_bytes

from shardfeed import ConvertOptions, convert
from shardfeed.errors import SourceError
from shardfeed.format import schema
from shardfeed.read.indexed import IndexedRecords
from shardfeed.write.sources import resolve_source

datasets = pytest.importorskip("datasets")

CLASSES = ["astronaut", "coffee", "chelsea", "rocket"]
TABLES = "shardfeed.write.sources.tables.TableSource"


def _rows(photo_tree: Path) -> dict[str, list[tuple[bytes, int]]]:
    """The photo tree's images as (bytes, class id) rows: 'train' and 'test' by file number."""
    rows: dict[str, list[tuple[bytes, int]]] = {"train": [], "test": []}
    for path in sorted(photo_tree.rglob("*.*")):
        split = "test" if path.stem in ("000", "001") else "train"
        rows[split].append((path.read_bytes(), sorted(p.name for p in photo_tree.iterdir()).index(path.parent.name)))
    return rows


def _dataset(rows: list[tuple[bytes, int]], names: list[str]) -> object:
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    return datasets.Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b, _ in rows], "label": [c for _, c in rows]}, features=features
    )


def _converted(out: Path) -> dict[str, Counter[tuple[str, str]]]:
    """Per split, the multiset of (image sha256, class name) in the shards."""
    m = json.loads((out / "manifest.json").read_text())
    found = {}
    for split in m["splits"]:
        records = IndexedRecords(str(out), split=split)
        found[split] = Counter(
            (hashlib.sha256(e[schema.ENCODED]).hexdigest(), e[schema.TEXT].decode())
            for e in (records.example(i) for i in range(len(records)))
        )
    return found


def _expected(rows: dict[str, list[tuple[bytes, int]]], names: list[str]) -> dict[str, Counter[tuple[str, str]]]:
    return {s: Counter((hashlib.sha256(b).hexdigest(), names[c]) for b, c in r) for s, r in rows.items()}


def pq_row_groups(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_row_groups


def _span_bytes(item: object) -> bytes:
    """The bytes an item's span holds (in a table, or in a staging folder's images file)."""
    span = getattr(item, "span", None)
    assert span is not None, item
    with open(span[0], "rb") as f:
        f.seek(span[1])
        return f.read(span[2])


def _staged(item: object) -> bytes:
    """The bytes a staged item's span holds in the staging folder's images file."""
    span = getattr(item, "span", None)
    assert span is not None and span[0].endswith("images.bin"), span
    return _span_bytes(item)


def _same_as_staged(
    source: Path, tmp_path: Path, options: ConvertOptions, monkeypatch: pytest.MonkeyPatch
) -> list[list[object]]:
    """Converts `source` again by the staged route (reading in place refused) and checks that its
    shards are byte for byte those in tmp_path/'in_place', and its inputs list the same but for
    each image's listing time (its table's, or when it was staged); returns the in-place one."""
    from shardfeed.write.sources import table_rows

    def not_in_place(*args: object) -> object:
        raise table_rows.NotInPlace("the staged route, for the comparison")

    monkeypatch.setattr(table_rows, "in_place_rows", not_in_place)
    convert(str(source), str(tmp_path / "staged"), options, workers=2, progress=False)
    assert (tmp_path / "cache" / "shardfeed" / "staged").exists(), "the staged route was not taken"
    in_place, via_staging = shard_bytes(tmp_path / "in_place"), shard_bytes(tmp_path / "staged")
    listed = [json.loads(gzip.decompress(f.pop("index/inputs-g0000.json.gz"))) for f in (in_place, via_staging)]
    assert in_place == via_staging
    assert [[*r[:4], *r[5:]] for r in listed[0]] == [[*r[:4], *r[5:]] for r in listed[1]]
    return listed[0]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def names(photo_tree: Path) -> list[str]:
    return sorted(p.name for p in photo_tree.iterdir())


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging folders (write/sources/staging.py) under the test's own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_hub_parquet_layout_keeps_splits_labels_and_bytes(photo_tree: Path, names: list[str], tmp_path: Path) -> None:
    rows = _rows(photo_tree)
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    for split, split_rows in rows.items():
        _dataset(split_rows, names).to_parquet(str(hub / "data" / f"{split}-00000-of-00001.parquet"))  # type: ignore[attr-defined]
    result = convert(str(hub), str(tmp_path / "out"), ConvertOptions(shards=2), workers=2, progress=False)
    assert result.manifest.data["source"]["kind"] == "parquet"
    assert result.manifest.labels == names  # ClassLabel's names, in its id order
    assert _converted(tmp_path / "out") == _expected(rows, names)
    assert not (tmp_path / "cache" / "shardfeed" / "staged").exists()  # datasets' Parquet: read in place
    discovery = resolve_source(str(hub)).discover()
    assert sorted({i.key.rsplit("/", 1)[0] for i in discovery.items}) == [
        "data/test-00000-of-00001.parquet",
        "data/train-00000-of-00001.parquet",
    ]
    assert Counter(hashlib.sha256(_span_bytes(i)).hexdigest() for i in discovery.items) == sum(
        (Counter(h for h, _ in c) for c in _expected(rows, names).values()), Counter()
    )
    assert {i.span[0] for i in discovery.items if i.span} == {str(p) for p in (hub / "data").iterdir()}


def test_hub_parquet_is_read_in_place_byte_identical_to_staging(
    photo_tree: Path, names: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet as `datasets` writes it for the Hub (image pages uncompressed, PLAIN) is read
    from its spans: nothing is staged, each span holds exactly its image's bytes (several row
    groups and pages, a row without an image among them), and the shards are byte for byte
    those of the staged route."""

    rows = _rows(photo_tree)
    empty = datasets.Dataset.from_dict(
        {"image": [None], "label": [0]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}),
    )
    train = datasets.concatenate_datasets(
        [_dataset(rows["train"][:9], names), empty, _dataset(rows["train"][9:], names)]
    )
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    train.to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"), batch_size=7)  # row groups of 7 rows
    _dataset(rows["test"], names).to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    assert pq_row_groups(hub / "data" / "train-00000-of-00001.parquet") > 2
    options = ConvertOptions(shards=2, seed=5)
    convert(str(hub), str(tmp_path / "in_place"), options, workers=2, progress=False)
    staged = tmp_path / "cache" / "shardfeed" / "staged"
    assert not staged.exists(), "a Hub Parquet file was staged"
    assert _converted(tmp_path / "in_place") == _expected(rows, names)
    report = json.loads((tmp_path / "in_place" / "report.json").read_text())
    assert [(s["file"], s["reason"]) for s in report["skipped"]] == [
        ("data/train-00000-of-00001.parquet row 9", "no image in the row (empty or null)")
    ]
    _same_as_staged(hub, tmp_path, options, monkeypatch)


@pytest.mark.parametrize("kind", ["arrow", "parquet"])
def test_values_shorter_than_a_head_read_in_place(photo_tree: Path, tmp_path: Path, kind: str) -> None:
    """A value shorter than the bytes an image's format is told from (a 3-byte cell), the
    table's last, is read in place as it is: its head is the value, its span exactly it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardfeed.write.sources import table_rows

    values = [p.read_bytes() for p in sorted(photo_tree.rglob("*.jpg"))[:3]] + [b"abc"]
    table, path = pa.table({"image": values, "label": [0, 1, 0, 1]}), tmp_path / f"t.{kind}"
    if kind == "parquet":
        pq.write_table(table, path, compression="none", use_dictionary=False)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    found = list(table_rows.in_place_rows(str(path), kind, "image", "label"))
    assert [label for _, label in found] == [0, 1, 0, 1] and found[-1][0] is not None
    assert found[-1][0].head == b"abc"
    for (image, _), value in zip(found, values, strict=True):
        assert image is not None
        with open(image.span[0], "rb") as f:
            f.seek(image.span[1])
            assert f.read(image.span[2]) == value


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ({}, "snappy"),  # pyarrow's and pandas' default
        ({"compression": "none"}, "dictionary-encoded"),  # a dictionary page: values are indices
        (
            {"compression": "none", "use_dictionary": False, "column_encoding": {"image": "DELTA_LENGTH_BYTE_ARRAY"}},
            "not PLAIN",
        ),
    ],
)
def test_parquet_not_stored_as_it_is_is_staged_and_converted(
    photo_tree: Path, tmp_path: Path, written: dict[str, object], why: str
) -> None:
    """Compressed or encoded image pages do not hold the images as they are: that table is
    staged, said by the in-place read, and converts the same."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardfeed.write.sources import table_rows

    rows = _rows(photo_tree)["train"]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": [b for b, _ in rows], "label": [c for _, c in rows]}), path, **written)
    with pytest.raises(table_rows.NotInPlace, match=why):
        list(table_rows.in_place_rows(str(path), "parquet", "image", "label"))
    discovery = resolve_source(str(path)).discover()
    assert all(i.span is not None and i.span[0] == str(Path(discovery.base) / "images.bin") for i in discovery.items)
    assert Counter(hashlib.sha256(_staged(i)).hexdigest() for i in discovery.items) == Counter(
        hashlib.sha256(b).hexdigest() for b, _ in rows
    )


def test_one_hub_file_alone_keeps_its_split_as_in_its_folder(
    photo_tree: Path, names: list[str], tmp_path: Path
) -> None:
    """`convert hub/data/train-00000-of-00001.parquet` read the same rows as the folder but
    re-split them 80/20; now it keeps the split the file's name gives, as the folder does."""
    rows = _rows(photo_tree)["train"]
    table = tmp_path / "train-00000-of-00001.parquet"
    _dataset(rows, names).to_parquet(str(table))  # type: ignore[attr-defined]
    convert(str(table), str(tmp_path / "out"), ConvertOptions(), workers=1, progress=False)
    assert _converted(tmp_path / "out") == _expected({"train": rows}, names)
    # a lone split is still divided when fractions are given (a Hub dataset with only 'train')
    options = ConvertOptions(split="train=0.75,validation=0.25")
    convert(str(table), str(tmp_path / "resplit"), options, workers=1, progress=False)
    resplit = _converted(tmp_path / "resplit")
    assert (
        set(resplit) == {"train", "validation"}
        and sum(resplit.values(), Counter()) == _expected({"train": rows}, names)["train"]
    )


def test_save_to_disk_of_a_dataset_dict(photo_tree: Path, names: list[str], tmp_path: Path) -> None:
    rows = _rows(photo_tree)
    saved = tmp_path / "saved"
    datasets.DatasetDict({s: _dataset(r, names) for s, r in rows.items()}).save_to_disk(str(saved))
    result = convert(str(saved), str(tmp_path / "out"), ConvertOptions(shards=2), workers=1, progress=False)
    assert result.manifest.data["source"]["kind"] == "arrow"
    assert _converted(tmp_path / "out") == _expected(rows, names)


def test_save_to_disk_tables_are_read_in_place_byte_identical_to_staging(
    photo_tree: Path, names: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save_to_disk dataset's images are read from their spans in its Arrow files: nothing is
    staged, each item's span holds exactly its image's bytes, a row without an image is
    reported as before, and the shards are byte for byte those of the staged route."""

    rows = _rows(photo_tree)
    empty = datasets.Dataset.from_dict(
        {"image": [None], "label": [0]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}),
    )
    train = datasets.concatenate_datasets([_dataset(rows["train"], names), empty])
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": train, "test": _dataset(rows["test"], names)}).save_to_disk(str(saved))
    discovery = resolve_source(str(saved)).discover()
    images = {b for r in rows.values() for b, _ in r}
    assert all(i.span is not None for i in discovery.items) and len(discovery.items) == len(images)
    for item in discovery.items:
        assert item.span is not None and item.span[0].endswith(".arrow")
        with open(item.span[0], "rb") as f:
            f.seek(item.span[1])
            assert f.read(item.span[2]) in images
    options = ConvertOptions(shards=2, seed=5)
    convert(str(saved), str(tmp_path / "in_place"), options, workers=2, progress=False)
    staged = tmp_path / "cache" / "shardfeed" / "staged"
    assert not staged.exists(), "a local Arrow table was staged"
    assert _converted(tmp_path / "in_place") == _expected(rows, names)
    report = json.loads((tmp_path / "in_place" / "report.json").read_text())
    assert [s["reason"] for s in report["skipped"]] == ["no image in the row (empty or null)"]
    listed = _same_as_staged(saved, tmp_path, options, monkeypatch)
    assert all(r[4] == (saved / r[0].rsplit("/", 1)[0]).stat().st_mtime_ns for r in listed)


def test_a_compressed_arrow_stream_is_staged_and_converted(photo_tree: Path, names: list[str], tmp_path: Path) -> None:
    """Compressed record batches do not hold the images as they are: that table is staged
    (the in-place read notices the buffers are not in the file) and converts the same."""
    import pyarrow as pa

    rows = _rows(photo_tree)["train"]
    table = pa.table({"image": [b for b, _ in rows], "label": [c for _, c in rows]})
    path = tmp_path / "z.arrow"
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=10)
    from shardfeed.write.sources import table_rows

    with pytest.raises(table_rows.NotInPlace, match="compressed"):
        list(table_rows.in_place_rows(str(path), "arrow", "image", "label"))
    discovery = resolve_source(str(path)).discover()
    assert len(discovery.items) == len(rows)
    assert all(i.span is not None and i.span[0] == str(Path(discovery.base) / "images.bin") for i in discovery.items)
    convert(str(path), str(tmp_path / "out"), ConvertOptions(shards=1), workers=1, progress=False)
    merged = sum(_converted(tmp_path / "out").values(), Counter())
    assert Counter(h for h, _ in merged) == Counter(hashlib.sha256(b).hexdigest() for b, _ in rows)


def test_compressed_parquet_is_staged_by_worker_processes_byte_identical(photo_tree: Path, tmp_path: Path) -> None:
    """Snappy-compressed Parquet (two files, row groups of 4 rows) is read and staged by worker
    processes, runs of row groups each into a file of its own; rows without image bytes (a null,
    one naming an image file) come back as they were and are read or reported here; the shards
    are byte for byte those of staging in the converting process."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [r for split in _rows(photo_tree).values() for r in split]
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / "named.jpg").write_bytes(rows[0][0])
    cells = [{"bytes": b, "path": None} for b, _ in rows]
    cells[3] = {"bytes": None, "path": "named.jpg"}
    cells[5] = None
    half = len(cells) // 2
    for name, part in (("00000-of-00002", slice(0, half)), ("00001-of-00002", slice(half, None))):
        table = pa.table({"image": cells[part], "label": [c for _, c in rows][part]})
        pq.write_table(table, hub / "data" / f"train-{name}.parquet", row_group_size=4)  # snappy: staged
    listed = {
        route: discovered_and_converted(TABLES, hub, tmp_path / route, route, tmp_path / f"cache-{route}")
        for route in ("workers", "here")
    }
    assert not listed["workers"]["tf"] and listed["here"]["files"] == ["images.bin", "listing.json"]
    assert len([f for f in listed["workers"]["files"] if f.startswith("images-")]) == 2 * min(8, -(-half // 4))
    assert "images.bin" in listed["workers"]["files"]  # the row naming a file: read and staged here
    expected = {}
    for i, (data, _) in enumerate(rows):
        table = f"data/train-{'00000' if i < half else '00001'}-of-00002.parquet"
        held = rows[0][0] if i == 3 else data  # row 3 names a copy of the first image
        ext = "png" if held.startswith(b"\x89PNG") else "jpg"
        if i != 5:
            expected[f"{table}/{i if i < half else i - half:07d}.{ext}"] = hashlib.sha256(held).hexdigest()
    assert listed["workers"]["held"] == expected and listed["here"]["held"] == expected
    by_workers, here = shard_bytes(tmp_path / "workers"), shard_bytes(tmp_path / "here")
    listed_inputs = [json.loads(gzip.decompress(f.pop("index/inputs-g0000.json.gz"))) for f in (by_workers, here)]
    assert by_workers == here
    # the inputs list: the same but for each image's listing time (when it was staged)
    assert [[*r[:4], *r[5:]] for r in listed_inputs[0]] == [[*r[:4], *r[5:]] for r in listed_inputs[1]]
    report = json.loads((tmp_path / "workers" / "report.json").read_text())
    assert [s["file"] for s in report["skipped"]] == ["data/train-00000-of-00002.parquet row 5"]


def test_one_parquet_file_is_split_by_the_fractions_and_bad_rows_reported(
    photo_tree: Path, names: list[str], tmp_path: Path
) -> None:
    rows = _rows(photo_tree)["train"]
    bad = [(b"not an image at all", 0)]
    table = tmp_path / "one.parquet"
    _dataset(rows + bad, names).to_parquet(str(table))  # type: ignore[attr-defined]
    result = convert(str(table), str(tmp_path / "out"), ConvertOptions(shards=1), workers=1, progress=False)
    assert result.num_written == len(rows) and set(result.manifest.split_names) == {"train", "validation"}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["file"], s["reason"].split(":")[0]) for s in report["skipped"]] == [
        ("one.parquet/0000036.bin", "not an image")  # the table and its row
    ]
    merged = sum(_converted(tmp_path / "out").values(), Counter())
    assert merged == _expected({"all": rows}, names)["all"]


def test_images_given_by_path_are_read_relative_to_the_dataset(photo_tree: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = tmp_path / "hub"
    (hub / "images").mkdir(parents=True)
    files = sorted(photo_tree.rglob("*.jpg"))[:6]
    for f in files:
        (hub / "images" / f.name.replace(".", f"-{f.parent.name}.")).write_bytes(f.read_bytes())
    paths = sorted(p.name for p in (hub / "images").iterdir())
    table = pa.table({"image": [{"bytes": None, "path": f"images/{p}"} for p in paths], "label": ["x"] * 3 + ["y"] * 3})
    pq.write_table(table, hub / "train.parquet")
    discovery = resolve_source(str(hub / "train.parquet")).discover()
    assert len(discovery.items) == 6 and discovery.class_names == ["x", "y"]
    staged = Counter(hashlib.sha256(_staged(i)).hexdigest() for i in discovery.items)
    assert staged == Counter(hashlib.sha256((hub / "images" / p).read_bytes()).hexdigest() for p in paths)


def test_integer_labels_without_classlabel_metadata_are_kept_named_by_their_ids(
    photo_tree: Path, tmp_path: Path
) -> None:
    """A Parquet file written by pyarrow or pandas (no `datasets` metadata) with an int label
    column: before, the labels were dropped and the images became an unlabeled split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [r for split in _rows(photo_tree).values() for r in split]
    table = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"image": [b for b, _ in rows], "label": [c for _, c in rows]}), table)
    with pytest.warns(UserWarning, match=r"class ids 0\.\.3 without ClassLabel names"):
        result = convert(str(table), str(tmp_path / "out"), ConvertOptions(split="train=1"), workers=1, progress=False)
    assert result.manifest.data["labels"] == ["0", "1", "2", "3"]
    assert _converted(tmp_path / "out") == {"train": Counter((hashlib.sha256(b).hexdigest(), str(c)) for b, c in rows)}


def test_classlabel_ids_out_of_range_are_skipped_per_row(photo_tree: Path, names: list[str], tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows(photo_tree)["train"][:6]
    good = pa.Table.from_pandas(_dataset(rows, names).to_pandas(), preserve_index=False)  # type: ignore[attr-defined]
    metadata = _dataset(rows, names).data.table.schema.metadata  # type: ignore[attr-defined]
    labels = [c for _, c in rows[:4]] + [len(names), 99]  # two ids past the names
    table = good.set_column(good.schema.get_field_index("label"), "label", pa.array(labels, pa.int64()))
    pq.write_table(table.replace_schema_metadata(metadata), tmp_path / "ids.parquet")
    result = convert(
        str(tmp_path / "ids.parquet"), str(tmp_path / "out"), ConvertOptions(split="train=1"), workers=1, progress=False
    )
    skipped = {s["file"]: s["reason"] for s in json.loads((tmp_path / "out" / "report.json").read_text())["skipped"]}
    assert skipped == {
        f"ids.parquet row {i}": f"label {label} is not an id of the ClassLabel's {len(names)} names"
        for i, label in ((4, len(names)), (5, 99))
    }
    assert result.manifest.data["labels"] == names
    assert result.manifest.data["splits"]["train"]["num_records"] == 4


def test_a_table_without_an_image_column_is_refused_naming_its_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(
        pa.table({"text": ["a", "b"], "label": [0, 1]}), tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"
    )
    with pytest.raises(SourceError, match=r"no image column found among \['text', 'label'\]"):
        convert(str(tmp_path / "hub"), str(tmp_path / "out"), workers=1, progress=False)


@pytest.mark.slow
def test_info_verify_and_train_run_on_the_result(photo_tree: Path, names: list[str], tmp_path: Path) -> None:
    rows = _rows(photo_tree)
    saved = tmp_path / "saved"
    datasets.DatasetDict({s: _dataset(r, names) for s, r in rows.items()}).save_to_disk(str(saved))
    out, run = tmp_path / "out", tmp_path / "run"
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (
        ["convert", str(saved), str(out), "--shards", "1", "-q"],
        ["info", str(out)],
        ["verify", str(out), "-q"],
        ["train", str(out), "--out", str(run), "--epochs", "1", "--image-size", "32", "--batch-size", "8"],
    ):
        done = zygote.run(
            [sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, env=env, timeout=600
        )
        assert done.returncode == 0, (args, done.stderr[-2000:])
    assert (run / "run.json").exists()


KILLED = """import sys
from shardfeed import ConvertOptions, convert
convert(sys.argv[1], sys.argv[2], ConvertOptions(shards=16), workers=int(sys.argv[3]), progress=False)
"""


@pytest.mark.slow
def test_deterministic_and_resumed_after_kill_to_the_same_bytes(
    photo_tree: Path, names: list[str], tmp_path: Path
) -> None:
    """A table of 8 x 44 photos: 1 and 2 workers write the same bytes; a conversion killed
    (SIGKILL) after two shards resumes, from its complete staging folder, to those bytes."""
    import os

    from conftest import killed_after_two_shards

    rows = [row for _ in range(8) for split in _rows(photo_tree).values() for row in split]
    table = tmp_path / "many.parquet"
    _dataset(rows, names).to_parquet(str(table))  # type: ignore[attr-defined]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    outs = {n: tmp_path / f"out{n}" for n in (1, 2)}
    for n, out in outs.items():
        subprocess.run([sys.executable, "-c", KILLED, str(table), str(out), str(n)], check=True, env=env, timeout=300)
    killed = tmp_path / "killed"
    if not killed_after_two_shards([sys.executable, "-c", KILLED, str(table), str(killed), "2"], killed, env):
        pytest.skip("the conversion finished before the kill")
    subprocess.run([sys.executable, "-c", KILLED, str(table), str(killed), "2"], check=True, env=env, timeout=300)
    shards = [
        {k: v for k, v in shard_bytes(o).items() if k.startswith(("train", "validation", "index/"))}
        for o in (*outs.values(), killed)
    ]
    assert shards[0] == shards[1] == shards[2] and len(shards[0]) == 2 * 16 * 2


def test_a_row_group_larger_than_the_bound_is_refused_from_the_footer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Parquet bomb: a 1 KB file whose footer declares 20 MB of image cells (compressed
    zeros). The bound is lowered here to 8 MB; the default is 2 GiB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardfeed.write.sources import table_rows

    monkeypatch.setattr(table_rows, "MAX_ROW_GROUP_BYTES", 8 << 20)
    table = tmp_path / "bomb.parquet"
    cells = [bytes(10 << 20) + bytes([i]) for i in range(2)]  # two distinct 10 MB cells
    pq.write_table(pa.table({"image": cells, "label": [0, 1]}), table, compression="zstd", use_dictionary=False)
    assert table.stat().st_size < 64 << 10
    with pytest.raises(SourceError, match=r"bomb.parquet: row group 0 declares 20,97\d,\d{3} bytes .* refused before"):
        convert(str(table), str(tmp_path / "out"), ConvertOptions(split="train=1"), workers=1, progress=False)
