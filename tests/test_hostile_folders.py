"""Converted folders someone else edited (a downloaded dataset, a shared bucket): the manifest
and report.json are data too. Whatever they name, readers stay inside the folder, open only
regular files, bound every read by what the manifest promises, and refuse in one line naming the
file and the entry; nothing hangs (each command is a real process under a timeout).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zygote
from conftest import crops, jpeg_bytes, photos, recording_http_server

from shardfeed import ConvertOptions, CorruptRecordError, convert
from shardfeed.format import tfrecord

TIMEOUT_S = 120
LOAD = "import sys, shardfeed; ds = shardfeed.load(sys.argv[1], batch_size=4, image_size=32); next(iter(ds))"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small converted folder of real photo crops, 2 classes, train and validation."""
    src = tmp_path_factory.mktemp("hostile_folders") / "src"
    for i, pixels in enumerate(crops(photos()["chelsea"], 24, seed=3)):
        (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 2}" / f"{i:02d}.jpg").write_bytes(jpeg_bytes(pixels))
    out = src.parent / "out"
    convert(str(src), str(out), ConvertOptions(shards=2, split="train=0.75,validation=0.25"), workers=1, progress=False)
    return out


@pytest.fixture()
def folder(converted: Path, tmp_path: Path) -> Path:
    """A copy of the converted folder to edit, a victim shard and photo beside it."""
    copy = tmp_path / "data"
    shutil.copytree(converted, copy)
    (tmp_path / "victim").mkdir()
    shutil.copy(copy / "train-00000-of-00002", tmp_path / "victim" / "secret-shard")
    (tmp_path / "victim" / "photo.jpg").write_bytes(jpeg_bytes(crops(photos()["astronaut"], 1, seed=1)[0]))
    return copy


def _edit(folder: Path, change: Callable[[dict[str, Any]], object]) -> None:
    data = json.loads((folder / "manifest.json").read_text())
    change(data)
    (folder / "manifest.json").write_text(json.dumps(data))


def _run(*args: str, python: str | None = None) -> subprocess.CompletedProcess[str]:
    """A shardfeed command (or a Python snippet) in a fresh process under the timeout."""
    command = [sys.executable, "-c", python, *args] if python else [sys.executable, "-m", "shardfeed", *args]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return zygote.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def _one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), done.stderr[-2000:]
    for word in words:
        assert word in last, (word, last)


@pytest.fixture()
def http_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every request it gets."""
    with recording_http_server(b"\0" * 64) as served:
        yield served


@pytest.mark.slow
@pytest.mark.parametrize("key", ["file", "index_file"])
@pytest.mark.parametrize("where", ["climbs", "absolute", "url"])
def test_manifest_entries_outside_the_folder_are_refused_before_anything_is_read(
    folder: Path, key: str, where: str, http_server: tuple[str, list[str]]
) -> None:
    url, requests = http_server
    victim = folder.parent / "victim" / "secret-shard"
    entry = {"climbs": "../victim/secret-shard", "absolute": str(victim), "url": f"{url}/shard"}[where]
    _edit(folder, lambda m: m["splits"]["train"]["shards"][0].__setitem__(key, entry))
    for done in (_run("info", str(folder)), _run("verify", str(folder)), _run(str(folder), python=LOAD)):
        if done.stderr.strip().splitlines()[-1].startswith("shardfeed.errors.ManifestError"):  # the Python API
            assert "names something outside its folder" in done.stderr
            continue
        _one_line_refusal(done, "manifest.json", "outside its folder", f"splits.train.shards[0].{key}")
    assert requests == []


@pytest.mark.slow
@pytest.mark.parametrize("depth", [40, 100_000])
def test_a_deeply_nested_manifest_is_refused_in_one_line(folder: Path, depth: int) -> None:
    """A RecursionError traceback in info, verify, show, report and load: deeper than any walker's
    stack (100,000: json's own decoder gives up) or deeper than a manifest ever nests (40)."""
    if depth < 900:
        _edit(folder, lambda m: m.__setitem__("extra", json.loads("[" * depth + "]" * depth)))
    else:
        text = (folder / "manifest.json").read_text().rstrip()
        (folder / "manifest.json").write_text(text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}")
    for command in (("info", str(folder)), ("verify", str(folder)), ("show", str(folder), "-o", str(folder / "s.png"))):
        _one_line_refusal(_run(*command), "manifest.json", "nests deeper" if depth < 900 else "not valid JSON")


def test_a_split_name_that_is_a_path_is_refused(folder: Path) -> None:
    _edit(folder, lambda m: m["splits"].__setitem__("../../x", m["splits"].pop("train")))
    _one_line_refusal(_run("info", str(folder)), "manifest.json", "split name '../../x'")


def test_a_class_name_holding_terminal_escapes_is_refused_never_printed(folder: Path) -> None:
    _edit(folder, lambda m: m["labels"].__setitem__(0, "c0\x1b]0;owned\x07\x1b[2J"))
    done = _run("info", str(folder))
    _one_line_refusal(done, "manifest.json", "control character")
    assert "\x1b" not in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, words",
    [
        (lambda m: m.__setitem__("splits", [m["splits"]]), ["'splits' is a JSON list"]),
        (lambda m: m["splits"]["train"].__setitem__("num_records", "12x"), ["splits.train.num_records"]),
        (lambda m: m["splits"]["train"]["shards"][1].__setitem__("num_bytes", None), ["shards[1].num_bytes"]),
        (lambda m: m["splits"]["train"].__setitem__("class_counts", {"c0": "9"}), ["class_counts"]),
    ],
)
def test_a_malformed_manifest_is_one_line_naming_the_field(
    folder: Path, change: Callable[[dict[str, Any]], object], words: list[str]
) -> None:
    _edit(folder, change)
    _one_line_refusal(_run("info", str(folder)), "manifest.json", *words)
    verified = _run("verify", str(folder))
    assert verified.returncode == 1 and "Traceback" not in verified.stderr, verified.stderr[-2000:]
    assert words[0] in verified.stdout + verified.stderr


@pytest.mark.slow
@pytest.mark.parametrize("which", ["train-00000-of-00002", "index/train-00000-of-00002.idx", "manifest.json"])
def test_a_fifo_in_the_folder_never_hangs_a_reader(folder: Path, which: str) -> None:
    """A FIFO blocks whoever opens it until a writer comes: no command may open one."""
    (folder / which).unlink()
    os.mkfifo(folder / which)
    for done in (_run("info", str(folder)), _run("verify", str(folder))):
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "FIFO" in done.stdout + done.stderr
    loaded = _run(str(folder), python=LOAD)
    if which.startswith("index/"):  # `load` streams the shards and never reads the index files
        assert loaded.returncode == 0, loaded.stderr[-2000:]
    else:
        assert loaded.returncode == 1 and "FIFO" in loaded.stderr.strip().splitlines()[-1], loaded.stderr[-2000:]


def test_an_index_file_larger_than_its_records_need_is_refused_before_it_is_read(folder: Path) -> None:
    index = folder / "index" / "train-00000-of-00002.idx"
    records = len(index.read_text().splitlines())
    with index.open("a") as f:
        f.write("0 16\n" * 200_000)  # 1 MB: far more than `records` lines of 42 bytes
    done = _run("info", str(folder))
    _one_line_refusal(done, str(index), "file too large", f"an index of {records} records")
    verified = _run("verify", str(folder))
    assert verified.returncode == 1 and "file too large" in verified.stdout + verified.stderr


def test_report_json_naming_files_outside_the_source_draws_none_of_them(folder: Path, tmp_path: Path) -> None:
    """report.html embeds thumbnails of skipped inputs: an edited report.json must not make it
    embed (and so disclose) any other file on the machine."""
    source = json.loads((folder / "manifest.json").read_text())["source"]["path"]
    inside = sorted(p for p in Path(source).rglob("*.jpg"))[0].relative_to(source)
    victim = folder.parent / "victim" / "photo.jpg"
    report = json.loads((folder / "report.json").read_text())
    report["skipped"] = [
        {"file": str(inside), "reason": "drawn: inside the source"},
        {"file": os.path.relpath(victim, source), "reason": "climbs out"},
        {"file": str(victim), "reason": "absolute"},
    ]
    (folder / "report.json").write_text(json.dumps(report))
    page = tmp_path / "page.html"
    done = _run("report", str(folder), "--out", str(page))
    assert done.returncode == 0, done.stderr[-2000:]
    html = page.read_text()
    table = html[html.index("drawn: inside the source") - 3000 :]
    assert table.count("outside the source folder, not drawn") == 2
    assert "data:image/jpeg;base64" in html[html.index(str(inside)) : html.index("drawn: inside the source")]


def _claim_length(shard: Path, record: int, length: int) -> int:
    """Rewrites the length field of `shard`'s record `record` to `length`, with a valid length CRC
    (as someone editing a downloaded folder would), the file's size unchanged; its byte offset."""
    data = bytearray(shard.read_bytes())
    offset = 0
    for _ in range(record):
        offset += struct.unpack_from("<Q", data, offset)[0] + tfrecord.FRAMING_BYTES
    header = struct.pack("<Q", length)
    data[offset : offset + 12] = header + struct.pack("<I", tfrecord.masked_crc(header))
    shard.write_bytes(bytes(data))
    return offset


INDEXED = (
    "import sys, shardfeed; r = shardfeed.IndexedRecords(sys.argv[1], 'train'); [r.record(i) for i in range(len(r))]"
)


@pytest.mark.slow
def test_a_record_claiming_more_bytes_than_its_shard_holds_is_one_line_in_every_reader(folder: Path) -> None:
    """A length field of 2^40 with a valid CRC, the file's size unchanged: TensorFlow's reader
    allocates what it says (`load` died with a segmentation fault), verify's a MemoryError. Each
    reader names the shard and the record's byte offset instead; the index file (unedited) lists
    the record's true size, so IndexedRecords finds the record cut short."""
    shard = folder / "train-00000-of-00002"
    offset = _claim_length(shard, 1, 1 << 40)
    loaded = _run(str(folder), python=LOAD)
    assert loaded.returncode == 1, loaded.stderr[-2000:]  # not -11 (SIGSEGV)
    last = loaded.stderr.strip().splitlines()[-1]
    assert str(shard) in last and f"record 1 at byte {offset} claims 1,099,511,627,776 bytes" in last, last
    verified = _run("verify", str(folder))
    assert verified.returncode == 1 and "Traceback" not in verified.stderr, verified.stderr[-2000:]
    assert f"record 1 at byte {offset}" in verified.stdout + verified.stderr
    indexed = _run(str(folder), python=INDEXED)
    assert indexed.returncode == 1, indexed.stderr[-2000:]
    assert "CorruptRecordError" in indexed.stderr and f"byte {offset}" in indexed.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_index_entry_past_its_shard_is_refused_before_a_record_is_read(folder: Path) -> None:
    """An index line claiming 2^40 bytes (os.pread allocated what it said): IndexedRecords
    refuses the folder when it opens it, naming the index file and the line."""
    index = folder / "index" / "train-00000-of-00002.idx"
    lines = index.read_text().splitlines()
    lines[2] = f"{lines[2].split()[0]} {1 << 40}"
    index.write_text("\n".join(lines) + "\n")
    indexed = _run(str(folder), python=INDEXED)
    assert indexed.returncode == 1, indexed.stderr[-2000:]
    last = indexed.stderr.strip().splitlines()[-1]
    assert "CorruptRecordError" in last and str(index) in last and "record 2" in last, last


def test_a_mirror_refuses_a_shard_whose_record_claims_more_than_it_holds(folder: Path, tmp_path: Path) -> None:
    """`serve worker --mirror`: the service's workers read with graph ops only, so the mirror
    checks each record's length when it fetches: an edited shard whose manifest was edited to
    match (size and SHA-256) is refused, naming the shard and the record."""
    import fsspec

    from shardfeed.read.remote.cache import ShardCache
    from shardfeed.read.remote.mirror import mirror

    shard = folder / "train-00000-of-00002"
    offset = _claim_length(shard, 1, 1 << 40)

    def matched(data: dict[str, Any]) -> None:
        entry = data["splits"]["train"]["shards"][0]
        entry["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()

    _edit(folder, matched)
    store = fsspec.filesystem("memory")
    bucket = f"memory://hostile-{tmp_path.name}/data"
    store.put(str(folder), bucket, recursive=True)
    try:
        with pytest.raises(CorruptRecordError, match=rf"train-00000-of-00002 .*record 1 at byte {offset} claims"):
            mirror(bucket, ShardCache(str(tmp_path / "cache")))
    finally:
        store.rm(bucket, recursive=True)
