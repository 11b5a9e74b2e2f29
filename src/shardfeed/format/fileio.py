"""All file access on data paths: plain OS calls locally, fsspec or `tf.io.gfile` for URL paths.

Local paths stay fast and fork-safe; a path with a scheme goes through fsspec (`s3://`, `gs://`,
`az://`, ...) or, for the schemes only TensorFlow has (`ram://`), through TensorFlow's
filesystems, imported only then: format/storage.py says which, and words the errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
import stat
from typing import Any, BinaryIO, cast

from shardfeed.format import layout, storage


def is_remote(path: str) -> bool:
    """True for a URL path (not a local file)."""
    return storage.is_url(path)


def is_bucket(path: str) -> bool:
    """True for a URL path that TensorFlow's readers cannot open (fsspec's schemes): its shards
    are read through the local shard cache."""
    return storage.via_fsspec(path)


def _gfile() -> Any:
    from shardfeed.lazy import tensorflow

    return tensorflow().io.gfile


def _fs(path: str) -> tuple[Any, str]:
    return storage.filesystem(path)


def _on_store(path: str, method: str, *args: Any, action: str = "read", **kwargs: Any) -> Any:
    """`method` of `path`'s fsspec filesystem called on it, its failures worded by storage.errors."""
    fs, name = _fs(path)
    with storage.errors(path, action):
        return getattr(fs, method)(name, *args, **kwargs)


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def absolute(path: str) -> str:
    """A local path made absolute (what a record of it should keep); a URL as it is."""
    return path if is_remote(path) else os.path.abspath(_local(path))


def join(*parts: str) -> str:
    """Joins path parts; URL paths always use '/'."""
    if is_remote(parts[0]):
        return posixpath.join(*parts)
    return os.path.join(*parts)


def open_binary(path: str, mode: str) -> BinaryIO:
    """Opens a file in binary mode ('rb', 'wb' or 'ab')."""
    if storage.via_fsspec(path):
        return cast(BinaryIO, _on_store(path, "open", mode, action="write" if "r" not in mode else "read"))
    if is_remote(path):
        return cast(BinaryIO, _gfile().GFile(path, mode))
    return cast(BinaryIO, open(_local(path), mode))


def read_bytes(path: str) -> bytes:
    """The whole content of a file."""
    with open_binary(path, "rb") as f:
        return f.read()


class UnusableFileError(OSError):
    """A path that must not be read as a data file; the message says why (for the report)."""


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def read_regular(
    path: str, max_bytes: int | None = None, limit: str = "any image within the pixel limit needs"
) -> bytes:
    """The content of a regular file of at most `max_bytes` bytes.

    Anything else is refused before it is read: opening a FIFO blocks until a writer comes, and
    a character device (/dev/zero) never ends. The size comes from the file's own stat (a
    `read(max_bytes + 1)` allocates the whole limit, 700 MB, for every image: 86 µs).

    Args:
        limit: what `max_bytes` is, for the message when the file is larger.

    Raises:
        UnusableFileError: not a regular file, or larger than `max_bytes`.
        OSError: it cannot be read.
    """
    if is_remote(path):
        _check_size(size(path), max_bytes, limit)
        return read_bytes(path)
    # O_NONBLOCK: opening a FIFO returns at once (regular files ignore it); one open + fstat
    # instead of a stat and an open (two path lookups: +14 µs an image).
    fd = os.open(_local(path), os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb", closefd=True) as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnusableFileError(_special_kind(info.st_mode))
        _check_size(info.st_size, max_bytes, limit)
        return f.read()


def _check_size(size_now: int, max_bytes: int | None, limit: str) -> None:
    if max_bytes is not None and size_now > max_bytes:
        raise UnusableFileError(f"file too large: {size_now:,} bytes, more than {limit} ({max_bytes:,})")


def read_range(path: str, offset: int, size: int, max_bytes: int | None = None) -> bytes:
    """Up to `size` bytes at `offset` of a local file; a `size` over `max_bytes` is refused
    (UnusableFileError) before anything is read, as `read_regular` bounds a whole file.

    Opens a private descriptor and reads with pread, so threads can read in parallel (the disk
    sees several requests at once) and no descriptor stays open. Reading records this way was
    as fast as seek+read on kept handles here (36-38k records of 29 KB a second, one thread).
    """
    _check_size(size, max_bytes, "any image within the pixel limit needs")
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
    """Writes a text file under a temporary name and renames it, so readers never see half.
    Secrets that URLs carry (s3://key:secret@..., signed queries) are redacted: manifests,
    reports and states name source and output folders."""
    write_bytes_atomic(path, storage.redact(text).encode("utf-8"))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes a file under a temporary name and renames it, so readers never see half."""
    tmp = layout.incomplete(path)
    write_bytes(tmp, data)
    rename(tmp, path)


def copy_atomic(src: str, dst: str) -> None:
    """Copies a file under a temporary name, then renames it (within one bucket a server-side copy)."""
    tmp = layout.incomplete(dst)
    if storage.via_fsspec(src) and storage.scheme(src) == storage.scheme(dst):
        _on_store(src, "copy", _fs(tmp)[1], action="write")
    else:
        with open_binary(src, "rb") as source, open_binary(tmp, "wb") as sink:
            shutil.copyfileobj(source, sink, 8 << 20)
    rename(tmp, dst)


def exists(path: str) -> bool:
    if storage.via_fsspec(path):
        return bool(_on_store(path, "exists"))
    if is_remote(path):
        return bool(_gfile().exists(path))
    return os.path.exists(_local(path))


def isdir(path: str) -> bool:
    """Whether `path` is a folder (in a bucket: a prefix that holds objects)."""
    if storage.via_fsspec(path):
        return bool(_on_store(path, "isdir"))
    if is_remote(path):
        return bool(_gfile().isdir(path))
    return os.path.isdir(_local(path))


def makedirs(path: str) -> None:
    """Creates a folder and its parents (nothing to create in a bucket: prefixes appear with objects)."""
    if storage.via_fsspec(path):
        _on_store(path, "makedirs", exist_ok=True, action="write")
    elif is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(_local(path), exist_ok=True)


def listdir(path: str) -> list[str]:
    """Sorted entry names of a directory (sorted so every listing is deterministic)."""
    if storage.via_fsspec(path):
        return sorted({posixpath.basename(entry.rstrip("/")) for entry in _on_store(path, "ls", detail=False)})
    if is_remote(path):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(_local(path)))


def size(path: str) -> int:
    if storage.via_fsspec(path):
        return size_and_mtime(path)[0]
    if is_remote(path):
        return int(_gfile().stat(path).length)
    return os.path.getsize(_local(path))


def size_and_mtime(path: str) -> tuple[int, int]:
    """A file's size in bytes and modification time in nanoseconds (0 where the store has none)."""
    if storage.via_fsspec(path):
        info = _on_store(path, "info")
        if info.get("type") == "directory":
            raise IsADirectoryError(path)
        modified = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("last_modified")
        return int(info["size"]), _nanoseconds(modified)
    if is_remote(path):
        info = _gfile().stat(path)
        return int(info.length), int(info.mtime_nsec)
    st = os.stat(_local(path))
    return st.st_size, st.st_mtime_ns


def glob(pattern: str) -> list[str]:
    """The paths matching a glob pattern, sorted; URL paths keep their scheme (and the
    credentials an `s3://KEY:SECRET@` pattern carries, so each path opens as the pattern did)."""
    if storage.via_fsspec(pattern):
        fs = _fs(pattern)[0]
        return sorted(storage.with_userinfo_of(pattern, fs.unstrip_protocol(f)) for f in _on_store(pattern, "glob"))
    if is_remote(pattern):
        return sorted(_gfile().glob(pattern))
    import glob as globbing

    return sorted(globbing.glob(_local(pattern)))


def _nanoseconds(modified: Any) -> int:
    """A store's modification time (datetime, ISO text or seconds) in nanoseconds."""
    import datetime

    if isinstance(modified, str):
        modified = datetime.datetime.fromisoformat(modified.replace("Z", "+00:00"))
    if isinstance(modified, datetime.datetime):
        return int(modified.timestamp() * 1_000_000_000)
    return int(float(modified or 0) * 1_000_000_000)


def rename(src: str, dst: str) -> None:
    """Renames `src` to `dst`, replacing `dst`. In a bucket a server-side copy, then a delete:
    `dst` appears whole or not at all (an object is published when its copy completes)."""
    if storage.via_fsspec(src):
        _on_store(src, "mv", _fs(dst)[1], action="write")
    elif is_remote(src):
        _gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(_local(src), _local(dst))


def remove(path: str) -> None:
    """Removes a file if it exists."""
    if storage.via_fsspec(path):
        with contextlib.suppress(FileNotFoundError):
            _on_store(path, "rm_file", action="write")
    elif is_remote(path):
        if _gfile().exists(path):
            _gfile().remove(path)
    elif os.path.exists(_local(path)):
        os.remove(_local(path))


def rmtree(path: str) -> None:
    """Removes a directory tree if it exists."""
    if storage.via_fsspec(path):
        with contextlib.suppress(FileNotFoundError):
            _on_store(path, "rm", recursive=True, action="write")
    elif is_remote(path):
        if _gfile().exists(path):
            _gfile().rmtree(path)
    else:
        shutil.rmtree(_local(path), ignore_errors=True)


def walk_files(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Paths relative to `root` (with '/') of all regular files below it, sorted, hidden entries
    skipped; and (path, reason) for every entry that cannot be an input: FIFOs and devices,
    broken links, a folder link that loops back to a folder above it, a name that is not UTF-8.

    Folder links are followed (a dataset assembled from links is common); loops are not.
    """
    found: list[str] = []
    refused: list[tuple[str, str]] = []

    def visit(directory: str, prefix: str, ancestors: frozenset[tuple[int, int] | None]) -> None:
        for name, kind, ident in _entries(directory):
            rel = f"{prefix}{name}"
            if name.startswith("."):
                continue
            if not _is_utf8(name):
                refused.append((_printable(rel), "file name is not valid UTF-8; rename it"))
            elif kind == "dir" and ident is not None and ident in ancestors:
                refused.append((rel, "folder link loops back to a folder above it (not followed)"))
            elif kind == "dir":
                visit(join(directory, name), rel + "/", ancestors | {ident})
            elif kind == "file":
                found.append(rel)
            else:
                refused.append((rel, kind))

    visit(root, "", frozenset({_identity(root)}))
    return found, refused


def _entries(directory: str) -> list[tuple[str, str, tuple[int, int] | None]]:
    """(name, kind, (device, inode)) of a directory's entries, sorted by name; kind is 'dir',
    'file' (regular) or why the entry is neither. Locally from one `scandir`, whose entries
    know their type without a `stat` per file (one stat fewer per image: seconds at a million
    files); only folders are stat'ed, for their identity."""
    if storage.via_fsspec(directory):
        listed = _on_store(directory, "ls", detail=True)
        kinds = {
            posixpath.basename(e["name"].rstrip("/")): "dir" if e["type"] == "directory" else "file" for e in listed
        }
        return [(n, kinds[n], None) for n in sorted(kinds)]
    if is_remote(directory):
        return [(n, "dir" if isdir(join(directory, n)) else "file", None) for n in listdir(directory)]
    out: list[tuple[str, str, tuple[int, int] | None]] = []
    with os.scandir(_local(directory)) as entries:
        for entry in entries:
            try:
                if entry.is_dir():
                    info = entry.stat()
                    out.append((entry.name, "dir", (info.st_dev, info.st_ino)))
                    continue
                kind = "file" if entry.is_file() else _special_kind(entry.stat().st_mode)
            except OSError as e:
                kind = f"cannot be read: {e.strerror or e} (a broken or looping link?)"
            out.append((entry.name, kind, None))
    return sorted(out)


def special_kind(path: str) -> str | None:
    """Why a local `path` is not a regular file to read ('not a regular file: a FIFO (named
    pipe)', a device, a folder), or None for a regular file, a missing one and a remote one.
    Links are followed: what matters is what opening it would read."""
    if is_remote(path):
        return None
    try:
        mode = os.stat(_local(path)).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return "not a regular file: a folder" if stat.S_ISDIR(mode) else _special_kind(mode)


def _special_kind(mode: int) -> str:
    return f"not a regular file: {_KINDS.get(stat.S_IFMT(mode), 'a special file')}"


def _identity(directory: str) -> tuple[int, int] | None:
    if is_remote(directory):
        return None
    info = os.stat(_local(directory))
    return info.st_dev, info.st_ino


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:  # undecodable bytes, kept by Python as surrogate escapes
        return False


def _printable(rel: str) -> str:
    """A path with undecodable bytes shown as \\xNN escapes, fit for JSON and messages."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


class HashingReader:
    """A read-only stream that hashes (SHA-256) and counts the bytes read through it, so one
    pass over a shard both parses its records and proves its bytes (verify, adopt)."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.sha256, self.size = raw, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha256.update(data)
        self.size += len(data)
        return bytes(data)

    def drain(self) -> None:
        """Reads the rest (bytes after a damaged record still count towards size and hash)."""
        while self.read(1 << 20):
            pass
