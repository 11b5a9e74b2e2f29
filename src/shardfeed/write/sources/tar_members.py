"""How a tar's members are read, for the WebDataset source: streamed once (one member in memory
at a time), or, for a local uncompressed tar, listed with the images' byte spans noted and the
images themselves skipped over (read later from their spans). Samples are the members grouped by
key as WebDataset groups them (`samples`); member names that would leave the tar's folder, links,
special files, repeated extensions and members larger than their bound are marked, never read.
"""

from __future__ import annotations

import gzip
import io
import multiprocessing
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat

from shardfeed import parallel
from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio, storage

MAX_SIDECAR_BYTES = 1024 * 1024  # a .cls or .json member: a label, never megabytes
SIDECARS = ("cls", "json", "txt")


class NeedsStaging(Exception):
    """An image member whose bytes are not one span of the tar (a sparse member)."""


def readable_in_place(tar: str) -> bool:
    """A local tar that is not compressed (its images can be read from their spans): a .tar
    whose first 512-byte header says ustar/GNU at byte 257, as an uncompressed tar's does."""
    if fileio.is_remote(tar) or not tar.lower().endswith(".tar"):
        return False
    try:
        with fileio.open_binary(tar, "rb") as f:
            header = f.read(512)
    except OSError:
        return False  # staging's read says why
    return header[257:262] == b"ustar"


class Sample:
    """One sample as the tar holds it: its key, the members read (extension -> bytes; images
    read in place: extension -> (tar, offset, size) in `spans`), the names of every member, and
    why it cannot be used (None when it can)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.members: dict[str, bytes] = {}
        self.spans: dict[str, tuple[str, int, int]] = {}
        self.names: list[str] = []
        self.problem: str | None = None


def listings(
    tars: list[str], wanted: set[str], max_image_bytes: int | None, in_place: frozenset[str]
) -> Iterator[Iterable[Sample]]:
    """Each tar's samples (`samples`), tar after tar. Tars read in place are listed in worker
    processes, one tar a task, where forking is safe: their listing is Python parsing tar
    headers (~100 us an image), and a listing without the images is small. Staged tars are
    streamed here (their samples hold the images' bytes)."""
    if not in_place or len(tars) < 2 or not parallel.fork_is_safe():
        yield from (samples(tar, wanted, max_image_bytes, in_place) for tar in tars)
        return
    workers = min(len(tars), os.cpu_count() or 1)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=parallel.worker_setup) as pool:
        yield from pool.map(_listed, tars, repeat(wanted), repeat(max_image_bytes), repeat(in_place))


def _listed(tar: str, wanted: set[str], max_image_bytes: int | None, in_place: frozenset[str]) -> list[Sample]:
    """`samples` of one tar as a list (a worker process's task)."""
    return list(samples(tar, wanted, max_image_bytes, in_place))


def samples(
    tar: str, wanted: set[str], max_image_bytes: int | None, in_place: frozenset[str] = frozenset()
) -> Iterator[Sample]:
    """Each sample of `tar`, streaming it once. Only the members whose extensions are `wanted`
    are read, each after its declared size is checked (a 40 KB sparse tar can declare a 2 GiB
    member); a member whose name leaves the tar's folder, a link and a special file are never
    used, and a sample whose key or extension repeats is reported rather than merged (its label
    could go with other bytes). `in_place`: the tar is seekable and uncompressed, and members of
    these extensions (the images) are not read but their spans noted; the reader seeks over them.

    Raises:
        SourceError: the tar is cut short (a partial download) or damaged, naming it and the last
            member read: what follows the cut cannot be listed, so not reported item by item.
        NeedsStaging: `in_place` and an image member is sparse.
    """
    last, end, container = "", 0, fileio.absolute(tar)
    try:
        with fileio.open_binary(tar, "rb") as f, tarfile.open(fileobj=f, mode="r:" if in_place else "r|*") as archive:
            sample: Sample | None = None
            for member in archive:
                last, end = member.name, max(end, member.offset_data + member.size)
                if member.isdir():
                    continue
                folder, _, base = member.name.rpartition("/")
                if "." not in base or base.startswith("."):
                    continue
                stem, ext = base.split(".", 1)
                this = f"{folder}/{stem}" if folder else stem
                if sample is None or this != sample.key:
                    if sample is not None:
                        yield sample
                    sample = Sample(this)
                sample.names.append(member.name)
                span = container if ext.lower() in in_place else None
                _take(archive, member, ext.lower(), wanted, max_image_bytes, sample, span)
            if in_place and end > f.seek(0, io.SEEK_END):  # seeking over the images finds no cut
                raise tarfile.ReadError("unexpected end of data")
            if sample is not None:
                yield sample
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        after = f"after member {last[:200]!r}" if last else "before its first member"
        raise SourceError(
            f"{storage.redact(tar)} is cut short or damaged {after} ({e}); download or write it again"
        ) from None


def _take(
    archive: tarfile.TarFile,
    member: tarfile.TarInfo,
    ext: str,
    wanted: set[str],
    max_bytes: int | None,
    sample: Sample,
    in_place: str | None = None,
) -> None:
    """Reads one member into its sample (one to be read in place from the tar `in_place`: notes
    its span), or marks the sample with why it cannot be used."""
    refusal = confinement.entry_refusal(member.name.removeprefix("./"))
    if refusal:
        sample.problem = f"unsafe member name (path traversal): {refusal}; not extracted"
    elif not member.isfile():
        sample.problem = f"member {member.name!r} is {_kind(member)}: links and special files are never extracted"
    elif ext in sample.members or ext in sample.spans:
        sample.problem = f"member {member.name!r} repeats .{ext}: a sample's members are never merged"
    elif in_place is not None:
        if max_bytes is not None and member.size > max_bytes:
            sample.problem = f"member {member.name!r} declares {member.size:,} bytes, more than {max_bytes:,}: not read"
        elif member.issparse():
            raise NeedsStaging(member.name)
        else:
            sample.spans[ext] = (in_place, member.offset_data, member.size)
    elif ext in wanted:
        sample.members[ext] = _read_member(archive, member, ext, max_bytes, sample)


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname[:200]!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname[:200]!r})"
    return "a FIFO" if member.isfifo() else "a device or other special file"


def _read_member(
    archive: tarfile.TarFile, member: tarfile.TarInfo, ext: str, max_image_bytes: int | None, sample: Sample
) -> bytes:
    """The member's bytes, or b'' (the sample then reported) when its declared size is over the
    bound for its kind: read only after the check, so memory is bounded by the bound."""
    bound = MAX_SIDECAR_BYTES if ext in SIDECARS else max_image_bytes
    if bound is not None and member.size > bound:
        sample.problem = f"member {member.name!r} declares {member.size:,} bytes, more than {bound:,}: not read"
        return b""
    data = archive.extractfile(member)
    return data.read() if data is not None else b""
