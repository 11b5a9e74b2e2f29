"""manifest.json's one builder (format/manifest_builder.py): what convert, append and adopt write,
checked against the files themselves and against the reference page that documents every field."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import photos
from PIL import Image

from shardfeed import ConvertOptions, convert
from shardfeed.format import manifest, tfrecord
from shardfeed.format.manifest_builder import Counts, Header, ImageStats, ManifestBuilder, ShardFacts, ShardInfo
from shardfeed.tools.adopt import AdoptOptions, adopt

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "manifest.md"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders written every way: a conversion that finds copies, near-copies and a photo under
    two labels (and drops it), keeping near-copies in one split; one that can grow, and a copy
    of it appended to; an adoption of the first one's shards."""
    root = tmp_path_factory.mktemp("manifests")
    source = root / "photos"
    pictures = list(photos().values())
    for c, name in enumerate(("cat", "dog", "fox")):
        (source / name).mkdir(parents=True)
        for i in range(6):  # tiles of 96 x 128 px side by side: different images
            y, x = 96 * (i // 3), 128 * (i % 3)
            image = Image.fromarray(pictures[c][y : y + 96, x : x + 128])
            image.save(source / name / (f"{i}.png" if i % 3 == 0 else f"{i}.jpg"))
    Image.open(source / "dog" / "1.jpg").resize((100, 75)).save(source / "dog" / "1-small.jpg")  # a near-copy
    shutil.copy(source / "cat" / "1.jpg", source / "dog" / "copy.jpg")  # one photo, two labels
    (source / "fox" / "broken.jpg").write_bytes(b"not an image")
    out = root / "converted"
    options = ConvertOptions(shards=2, split_rule="hash", dedupe=True, label_conflicts="drop", split_groups="near")
    convert(str(source), str(out), options, workers=1, progress=False)
    first, grown = root / "first", root / "grown"
    growing = ConvertOptions(shards=2, split_rule="hash")  # conflicts kept (and counted); it can grow
    convert(str(source), str(first), growing, workers=1, progress=False)
    shutil.copytree(first, grown)
    for i in range(5):
        Image.fromarray(pictures[3][200:296, 128 * i : 128 * i + 128]).save(source / "cat" / f"new{i}.jpg")
    convert(str(source), str(grown), dataclasses.replace(growing, append=True), workers=1, progress=False)
    foreign = root / "foreign"
    foreign.mkdir()
    for shard in out.glob("*-of-*"):
        shutil.copy(shard, foreign)
    adopt(str(foreign), str(root / "adopted"), AdoptOptions())
    segmented = root / "segmented"  # images, a mask of class ids each, classes.txt
    (segmented / "masks").mkdir(parents=True)
    (segmented / "classes.txt").write_text("background\nsky\n")
    for i in range(4):
        (segmented / "images").mkdir(exist_ok=True)
        Image.fromarray(pictures[i][:96, :128]).save(segmented / "images" / f"{i}.png")
        Image.fromarray((np.arange(96 * 128).reshape(96, 128) % 2).astype(np.uint8)).save(
            segmented / "masks" / f"{i}.png"
        )
    convert(str(segmented), str(root / "segmentation"), ConvertOptions(split="train=1"), workers=1, progress=False)
    annotations = {  # COCO detection: one box sticking out (clipped), one outside the image (skipped)
        "images": [{"id": 1, "file_name": "images/0.png", "width": 128, "height": 96}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 4, "bbox": [100, 10, 60, 20], "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 4, "bbox": [200, 10, 5, 5], "iscrowd": 0},
        ],
        "categories": [{"id": 4, "name": "thing"}],
    }
    (segmented / "instances.json").write_text(json.dumps(annotations))
    convert(str(segmented / "instances.json"), str(root / "detection"), ConvertOptions(split="train=1"), progress=False)
    return {
        "converted": out,
        "first": first,
        "grown": grown,
        "adopted": root / "adopted",
        "segmentation": root / "segmentation",
        "detection": root / "detection",
    }


@pytest.fixture(scope="module")
def written(folders: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each folder's manifest."""
    return {name: manifest.read(str(folder)).data for name, folder in folders.items()}


def _documented() -> dict[str, set[str]]:
    """The fields each table of the reference page lists, by its section heading."""
    tables: dict[str, set[str]] = {}
    heading = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip("` ")
        found = re.match(r"\| `([a-z_0-9]+)` \|", line)
        if found and heading:
            tables.setdefault(heading, set()).add(found.group(1))
    return tables


def test_the_reference_page_lists_every_field_written_and_no_other(written: dict[str, dict[str, Any]]) -> None:
    """Top level, source, splits, shards, near-duplicates and generations: the union of what the
    three writers wrote is exactly what docs/reference/manifest.md lists."""
    tables = _documented()
    manifests = list(written.values())
    splits = [split for m in manifests for split in m["splits"].values()]
    generations = written["grown"]["generations"]
    seen = {
        "Top level": {key for m in manifests for key in m},
        "source": {key for m in manifests for key in m["source"]},
        "A split": {key for split in splits for key in split},
        "A shard": {key for split in splits for shard in split["shards"] for key in shard},
        "near_duplicates": {key for m in manifests for key in m.get("near_duplicates", {})},
        "A generation": {key for g in generations for key in g} - {"source"},
    }
    assert set(tables) == set(seen)
    for heading, fields in seen.items():
        assert tables[heading] == fields, (
            heading,
            "undocumented:",
            fields - tables[heading],
            "never written:",
            tables[heading] - fields,
        )


@pytest.mark.slow
def test_the_counts_are_those_of_the_files(folders: dict[str, Path]) -> None:
    """Each shard's entry against the file itself (its size, its digest, its records read
    back), and each split's totals against its shards and classes: computed here, not taken
    from the builder."""
    for folder in folders.values():
        m = manifest.read(str(folder))
        for name in m.split_names:
            split = m.split(name)
            assert split.num_records == sum(s.num_records for s in split.shards)
            assert split.num_bytes == sum(s.num_bytes for s in split.shards)
            if m.labels is not None and m.header.task == "classification":  # a class per image
                assert sum(split.class_counts.values()) == split.num_records
            for shard in split.shards:
                body = (folder / shard.file).read_bytes()
                assert shard.num_bytes == len(body) and shard.sha256 == hashlib.sha256(body).hexdigest()
                assert shard.num_records == sum(1 for _ in tfrecord.read_records(str(folder / shard.file)))
                assert (folder / shard.index_file).is_file()


def test_an_append_adds_to_the_first_generation_and_keeps_the_rest(written: dict[str, dict[str, Any]]) -> None:
    """The grown folder: the first generation's shards unchanged and first, the new ones after;
    class counts summed; the counts the append does not redo (dropped copies, label conflicts)
    and the first writer carried over; generation 1 in the history."""
    before, after = written["first"], written["grown"]
    for name, split in before["splits"].items():
        assert after["splits"][name]["shards"][: len(split["shards"])] == split["shards"]
    added = {s["file"] for split in after["splits"].values() for s in split["shards"]} - {
        s["file"] for split in before["splits"].values() for s in split["shards"]
    }
    assert added and all(".g0001-" in f or "-g0001-" in f for f in added)
    new_records = sum(after["generations"][1]["records"].values())
    assert (
        new_records == 5
        and sum(s["num_records"] for s in after["splits"].values())
        == sum(s["num_records"] for s in before["splits"].values()) + new_records
    )
    assert after["splits"]["train"]["class_counts"]["cat"] >= before["splits"]["train"]["class_counts"]["cat"]
    for key in ("num_dropped_duplicates", "num_label_conflicts", "created_by"):
        assert after[key] == before[key]
    assert before["num_label_conflicts"] == 1 and written["converted"]["num_dropped_label_conflicts"] == 2
    assert [g["generation"] for g in after["generations"]] == [0, 1]


def test_the_builder_sums_shards_and_leaves_out_what_was_not_counted() -> None:
    """Image statistics a shard did not count stay uncounted (left out); zero label-conflict
    counts are left out; a continued manifest keeps the fields it does not make unless given."""
    header = Header({"kind": "folder"}, {"shards": 2}, ["a", "b"], 1, {"image/encoded": "bytes"})
    builder = ManifestBuilder(header)
    first = ShardInfo("train-00000-of-00002", "index/train-00000-of-00002.idx", 3, 300, "x" * 64)
    second = ShardInfo("train-00001-of-00002", "index/train-00001-of-00002.idx", 2, 200, "y" * 64)
    builder.add(ShardFacts("train", first, {"a": 2, "b": 1}, ImageStats({"jpeg": 3}, 640, {"384": 3})))
    builder.add(
        ShardFacts("train", second, {"b": 2}, ImageStats({"png": 2}, None, None), ("cmyk", "cmyk, progressive"))
    )
    data = builder.build(Counts(skipped=1))
    assert data["splits"]["train"] == {
        "num_records": 5,
        "num_bytes": 500,
        "class_counts": {"a": 2, "b": 3},
        "shards": [vars(first), vars(second)],
    }
    assert data["image_formats"] == {"jpeg": 3, "png": 2} and "image_max_side" not in data
    assert "image_short_sides" not in data and data["conversions"] == {"cmyk": 2, "progressive": 1}
    assert "num_label_conflicts" not in data and data["num_skipped"] == 1 and data["label_offset"] == 1
    later = ManifestBuilder.continuing({**data, "generations": [1], "near_duplicates": {"groups": 1}}, header)
    kept = later.build(Counts(), near_duplicates=None)
    assert kept["generations"] == [1] and "near_duplicates" not in kept and kept["splits"] == data["splits"]
