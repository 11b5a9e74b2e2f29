"""train's automatic augmentation choice, on real converted data."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardfeed import ConvertOptions, convert, read_manifest
from shardfeed.training.augment_choice import choose_augment, median_short_side


@pytest.fixture(scope="module")
def digit_out(digits_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("choice_digits") / "out"
    convert(str(digits_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def photo_out(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("choice_photos") / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


def test_small_images_get_small_shifts(digit_out: Path) -> None:
    choice = choose_augment(str(digit_out), "train", tiny_set=100)
    assert choice.preset == "light" and "32 px" in choice.reason


def test_photos_get_random_resized_crops(photo_out: Path) -> None:
    assert median_short_side(str(photo_out), "train") >= 120  # the crops are 120-300 px a side
    choice = choose_augment(str(photo_out), "train", tiny_set=10, photo_side=120)
    assert choice.preset == "inception" and "photo-sized" in choice.reason


def test_a_tiny_set_gets_none(photo_out: Path) -> None:
    count = read_manifest(str(photo_out)).split("train").num_records  # 44 photos, 80% of them
    choice = choose_augment(str(photo_out), "train")
    assert choice.preset == "none" and f"{count} training images (< 500)" in choice.reason
