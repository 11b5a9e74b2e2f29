"""One conversion at a time per output folder: an advisory lock holding the writer's pid.

The lock is `fcntl.flock` on OUT/.shardfeed.lock, so the kernel releases it when its process
ends in any way (SIGKILL included): a lock file left behind by a killed run is stale by
construction and the next run takes it over, which keeps kill-then-resume working. Remote
folders (gs://, s3://) are not locked: flock does not reach them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from shardfeed.errors import ConvertError
from shardfeed.format import fileio

LOCK_NAME = ".shardfeed.lock"


@contextlib.contextmanager
def hold(output_dir: str) -> Iterator[None]:
    """Holds the output folder's lock for the duration of the block.

    Raises:
        ConvertError: another live process holds it (its pid named).
    """
    if fileio.is_remote(output_dir):
        yield
        return
    import fcntl

    path = os.path.join(output_dir, LOCK_NAME)
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
