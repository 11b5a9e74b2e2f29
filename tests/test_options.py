"""The option objects: defaults in one place, validation on construction, parsed values stored once."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardfeed import ConvertOptions, DecodeOptions, ImageOptions, ReadOptions, convert, load, steps_per_epoch
from shardfeed.training.options import TrainOptions


def test_convert_options_store_parsed_values() -> None:
    options = ConvertOptions(split="train=80,validation=20", shards="train=4,validation=1", shard_size=None)
    assert options.split == {"train": 0.8, "validation": 0.2}
    assert options.shards == {"train": 4, "validation": 1}
    assert ConvertOptions(shard_size="128MB").shard_size == 128 * 10**6
    assert ConvertOptions(shards="8").shards == 8
    assert options.settings()["split"] == options.split and options.settings()["image"] == ImageOptions().__dict__


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "train=0.5"}, "must add up to 1"),
        ({"shards": "train=x"}, "must look like split=count"),
        ({"shard_size": "big"}, "is not a size like"),
        ({"image": {"resize": 10}}, "image must be an ImageOptions"),
    ],
)
def test_convert_options_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConvertOptions(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle_buffer": -1}, "shuffle_buffer must be a non-negative integer"),
        ({"num_workers": 2, "worker_index": 2}, r"worker_index must be in 0\.\.1 for 2 workers, got 2"),
        ({"compression": "zlib"}, r"compression must be one of \[None, 'gzip'\]"),
        ({"epoch": -1, "shuffle": "global"}, "epoch, start_step and start_record must be >= 0"),
    ],
)
def test_read_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReadOptions(**kwargs)


def test_read_config_resolves_its_defaults() -> None:
    assert ReadOptions().order == "buffer" and ReadOptions(even="drop").order == "global"
    assert ReadOptions(even="pad", shuffle="buffer").by_index and not ReadOptions().by_index
    assert ReadOptions().keeps_order(training=True, seed=None) is False
    assert ReadOptions().keeps_order(training=True, seed=1) and ReadOptions().keeps_order(training=False, seed=None)
    assert ReadOptions().drops_remainder(training=True) and not ReadOptions().drops_remainder(training=False)
    assert ReadOptions().buffer_size(100) == 100 and ReadOptions(shuffle_buffer=0).buffer_size(100) == 0


def test_decode_config_errors() -> None:
    with pytest.raises(ValueError, match=r"dct_method must be one of"):
        DecodeOptions(dct_method="FAST")
    with pytest.raises(ValueError, match=r"crowd_targets must be one of \[False, True\], got 'yes'"):
        DecodeOptions(crowd_targets="yes")  # type: ignore[arg-type]


def test_load_augment_takes_what_it_says_not_trains_spellings() -> None:
    """`augment="none"` (train's spelling) was truthy: load augmented, its boxes cut away."""
    from shardfeed.read.augment import Augment, resolve_augment

    with pytest.raises(ValueError, match=r"augment takes True, False, None or an Augment, got 'none'"):
        resolve_augment("none", training=True)  # type: ignore[arg-type]
    assert resolve_augment(False, training=True) is None and resolve_augment(None, training=True) == Augment()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"augment": "strong"}, r"augment must be one of \['auto', 'inception', 'light', 'flip', 'none'\]"),
        ({"epochs": 0}, r"epochs must be >= 1, got 0 \(--epochs\)"),
        ({"batch_size": 0}, r"batch_size must be >= 1, got 0 \(--batch-size\)"),
        ({"learning_rate": 0.0}, "learning_rate must be > 0"),
        ({"model": "vgg"}, "model must be one of"),
        ({"save_every": 5}, "save_every=5 needs shuffle='global'"),
        ({"channels": 2}, "channels must be 1 or 3"),
    ],
)
def test_train_options_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainOptions(**kwargs)


def test_train_options_share_load_defaults() -> None:
    assert TrainOptions().crop_fraction == DecodeOptions().crop_fraction


@pytest.mark.slow
def test_steps_per_epoch_counts_what_load_yields(photo_tree: Path, tmp_path: Path) -> None:
    """Same arguments, same count: evaluation keeps the last partial batch in both."""
    out = tmp_path / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    for split, read in (
        ("validation", None),
        ("train", None),
        ("train", ReadOptions(drop_remainder=False)),
        ("train", ReadOptions(num_workers=2, worker_index=1)),
        ("train", ReadOptions(num_workers=3, worker_index=2, even="pad")),
    ):
        ds = load(str(out), split=split, batch_size=5, image_size=16, seed=0, read=read)
        assert steps_per_epoch(str(out), split, 5, read=read) == sum(1 for _ in ds), (split, read)
