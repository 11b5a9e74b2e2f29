"""Shard planning: counts, boundaries, sizes and names."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from shardfeed.write.sharding import (
    num_shards,
    parse_shard_counts,
    parse_size,
    shard_bounds,
    shard_name,
    validate_template,
)


def test_imagenet_gets_1024_train_shards() -> None:
    # ImageNet-1k train: 1,281,167 JPEGs, ~140 GB as they are.
    assert num_shards(1_281_167, 140 * 10**9) == 1024
    # its 50,000-image, ~6.7 GB validation split: 64 shards of ~105 MB
    assert num_shards(50_000, 6_700_000_000) == 64


def test_default_mean_shard_size_is_100_to_200_mb() -> None:
    for total in (3 * 10**9, 47 * 10**9, 999 * 10**9):
        mean = total / num_shards(10**7, total)
        assert 100 * 10**6 < mean <= 200 * 10**6


def test_shard_count_limits() -> None:
    assert num_shards(10, 5 * 10**9) == 10  # never more shards than records
    assert num_shards(100, 1000) == 1  # small data: one shard
    assert num_shards(0, 0) == 0
    assert num_shards(1000, 10**9, shard_size=128 * 10**6) == 8


def test_bounds_cover_every_record_once() -> None:
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    bounds = shard_bounds(1001, 16)
    assert bounds[0][0] == 0 and bounds[-1][1] == 1001
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert {e - s for s, e in bounds} <= {62, 63}


def test_parse_size() -> None:
    assert parse_size("128MB") == 128 * 10**6
    assert parse_size("1GiB") == 2**30
    assert parse_size("1.5 kb") == 1500
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="is not a size like"):
        parse_size("lots")
    with pytest.raises(ValueError, match="must be positive"):
        parse_size("0MB")


def test_parse_shard_counts() -> None:
    assert parse_shard_counts("16") == 16
    assert parse_shard_counts("train=16, validation=4") == {"train": 16, "validation": 4}
    with pytest.raises(ValueError, match="must look like split=count"):
        parse_shard_counts("train:16")
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_shard_counts(0)


def test_names_follow_the_imagenet_convention() -> None:
    assert shard_name("{split}-{shard:05d}-of-{num_shards:05d}", "train", 3, 1024) == "train-00003-of-01024"
    assert shard_name("{split}-{label}-{shard:03d}-of-{num_shards:03d}.tfrecord", "train", 0, 2, "big cat") == (
        "train-big_cat-000-of-002.tfrecord"
    )


@pytest.mark.parametrize(
    ("template", "by_class", "message"),
    [
        ("{split}-{shard}", False, "must use"),
        ("{split}-{shard}-of-{num_shards}-{bogus}", False, "must use"),
        ("{split}-{shard}-of-{num_shards}", True, "label"),
        ("{split}/{shard}-of-{num_shards}", False, "must not contain '/'"),
        ("{split-{shard}", False, "malformed"),
    ],
)
def test_template_errors(template: str, by_class: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_template(template, by_class=by_class)


def test_long_class_names_make_file_names_a_file_system_takes(tmp_path: Path) -> None:
    """--by-class puts the class name in the shard name: a 240-character name wrote some shards,
    then failed with 'File name too long'. Two long names with the same start stay apart."""
    from conftest import crops, jpeg_bytes, photos

    from shardfeed import ConvertOptions, convert

    names = ["x" * 240 + "a", "x" * 240 + "b", "short"]
    for i, pixels in enumerate(crops(photos()["coffee"], 6, seed=2)):
        folder = tmp_path / "src" / names[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.jpg").write_bytes(jpeg_bytes(pixels))
    options = ConvertOptions(by_class=True, split="train=1")
    result = convert(str(tmp_path / "src"), str(tmp_path / "out"), options, workers=1, progress=False)
    files = [s["file"] for s in result.manifest.data["splits"]["train"]["shards"]]
    assert len(set(files)) == 3 and "train-short-00000-of-00001" in files
    assert all(len(f) <= 255 for f in files) and all((tmp_path / "out" / f).is_file() for f in files)
    assert result.manifest.data["splits"]["train"]["num_records"] == 6
