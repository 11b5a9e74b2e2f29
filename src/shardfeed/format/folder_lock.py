"""One conversion at a time per output folder: an advisory lock holding the writer's pid.

The lock is `fcntl.flock` on OUT/.shardfeed.lock, so the kernel releases it when its process
ends in any way (SIGKILL included): a lock file left behind by a killed run is stale by
construction and the next run takes it over, which keeps kill-then-resume working.

Buckets (s3://, gs://, ...) have no flock: there the lock is an object, OUT/.lock.shardfeed,
naming the writer's host, pid and a random token. A conversion finding one of another live
writer refuses to start, naming it; one left by a killed run on this host (its pid gone) is
taken over, so kill-then-resume works there too. The object is written, then read back after a
moment: of two writers starting at once, the one whose token is not there backs off. A store
with no conditional writes cannot make this airtight; two writers starting within the same
second from different hosts may both proceed (stated in docs/buckets.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator

from shardfeed.errors import ConvertError
from shardfeed.format import fileio, layout

SETTLE_SECONDS = 0.5  # between writing the lock object and reading it back


@contextlib.contextmanager
def hold(output_dir: str) -> Iterator[None]:
    """Holds the output folder's lock for the duration of the block.

    Raises:
        ConvertError: another live process holds it (its pid named).
    """
    if fileio.is_remote(output_dir):
        with _object_lock(output_dir):
            yield
        return
    import fcntl

    path = os.path.join(output_dir, layout.LOCK)
    while True:
        fd = _open_lock_file(output_dir, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConvertError(
                f"another conversion (pid {holder}) is writing into {output_dir!r}; wait for it to finish "
                "(or stop it), then run this command again"
            ) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        os.close(fd)


@contextlib.contextmanager
def waited(path: str) -> Iterator[None]:
    """An exclusive flock on the local file `path` (created if absent), waited for and held for
    the block; the kernel releases it if the process dies. For the short critical sections of
    shared caches (the shard cache's space accounting, the fused resize op's one build)."""
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield


def _open_lock_file(output_dir: str, path: str) -> int:
    """The lock file's descriptor (created with its folder when missing).

    Raises:
        ConvertError: the folder cannot be written (read-only folder or file system, no
            permission): refused before any work.
    """
    try:
        os.makedirs(output_dir, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ConvertError(
            f"cannot write into {output_dir!r}: {e.strerror or e}; choose a writable output folder"
        ) from e


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def _object_lock(output_dir: str) -> Iterator[None]:
    """The lock of a folder in a bucket or on TensorFlow's filesystems (see the module docstring)."""
    path = fileio.join(output_dir, layout.OBJECT_LOCK)
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "token": secrets.token_hex(8)}
    if fileio.exists(path):
        _refuse_unless_stale(output_dir, _holder(path))
    fileio.makedirs(output_dir)
    fileio.write_bytes(path, json.dumps(mine).encode())
    time.sleep(SETTLE_SECONDS)
    holder = _holder(path)
    if holder.get("token") != mine["token"]:
        _refuse_unless_stale(output_dir, holder, started_together=True)
    try:
        yield
    finally:
        if _holder(path).get("token") == mine["token"]:
            fileio.remove(path)


def _holder(path: str) -> dict[str, object]:
    try:
        data = json.loads(fileio.read_bytes(path))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _refuse_unless_stale(output_dir: str, holder: dict[str, object], started_together: bool = False) -> None:
    """Raises unless the lock was left by a process of this host that is gone."""
    pid, host = holder.get("pid"), holder.get("host")
    if host == socket.gethostname() and isinstance(pid, int) and not started_together and not process_alive(pid):
        return
    raise ConvertError(
        f"another conversion (pid {pid} on host {host}) is writing into {output_dir!r}; wait for it to finish "
        f"(or stop it), then run this command again. If no conversion is running there, remove "
        f"{fileio.join(output_dir, layout.OBJECT_LOCK)} and run it again"
    )


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host is running (lock files left by killed runs are stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
