"""All file access on data paths: plain OS calls locally, `tf.io.gfile` for URL paths.

Local paths stay TensorFlow-free (fast, fork-safe workers); a path with a scheme (`gs://`,
`s3://`, `ram://`, ...) goes through TensorFlow's filesystems, imported only then.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from typing import Any, BinaryIO, cast


def is_remote(path: str) -> bool:
    """True for a URL-style path that needs a TensorFlow filesystem."""
    return "://" in path and not path.startswith("file://")


def _gfile() -> Any:
    from shardfeed.lazy import tensorflow

    return tensorflow().io.gfile


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def join(*parts: str) -> str:
    """Joins path parts; URL paths always use '/'."""
    if is_remote(parts[0]):
        return posixpath.join(*parts)
    return os.path.join(*parts)


def open_binary(path: str, mode: str) -> BinaryIO:
    """Opens a file in binary mode ('rb', 'wb' or 'ab')."""
    if is_remote(path):
        return cast(BinaryIO, _gfile().GFile(path, mode))
    return cast(BinaryIO, open(_local(path), mode))


def read_bytes(path: str) -> bytes:
    """The whole content of a file."""
    with open_binary(path, "rb") as f:
        return f.read()


def read_range(path: str, offset: int, size: int) -> bytes:
    """Up to `size` bytes at `offset` of a local file.

    Opens a private descriptor and reads with pread, so threads can read in parallel (the disk
    sees several requests at once) and no descriptor stays open. Reading records this way was
    as fast as seek+read on kept handles here (36-38k records of 29 KB a second, one thread).
    """
    fd = os.open(_local(path), os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` (replacing it)."""
    with open_binary(path, "wb") as f:
        f.write(data)


def write_text_atomic(path: str, text: str) -> None:
    """Writes a text file under a temporary name and renames it, so readers never see half."""
    tmp = path + ".incomplete"
    write_bytes(tmp, text.encode("utf-8"))
    rename(tmp, path)


def exists(path: str) -> bool:
    if is_remote(path):
        return bool(_gfile().exists(path))
    return os.path.exists(_local(path))


def isdir(path: str) -> bool:
    if is_remote(path):
        return bool(_gfile().isdir(path))
    return os.path.isdir(_local(path))


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(_local(path), exist_ok=True)


def listdir(path: str) -> list[str]:
    """Sorted entry names of a directory (sorted so every listing is deterministic)."""
    if is_remote(path):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(_local(path)))


def size(path: str) -> int:
    if is_remote(path):
        return int(_gfile().stat(path).length)
    return os.path.getsize(_local(path))


def rename(src: str, dst: str) -> None:
    """Renames `src` to `dst`, replacing `dst`."""
    if is_remote(src):
        _gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(_local(src), _local(dst))


def remove(path: str) -> None:
    """Removes a file if it exists."""
    if is_remote(path):
        if _gfile().exists(path):
            _gfile().remove(path)
    elif os.path.exists(_local(path)):
        os.remove(_local(path))


def rmtree(path: str) -> None:
    """Removes a directory tree if it exists."""
    if is_remote(path):
        if _gfile().exists(path):
            _gfile().rmtree(path)
    else:
        shutil.rmtree(_local(path), ignore_errors=True)


def walk_files(root: str) -> list[str]:
    """Paths relative to `root` (with '/') of all files below it, sorted; hidden entries skipped."""
    found: list[str] = []

    def visit(directory: str, prefix: str) -> None:
        for name, is_dir in _entries(directory):
            if name.startswith("."):
                continue
            rel = f"{prefix}{name}"
            if is_dir:
                visit(join(directory, name), rel + "/")
            else:
                found.append(rel)

    visit(root, "")
    return found


def _entries(directory: str) -> list[tuple[str, bool]]:
    """(name, is a directory) of a directory's entries, sorted by name. Locally from one
    `scandir`, whose entries know their type without a `stat` per file (one stat fewer per
    image: seconds at a million files)."""
    if is_remote(directory):
        return [(name, isdir(join(directory, name))) for name in listdir(directory)]
    with os.scandir(_local(directory)) as entries:
        return sorted((entry.name, entry.is_dir()) for entry in entries)
