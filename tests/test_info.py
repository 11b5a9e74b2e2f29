"""info on converted data and on other TFRecords, as text and as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, ForeignKeys, convert
from shardfeed.tools import info
from shardfeed.tools.dataset_info import format_info


@pytest.fixture(scope="module")
def converted(odd_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("info") / "out"
    convert(str(odd_tree), str(out), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    return out


def test_info_json_holds_counts_stats_and_settings(converted: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "info", str(converted), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(done.stdout)
    train = data["splits"]["train"]
    assert data["kind"] == "shardfeed" and data["labels"] == ["cat", "dog"] and data["num_classes"] == 2
    assert train["records"] == 15 == sum(train["class_counts"].values()) == data["records"]
    assert train["shards"] == 2 and train["bytes"] > 100_000
    images = train["images"]
    assert images["sampled"] == 15 and 100 <= images["height"]["min"] <= images["height"]["max"] <= 300
    assert images["formats"] == {"JPEG": 8, "PNG": 7} and images["channels"] == {"1": 2, "3": 13}
    assert data["settings"]["shards"] == 2 and data["skipped"] == 6 and data["conversions"]["CMYK JPEG"] == 1


def test_info_text_has_a_histogram(converted: Path) -> None:
    text = format_info(info(str(converted)))
    assert "#" in text and "image settings" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["split", "records", "shards", "MB"] in rows and ["train", "15", "2", "0.6"] in rows
    assert "{" not in text.split("settings:")[0]  # tables and words, not Python dicts
    assert "1 shards" not in text and "records" in text


def test_info_on_other_tfrecords(converted: Path) -> None:
    data = info(str(converted / "train-*"), foreign=ForeignKeys(label_key="image/class/label"))
    assert data["kind"] == "tfrecord" and data["records"] == 15 and data["features"]["image/encoded"] == "bytes"
    assert sum(data["class_counts"].values()) == 15
    with pytest.raises(ValueError, match=r"feature 'label' not in the records; they have \['image/channels'"):
        info(str(converted / "train-*"), foreign=ForeignKeys(label_key="label"))


def test_many_classes_are_summarised_unless_all_are_asked_for(tmp_path: Path) -> None:
    """30 classes of real photo crops: a few summary lines naming the smallest and largest
    classes; --all-classes gives a line per class; --json keeps every count."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.corpus import build_corpus

    source = build_corpus(str(tmp_path / "src"), 120, classes=30)
    out = tmp_path / "out"
    convert(source, str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    data = info(str(out))
    text = format_info(data)
    assert "30 classes: images per class min" in text and "smallest: " in text and "--all-classes" in text
    assert len(text.splitlines()) < 20
    counts = data["splits"]["train"]["class_counts"]
    assert len(counts) == 30
    smallest = min(counts.items(), key=lambda kv: (kv[1], kv[0]))
    assert f"smallest: {smallest[0]} {smallest[1]}" in text
    full = format_info(data, all_classes=True)
    assert all(any(line.split()[:2] == [name, str(n)] for line in full.splitlines()) for name, n in counts.items())
    cli = subprocess.run(
        [sys.executable, "-m", "shardfeed", "info", str(out), "--all-classes"], capture_output=True, text=True
    )
    assert cli.returncode == 0 and len(cli.stdout.splitlines()) > 30
