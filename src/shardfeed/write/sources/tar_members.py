"""How a tar's members are read, for the WebDataset source: streamed once (one member in memory
at a time), or, for a local uncompressed tar, listed with the images' byte spans noted and the
images themselves skipped over (read later from their spans). Samples are the members grouped by
key as WebDataset groups them (`samples`); member names that would leave the tar's folder, links,
special files, repeated extensions and members larger than their bound are marked, never read.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import re
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from typing import BinaryIO

from shardfeed import parallel
from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio, storage
from shardfeed.write.sources.staging import Writer, part_images

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
    tars: list[str],
    wanted: set[str],
    max_image_bytes: int | None,
    in_place: frozenset[str],
    stage_in: str | None = None,
    images: frozenset[str] = frozenset(),
) -> Iterator[Iterable[Sample]]:
    """Each tar's samples (`samples`), tar after tar. Tars read in place are listed in worker
    processes, one tar a task, where forking is safe: their listing is Python parsing tar
    headers (~30 us an image), and a listing without the images is small. Tars to stage
    (`stage_in`: the staging folder) are streamed in worker processes too, each writing the
    members of the `images` extensions to a file of its own there (`_staged_samples`): a gzipped
    tar's inflating is then spread over the cores. Otherwise (one tar, or TensorFlow loaded) the
    tars are streamed here, their samples holding the images' bytes."""
    if len(tars) < 2 or not parallel.fork_is_safe() or (not in_place and stage_in is None):
        yield from (samples(tar, wanted, max_image_bytes, in_place) for tar in tars)
        return
    with parallel.forked_pool(len(tars)) as pool:
        if in_place:
            yield from pool.map(_listed, tars, repeat(wanted), repeat(max_image_bytes), repeat(in_place))
        else:
            yield from pool.map(
                _staged_samples,
                tars,
                repeat(stage_in),
                range(len(tars)),
                repeat(wanted),
                repeat(max_image_bytes),
                repeat(images),
            )


def _listed(tar: str, wanted: set[str], max_image_bytes: int | None, in_place: frozenset[str]) -> list[Sample]:
    """`samples` of one tar as a list (a worker process's task)."""
    return list(samples(tar, wanted, max_image_bytes, in_place))


def _staged_samples(
    tar: str, folder: str, index: int, wanted: set[str], max_image_bytes: int | None, images: frozenset[str]
) -> list[Sample]:
    """`samples` of one tar streamed once, the members of the `images` extensions appended to
    the staging `folder`'s images file of task `index` and each noted in its sample's `spans`
    (the file's name, offset, size) instead of held in `members` (a worker process's task: what
    it returns is small)."""
    out = []
    with Writer(folder, part_images(index)) as part:
        for sample in samples(tar, wanted, max_image_bytes):
            for ext in [e for e in sample.members if e in images]:
                sample.spans[ext] = part.append(sample.members.pop(ext))
            out.append(sample)
    return out


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
        with fileio.open_binary(tar, "rb") as f, contextlib.ExitStack() as stack:
            members: Iterable[tarfile.TarInfo] | None = plain_headers(f) if in_place else None
            if members is None:
                if in_place:
                    f.seek(0)  # back from what `plain_headers` read (a stream is never sought)
                archive = stack.enter_context(tarfile.open(fileobj=f, mode="r:" if in_place else "r|*"))
                members, read = archive, functools.partial(_extracted, archive)
            else:
                read = functools.partial(_span_bytes, f)
            sample: Sample | None = None
            for member in members:
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
                _take(read, member, ext.lower(), wanted, max_image_bytes, sample, span)
            if in_place and end > f.seek(0, io.SEEK_END):  # seeking over the images finds no cut
                raise tarfile.ReadError("unexpected end of data")
            if sample is not None:
                yield sample
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        after = f"after member {last[:200]!r}" if last else "before its first member"
        raise SourceError(
            f"{storage.redact(tar)} is cut short or damaged {after} ({e}); download or write it again"
        ) from None


def plain_headers(f: BinaryIO) -> list[tarfile.TarInfo] | None:
    """The members of an uncompressed tar, when every header is a plain ustar/GNU header of a
    regular file or a folder with a valid checksum, each maybe after a pax header of plain
    records (what WebDataset's TarWriter and Python's tarfile write: a pax header carrying each
    member's fractional mtime), parsed here by tarfile's rules (names decoded as it decodes them,
    ustar's prefix joined, a folder's trailing slash dropped, pax's path and size applied): 4-5x
    faster than tarfile, whose per-header object building was most of a WebDataset listing's
    time. None for anything else (GNU long-name headers, global pax headers, links, sparse
    members, base-256 sizes, a bad checksum, an empty or cut tar): tarfile reads those, and says
    what is wrong."""
    members: list[tarfile.TarInfo] = []
    offset, pax_offset = 0, 0
    pax: dict[str, str] = {}
    while True:
        f.seek(offset)
        block = f.read(BLOCK)
        if len(block) != BLOCK:
            return None
        if block == ZERO_BLOCK:
            return members if members and not pax else None
        header = _plain_header(block)
        if header is None:
            return None
        kind, name, size = header
        if kind == tarfile.XHDTYPE and not pax:
            f.seek(offset + BLOCK)
            records = _pax_records(f.read(size))
            if not records:
                return None
            pax, pax_offset = records, offset
            offset += BLOCK + -(-size // BLOCK) * BLOCK
            continue
        if kind == tarfile.XHDTYPE:
            return None
        member = tarfile.TarInfo(pax["path"].rstrip("/") if "path" in pax else name)
        member.type, member.size, member.offset_data = kind, int(pax.get("size", size)), offset + BLOCK
        member.offset = pax_offset if pax else offset
        members.append(member)
        offset = member.offset_data + (-(-member.size // BLOCK) * BLOCK if kind != tarfile.DIRTYPE else 0)
        pax = {}


BLOCK = tarfile.BLOCKSIZE
ZERO_BLOCK = bytes(BLOCK)
PLAIN_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.XHDTYPE)
NAME_ENCODING = tarfile.ENCODING  # tarfile's default for member names (the file system's)
PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")  # tarfile's: "<length> <keyword>=<value>\n"


def _plain_header(block: bytes) -> tuple[bytes, str, int] | None:
    """(type, name, size) of a ustar/GNU header block of a plain type with a valid checksum."""
    kind = block[156:157]
    if block[257:262] != b"ustar" or kind not in PLAIN_TYPES or block[124] in (0o200, 0o377):
        return None
    try:
        size = int(_field(block[124:136]) or b"0", 8)
        checksum = int(_field(block[148:156]) or b"0", 8)
    except ValueError:
        return None
    if checksum != 256 + sum(block[:148]) + sum(block[156:]):  # the checksum field counted as spaces
        return None
    name = _field(block[:100]).decode(NAME_ENCODING, "surrogateescape")
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE
    if kind == tarfile.DIRTYPE:
        name = name.rstrip("/")
    prefix = _field(block[345:500])
    return kind, (f"{prefix.decode(NAME_ENCODING, 'surrogateescape')}/{name}" if prefix else name), size


def _pax_records(data: bytes) -> dict[str, str] | None:
    """A pax header's records, read as tarfile reads them; None (tarfile then reads the tar)
    when one is malformed or is one this listing does not apply (a charset, sparse maps)."""
    records, pos = {}, 0
    while match := PAX_RECORD.match(data, pos):
        length = int(match[1])
        value = data[match.end(2) + 1 : match.start(1) + length - 1]
        try:
            keyword, text = match[2].decode("utf-8"), value.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if length == 0 or keyword == "hdrcharset" or keyword.startswith("GNU.sparse"):
            return None
        if keyword == "size" and not text.isdigit():
            return None
        records[keyword] = text
        pos += length
    return records


def _field(raw: bytes) -> bytes:
    """A header field up to its first NUL (tarfile's `nts`, before decoding)."""
    return raw.split(b"\0", 1)[0]


def _span_bytes(f: BinaryIO, member: tarfile.TarInfo) -> bytes:
    """A member's bytes, read from its span of the tar."""
    f.seek(member.offset_data)
    return f.read(member.size)


def _extracted(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A member's bytes, read through tarfile (a stream, or a tar `plain_headers` declined)."""
    data = archive.extractfile(member)
    return data.read() if data is not None else b""


def _take(
    read: Callable[[tarfile.TarInfo], bytes],
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
        sample.members[ext] = _read_member(read, member, ext, max_bytes, sample)


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname[:200]!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname[:200]!r})"
    return "a FIFO" if member.isfifo() else "a device or other special file"


def _read_member(
    read: Callable[[tarfile.TarInfo], bytes],
    member: tarfile.TarInfo,
    ext: str,
    max_image_bytes: int | None,
    sample: Sample,
) -> bytes:
    """The member's bytes, or b'' (the sample then reported) when its declared size is over the
    bound for its kind: read only after the check, so memory is bounded by the bound."""
    bound = MAX_SIDECAR_BYTES if ext in SIDECARS else max_image_bytes
    if bound is not None and member.size > bound:
        sample.problem = f"member {member.name!r} declares {member.size:,} bytes, more than {bound:,}: not read"
        return b""
    return read(member)
