"""read/plan.py: `steps_per_epoch` and `load` resolve one plan, so they agree or fail alike, and a
read opens the manifest once."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardfeed import OptionError, ReadOptions, ShardfeedError, load, steps_per_epoch
from shardfeed.format import manifest
from shardfeed.read.order import WorkerShare
from shardfeed.read.plan import resolve

SETTINGS: list[tuple[str, bool | None, ReadOptions]] = [
    ("train", None, ReadOptions()),
    ("validation", None, ReadOptions()),
    ("train", False, ReadOptions()),
    ("train", None, ReadOptions(drop_remainder=False)),
    ("train", None, ReadOptions(shuffle="global")),
    ("train", None, ReadOptions(shuffle_buffer=0)),
    ("train", None, ReadOptions(num_workers=2, worker_index=1)),
    ("train", None, ReadOptions(num_workers=4, worker_index=3)),
    ("train", None, ReadOptions(num_workers=5, worker_index=0)),  # more workers than shards
    ("train", None, ReadOptions(num_workers=5, worker_index=4, even="pad")),
    ("train", None, ReadOptions(num_workers=3, worker_index=2, even="drop", shuffle="buffer")),
    ("validation", None, ReadOptions(num_workers=3, worker_index=1, even="pad")),
    ("train", None, ReadOptions(shuffle="global", epoch=1)),
    ("train", None, ReadOptions(skip_corrupt=True)),
    ("train", None, ReadOptions(with_filenames=True, cache=True)),
    ("train", None, ReadOptions(filter_fn=lambda features: True)),
]


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except ShardfeedError as e:
        return type(e).__name__, str(e)


def _batches(path: Any, split: str, training: bool | None, read: ReadOptions) -> int:
    return sum(1 for _ in load(path, split=split, batch_size=5, image_size=8, training=training, seed=0, read=read))


def _paths(photo_shards: Path) -> dict[str, Any]:
    """The same shards as a converted folder, as its manifest, and as foreign files (a list)."""
    return {
        "folder": str(photo_shards),
        "manifest": manifest.read(str(photo_shards)),
        "files": sorted(str(p) for p in photo_shards.glob("train-*")),
    }


@pytest.mark.slow
@pytest.mark.parametrize("number", range(len(SETTINGS)))
def test_steps_per_epoch_is_what_load_yields_or_both_refuse(photo_shards: Path, number: int) -> None:
    split, training, read = SETTINGS[number]
    for kind, path in _paths(photo_shards).items():
        if kind == "files" and split != "train":
            continue
        counted = _outcome(lambda: steps_per_epoch(path, split, 5, training=training, read=read))  # noqa: B023
        yielded = _outcome(lambda: _batches(path, split, training, read))  # noqa: B023
        if read.filter_fn is not None:  # only reading can count what a filter keeps
            assert counted[0] == "OptionError" and "filter_fn" in counted[1] and yielded[0] == "ok"
        else:
            assert counted == yielded, (kind, split, training, read)


def test_rules_fire_before_anything_is_counted(photo_shards: Path, tmp_path: Path) -> None:
    """Global order on foreign files is refused before their records are counted (no sidecar
    written); whole shards for more workers than there are shards likewise."""
    files = [shutil.copy(p, tmp_path) for p in _paths(photo_shards)["files"]]
    with pytest.raises(OptionError, match="index files of a converted folder"):
        steps_per_epoch(files, read=ReadOptions(shuffle="global"))
    assert not (tmp_path / ".shardfeed-counts.json").exists()
    with pytest.raises(OptionError, match="4 shards cannot be split across 5 workers"):
        steps_per_epoch(str(photo_shards), read=ReadOptions(num_workers=5))


def test_worker_identity_is_given_one_way(photo_shards: Path) -> None:
    import tensorflow as tf

    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    plan = resolve(str(photo_shards), batch_size=8, input_context=context)
    assert plan.share == WorkerShare(2, 1) and plan.batch_size == 4
    assert steps_per_epoch(str(photo_shards), batch_size=8, input_context=context) == sum(
        1 for _ in load(str(photo_shards), batch_size=8, image_size=8, input_context=context)
    )
    with pytest.raises(OptionError, match="worker identity given twice"):
        load(str(photo_shards), input_context=context, read=ReadOptions(num_workers=2, worker_index=0))


def test_a_resume_point_past_the_epoch_is_refused_by_both(photo_shards: Path) -> None:
    read = ReadOptions(shuffle="global", start_step=100)
    with pytest.raises(OptionError, match="start_step skips 500 records but this worker has 33 per epoch"):
        load(str(photo_shards), batch_size=5, seed=0, read=read)
    with pytest.raises(OptionError, match="start_step skips 500 records"):
        steps_per_epoch(str(photo_shards), batch_size=5, read=read)


@pytest.fixture
def manifest_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every manifest.read call from here on (the real function still runs)."""
    calls: list[str] = []
    real = manifest.read

    def counted(path: str) -> manifest.Manifest:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(manifest, "read", counted)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("read", [ReadOptions(), ReadOptions(shuffle="global"), ReadOptions(even="pad", num_workers=3)])
def test_load_reads_the_manifest_once(photo_shards: Path, manifest_reads: list[str], read: ReadOptions) -> None:
    ds = load(str(photo_shards), batch_size=4, image_size=8, seed=0, read=read)
    next(iter(ds))
    assert len(manifest_reads) == 1
    assert steps_per_epoch(str(photo_shards), "train", 4, read=read) > 0 and len(manifest_reads) == 2


@pytest.mark.slow
def test_both_pipelines_augment_reproducibly_from_the_seed(photo_shards: Path) -> None:
    """The same seed gives the same augmented batches, another seed other ones, for the shard
    pipeline and the index pipeline alike."""
    import numpy as np

    for read in (ReadOptions(), ReadOptions(shuffle="global")):

        def first(seed: int, read: ReadOptions = read) -> np.ndarray:
            return next(iter(load(str(photo_shards), batch_size=8, image_size=16, seed=seed, read=read)))[0].numpy()

        assert np.array_equal(first(3), first(3)) and not np.array_equal(first(3), first(4))


@pytest.mark.slow
def test_even_splits_with_a_buffer_shuffle_differ_per_epoch_under_a_global_seed(photo_shards: Path) -> None:
    """Even splits with shuffle='buffer' read file order shuffled within windows, a pure function
    of (seed, epoch): built inside the per-epoch dataset, with TensorFlow's global seed set (as
    Keras' set_random_seed does; a tf.data shuffle there failed on its seed), each epoch differs."""
    import tensorflow as tf

    from shardfeed.read.order import window_order

    tf.random.set_seed(1)
    read = ReadOptions(num_workers=2, worker_index=0, even="drop", shuffle="buffer", with_filenames=True)
    ds = load(str(photo_shards), batch_size=4, image_size=8, seed=0, repeat=True, read=read)
    steps = steps_per_epoch(str(photo_shards), batch_size=4, read=read)
    names = [[f.decode() for f in files.numpy()] for _, _, files in ds.take(2 * steps)]
    first, second = [n for b in names[:steps] for n in b], [n for b in names[steps:] for n in b]
    assert len(set(first)) == len(first) and first != second
    order = window_order(100, 10, seed=3, epoch=0)
    assert sorted(order) == list(range(100)) and all(
        set(order[i : i + 10]) == set(range(i, i + 10)) for i in range(0, 100, 10)
    )
    assert not np.array_equal(order, window_order(100, 10, seed=3, epoch=1))
    assert np.array_equal(window_order(5, 0, seed=3, epoch=0), np.arange(5))


def test_a_worker_share_smaller_than_a_batch_is_refused_not_silent(photo_shards: Path) -> None:
    """120-record split across 8 workers at batch 64 yielded 0 batches and steps_per_epoch 0."""
    from shardfeed import ReadOptions, load, steps_per_epoch
    from shardfeed.errors import OptionError

    read = ReadOptions(num_workers=8, worker_index=3, even="drop")
    refused = r"worker 3 of 8 \(even='drop'\) gets 4 of its 33 records, fewer than one batch of 16"
    with pytest.raises(OptionError, match=refused):
        load(str(photo_shards), batch_size=16, seed=0, read=read)
    with pytest.raises(OptionError, match=refused):
        steps_per_epoch(str(photo_shards), batch_size=16, read=read)
    assert steps_per_epoch(str(photo_shards), batch_size=4, read=read) == 1
