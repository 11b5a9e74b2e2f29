"""`tar_members.plain_headers`: the WebDataset listing's own reading of plain tar headers gives
exactly what Python's tarfile gives (every member's name, type, size and offsets) for the tars
WebDataset's TarWriter and tarfile write in each format, and declines (None, so tarfile reads
the tar) whatever it does not parse itself."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from shardfeed.write.sources import tar_members

MEMBERS = [
    ("0001.jpg", b"\xff\xd8" + bytes(range(256)) * 7),
    ("0001.cls", b"3"),
    ("deep/folder/0002.jpg", b"\xff\xd8" * 300),
    ("deep/folder/0002.json", b'{"label": 1}'),
    ("empty.txt", b""),
    ("exactly.bin", bytes(512)),
]
LONG = "a" * 60 + "/" + "b" * 60 + "/sample.jpg"  # > 100 bytes: ustar's prefix field, or a pax path
UNICODE = "données/échantillon.jpg"  # a pax path (UTF-8) in PAX_FORMAT


def _tar(
    path: Path, fmt: int, members: list[tuple[str, bytes]], *, mtime: float = 1700000000, folders: bool = True
) -> Path:
    with tarfile.open(path, "w", format=fmt) as tar:
        if folders:
            info = tarfile.TarInfo("deep/folder")
            info.type, info.mtime = tarfile.DIRTYPE, int(mtime)
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
    return path


def _fields(members: list[tarfile.TarInfo]) -> list[tuple[str, bytes, int, int, int]]:
    return [(m.name, m.type, m.size, m.offset, m.offset_data) for m in members]


def _same_as_tarfile(path: Path) -> list[tarfile.TarInfo]:
    with open(path, "rb") as f:
        ours = tar_members.plain_headers(f)
    assert ours is not None, path
    with tarfile.open(path, "r:") as tar:
        theirs = tar.getmembers()
    assert _fields(ours) == _fields(theirs)
    assert all(m.isfile() or m.isdir() for m in ours)
    return ours


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("mtime", [1700000000, 1700000000.25])
def test_plain_tars_of_every_format_are_listed_as_tarfile_lists_them(tmp_path: Path, fmt: int, mtime: float) -> None:
    """USTAR, GNU and PAX tars (PAX with a header per member for a fractional mtime, as
    WebDataset's TarWriter writes), a folder entry, an empty member, one of exactly a block, a
    name over 100 bytes (ustar's prefix; a pax path in PAX; GNU's long-name header is left to
    tarfile), and UTF-8 names in PAX."""
    members = [*MEMBERS] if fmt == tarfile.GNU_FORMAT else [*MEMBERS, (LONG, b"\xff\xd8long")]  # GNU: an L header
    if fmt == tarfile.PAX_FORMAT:
        members.append((UNICODE, b"\xff\xd8unicode"))
    listed = _same_as_tarfile(_tar(tmp_path / "t.tar", fmt, members, mtime=mtime))
    assert [m.name for m in listed if m.isfile()] == [name for name, _ in members]
    with open(tmp_path / "t.tar", "rb") as f:  # the offsets are the bytes' own
        for member, (_, data) in zip([m for m in listed if m.isfile()], members, strict=True):
            f.seek(member.offset_data)
            assert f.read(member.size) == data


def test_webdatasets_own_tar_writer(tmp_path: Path) -> None:
    """What WebDataset's TarWriter writes is read here, not handed to tarfile."""
    wds = pytest.importorskip("webdataset")
    with wds.TarWriter(str(tmp_path / "w.tar")) as sink:
        for i in range(5):
            sink.write({"__key__": f"s{i:03d}", "jpg": b"\xff\xd8" * (100 * i + 1), "cls": str(i).encode()})
    assert len(_same_as_tarfile(tmp_path / "w.tar")) == 10


@pytest.mark.parametrize(
    "case",
    ["symlink", "hard link", "gnu long name", "global pax", "pax charset", "bad checksum", "cut", "empty", "v7"],
)
def test_what_it_does_not_parse_is_left_to_tarfile(tmp_path: Path, case: str) -> None:
    """Links, GNU long-name headers, global pax headers, a pax charset record, a corrupted header,
    a tar cut short, an empty file and a pre-POSIX (v7) tar: None, never a guess."""
    path = tmp_path / "t.tar"
    fmt = tarfile.GNU_FORMAT if case == "gnu long name" else tarfile.PAX_FORMAT
    pax = {"comment": "made here"} if case == "global pax" else None  # a global header first
    with tarfile.open(path, "w", format=fmt, pax_headers=pax) as tar:
        for name, data in MEMBERS[:2]:
            info = tarfile.TarInfo("x" * 120 + ".jpg" if case == "gnu long name" else name)
            info.size = len(data)
            if case == "pax charset":
                info.pax_headers = {"hdrcharset": "BINARY"}
            tar.addfile(info, io.BytesIO(data))
        if case in ("symlink", "hard link"):
            link = tarfile.TarInfo("0002.jpg")
            link.type, link.linkname = (tarfile.SYMTYPE if case == "symlink" else tarfile.LNKTYPE), "0001.jpg"
            tar.addfile(link)
    raw = bytearray(path.read_bytes())
    if case == "bad checksum":
        raw[0] ^= 1
    elif case == "cut":
        raw = raw[:700]
    elif case == "empty":
        raw = bytearray()
    elif case == "v7":
        raw[257:265] = bytes(8)  # no magic: a v7 header (tarfile still reads it)
        raw[148:156] = b"%06o\0 " % (256 + sum(raw[:148]) + sum(raw[156:512]))
    path.write_bytes(bytes(raw))
    with open(path, "rb") as f:
        assert tar_members.plain_headers(f) is None
