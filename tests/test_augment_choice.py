"""train's automatic augmentation choice, on real converted data."""

from __future__ import annotations

from pathlib import Path

from shardfeed import read_manifest
from shardfeed.training.augment_choice import choose_augment, median_short_side


def test_small_images_get_small_shifts(digit_shards: Path) -> None:
    choice = choose_augment(str(digit_shards), "train", tiny_set=100)
    assert choice.preset == "light" and "32 px" in choice.reason


def test_photos_get_random_resized_crops(photo_shards: Path) -> None:
    assert median_short_side(str(photo_shards), "train") >= 120  # the crops are 120-300 px a side
    choice = choose_augment(str(photo_shards), "train", tiny_set=10, photo_side=120)
    assert choice.preset == "inception" and "photo-sized" in choice.reason


def test_a_tiny_set_gets_none(photo_shards: Path) -> None:
    count = read_manifest(str(photo_shards)).split("train").num_records  # 33 photos, 75% of them
    choice = choose_augment(str(photo_shards), "train")
    assert choice.preset == "none" and f"{count} training images (< 500)" in choice.reason
