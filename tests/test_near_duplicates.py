"""Near-duplicates: the perceptual hash, the grouping index, and what a conversion reports, on real
photos with near-copies made at test time (bench/corpus.py)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import photos
from PIL import Image

from bench.corpus import build_near_duplicate_corpus
from shardfeed import ConvertOptions, OptionError, convert
from shardfeed.write import near_duplicates, perceptual_hash


@pytest.fixture(scope="module")
def near_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("near") / "photos"
    return root, build_near_duplicate_corpus(str(root), copies=2)


def test_the_hash_is_pinned() -> None:
    """Our definition, bit for bit (a change here is a new `perceptual_hash.NAME`)."""
    assert perceptual_hash.of_image(Image.fromarray(photos()["astronaut"])) == "c2924c5532bddfc8"
    assert perceptual_hash.of_image(Image.new("L", (300, 200), 128)) is None  # flat: no hash
    assert perceptual_hash.distance("c2924c5532bddfc8", "c2924c5532bddfc9") == 1


def test_close_pairs_finds_exactly_what_all_pairs_would() -> None:
    rng = np.random.default_rng(1)
    hashes = rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2)
    for a, b in rng.choice(3000, (300, 2), replace=False):
        value = int(hashes[a])
        for bit in rng.choice(64, int(rng.integers(0, 9)), replace=False):
            value ^= 1 << int(bit)
        hashes[b] = np.uint64(value)
    everything = np.bitwise_count(hashes[:, None] ^ hashes[None, :])
    for radius in (0, 3, 4, 7):
        i, j, d = near_duplicates.close_pairs(hashes, radius)
        want_i, want_j = np.nonzero(np.triu(everything <= radius, 1))
        assert list(zip(i.tolist(), j.tolist(), strict=True)) == list(
            zip(want_i.tolist(), want_j.tolist(), strict=True)
        )
        assert (d == everything[i, j]).all() and (d <= radius).all()
    with pytest.raises(OptionError):
        near_duplicates.close_pairs(hashes, 8)


def test_a_conversion_groups_near_copies_and_flags_leaks(
    near_corpus: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    """Near-copies (re-encoded, resized, cropped <= 3% a side, PNG, brighter) of real photos,
    beside crops of the same photos: at the default radius the groups find >= 95% of the true
    pairs and no false one; a group spanning splits is a leak; the manifest counts them."""
    root, truth = near_corpus
    result = convert(str(root), str(tmp_path / "out"), ConvertOptions(shards=2), workers=2, progress=False)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    groups = report["near_duplicates"]
    found = {pair for g in groups for pair in itertools.combinations(sorted(g["files"]), 2)}
    true = {(a, b) for a, b in itertools.combinations(sorted(truth), 2) if truth[a] == truth[b]}
    assert len(found & true) >= 0.95 * len(true)
    assert found <= true  # precision 1.0 here
    splits = {}
    for name in ("train", "validation"):
        splits.update(dict.fromkeys(_keys(tmp_path / "out", name), name))
    for g in groups:
        assert g["splits"] == sorted({splits[f] for f in g["files"]})
        assert g["leak"] == (len(g["splits"]) > 1)
        assert all(0 <= d <= g["max_distance"] <= near_duplicates.DEFAULT_RADIUS for _, _, d in g["pairs"])
    near = result.manifest.data["near_duplicates"]
    assert near == {
        "hash": perceptual_hash.NAME,
        "radius": near_duplicates.DEFAULT_RADIUS,
        "groups": len(groups),
        "images": sum(len(g["files"]) for g in groups),
        "leaks": sum(g["leak"] for g in groups),
    }
    assert near["leaks"] > 0 and f"{near['groups']} near-duplicate groups" in result.summary()


def _keys(out: Path, split: str) -> list[str]:
    from shardfeed.format import schema
    from shardfeed.read.indexed import IndexedRecords

    records = IndexedRecords(str(out), split=split)
    return [records.example(i)[schema.FILENAME].decode() for i in range(len(records))]


def test_append_groups_new_near_copies_with_converted_images(photo_tree: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(photo_tree, source)
    out = tmp_path / "out"
    options = ConvertOptions(shards=1, split_rule="hash")
    first = convert(str(source), str(out), options, workers=1, progress=False)
    assert first.manifest.data["near_duplicates"]["groups"] == 0
    original = sorted(source.rglob("*.jpg"))[0]
    copy = original.with_name("copy-" + original.stem + ".png")
    Image.open(original).save(copy)
    second = convert(str(source), str(out), ConvertOptions(shards=1, split_rule="hash", append=True), workers=1)
    report = json.loads((out / "report.json").read_text())
    rel = lambda p: str(p.relative_to(source))  # noqa: E731
    assert [g["files"] for g in report["near_duplicates"]] == [sorted([rel(original), rel(copy)])]
    assert "1 near-duplicate groups join new and converted images" in second.summary()


def test_near_radius_off_and_out_of_range(photo_tree: Path, tmp_path: Path) -> None:
    result = convert(str(photo_tree), str(tmp_path / "off"), ConvertOptions(shards=1, near_radius=None), workers=1)
    assert "near_duplicates" not in result.manifest.data
    assert "near_duplicates" not in json.loads((tmp_path / "off" / "report.json").read_text())
    with pytest.raises(OptionError, match=r"near_radius must be 0\.\.7"):
        ConvertOptions(near_radius=8)
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(photo_tree), str(tmp_path / "x"), "--near-radius", "many"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--near-radius" in done.stderr and "Traceback" not in done.stderr
