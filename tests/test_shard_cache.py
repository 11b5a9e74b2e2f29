"""The shard cache on its own: verified fetches, bounded space, eviction order, pins across processes.
(A local file stands in for the object: `fetch` reads any path through fileio.)"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardfeed.errors import CorruptRecordError
from shardfeed.read.remote.cache import RemoteShard, ShardCache


def _shards(tmp_path: Path, count: int, size: int = 1000) -> list[RemoteShard]:
    shards = []
    for i in range(count):
        data = bytes([i]) * size
        path = tmp_path / f"obj-{i}"
        path.write_bytes(data)
        shards.append(RemoteShard(str(path), size, hashlib.sha256(data).hexdigest()))
    return shards


def _fill(cache: ShardCache, shards: list[RemoteShard]) -> None:
    for s in shards:
        assert cache.reserve(s, set(), lambda sha: 0.0)
        cache.fetch(s)


def test_a_fetch_is_verified_and_published_whole(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path / "c"))
    shard = _shards(tmp_path, 1)[0]
    assert cache.reserve(shard, set(), lambda sha: 0.0)
    path = cache.fetch(shard)
    assert path.endswith(f"{shard.sha256}.tfrecord") and Path(path).read_bytes() == bytes([0]) * 1000
    assert cache.holds(shard) and not list((tmp_path / "c").glob("*.part"))
    Path(path).write_bytes(b"short")  # damaged in the cache: not trusted, removed
    assert not cache.holds(shard) and not Path(path).exists()


def test_an_object_that_is_not_what_the_manifest_says_is_refused(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path / "c"))
    shard = _shards(tmp_path, 1)[0]
    Path(shard.url).write_bytes(b"x" * 1000)
    with pytest.raises(CorruptRecordError, match=rf"not the one the manifest describes.*{shard.sha256}"):
        cache.fetch(shard)
    assert os.listdir(tmp_path / "c") == [] or set(os.listdir(tmp_path / "c")) == {".lock"}


def test_eviction_keeps_the_limit_and_goes_by_next_use(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path / "c"), limit=3000)
    a, b, c, d = _shards(tmp_path, 4)
    _fill(cache, [a, b, c])
    next_use = {a.sha256: 5.0, b.sha256: 1.0, c.sha256: 9.0}
    assert cache.reserve(d, set(), lambda sha: next_use.get(sha, float("inf")))
    cache.fetch(d)
    assert not cache.holds(c) and cache.holds(a) and cache.holds(b)  # c is read furthest ahead
    assert cache.usage() <= 3000
    assert not cache.reserve(c, {a.sha256, b.sha256, d.sha256}, lambda sha: 0.0)  # all kept: no room


def test_a_live_process_pin_is_respected_and_a_dead_ones_is_cleared(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path / "c"), limit=2000)
    a, b, c = _shards(tmp_path, 3)
    _fill(cache, [a, b])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for s in (a, b):
            (tmp_path / "c" / f"{s.sha256}.{other.pid}.pin").touch()
        assert not cache.reserve(c, set(), lambda sha: 0.0)  # both pinned by a live reader
    finally:
        other.kill()
        other.wait()
    assert cache.reserve(c, set(), lambda sha: 0.0)  # its pins died with it
    assert not list((tmp_path / "c").glob("*.pin"))
