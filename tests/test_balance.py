"""Class-balanced reading (`ReadOptions(balance='class')`, `train --balance class`) and class
weights (`--class-weight balanced`) on a 10:1 imbalanced set of real photos."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zygote
from conftest import crops, jpeg_bytes, photos

from shardfeed import ConvertOptions, ReadOptions, convert, load, read_manifest, steps_per_epoch
from shardfeed.errors import OptionError
from shardfeed.read.order import balanced_order
from shardfeed.training import TrainOptions
from shardfeed.training.imbalance import balanced_class_weights


@pytest.fixture(scope="module")
def imbalanced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 crops of one photo, 6 of another (10:1), 12 of a third; all in one split."""
    root = tmp_path_factory.mktemp("imbalanced")
    for name, count in (("astronaut", 60), ("rocket", 6), ("coffee", 12)):
        (root / "src" / name).mkdir(parents=True)
        for i, crop in enumerate(crops(photos()[name], count, seed=count)):
            (root / "src" / name / f"{i:03d}.jpg").write_bytes(jpeg_bytes(crop))
    convert(str(root / "src"), str(root / "out"), ConvertOptions(split="train=1", shards=3), workers=1, progress=False)
    return root / "out"


def test_balanced_order_gives_each_class_an_equal_share() -> None:
    labels = np.array([0] * 100 + [1] * 10 + [2] * 3)
    order = balanced_order(labels, seed=1, epoch=0)
    assert len(order) == 113 and sorted(Counter(labels[order].tolist()).values()) == [37, 38, 38]
    uses = Counter(order.tolist())
    small = [uses[i] for i in range(110, 113)]  # 3 records for 37 or 38 places: 12 or 13 times each
    assert set(small) <= {12, 13} and sum(small) == Counter(labels[order].tolist())[2]
    assert max(uses[i] for i in range(100)) == 1  # the large class is sampled without repeats
    assert np.array_equal(order, balanced_order(labels, seed=1, epoch=0))  # a pure function
    assert not np.array_equal(order, balanced_order(labels, seed=1, epoch=1))  # a new choice each epoch
    seen = {int(i) for e in range(4) for i in balanced_order(labels, seed=1, epoch=e) if i < 100}
    assert len(seen) > 100 * 0.7  # over epochs the large class is covered, not the same 38 records


def test_load_reads_equal_class_counts_each_epoch(imbalanced: Path) -> None:
    m = read_manifest(str(imbalanced))
    assert m.split("train").class_counts == {"astronaut": 60, "coffee": 12, "rocket": 6}
    read = ReadOptions(balance="class")
    ds = load(str(imbalanced), batch_size=6, image_size=16, seed=3, augment=False, read=read)
    for _ in range(2):  # two epochs: each exactly balanced (78 records = 26 per class, 13 batches)
        counts = Counter(int(x) for _, y in ds for x in y)
        assert counts == {0: 26, 1: 26, 2: 26}
    assert steps_per_epoch(str(imbalanced), batch_size=6, read=read) == 13


def test_what_balance_refuses(imbalanced: Path) -> None:
    with pytest.raises(OptionError, match="balance='class' is a training sampler"):
        load(str(imbalanced), seed=0, training=False, read=ReadOptions(balance="class"))
    with pytest.raises(OptionError, match="a shuffle buffer cannot"):
        ReadOptions(balance="class", shuffle="buffer")
    with pytest.raises(OptionError, match="balance must be one of"):
        ReadOptions(balance="none")


def test_class_weights_and_remedies(imbalanced: Path) -> None:
    weights = balanced_class_weights(read_manifest(str(imbalanced)), "train")
    assert weights == pytest.approx({0: 78 / (3 * 60), 1: 78 / (3 * 12), 2: 78 / (3 * 6)})
    with pytest.raises(OptionError, match="pick one"):
        TrainOptions(balance="class", class_weight="balanced")


@pytest.mark.slow
@pytest.mark.parametrize("flag", [["--balance", "class"], ["--class-weight", "balanced"]])
def test_train_says_which_remedy_it_used(imbalanced: Path, tmp_path: Path, flag: list[str]) -> None:
    cmd = [sys.executable, "-m", "shardfeed", "train", str(imbalanced), "--out", str(tmp_path / "run")]
    cmd += ["--model", "small_cnn", "--epochs", "1", "--batch-size", "6", "--image-size", "32", *flag]
    cmd += ["--validation-split", "train"]  # the set has one split: recall measured on it
    done = zygote.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    word = "class-balanced sampling" if flag[0] == "--balance" else "class weights"
    said = done.stdout + done.stderr
    assert f"imbalance: {word}" in said
    assert "per-class recall (classes 10.0x imbalanced; lowest first): " in said  # 60 vs 6 images
    assert "precision: float32 (no GPU for Keras' tensorflow backend)" in said  # 'auto' on this machine


def test_repeat_factors_are_lvis_and_an_epoch_gives_each_image_its_share() -> None:
    """LVIS' factors worked out by hand; systematic sampling gives each image the floor or the
    ceiling of n * r_i / sum(r) places, in a new seeded order each epoch."""
    from shardfeed.read.order import repeat_factor_order, repeat_factors

    # 1,000 images: class 0 on all, class 1 on 1 image (f = 0.001), class 2 on 10 (f = 0.01)
    classes = [np.array([0])] * 989 + [np.array([0, 1])] + [np.array([0, 2])] * 10
    factors = repeat_factors(classes, threshold=0.01)
    assert factors[0] == 1.0 and factors[989] == pytest.approx(np.sqrt(0.01 / 0.001))  # sqrt(10)
    assert factors[990] == pytest.approx(1.0)  # f = t: sqrt(1)
    assert (repeat_factors([np.array([], np.int64), np.array([3])], threshold=1.0) == [1.0, np.sqrt(2)]).all()
    weights = np.array([1.0] * 6 + [3.5, 0.5])
    for epoch in range(5):
        order = repeat_factor_order(weights, seed=1, epoch=epoch)
        counts = np.bincount(order, minlength=8)
        share = len(weights) * weights / weights.sum()
        assert len(order) == 8 and (np.floor(share) <= counts).all() and (counts <= np.ceil(share)).all()
        assert (order == repeat_factor_order(weights, seed=1, epoch=epoch)).all()
    assert not (repeat_factor_order(weights, 1, 0) == repeat_factor_order(weights, 1, 1)).all()
