"""Random access without TensorFlow, the shared global shuffle, and even per-worker splits."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardfeed import ConvertOptions, IndexedRecords, ReadOptions, convert, load, read_manifest, steps_per_epoch
from shardfeed.format import tfrecord
from shardfeed.read.order import global_order, worker_positions


def _records_and_names(folder: Path) -> tuple[IndexedRecords, list[str]]:
    records = IndexedRecords(str(folder), "train")
    return records, [records.example(i)["image/filename"].decode() for i in range(len(records))]


def _filenames(ds: Any) -> list[str]:
    """The image/filename of every record of a load(..., with_filenames=True) dataset, in order."""
    return [f.decode() for batch in ds for f in batch[2].numpy()]


@pytest.fixture(scope="module")
def by_class(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Class-sorted shards (one shard set per class): the worst case for buffer shuffling."""
    out = tmp_path_factory.mktemp("byclass") / "out"
    convert(
        str(photo_tree), str(out), ConvertOptions(split="train=1", by_class=True, shards=1), workers=1, progress=False
    )
    return out


def test_random_access_matches_the_shards(by_class: Path, photo_tree: Path) -> None:
    records = IndexedRecords(str(by_class), "train")
    m = read_manifest(str(by_class))
    assert len(records) == 44
    for i in (43, 0, 17, -1):
        example = records.example(i)
        original = (photo_tree / example["image/filename"].decode()).read_bytes()
        assert example["image/encoded"] == original
        image, label = records[i]
        assert image.shape == (example["image/height"], example["image/width"], 3) and image.dtype == np.uint8
        assert (m.labels or [])[label] == example["image/class/text"].decode()
    assert Counter((m.labels or [])[records.label(i)] for i in range(44)) == Counter(m.split("train").class_counts)
    for i in range(44):  # the image and class id alone (two features parsed): the whole parse's
        example = records.example(i)
        assert records.encoded(i) == (example["image/encoded"], records.label(i))
        assert records.example(i, ("image/encoded", "no/such/key")) == {"image/encoded": example["image/encoded"]}
    with pytest.raises(IndexError, match="record 44 out of range for 44 records"):
        records.record(44)


def test_crc_damage_is_reported_with_file_and_record(by_class: Path, tmp_path: Path) -> None:
    import shutil

    out = shutil.copytree(by_class, tmp_path / "d")
    shard = out / "train-chelsea-00000-of-00001"
    offsets = tfrecord.parse_index((out / "index" / (shard.name + ".idx")).read_text())
    data = bytearray(shard.read_bytes())
    data[offsets[2][0] + 40] ^= 0xFF
    shard.write_bytes(bytes(data))
    records = IndexedRecords(str(out), "train")
    damaged = 11 + 2  # astronaut's 11 records come first
    with pytest.raises(
        tfrecord.CorruptRecordError,
        match=r"train-chelsea-00000-of-00001 record 2 \(record 13 of split train\), byte \d+: data checksum",
    ):
        records.record(damaged)
    assert records.example(damaged + 1)  # the rest stays readable
    import tensorflow as tf

    with pytest.raises(
        tf.errors.OpError,
        match=r"train-chelsea-00000-of-00001 record 2 \(record 13 of split train\), byte \d+: data checksum",
    ):
        list(load(str(out), seed=0, batch_size=4, image_size=16, read=ReadOptions(shuffle="global")))


@pytest.mark.slow
def test_reader_is_a_grain_data_source_in_worker_processes(by_class: Path, tmp_path: Path) -> None:
    """JAX users' loader, for real: Grain's MapDataset and its multi-process DataLoader."""
    code = f"""
import sys
import grain
import numpy as np
from shardfeed.read.indexed import IndexedRecords

class Crop(grain.transforms.Map):
    def map(self, item):
        return item[0][:16, :16], item[1]

if __name__ == "__main__":
    from absl import flags

    # With JAX installed, Grain's DataLoader reads an absl flag (its worker profiling), which a
    # script that never parsed absl's flags must mark as parsed first (grain 0.2.18).
    flags.FLAGS.mark_as_parsed()
    records = IndexedRecords({str(by_class)!r}, "train")
    batch = grain.MapDataset.source(records).shuffle(seed=3).map(Crop().map).batch(8)[0]
    sampler = grain.samplers.IndexSampler(
        num_records=len(records), shard_options=grain.sharding.NoSharding(), shuffle=True, num_epochs=1, seed=0
    )
    loader = grain.DataLoader(
        data_source=records, sampler=sampler, operations=[Crop(), grain.transforms.Batch(4)], worker_count=2
    )
    labels = np.concatenate([labels for _, labels in loader])
    print(batch[0].shape, np.bincount(labels).tolist(), "tensorflow" in sys.modules)
"""
    script = tmp_path / "grain_check.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    m = read_manifest(str(by_class))
    per_class = [m.split("train").class_counts[name] for name in m.labels or []]  # every record exactly once
    assert done.stdout.splitlines()[-1] == f"(8, 16, 16, 3) {per_class} False"


def test_no_shard_file_stays_open_and_remote_handles_are_bounded(by_class: Path, photo_tree: Path) -> None:
    """A random order touches every shard: 1,024 kept handles would pass the usual open-files limit."""
    import os

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    local = IndexedRecords(str(by_class), "train")
    order = local.order(seed=1)
    blobs = [local.record(int(i)) for i in order]
    assert open_fds() == before

    convert(
        str(photo_tree),
        "ram://shardfeed-indexed/out",
        ConvertOptions(split="train=1", by_class=True, shards=1),
        workers=1,
        progress=False,
    )
    remote = IndexedRecords("ram://shardfeed-indexed/out", "train", max_open_files=2)
    assert [remote.record(int(i)) for i in order] == blobs
    assert len(remote._handles) == 2
    remote.close()
    assert not remote._handles


def test_reader_imports_no_tensorflow_and_pickles_for_worker_processes(by_class: Path) -> None:
    code = (
        "import sys, pickle\n"
        "from shardfeed.read.indexed import IndexedRecords\n"
        f"r = IndexedRecords({str(by_class)!r}, 'train')\n"
        "image, label = r[5]\n"
        "r2 = pickle.loads(pickle.dumps(r))\n"
        "assert (r2[5][0] == image).all()\n"
        "print('tensorflow' in sys.modules, len(r), image.shape[2])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "44", "3"]
    records = IndexedRecords(str(by_class), "train")
    records[0]
    assert pickle.loads(pickle.dumps(records))[1][1] == records[1][1]


def test_sampler_walks_the_global_order_epoch_by_epoch(by_class: Path) -> None:
    records = IndexedRecords(str(by_class), "train")
    sampler = records.sampler(seed=4, num_workers=3, worker_index=1)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert len(sampler) == 14 and first == records.order(4, 0, num_workers=3, worker_index=1).tolist()
    assert second == records.order(4, 1, num_workers=3, worker_index=1).tolist() and second != first
    assert all(isinstance(i, int) for i in first)  # plain ints, as DataLoader passes to __getitem__


def test_global_order_is_pinned_and_reshuffles_each_epoch() -> None:
    first = global_order(10, seed=0, epoch=0)
    assert first.tolist() == [0, 9, 1, 6, 3, 5, 4, 2, 8, 7]
    assert sorted(global_order(1000, 3, 1).tolist()) == list(range(1000))
    assert not np.array_equal(global_order(1000, 3, 1), global_order(1000, 3, 2))
    assert np.array_equal(global_order(1000, 3, 1), global_order(1000, 3, 1))


def test_tf_pipeline_and_python_reader_share_the_global_order(by_class: Path) -> None:
    records = IndexedRecords(str(by_class), "train")
    expected = [records.example(int(i))["image/filename"].decode() for i in records.order(seed=5, epoch=1)]
    ds = load(
        str(by_class),
        seed=5,
        batch_size=4,
        image_size=16,
        read=ReadOptions(shuffle="global", epoch=1, with_filenames=True),
    )
    seen = _filenames(ds)
    assert seen == expected and int(ds.cardinality()) == 11
    resumed = load(
        str(by_class),
        seed=5,
        batch_size=4,
        image_size=16,
        read=ReadOptions(shuffle="global", epoch=1, start_step=3, with_filenames=True),
    )
    assert _filenames(resumed) == expected[12:]


def test_repeated_global_order_runs_on_into_the_next_epoch(by_class: Path) -> None:
    records, names = _records_and_names(by_class)
    expected = [names[i] for i in records.order(seed=5, epoch=1)[36:]] + [
        names[i] for i in records.order(seed=5, epoch=2)
    ]
    ds = load(
        str(by_class),
        seed=5,
        repeat=True,
        batch_size=4,
        image_size=16,
        read=ReadOptions(shuffle="global", epoch=1, start_step=9, with_filenames=True),
    )
    seen = _filenames(ds.take(13))
    assert seen == expected


def test_each_iteration_reads_the_next_epoch(by_class: Path) -> None:
    """model.fit(ds, epochs=N) iterates ds anew each epoch: each pass must be a new order."""
    records, names = _records_and_names(by_class)
    ds = load(
        str(by_class),
        seed=5,
        batch_size=4,
        image_size=16,
        read=ReadOptions(shuffle="global", epoch=1, start_step=3, with_filenames=True),
    )
    passes = [_filenames(ds) for _ in range(3)]
    assert passes[0] == [names[i] for i in records.order(seed=5, epoch=1)[12:]]
    assert passes[1] == [names[i] for i in records.order(seed=5, epoch=2)]
    assert passes[2] == [names[i] for i in records.order(seed=5, epoch=3)]


@pytest.mark.slow
def test_global_shuffle_mixes_class_sorted_shards(by_class: Path) -> None:
    def classes_per_batch(read: ReadOptions) -> float:
        ds = load(str(by_class), batch_size=8, image_size=16, seed=1, read=read)
        return float(np.mean([len(set(y.numpy().tolist())) for _, y in ds]))

    local = classes_per_batch(ReadOptions(shuffle_buffer=4))
    globally = classes_per_batch(ReadOptions(shuffle="global"))
    assert globally > local + 0.8  # 4 classes: local shuffling of per-class shards keeps batches narrow


@pytest.mark.slow
def test_even_splits_give_every_worker_the_same_count(by_class: Path) -> None:
    records, names = _records_and_names(by_class)
    counts, seen = [], []
    for w in range(3):  # 4 class shards, 44 records, 3 workers: 14 each, 2 dropped
        common: dict[str, Any] = {"seed": 2, "batch_size": 7, "image_size": 16}
        read = ReadOptions(num_workers=3, worker_index=w, even="drop", with_filenames=True)
        files = _filenames(load(str(by_class), read=read, **common))  # training, even splits: global order
        counts.append(len(files))
        seen += files
        assert files == [names[i] for i in records.order(seed=2, epoch=0, num_workers=3, worker_index=w)]
        buffered = load(str(by_class), read=dataclasses.replace(read, shuffle="buffer"), **common)
        in_buffer = _filenames(buffered)
        in_file_order = [names[i] for i in worker_positions(44, 3, w)[:14]]
        assert sorted(in_buffer) == sorted(in_file_order) and in_buffer != in_file_order
        assert (
            steps_per_epoch(str(by_class), "train", 7, read=ReadOptions(num_workers=3, worker_index=w, even="drop"))
            == 2
        )
    assert counts == [14, 14, 14] and len(set(seen)) == 42
    many = [len(worker_positions(44, 6, w, "pad")) for w in range(6)]  # more workers than shards
    assert many == [8] * 6 and set(np.concatenate([worker_positions(44, 6, w, "pad") for w in range(6)])) == set(
        range(44)
    )
    ds = load(
        str(by_class),
        training=False,
        batch_size=4,
        image_size=16,
        read=ReadOptions(num_workers=6, worker_index=5, even="pad"),
    )
    assert sum(int(b[0].shape[0]) for b in ds) == 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle": "perfect"}, r"shuffle must be one of \['buffer', 'global'\]"),
        ({"start_step": 2, "seed": 1}, "epoch, start_step and start_record need shuffle='global'"),
        ({"shuffle": "global", "epoch": 1}, "epoch, start_step and start_record need a seed"),
        ({"even": "even"}, "even must be None, 'drop' or 'pad'"),
        ({"shuffle": "global", "cache": True}, "cache= does not apply with shuffle='global'"),
        ({"even": "drop", "skip_corrupt": True}, "skip_corrupt= does not apply with shuffle='global' or even"),
        ({"shuffle": "global", "shuffle_buffer": 100}, "shuffle_buffer= does not apply"),
    ],
)
def test_option_errors(by_class: Path, kwargs: dict, message: str) -> None:
    seed = kwargs.pop("seed", None)
    with pytest.raises(ValueError, match=message):
        load(str(by_class), seed=seed, read=ReadOptions(**kwargs))


def test_gzip_shards_cannot_be_read_at_random(photo_tree: Path, tmp_path: Path) -> None:
    convert(
        str(photo_tree),
        str(tmp_path / "gz"),
        ConvertOptions(compression="gzip", split="train=1"),
        workers=1,
        progress=False,
    )
    with pytest.raises(ValueError, match="gzip-compressed shards, which cannot be read at random positions"):
        IndexedRecords(str(tmp_path / "gz"), "train")
    with pytest.raises(ValueError, match="gzip-compressed shards"):
        load(str(tmp_path / "gz"), batch_size=8, seed=0, read=ReadOptions(shuffle="global"))
