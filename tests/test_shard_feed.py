"""load() from a bucket (the loopback S3 server) through the shard cache, against the same shards on disk."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest
import zygote
from conftest import in_private_mounts
from test_coco import coco  # noqa: F401  (a fixture)

from bench.store_servers import peak_usage
from shardfeed import ConvertOptions, ImageOptions, IndexedRecords, ReadOptions, convert, load, steps_per_epoch
from shardfeed.errors import OptionError
from shardfeed.format import storage
from shardfeed.read.remote.cache import ShardCache

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


@pytest.fixture(scope="module")
def many_shards(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 44 photos in 12 train + 12 validation shards (most of one to four records)."""
    out = tmp_path_factory.mktemp("many") / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=12), workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def even_shards(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 44 photos as JPEG in 22 shards of two records: shards of about one size."""
    out = tmp_path_factory.mktemp("even") / "out"
    options = ConvertOptions(split="train=1", shards=22, image=ImageOptions(image_format="jpeg"))
    convert(str(photo_tree), str(out), options, workers=1, progress=False)
    return out


def _upload(local: Path, url: str) -> str:
    fs, path = storage.filesystem(url)
    fs.put(str(local), path, recursive=True)
    return url


def _names(ds) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [name for batch in ds for name in batch[2].numpy()]


def _read(path: str, cache: Path, **kw) -> list[bytes]:  # type: ignore[no-untyped-def]
    read = ReadOptions(with_filenames=True, cache_dir=str(cache), **kw.pop("read", {}))
    return _names(load(path, batch_size=4, image_size=16, read=read, **kw))


def test_evaluation_reads_what_local_reads_and_the_next_epoch_from_the_cache(
    any_bucket: str, many_shards: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = _upload(many_shards, f"{any_bucket}/out")
    caplog.set_level(logging.DEBUG, logger="shardfeed")
    local = _read(str(many_shards), tmp_path / "unused", split="validation")
    assert _read(url, tmp_path / "cache", split="validation") == local
    assert _read(url, tmp_path / "cache", split="validation") == local
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shard cache")]
    shards = len(list(many_shards.glob("validation-*")))
    # each line names the split it is about: a run reads several, each feed counting its own epochs
    assert lines[0].startswith(f"shard cache: validation, epoch 0: {shards} shards, 0 from the cache, {shards} fetched")
    assert f"{shards} shards, {shards} from the cache, 0 fetched" in lines[1]
    assert steps_per_epoch(url, split="train", batch_size=4) == steps_per_epoch(str(many_shards), batch_size=4)


def test_training_epochs_read_every_record_once_in_a_new_seeded_order(
    bucket: str, many_shards: Path, tmp_path: Path
) -> None:
    url = _upload(many_shards, f"{bucket}/out")
    ds = load(url, batch_size=5, image_size=16, seed=3, read=ReadOptions(with_filenames=True, cache_dir=str(tmp_path)))
    first, second = _names(ds), _names(ds)
    local = _read(str(many_shards), tmp_path / "unused", training=False)
    assert sorted(first) != first and first != second
    assert len(first) == len(second) == 35 // 5 * 5
    assert set(first) <= set(local) and len(set(first)) == len(first)
    again = load(
        url, batch_size=5, image_size=16, seed=3, read=ReadOptions(with_filenames=True, cache_dir=str(tmp_path))
    )
    assert _names(again) == first  # same seed, same order


def test_global_order_and_indexed_records_match_local(bucket: str, many_shards: Path, tmp_path: Path) -> None:
    url = _upload(many_shards, f"{bucket}/out")
    read = {"shuffle": "global"}
    assert _read(url, tmp_path / "c", seed=5, read=read) == _read(str(many_shards), tmp_path / "u", seed=5, read=read)
    remote = IndexedRecords(url, "train", cache=ShardCache(str(tmp_path / "c2")))
    local = IndexedRecords(str(many_shards), "train")
    assert len(remote) == len(local) == 35
    assert [remote.record(i) for i in remote.order(7)] == [local.record(i) for i in local.order(7)]


def test_a_cache_a_third_of_the_split_stays_bounded_and_reads_everything(
    bucket: str, even_shards: Path, tmp_path: Path
) -> None:
    url = _upload(even_shards, f"{bucket}/out")
    split_bytes = sum(p.stat().st_size for p in even_shards.glob("train-*"))
    largest = max(p.stat().st_size for p in even_shards.glob("train-*"))
    limit = max(split_bytes // 3, 4 * largest)
    assert limit * 2.5 < split_bytes
    cache = tmp_path / "cache"
    with peak_usage(cache) as peak:
        ds = load(
            url,
            batch_size=5,
            image_size=16,
            seed=1,
            training=True,
            read=ReadOptions(with_filenames=True, cache_dir=str(cache), cache_limit=limit, drop_remainder=False),
        )
        epochs = [_names(ds) for _ in range(3)]
    expected = sorted(_read(str(even_shards), tmp_path / "unused", training=False))
    assert all(sorted(e) == expected for e in epochs)
    in_flight = 4 * largest  # FETCH_THREADS fetches at most
    assert 0 < peak[0] <= limit + in_flight
    assert sum(p.stat().st_size for p in cache.iterdir()) <= limit


def test_too_small_a_cache_is_refused(bucket: str, many_shards: Path, tmp_path: Path) -> None:
    url = _upload(many_shards, f"{bucket}/out")
    with pytest.raises(OptionError, match=r"cache_limit 100 bytes holds 0 of the largest shard"):
        load(url, batch_size=4, read=ReadOptions(cache_dir=str(tmp_path), cache_limit=100))


def test_a_shard_changed_in_the_bucket_is_named_and_never_read(bucket: str, many_shards: Path, tmp_path: Path) -> None:
    url = _upload(many_shards, f"{bucket}/out")
    fs = fsspec.filesystem("s3")
    name = sorted(p.name for p in many_shards.glob("validation-*"))[3]
    data = bytearray(fs.cat_file(f"{url}/{name}"))
    data[-20] ^= 0xFF  # same size, other bytes
    fs.pipe_file(f"{url}/{name}", bytes(data))
    with pytest.raises(Exception, match=rf"{name} is not the one the manifest describes.*SHA-256"):
        _read(url, tmp_path / "cache", split="validation")
    changed = __import__("hashlib").sha256(bytes(data)).hexdigest()
    assert not (tmp_path / "cache" / f"{changed}.tfrecord").exists()
    assert not list((tmp_path / "cache").glob("*.part"))


def test_foreign_tfrecords_in_a_bucket_ask_for_a_manifest(bucket: str, many_shards: Path) -> None:
    fs = fsspec.filesystem("s3")
    fs.put(str(many_shards / "train-00000-of-00012"), f"{bucket}/foreign/train-00000-of-00001")
    with pytest.raises(OptionError, match="shardfeed adopt"):
        load(f"{bucket}/foreign/train-*", batch_size=4)


STORE_DIES = """
import os, sys, time
from shardfeed import load, ReadOptions
from shardfeed.read.remote import cache as shard_cache
shard_cache.BACKOFF = 0.1
read = ReadOptions(cache_dir=sys.argv[2], cache_limit=int(sys.argv[4]))
ds = load(sys.argv[1], batch_size=1, image_size=16, training=False, read=read)
for i, _ in enumerate(ds):  # uncaught: the error ends the script, with the failed iterator still alive
    if i == 0:
        print("first batch", flush=True)
        while not os.path.exists(sys.argv[3]):  # until the store is dead
            time.sleep(0.05)
"""
READERS = 10  # fresh processes: an exit that hangs one run in four cannot pass


def test_the_store_dying_mid_epoch_ends_in_an_error_naming_the_shard_and_every_reader_exits(
    even_shards: Path, tmp_path: Path
) -> None:
    """Ten readers of a private S3 server, which is killed once each has its first batch (each
    cache holds 4 of the 22 shards, so most are still to fetch): bounded retries, then an error
    naming the shard, and every process exits. tf.data goes on calling the feed while it tears
    the failed iterator down; each call used to start fetches of its own against the dead store,
    and exits took minutes or never came (3 runs in 6)."""
    from bench.store_servers import s3_environment, start_s3, stop

    endpoint, server = start_s3(tmp_path)
    env = {**os.environ, **s3_environment(endpoint), "TF_CPP_MIN_LOG_LEVEL": "3"}
    dead = tmp_path / "store-is-dead"
    readers: list[zygote.Forked] = []
    try:
        fs = fsspec.filesystem("s3", key="testing", secret="testing", endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("dies")
        fs.put(str(even_shards), "s3://dies/out", recursive=True)
        limit = 4 * max(p.stat().st_size for p in even_shards.glob("train-*"))
        for n in range(READERS):
            script = [sys.executable, "-c", STORE_DIES, "s3://dies/out", str(tmp_path / f"cache{n}"), str(dead)]
            readers.append(
                zygote.popen([*script, str(limit)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        for reader in readers:
            assert reader.stdout is not None
            assert reader.stdout.readline().strip() == "first batch"
    finally:
        stop(server)
        dead.touch()
    deadline = time.monotonic() + 240
    hung = []
    for n, reader in enumerate(readers):
        try:
            _, err = reader.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.communicate()
            hung.append(n)
            continue
        assert reader.returncode == 1
        assert "the store is unreachable" in err and "s3://dies/out/train-" in err and "3 attempts" in err
        last = err.strip().splitlines()[-1]  # the Python API raises shardfeed's error, not TensorFlow's UnknownError
        assert last.startswith("shardfeed.errors.StorageError: "), last
    assert hung == [], f"readers {hung} did not exit within 240 s of the store's death"
    assert [p.name for p in tmp_path.glob("cache*/*.pin")] == []  # each took its pins back on the way out


CACHE_DISK_FULL = """
import subprocess, sys
mount_point, url = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + sys.argv[3], "tmpfs", mount_point], check=True)
done = subprocess.run([sys.executable, "-m", "shardfeed", "show", url, "--cache-dir", mount_point, "--out",
                       mount_point + "/../grid.png"], capture_output=True, text=True)
print(done.returncode)
print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "")
"""


def test_a_full_cache_disk_ends_in_one_line(bucket: str, even_shards: Path, tmp_path: Path) -> None:
    url = _upload(even_shards, f"{bucket}/out")
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    size = 2 * max(p.stat().st_size for p in even_shards.glob("train-*"))
    done = in_private_mounts(CACHE_DISK_FULL, str(mount_point), url, str(size))
    code, last = done.stdout.strip().splitlines()[-2:]
    assert code == "1", done.stdout + done.stderr
    assert last.startswith(f"error: the shard cache's disk is full: {mount_point} while fetching {url}/train-"), last
    assert "free space there, or lower the cache limit" in last


def test_indexed_records_read_a_bucket_without_tensorflow(bucket: str, many_shards: Path, tmp_path: Path) -> None:
    url = _upload(many_shards, f"{bucket}/out")
    script = (
        "import sys\n"
        "from shardfeed import IndexedRecords\n"
        "from shardfeed.read.remote.cache import ShardCache\n"
        "r = IndexedRecords(sys.argv[1], 'validation', cache=ShardCache(sys.argv[2]))\n"
        "print(len(r), r.image(0).shape, r.label(len(r) - 1), 'tensorflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, url, str(tmp_path / "cache")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    local = IndexedRecords(str(many_shards), "validation")
    count, *_, tensorflow_imported = done.stdout.split()
    assert int(count) == len(local) and tensorflow_imported == "False"


BOUNDED_EPOCHS = """
import sys
from shardfeed import ReadOptions, load
read = ReadOptions(cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]), drop_remainder=False)
ds = load(sys.argv[1], batch_size=32, image_size=32, seed=0, read=read, augment=False)
print([sum(int(b[0].shape[0]) for b in ds) for _ in range(3)])
"""


def test_long_shards_through_a_tight_cache_never_stall(bucket: str, tmp_path: Path) -> None:
    """32 shards of ~25 photos, a cache a third of the split (4 shards read at once): a shard the
    interleave had been handed but not yet opened was once evicted, and TensorFlow's reader
    retried the missing file forever at 100% CPU. Now a shard stays pinned until read to its end."""
    from bench.corpus import build_corpus

    source = build_corpus(str(tmp_path / "src"), 3200, classes=4)
    local = tmp_path / "local"
    convert(source, str(local), ConvertOptions(split="train=1", shards=32), workers=2, progress=False)
    url = _upload(local, f"{bucket}/out")
    sizes = [p.stat().st_size for p in local.glob("train-*")]
    limit = sum(sizes) // 3
    assert limit // max(sizes) >= 8  # reading_cycle: 3 shards at once, 6 pinned by the old rule
    done = zygote.run(
        [sys.executable, "-c", BOUNDED_EPOCHS, url, str(tmp_path / "cache"), str(limit)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[3200, 3200, 3200]"


def test_a_handed_shard_stays_until_read_to_its_end(tmp_path: Path) -> None:
    """With room for 4 shards, the feed hands out 3 that the reader has not finished: none of them
    is evicted to fetch ahead, whatever the order says; once finished, they may go."""
    import hashlib

    from shardfeed.read.remote.feed import ShardFeed
    from shardfeed.read.shardset import ShardSet

    files, sizes, hashes = [], [], []
    for i in range(8):
        data = bytes([i]) * 1000
        (tmp_path / f"obj-{i}").write_bytes(data)
        files.append(str(tmp_path / f"obj-{i}"))
        sizes.append(1000)
        hashes.append(hashlib.sha256(data).hexdigest())
    shards = ShardSet(files, [1] * 8, None, None, sizes, sha256s=hashes)
    cache = ShardCache(str(tmp_path / "cache"), limit=4000)
    feed = ShardFeed(cache, shards, shuffle=True, seed=0, first_epoch=0)
    epoch = feed.epoch()
    handed = [next(epoch)[0] for _ in range(3)]
    time.sleep(0.5)  # fetches ahead run meanwhile
    assert all(Path(p).exists() for p in handed)
    assert cache.usage() <= 4000 + 4 * 1000
    for p in handed:
        feed.finished(p.encode())
    rest = []
    for path, _ in epoch:
        rest.append(path)
        feed.finished(path.encode())
    assert len(rest) == 5 and len(set(handed + rest)) == 8
    assert not list((tmp_path / "cache").glob("*.pin"))


def test_a_cache_limit_too_small_for_any_split_a_run_reads_is_refused_before_training(
    bucket: str, photo_tree: Path, tmp_path: Path
) -> None:
    """The training shards are larger than the validation ones: a limit too small for either is
    refused naming a training shard (the largest this run reads), before the model is built; it
    named the validation shard, whose suggested limit then failed again."""
    from shardfeed.read import options as read_options
    from shardfeed.training import TrainOptions, train

    local = tmp_path / "data"
    convert(str(photo_tree), str(local), ConvertOptions(split="train=0.75,validation=0.25", shards=1), progress=False)
    m = json.loads((local / "manifest.json").read_text())
    train_size = max(s["num_bytes"] for s in m["splits"]["train"]["shards"])
    val_size = max(s["num_bytes"] for s in m["splits"]["validation"]["shards"])
    assert train_size > 2 * val_size
    url = _upload(local, f"{bucket}/data")
    limit = 4 * val_size - 1
    os.environ[read_options.CACHE_LIMIT_VARIABLE] = str(limit)
    try:
        with pytest.raises(OptionError, match=rf"of split 'train', {train_size:,} bytes\); it must hold at least 4"):
            train(url, str(tmp_path / "run"), TrainOptions(epochs=1, batch_size=8, image_size=32), verbose=0)
    finally:
        del os.environ[read_options.CACHE_LIMIT_VARIABLE]
    assert not (tmp_path / "run" / "model.keras").exists()


def test_a_detection_folder_in_a_bucket_reads_as_on_disk(bucket: str, coco: Path, tmp_path: Path) -> None:  # noqa: F811
    """Boxes through the shard cache: `load`'s training batches in the global order (crops, flips,
    padded boxes) and `IndexedRecords`' targets from the bucket are those read from disk."""
    from test_coco import boxes_frame_objects

    from shardfeed.write.sources import CocoSource

    local = tmp_path / "local"
    source = CocoSource(str(coco), str(coco.parent / "images"))
    convert(source, str(local), ConvertOptions(split="train=1", shards=2), progress=False)
    url = _upload(local, f"{bucket}/squares")
    read = ReadOptions(shuffle="global", cache_dir=str(tmp_path / "cache"))
    for seed in range(3):
        remote = list(load(url, batch_size=3, image_size=64, seed=seed, read=read))
        on_disk = list(load(str(local), batch_size=3, image_size=64, seed=seed, read=ReadOptions(shuffle="global")))
        assert len(remote) == len(on_disk) == 1
        for (x, y), (x2, y2) in zip(remote, on_disk, strict=True):
            assert (x.numpy() == x2.numpy()).all()
            assert all((y[k].numpy() == y2[k].numpy()).all() for k in ("boxes", "labels"))
            boxes_frame_objects(x.numpy(), {k: v.numpy() for k, v in y.items()})
    remote_rows = IndexedRecords(url, cache=ShardCache(str(tmp_path / "cache")))
    rows = IndexedRecords(str(local))
    for i in range(len(rows)):
        theirs, ours = remote_rows[i][1], rows[i][1]
        assert (theirs["boxes"] == ours["boxes"]).all() and (theirs["labels"] == ours["labels"]).all()
