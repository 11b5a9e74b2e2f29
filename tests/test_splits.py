"""Split planning: spec parsing, allocation, stratification and the pinned seeded order."""

from __future__ import annotations

import pytest

from shardfeed.write.items import Item
from shardfeed.write.splits import allocate, assign_splits, order_key, parse_split_spec, seeded_order


def _items(per_class: dict[int, int]) -> list[Item]:
    return [Item(f"c{label}/{i:04d}.jpg", label, None, 1) for label, n in per_class.items() for i in range(n)]


def test_parse_split_spec_fractions_and_percentages() -> None:
    assert parse_split_spec("train=0.8,validation=0.2") == {"train": 0.8, "validation": 0.2}
    assert parse_split_spec("train=70, val=20, test=10") == pytest.approx({"train": 0.7, "val": 0.2, "test": 0.1})
    assert parse_split_spec({"a": 1}) == {"a": 1.0}


def test_deliberate_split_names_pass() -> None:
    """Known names in any case, numbered or suffixed variants, unrelated names, and a misspelling
    when custom names are asked for."""
    for spec in ("Train=0.5,VAL=0.5", "train=0.5,train2=0.5", "train=0.5,test_hard=0.5", "a=0.5,holdout=0.5"):
        parse_split_spec(spec)
    assert parse_split_spec("train=0.8,valdation=0.2", custom_names=True) == {"train": 0.8, "valdation": 0.2}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("train=0.8,validation=0.1", "add up to 0.9"),
        ("train", "must look like name=fraction"),
        ("train=x", "is not a number"),
        ("train=1.2,val=-0.2", "must be > 0"),
        ("tr ain=1", "may only use letters"),
        ("", "empty"),
        ("train=0.8,valdation=0.2", "split name 'valdation' looks like a misspelling of 'validation'"),
        ("trian=0.8,test=0.2", "misspelling of 'train'.*--custom-split-names"),
        ("train=0.9,tset=0.1", "misspelling of 'test'"),
    ],
)
def test_parse_split_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_split_spec(spec)


def test_allocate_is_exact_and_proportional() -> None:
    assert allocate(10, [0.8, 0.2]) == [8, 2]
    assert allocate(7, [0.5, 0.5]) == [4, 3]
    assert sum(allocate(1001, [0.7, 0.2, 0.1])) == 1001
    assert allocate(0, [0.5, 0.5]) == [0, 0]


def test_stratified_split_keeps_class_proportions() -> None:
    items = _items({0: 50, 1: 10, 2: 5})
    out = assign_splits(items, {"train": 0.8, "validation": 0.2}, seed=1)
    val = [i.label for i in out["validation"]]
    assert (val.count(0), val.count(1), val.count(2)) == (10, 2, 1)
    assert sorted(i.key for s in out.values() for i in s) == sorted(i.key for i in items)


def test_split_depends_on_seed_not_on_input_order() -> None:
    items = _items({0: 30, 1: 30})
    a = assign_splits(items, {"train": 0.5, "val": 0.5}, seed=3)
    b = assign_splits(list(reversed(items)), {"train": 0.5, "val": 0.5}, seed=3)
    c = assign_splits(items, {"train": 0.5, "val": 0.5}, seed=4)
    assert {i.key for i in a["val"]} == {i.key for i in b["val"]}
    assert {i.key for i in a["val"]} != {i.key for i in c["val"]}


def test_golden_seeded_order() -> None:
    """Pins the order for seed 0: changing it changes every user's shards, so it must be deliberate."""
    keys = [i.key for i in seeded_order(_items({0: 3, 1: 3}), 0)]
    assert order_key(0, "c0/0000.jpg").hex() == "4c500027ee4397d3"
    assert keys == [
        "c1/0001.jpg",
        "c0/0000.jpg",
        "c1/0000.jpg",
        "c0/0002.jpg",
        "c1/0002.jpg",
        "c0/0001.jpg",
    ]


@pytest.mark.parametrize(("per_class", "classes", "validation"), [(2, 10, 4), (3, 10, 6), (1, 2000, 400), (11, 4, 9)])
def test_split_sizes_are_those_of_the_whole_set(per_class: int, classes: int, validation: int) -> None:
    """Rounding each class on its own gave 10 classes of 2 no validation at all, and classes of
    3 a third; the whole set's sizes hold, and each class gives its share rounded up or down."""
    items = [Item(f"c{c}/{i}.jpg", c, None, 1) for c in range(classes) for i in range(per_class)]
    out = assign_splits(items, {"train": 0.8, "validation": 0.2}, seed=0)
    assert len(out["validation"]) == validation and len(out["train"]) == len(items) - validation
    for c in range(classes):
        share = sum(1 for item in out["validation"] if item.label == c)
        assert share in (int(per_class * 0.2), -(-per_class * 2 // 10)), (c, share)
    assert out == assign_splits(list(reversed(items)), {"train": 0.8, "validation": 0.2}, seed=0)


def test_a_split_left_empty_is_warned_about(tmp_path: object) -> None:
    """Four images at 0.9/0.1 leave validation nothing (0.4 rounds to 0): the summary says so
    (it used to be silent)."""
    import numpy as np
    from conftest import jpeg_bytes, photos

    from shardfeed import ConvertOptions, convert

    root = tmp_path / "src"  # type: ignore[operator]
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(2):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(np.ascontiguousarray(photos()["rocket"][i:64, c:64])))
    result = convert(str(root), str(tmp_path / "out"), ConvertOptions(split="train=0.9,validation=0.1"), progress=False)  # type: ignore[operator]
    assert result.manifest.split_names == ["train"]
    assert "warning: no 'validation' split was written: 4 images are too few" in result.summary()
