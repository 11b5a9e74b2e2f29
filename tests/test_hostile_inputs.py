"""Datasets someone else made, probed as an attacker would: nothing is written, read or fetched
outside the folders the user named, memory stays bounded, nothing hangs, and every refused item
is reported with its reason.

Each probe runs the real CLI in its own process under a timeout, in a scratch root whose every
file is listed before and after: anything created or changed outside the allowed folders (the
source, the output, the staging cache) fails the test.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import crops, jpeg_bytes, photos, recording_http_server
from PIL import Image

TIMEOUT_S = 180


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its content's hash."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


# Runs a command and prints, last on stdout, the peak memory (KiB) of it and every process under it:
# this process's children are only those, so an earlier, larger child of pytest cannot hide it.
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)\n"
    "sys.exit(code)\n"
)


def _convert(scratch: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`shardfeed convert ARGS` in a fresh process with its staging cache under scratch/cache;
    the result and the peak memory (KiB) of it and its workers. Files outside scratch/src,
    scratch/out and scratch/cache must be as they were."""
    allowed = ("src", "out", "cache")
    before = {k: v for k, v in _tree(scratch).items() if not k.startswith(allowed)}
    env = {**os.environ, "XDG_CACHE_HOME": str(scratch / "cache"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "shardfeed", "convert", *args],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    *printed, peak = done.stdout.splitlines()
    done.stdout = "\n".join(printed)
    after = {k: v for k, v in _tree(scratch).items() if not k.startswith(allowed)}
    assert after == before, f"files created or changed outside the allowed folders:\n{done.stderr}"
    return done, int(peak)


def _skipped(out: Path) -> dict[str, str]:
    return {s["file"]: s["reason"] for s in json.loads((out / "report.json").read_text())["skipped"]}


def _jpegs(count: int) -> list[bytes]:
    return [jpeg_bytes(c) for c in crops(photos()["coffee"], count, seed=5)]


def _member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


class _Zeros(io.RawIOBase):
    """`size` zero bytes, made as they are read."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = min(self.left, 1 << 20 if n < 0 else n)
        self.left -= n
        return bytes(n)


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """A scratch root: src/ (the hostile data), out/ (the output), a victim file beside them."""
    (tmp_path / "src").mkdir()
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "existing.jpg").write_bytes(b"the user's own photo")
    return tmp_path


def test_tar_members_that_climb_out_are_reported_never_written(scratch: Path) -> None:
    """CVE-2007-4559's class: '../' members aimed at the scratch root (exactly as many as the
    staging folder is deep) overwrite nothing and create nothing there; absolute names neither."""
    images = _jpegs(4)
    climb = "../" * 6  # from staged/<id>/all/<tar>/ up to the scratch root
    with tarfile.open(scratch / "src" / "data.tar", "w") as archive:
        for i, data in enumerate(images[:2]):
            _member(archive, f"{i:04d}.jpg", data)
            _member(archive, f"{i:04d}.cls", b"0")
        _member(archive, f"{climb}victim/existing.jpg", images[2])
        _member(archive, f"{climb}victim/existing.cls", b"1")
        _member(archive, f"{climb}victim/new/created.jpg", images[3])
        _member(archive, f"{climb}victim/new/created.cls", b"1")
        _member(archive, "/abs/path.jpg", images[3])
        _member(archive, "/abs/path.cls", b"1")
    done, _ = _convert(scratch, "src/data.tar", "out")
    assert done.returncode == 0, done.stderr
    assert (scratch / "victim" / "existing.jpg").read_bytes() == b"the user's own photo"
    skipped = _skipped(scratch / "out")
    climbing = {k: v for k, v in skipped.items() if "victim" in k}
    assert len(climbing) == 2 and all("leaves the folder" in r for r in climbing.values())
    assert any("/abs/path" in k and "absolute" in r for k, r in skipped.items())
    assert json.loads((scratch / "out" / "manifest.json").read_text())["splits"]["train"]["num_records"] == 2


def test_a_repeated_tar_key_is_reported_both_times_never_merged(scratch: Path) -> None:
    """The same key twice: neither sample's label may go with the other's bytes."""
    images = _jpegs(3)
    with tarfile.open(scratch / "src" / "data.tar", "w") as archive:
        for key, data, label in (("a", images[0], b"0"), ("b", images[1], b"1"), ("a", images[2], b"1")):
            _member(archive, f"{key}.jpg", data)
            _member(archive, f"{key}.cls", label)
        _member(archive, "c.jpg", images[0])  # one sample, its image member twice
        _member(archive, "c.jpg", images[1])
        _member(archive, "c.cls", b"0")
    done, _ = _convert(scratch, "src/data.tar", "out", "--split", "train=1")
    assert done.returncode == 0, done.stderr
    skipped = _skipped(scratch / "out")
    assert [r for k, r in skipped.items() if k.endswith(":a")] == [skipped["data.tar:a"]]
    assert "repeated" in skipped["data.tar:a"] and "never merged" in skipped["data.tar:c"]
    report = json.loads((scratch / "out" / "report.json").read_text())
    assert sum(1 for s in report["skipped"] if s["file"] == "data.tar:a") == 2
    m = json.loads((scratch / "out" / "manifest.json").read_text())
    assert sum(s["num_records"] for s in m["splits"].values()) == 1


def test_link_and_special_tar_members_are_reported_as_what_they_are(scratch: Path) -> None:
    images = _jpegs(1)
    with tarfile.open(scratch / "src" / "data.tar", "w") as archive:
        _member(archive, "0.jpg", images[0])
        _member(archive, "0.cls", b"0")
        for key, kind in (("sym", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE), ("fifo", tarfile.FIFOTYPE)):
            info = tarfile.TarInfo(f"{key}.jpg")
            info.type, info.linkname = kind, str(scratch / "victim" / "existing.jpg")
            archive.addfile(info)
            _member(archive, f"{key}.cls", b"0")
    done, _ = _convert(scratch, "src/data.tar", "out", "--split", "train=1")
    assert done.returncode == 0, done.stderr
    skipped = _skipped(scratch / "out")
    assert skipped["data.tar:sym"].startswith("member 'sym.jpg' is a symbolic link (to '")
    assert skipped["data.tar:hard"].startswith("member 'hard.jpg' is a hard link (to '")
    assert skipped["data.tar:fifo"] == "member 'fifo.jpg' is a FIFO: links and special files are never extracted"
    assert json.loads((scratch / "out" / "manifest.json").read_text())["splits"]["train"]["num_records"] == 1


def test_a_tar_cut_short_is_one_line_naming_it_and_leaves_no_staging(scratch: Path) -> None:
    """A partial download: what follows the cut cannot be listed, so the conversion stops, saying
    where the tar ends; the half-done staging folder is removed (the re-run starts over)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for i, data in enumerate(_jpegs(4)):
            _member(archive, f"{i}.jpg", data)
            _member(archive, f"{i}.cls", b"0")
    whole = buffer.getvalue()
    (scratch / "src" / "data.tar").write_bytes(whole[: len(whole) // 2])
    done, _ = _convert(scratch, "src/data.tar", "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: src/data.tar is cut short or damaged after member '"), last
    assert not list((scratch / "cache").rglob("*.partial-*")), "the failed extraction's staging folder is left"


def test_a_damaged_parquet_file_is_one_line_naming_it(scratch: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"image": _jpegs(2), "label": [0, 1]}), scratch / "src" / "t.parquet")
    data = (scratch / "src" / "t.parquet").read_bytes()
    (scratch / "src" / "t.parquet").write_bytes(data[:-8] + bytes(8))  # the footer's length and magic gone
    done, _ = _convert(scratch, "src/t.parquet", "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: src/t.parquet is not a readable Parquet file ("), last


@pytest.mark.slow
def test_a_tar_bomb_is_refused_before_it_is_read(scratch: Path) -> None:
    """A 4 MB .tar.gz declaring an 800 MB member: refused from its header, memory stays small."""
    size = 800 * 1024 * 1024
    with (
        (scratch / "src" / "bomb.tar.gz").open("wb") as f,
        gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):
        _member(tar, "0000.jpg", _jpegs(1)[0])
        _member(tar, "0000.cls", b"0")
        info = tarfile.TarInfo("0001.jpg")
        info.size = size
        tar.addfile(info, _Zeros(size))
        _member(tar, "0001.cls", b"0")
    assert (scratch / "src" / "bomb.tar.gz").stat().st_size < 4_000_000
    done, peak_kib = _convert(scratch, "src/bomb.tar.gz", "out", "--split", "train=1")
    assert done.returncode == 0, done.stderr
    assert "not read" in _skipped(scratch / "out")["bomb.tar.gz:0001"]
    assert peak_kib < 400 * 1024, f"peak memory {peak_kib / 1024:.0f} MiB"


def test_split_names_from_a_csv_are_names_never_paths(scratch: Path) -> None:
    """A CSV split value '../victim/pwnsplit' (the issue's had four '../') wrote a shard, its index
    and a partial manifest outside the output folder: now those rows are reported, the rest
    converted."""
    images = _jpegs(4)
    rows = ["path,label,split"]
    for i, data in enumerate(images):
        (scratch / "src" / f"{i}.jpg").write_bytes(data)
        rows.append(f"{i}.jpg,{'ab'[i % 2]},{'train' if i < 2 else '../victim/pwnsplit'}")
    (scratch / "src" / "list.csv").write_text("\n".join(rows) + "\n")
    done, _ = _convert(scratch, "src/list.csv", "out")
    assert done.returncode == 0, done.stderr
    skipped = _skipped(scratch / "out")
    assert set(skipped) == {"2.jpg", "3.jpg"}
    assert all("is not letters, digits, '_' and '-' only" in r for r in skipped.values())
    assert list(json.loads((scratch / "out" / "manifest.json").read_text())["splits"]) == ["train"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "named"),
    [
        ({"dataset_dict.json": {"splits": ["../../victim/pwnarrow"]}}, "split '../../victim/pwnarrow'"),
        ({"state.json": {"_data_files": [{"filename": "../victim/data.arrow"}]}}, "_data_files"),
        ({"state.json": {"_data_files": [{"filename": "/etc/hostname"}]}}, "absolute path"),
    ],
)
def test_a_save_to_disk_folder_naming_files_outside_itself_is_refused(
    scratch: Path, layout: dict[str, object], named: str
) -> None:
    pytest.importorskip("pyarrow")
    for name, content in layout.items():
        (scratch / "src" / name).write_text(json.dumps(content))
    done, _ = _convert(scratch, "src", "out")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and named in last and "outside the dataset" in last, last
    assert not (scratch / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_image_paths_in_table_rows_stay_inside_the_dataset(scratch: Path) -> None:
    """Rows naming an absolute path, a '../' path, a link out of the folder, a FIFO and an
    http:// URL on a loopback server: none is read or fetched (the FIFO hung the conversion, the
    URL was fetched); each row is reported, the rows naming files inside are converted. With
    --outside-files the absolute path is read."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    images = _jpegs(3)
    (scratch / "src" / "inside.jpg").write_bytes(images[0])
    (scratch / "src" / "sub").mkdir()
    (scratch / "src" / "sub" / "also.jpg").write_bytes(images[1])
    (scratch / "victim" / "secret.jpg").write_bytes(images[2])
    (scratch / "src" / "link.jpg").symlink_to(scratch / "victim" / "secret.jpg")
    os.mkfifo(scratch / "src" / "fifo.jpg")
    with recording_http_server(images[2]) as (base, requests):
        paths = [
            "inside.jpg",
            "./sub/also.jpg",
            str(scratch / "victim" / "secret.jpg"),
            "../victim/secret.jpg",
            "link.jpg",
            "fifo.jpg",
            f"{base}/secret.jpg",
        ]
        table = pa.table({"image": [{"bytes": None, "path": p} for p in paths], "label": [0, 1] * 3 + [0]})
        pq.write_table(table, scratch / "src" / "data.parquet")
        done, _ = _convert(scratch, "src/data.parquet", "out", "--split", "train=1")
        assert done.returncode == 0, done.stderr
        assert requests == []
        skipped = _skipped(scratch / "out")
        assert len(skipped) == 5, skipped
        reasons = " | ".join(skipped.values())
        for words in (
            "absolute path",
            "leaves the folder",
            "link that leads outside",
            "not a regular file: a FIFO",
            "is a URL",
        ):
            assert words in reasons, words
        m = json.loads((scratch / "out" / "manifest.json").read_text())
        assert m["splits"]["train"]["num_records"] == 2
        (scratch / "src" / "fifo.jpg").unlink()
        done, _ = _convert(scratch, "src/data.parquet", "out2", "--split", "train=1", "--outside-files")
        assert done.returncode == 0, done.stderr
        assert len(requests) >= 1  # the opt-in fetches what the row names


@pytest.mark.parametrize("name", ["dog\nrm -rf", "dog\u2028rm -rf"])
def test_a_class_name_with_a_line_break_is_refused_in_one_line(scratch: Path, name: str) -> None:
    """labels.txt and TFDS' label file hold one name a line: 'cat\\nrm' would make two classes,
    and so would U+2028 for a Python reader (str.splitlines)."""
    images = _jpegs(2)
    rows = ["path,label"] + [f'{i}.jpg,"{label}"' for i, label in enumerate(("cat", name))]
    for i, data in enumerate(images):
        (scratch / "src" / f"{i}.jpg").write_bytes(data)
    (scratch / "src" / "list.csv").write_text("\n".join(rows) + "\n")
    done, _ = _convert(scratch, "src/list.csv", "out")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "holds a line break or control character" in last, done.stderr
    assert f"U+{ord(name[3]):04X}" in last
    assert not (scratch / "out" / "labels.txt").exists()


def test_every_character_a_reader_breaks_lines_at_or_acts_on_is_refused_in_a_class_name() -> None:
    """Python's str.splitlines is the oracle for line breaks (it splits at U+0085, U+2028, U+001C,
    ...); C1 controls (a terminal takes U+009B for ESC [) and bidirectional controls (U+202E
    reverses what a terminal shows) are refused too; other text, accents and CJK included, is not."""
    from shardfeed.format.confinement import text_refusal

    breaks = [c for c in map(chr, range(0x3000)) if len(f"a{c}b".splitlines()) > 1]
    assert {"\n", "\x85", "\u2028", "\u2029", "\x1c"} <= set(breaks)
    acted_on = ["\x9b", "\x1b", "\x7f", "\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u061c"]
    for c in breaks + acted_on:
        assert text_refusal(f"dog{c}cat") is not None, repr(c)
    for fine in ("cat", "café au lait", "猫", "Ελληνικά", "a-b_c (d)", "x\u00a0y"):
        assert text_refusal(fine) is None, fine


def _yolo(root: Path, names: str | None = "cat\ndog\n", data_yaml: str | None = None) -> Path:
    """A YOLO folder as Ultralytics' docs lay one out: images/, labels/ (class x y w h, fractions),
    and classes.txt and/or data.yaml."""
    for sub in ("images", "labels"):
        (root / sub).mkdir(parents=True)
    for i, data in enumerate(_jpegs(2)):
        (root / "images" / f"{i}.jpg").write_bytes(data)
        (root / "labels" / f"{i}.txt").write_text(f"{i} 0.5 0.5 0.25 0.25\n")
    if names is not None:
        (root / "classes.txt").write_text(names)
    if data_yaml is not None:
        (root / "data.yaml").write_text(data_yaml)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("classes.txt a FIFO", "not a regular file: a FIFO"),
        ("data.yaml linked to /dev/zero", "a link that leads outside the dataset's folder (to '/dev/zero')"),
        ("ImageSets/Main/train.txt a FIFO", "not a regular file: a FIFO"),
    ],
)
def test_a_dataset_file_that_would_hang_or_never_end_is_refused_in_one_line(
    scratch: Path, case: str, expected: str
) -> None:
    """A FIFO blocked the conversion forever; /dev/zero grew to 5.3 GB and a MemoryError. Each in
    a real process under a timeout: exit 1, one line naming the file, nothing written."""
    src = scratch / "src" / "data"
    if case.startswith("ImageSets"):
        for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
            (src / sub).mkdir(parents=True)
        (src / "JPEGImages" / "0.jpg").write_bytes(_jpegs(1)[0])
        os.mkfifo(src / "ImageSets" / "Main" / "train.txt")
    elif case.startswith("classes.txt"):
        _yolo(src, names=None)
        os.mkfifo(src / "classes.txt")
    else:
        _yolo(src)
        (src / "data.yaml").symlink_to("/dev/zero")
    done, peak = _convert(scratch, "src/data", "out")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and expected in last and "Traceback" not in done.stderr, done.stderr
    assert peak < 2_000_000  # KiB: nothing read whole
    assert not (scratch / "out" / "manifest.json").exists()


def test_class_lists_and_yaml_linked_outside_or_malformed_are_refused_not_used(scratch: Path) -> None:
    """A classes.txt linked to a file outside the folder became the class names; YAML aliases
    ran 90 s to 3.5 GB; a names mapping with mixed key types was a TypeError traceback; None and
    lists were stringified into names. Each is one SourceError naming the file (the Python API)."""
    from shardfeed import ConvertOptions, convert
    from shardfeed.errors import SourceError

    (scratch / "victim" / "names.txt").write_text("secret\nnames\n")
    linked = _yolo(scratch / "src" / "linked", names=None)
    (linked / "classes.txt").symlink_to(scratch / "victim" / "names.txt")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    cases = {
        linked: "a link that leads outside the dataset's folder",
        _yolo(scratch / "src" / "aliases", names=None, data_yaml=bomb + "names: [cat, dog]\n"): "YAML aliases",
        _yolo(scratch / "src" / "mixed", names=None, data_yaml="names: {0: cat, '1': dog}\n"): "`names` must list",
        _yolo(scratch / "src" / "none", names=None, data_yaml="names: [cat, null]\n"): "`names` must list",
        _yolo(scratch / "src" / "lists", names=None, data_yaml="names: [cat, [dog]]\n"): "`names` must list",
    }
    for folder, expected in cases.items():
        with pytest.raises(SourceError, match=None) as raised:
            convert(str(folder), str(scratch / "out" / folder.name), ConvertOptions(), workers=1, progress=False)
        message = str(raised.value)
        assert expected in message and "\n" not in message, message
        assert not (scratch / "out" / folder.name / "labels.txt").exists()
    digits = _yolo(scratch / "src" / "digits", names=None, data_yaml="names: [0, 1]\n")  # unquoted digit names
    convert(str(digits), str(scratch / "out" / "digits"), ConvertOptions(split="train=1"), workers=1, progress=False)
    assert (scratch / "out" / "digits" / "labels.txt").read_text().split() == [
        "1:0",
        "2:1",
    ]  # ids from 1: 0 is the background


def test_coco_annotations_that_are_not_an_object_are_refused_in_one_line(scratch: Path) -> None:
    from shardfeed import ConvertOptions, convert
    from shardfeed.errors import SourceError

    (scratch / "src" / "list.json").write_text("[1, 2, 3]")
    (scratch / "src" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for name, expected in (("list.json", "is a JSON object; this is a list"), ("deep.json", "not a readable COCO")):
        with pytest.raises(SourceError) as raised:
            convert(
                str(scratch / "src" / name), str(scratch / "out" / name), ConvertOptions(), workers=1, progress=False
            )
        assert expected in str(raised.value), raised.value


def _voc(root: Path, names: tuple[str, ...] = ("0", "1")) -> Path:
    """A VOC folder as VOC2012 lays one out: JPEGImages/ and one Annotations XML per image."""
    for sub in ("Annotations", "JPEGImages"):
        (root / sub).mkdir(parents=True)
    for name, data in zip(names, _jpegs(len(names)), strict=True):
        (root / "JPEGImages" / f"{name}.jpg").write_bytes(data)
        (root / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><object><name>cat</name><bndbox><xmin>5</xmin>"
            "<ymin>5</ymin><xmax>50</xmax><ymax>50</ymax></bndbox></object></annotation>"
        )
    return root


def _segmentation(root: Path) -> Path:
    """A segmentation folder: images/, masks/ (a one-channel PNG of class ids each), classes.txt."""
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i, data in enumerate(_jpegs(2)):
        (root / "images" / f"{i}.jpg").write_bytes(data)
        height, width = np.asarray(Image.open(io.BytesIO(data))).shape[:2]
        Image.fromarray(np.zeros((height, width), np.uint8)).save(root / "masks" / f"{i}.png")
    (root / "classes.txt").write_text("background\n")
    return root


def _coco(root: Path) -> Path:
    """COCO annotations beside their two images (file_name relative to the .json's folder)."""
    root.mkdir(parents=True)
    images = []
    for i, data in enumerate(_jpegs(2)):
        (root / f"{i}.jpg").write_bytes(data)
        height, width = np.asarray(Image.open(io.BytesIO(data))).shape[:2]
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "width": width, "height": height})
    annotations = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 5, 40, 40], "iscrowd": 0, "area": 1600}]
    categories = [{"id": 1, "name": "cat"}]
    (root / "instances.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    return root / "instances.json"


def _relink(path: Path, target: Path) -> None:
    """`path` made a symbolic link to `target` (a copy of what `path` held: it still parses)."""
    shutil.copy(path, target)
    path.unlink()
    path.symlink_to(target)


def test_annotation_files_images_and_masks_linked_outside_the_folder_are_reported_unless_asked(scratch: Path) -> None:
    """A downloaded VOC, YOLO, segmentation or COCO dataset whose XML, label file, mask or image
    is a link out of its folder (their content ended in shards and report.html): each is a
    reported item naming the link's target and --outside-files, the rest listed; with
    outside_files they are read. A dataset folder that is itself a link is inside itself."""
    from shardfeed.write.sources import listed, resolve_source

    victim = scratch / "victim"
    voc, yolo = _voc(scratch / "src" / "voc", ("0", "1", "2")), _yolo(scratch / "src" / "yolo")
    segmentation, coco = _segmentation(scratch / "src" / "seg"), _coco(scratch / "src" / "coco")
    _relink(voc / "Annotations" / "0.xml", victim / "0.xml")
    _relink(voc / "JPEGImages" / "1.jpg", victim / "1.jpg")
    _relink(yolo / "labels" / "0.txt", victim / "0.txt")
    _relink(yolo / "images" / "1.jpg", victim / "yolo-1.jpg")
    _relink(segmentation / "masks" / "1.png", victim / "1.png")
    _relink(coco.parent / "0.jpg", victim / "coco-0.jpg")
    expected = {
        "voc": ({"Annotations/0.xml", "JPEGImages/1.jpg"}, ["JPEGImages/2.jpg"]),
        "yolo": ({"images/0.jpg", "images/1.jpg"}, []),
        "seg": ({"images/1.jpg"}, ["images/0.jpg"]),
        "coco/instances.json": ({"0.jpg"}, ["1.jpg"]),
    }
    for name, (refused, kept) in expected.items():
        path = str(scratch / "src" / name)
        found = listed(resolve_source(path))
        reasons = {key: why for key, why in found.skipped if "outside the dataset's folder" in why}
        assert set(reasons) == refused, (name, found.skipped)
        assert all(str(victim) in why and "--outside-files" in why for why in reasons.values()), reasons
        assert [item.key for item in found.items] == kept, name
        opted = listed(resolve_source(path, container_options={"outside_files": True}))
        assert len(opted.items) == len(kept) + len(refused) and not opted.skipped, (name, opted.skipped)
    (scratch / "seg-link").symlink_to(segmentation)  # the dataset's folder a link: its own files are inside it
    via_link = listed(resolve_source(str(scratch / "seg-link")))
    assert [item.key for item in via_link.items] == ["images/0.jpg"] and len(via_link.skipped) == 1


def test_voc_xml_in_utf16_with_a_doctype_and_two_xmls_naming_one_image_are_reported(scratch: Path) -> None:
    """A UTF-16 XML slipped past a byte search for '<!DOCTYPE' (its entities were expanded); two
    XMLs naming one image were converted twice with different objects. Each is reported: the
    DOCTYPE XML, the image named twice and both XMLs naming it."""
    from shardfeed.write.sources import listed, resolve_source

    voc = _voc(scratch / "src" / "voc", ("0", "1", "2"))
    doctype = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY e "0.jpg">]>'
    (voc / "Annotations" / "0.xml").write_bytes(
        (doctype + "<annotation><filename>&e;</filename></annotation>").encode("utf-16")
    )
    (voc / "Annotations" / "1.xml").write_bytes((voc / "Annotations" / "1.xml").read_text().encode("utf-16"))
    shutil.copy(voc / "Annotations" / "2.xml", voc / "Annotations" / "2-copy.xml")
    found = listed(resolve_source(str(voc)))
    skipped = dict(found.skipped)
    assert skipped["Annotations/0.xml"].startswith("has a DOCTYPE")
    assert skipped["JPEGImages/2.jpg"].startswith("named by ['Annotations/2-copy.xml', 'Annotations/2.xml']")
    assert (
        skipped["Annotations/2.xml"]
        == skipped["Annotations/2-copy.xml"]
        == ("names JPEGImages/2.jpg, as another annotation file does")
    )
    assert [item.key for item in found.items] == ["JPEGImages/1.jpg"]  # a UTF-16 XML without a DOCTYPE is read


def _png_of_zeros(width: int, height: int) -> bytes:
    """A grey PNG of `width` x `height` black pixels, made as zlib makes one (a row at a time):
    ~875 KB for 30000 x 30000, 900 MB once decoded."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row = zlib.compressobj(9), bytes(width + 1)  # filter byte 0, then the row
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.slow
def test_a_mask_declaring_a_huge_size_is_reported_before_it_is_decoded(scratch: Path) -> None:
    """A 875 KB mask PNG of 30000 x 30000 was decoded whole (1.76 GB) before its size was
    checked: its header now says it is not its image's size, and the image is reported; the
    conversion's peak memory stays far below what decoding it takes."""
    segmentation = _segmentation(scratch / "src" / "seg")
    (segmentation / "masks" / "0.png").write_bytes(_png_of_zeros(30000, 30000))
    done, peak = _convert(scratch, "src/seg", "out", "--split", "train=1", "--workers", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    reason = _skipped(scratch / "out")["images/0.jpg"]
    assert "mask masks/0.png is 30000 x 30000, its image" in reason, reason
    assert peak < 700_000, peak  # KiB: TensorFlow's import is most of it; the decode alone is 900 MB


@pytest.mark.slow
def test_convert_reports_linked_files_and_reads_them_with_outside_files(scratch: Path) -> None:
    """The same rule from the command line, each run a real process under the timeout: a VOC
    folder's linked XML and a COCO file's linked image are reported (exit 0, the rest converted),
    and --outside-files converts them; the old --outside-images still works."""
    voc, coco = _voc(scratch / "src" / "voc", ("0", "1")), _coco(scratch / "src" / "coco")
    _relink(voc / "Annotations" / "0.xml", scratch / "victim" / "0.xml")
    _relink(coco.parent / "0.jpg", scratch / "victim" / "coco-0.jpg")
    for source, linked in (("src/voc", "Annotations/0.xml"), ("src/coco/instances.json", "0.jpg")):
        name = source.split("/")[1]
        done, peak = _convert(scratch, source, f"out/{name}", "--split", "train=1")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "--outside-files" in _skipped(scratch / "out" / name)[linked]
        assert json.loads((scratch / "out" / name / "manifest.json").read_text())["splits"]["train"]["num_records"] == 1
        for flag in ("--outside-files", "--outside-images"):
            done, _ = _convert(scratch, source, f"out/{name}{flag}", "--split", "train=1", flag)
            assert done.returncode == 0, done.stderr[-2000:]
            manifest = json.loads((scratch / "out" / f"{name}{flag}" / "manifest.json").read_text())
            assert manifest["splits"]["train"]["num_records"] == 2, flag
        assert peak < 1_000_000  # KiB
