"""A local, bounded, verified cache of shards that live in a bucket (s3://, gs://, az://, ...).

On-disk format (one folder, shareable by processes of one host):

    <sha256>.tfrecord                  a shard, named by its content's SHA-256 from the manifest:
                                       published by rename only after its size and hash were
                                       checked, so a file under this name is a verified copy (a
                                       re-converted dataset can never be served an old shard)
    <sha256>.<size>.<pid>-<n>.part     a fetch in flight (its size known, so it is counted)
    <sha256>.<pid>.pin                 process <pid> has handed this shard to its reader and the
                                       reader has not read it to the end: no process evicts it
    .lock                              flock'ed while space is made (released by the kernel when
                                       its process dies: nothing goes stale after a kill)

Space is made before each fetch: complete shards + fetches in flight + the new one stay within
`limit`, evicting first what nobody here will read (other datasets' shards, oldest first), then
the shard whose next use lies furthest ahead (the caller ranks them: Belady's rule, since the
epoch orders are known in advance). Shards the caller keeps (fetched ahead) and shards any live
process has pinned are never evicted; pins and fetches of a process that is gone are removed.
POSIX keeps an evicted file readable for whoever has it open.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from shardfeed.errors import CacheDiskFull, CorruptRecordError, OptionError
from shardfeed.format import fileio, layout, storage
from shardfeed.format.folder_lock import process_alive, waited

log = logging.getLogger("shardfeed")

FETCH_ATTEMPTS = 3  # per shard: a store that stays down fails the read after ~3 x s3fs's own retries
BACKOFF = 1.0  # seconds before the second attempt, doubled after each, plus up to 50% jitter
CHUNK = 8 << 20  # bytes per read from the store
SUFFIX = ".tfrecord"
_fetch_numbers = itertools.count()


def default_dir() -> str:
    """$XDG_CACHE_HOME/shardfeed/shards (~/.cache/shardfeed/shards)."""
    return layout.user_cache("shards")


def copy_name(sha256: str) -> str:
    """The file name of a verified copy of the shard whose content has this SHA-256."""
    return sha256 + SUFFIX


@dataclass(frozen=True)
class RemoteShard:
    """A shard in a bucket as the manifest describes it."""

    url: str
    size: int
    sha256: str


class ShardCache:
    """The cache folder: fetch-and-verify, and bounded space (see the module docstring).

    Args:
        directory: the cache folder (created when missing).
        limit: bytes of complete shards plus fetches in flight it may hold; None: no bound.
    """

    def __init__(self, directory: str | None = None, limit: int | None = None) -> None:
        self.directory = directory or default_dir()
        self.limit = limit
        self._reserved: dict[str, int] = {}  # sha256 -> bytes of this process's fetches in flight
        self._guard = threading.Lock()
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise OptionError(f"cannot create the shard cache {self.directory!r}: {e.strerror or e}") from e

    def __getstate__(self) -> dict[str, object]:  # crosses into DataLoader / Grain worker processes
        return {"directory": self.directory, "limit": self.limit, "_reserved": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._guard = threading.Lock()

    def path(self, shard: RemoteShard) -> str:
        return os.path.join(self.directory, copy_name(shard.sha256))

    def holds(self, shard: RemoteShard) -> bool:
        """Whether a verified copy is here (a file of another size is a damaged one: removed)."""
        path = self.path(shard)
        try:
            if os.path.getsize(path) == shard.size:
                return True
            os.remove(path)
        except FileNotFoundError:
            pass
        return False

    def reserve(self, shard: RemoteShard, keep: set[str], rank: Callable[[str], float]) -> bool:
        """Makes room for `shard` and reserves it (True), or says there is none without evicting
        a pinned shard (False). `keep`: sha256s never evicted; `rank`: how far ahead a shard is
        next read (larger is evicted first)."""
        with self._guard, self._locked():
            if self.limit is None:
                self._reserved[shard.sha256] = shard.size
                return True
            complete, parts, pinned = self._listing()
            used = sum(size for _, size, _ in complete) + parts + sum(self._reserved.values())
            keep = keep | pinned | {shard.sha256}
            victims = sorted(
                (entry for entry in complete if entry[0] not in keep),
                key=lambda e: (-rank(e[0]), e[2]),
            )
            for sha, size, _ in victims:
                if used + shard.size <= self.limit:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, copy_name(sha)))
                used -= size
            if used + shard.size > self.limit:
                return False
            self._reserved[shard.sha256] = shard.size
            return True

    def fetch(self, shard: RemoteShard, stop: threading.Event | None = None) -> str:
        """The local path of a verified copy of `shard`, fetched (after `reserve`) unless here.
        `stop`: once set, a failed attempt is not retried (the reader has gone).

        Raises:
            CorruptRecordError: the object's bytes are not what the manifest says, twice.
            StorageError: the store failed FETCH_ATTEMPTS times; the cache's disk is full.
        """
        try:
            if self.holds(shard):
                return self.path(shard)
            for attempt in range(FETCH_ATTEMPTS):
                try:
                    return self._download(shard)
                except CorruptRecordError:
                    if attempt:  # a second mismatch is not a torn transfer
                        raise
                except CacheDiskFull:
                    raise
                except storage.StorageError as e:
                    if attempt == FETCH_ATTEMPTS - 1 or (stop is not None and stop.is_set()):
                        raise storage.StorageError(
                            f"{e} (shard {storage.redact(shard.url)}, {FETCH_ATTEMPTS} attempts)"
                        ) from e
                    time.sleep(BACKOFF * 2**attempt * (1 + random.random() / 2))
            raise AssertionError("unreachable")
        finally:
            self.release(shard)

    def release(self, shard: RemoteShard) -> None:
        """Gives back the room reserved for a fetch that ended (or never started)."""
        with self._guard:
            self._reserved.pop(shard.sha256, None)

    def _download(self, shard: RemoteShard) -> str:
        """One fetch: streamed into a .part file while hashing, checked, fsynced, renamed."""
        part = os.path.join(self.directory, f"{shard.sha256}.{shard.size}.{os.getpid()}-{next(_fetch_numbers)}.part")
        digest, size = hashlib.sha256(), 0
        try:
            with fileio.open_binary(shard.url, "rb") as source, open(part, "wb") as sink:
                while chunk := _read(source, shard.url):
                    digest.update(chunk)
                    size += len(chunk)
                    sink.write(chunk)
                sink.flush()
                os.fsync(sink.fileno())
        except FileNotFoundError as e:
            raise storage.StorageError(
                f"shard {storage.redact(shard.url)} is missing from the store (deleted or moved after the dataset "
                "was made); run `shardfeed verify` on the folder"
            ) from e
        except OSError as e:
            self._discard(part)
            if e.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, storage.StorageError):
                raise CacheDiskFull(
                    f"the shard cache's disk is full: {self.directory} while fetching {storage.redact(shard.url)} "
                    f"({shard.size:,} bytes); free space there, or lower the cache limit (--cache-limit)"
                ) from e
            raise
        if (size, digest.hexdigest()) != (shard.size, shard.sha256):
            self._discard(part)
            raise CorruptRecordError(
                f"shard {storage.redact(shard.url)} is not the one the manifest describes: {size:,} bytes with "
                f"SHA-256 {digest.hexdigest()}, the manifest says {shard.size:,} bytes with {shard.sha256}; it was "
                "changed after conversion: run `shardfeed verify`, then convert again"
            )
        os.replace(part, self.path(shard))
        return self.path(shard)

    @staticmethod
    def _discard(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def pin(self, sha256: str) -> None:
        """Marks a shard as being read by this process (`unpin` when read to the end)."""
        with open(self._pin_path(sha256), "wb"):
            pass

    def unpin(self, sha256: str) -> None:
        self._discard(self._pin_path(sha256))

    def _pin_path(self, sha256: str) -> str:
        return os.path.join(self.directory, f"{sha256}.{os.getpid()}.pin")

    def _listing(self) -> tuple[list[tuple[str, int, float]], int, set[str]]:
        """(sha256, size, mtime) of the complete shards, the bytes of other processes' fetches in
        flight (from their names), and the shards pinned by live processes; what processes that
        are gone left behind is removed."""
        complete, parts, pinned = [], 0, set()
        mine = f".{os.getpid()}-"
        for entry in os.scandir(self.directory):
            name = entry.name
            with contextlib.suppress(FileNotFoundError):
                if name.endswith(SUFFIX):
                    info = entry.stat()
                    complete.append((name[: -len(SUFFIX)], info.st_size, info.st_mtime))
                elif name.endswith(".part") and mine not in name:
                    if process_alive(int(name.split(".")[2].split("-")[0])):
                        parts += int(name.split(".")[1])
                    else:  # left by a killed process
                        os.remove(entry.path)
                elif name.endswith(".pin"):
                    if process_alive(int(name.split(".")[1])):
                        pinned.add(name.split(".")[0])
                    else:
                        os.remove(entry.path)
        return complete, parts, pinned

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return waited(os.path.join(self.directory, layout.CACHE_LOCK))

    def usage(self) -> int:
        """Bytes on disk in the cache folder (complete shards and fetches in flight)."""
        total = 0
        for entry in os.scandir(self.directory):
            with contextlib.suppress(FileNotFoundError):  # published or evicted meanwhile
                total += entry.stat().st_size if entry.name != layout.CACHE_LOCK else 0
        return total


def _read(source: BinaryIO, url: str) -> bytes:
    """The next chunk from the store (its failures worded by `storage.errors`)."""
    with storage.errors(url):
        return source.read(CHUNK)
