"""WebDataset tar shards as a source, written by the `webdataset` library's TarWriter from real
photos: after conversion each split holds exactly the (image bytes, class) pairs written; samples
without an image or label are reported with their members."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import discovered_and_converted, shard_bytes

from shardfeed import ConvertOptions, convert
from shardfeed.format import schema
from shardfeed.read.indexed import IndexedRecords

wds = pytest.importorskip("webdataset")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging folders (write/sources/staging.py) under the test's own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _photos(photo_tree: Path) -> list[tuple[bytes, int, str]]:
    """(bytes, class id, extension) of every photo."""
    classes = sorted(p.name for p in photo_tree.iterdir())
    return [(p.read_bytes(), classes.index(p.parent.name), p.suffix[1:]) for p in sorted(photo_tree.rglob("*.*"))]


def _write(path: Path, samples: list[dict[str, object]]) -> None:
    with wds.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)


def _converted(out: Path) -> dict[str, Counter[tuple[str, int]]]:
    m = json.loads((out / "manifest.json").read_text())
    found = {}
    for split in m["splits"]:
        records = IndexedRecords(str(out), split=split)
        found[split] = Counter(
            (hashlib.sha256(e[schema.ENCODED]).hexdigest(), int(e[schema.LABEL]))
            for e in (records.example(i) for i in range(len(records)))
        )
    return found


def test_tar_shards_with_splits_in_their_names(photo_tree: Path, tmp_path: Path) -> None:
    photos = _photos(photo_tree)
    shards = tmp_path / "shards"
    shards.mkdir()
    expected: dict[str, Counter[tuple[str, int]]] = {"train": Counter(), "val": Counter()}
    for n, chunk in enumerate((photos[:20], photos[20:36], photos[36:])):
        split = "val" if n == 2 else "train"
        samples = [{"__key__": f"{n}{i:04d}", ext: data, "cls": label} for i, (data, label, ext) in enumerate(chunk)]
        _write(shards / f"{split}-{n:06d}.tar", samples)
        expected[split].update((hashlib.sha256(d).hexdigest(), label) for d, label, _ in chunk)
    result = convert(str(shards), str(tmp_path / "out"), ConvertOptions(shards=2), workers=2, progress=False)
    assert result.manifest.data["source"]["kind"] == "webdataset"
    assert _converted(tmp_path / "out") == expected
    from shardfeed.tools import info, verify

    assert info(str(tmp_path / "out"))["records"] == len(photos)
    assert verify(str(tmp_path / "out"), workers=1, progress=False).ok


def test_a_brace_pattern_json_labels_and_incomplete_samples(photo_tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("braceexpand")
    photos = _photos(photo_tree)
    names = ["astronaut", "chelsea", "coffee", "rocket"]
    for n in range(2):
        samples: list[dict[str, object]] = [
            {"__key__": f"s{n}{i:03d}", ext: data, "json": {"label": names[label]}}
            for i, (data, label, ext) in enumerate(photos[n * 22 : (n + 1) * 22])
        ]
        samples.append({"__key__": f"nolabel{n}", "jpg": photos[0][0], "json": {"other": 1}})
        samples.append({"__key__": f"noimage{n}", "json": {"label": "coffee"}})
        _write(tmp_path / f"data-{n:06d}.tar", samples)
    source = str(tmp_path / "data-{000000..000001}.tar")
    from shardfeed.write.sources.webdataset import WebDatasetSource

    out = tmp_path / "out"
    result = convert(WebDatasetSource(source, label_field="label"), str(out), ConvertOptions(shards=1), workers=1)
    assert result.num_written == len(photos) and result.manifest.labels == names
    report = json.loads((out / "report.json").read_text())
    skipped = {s["file"]: s["reason"] for s in report["skipped"]}
    assert skipped["data-000000.tar:nolabel0"] == "no 'label' field in its .json"
    assert skipped["data-000001.tar:noimage1"] == "no image member (json)"
    got = sum(_converted(out).values(), Counter())
    assert got == Counter((hashlib.sha256(d).hexdigest(), label) for d, label, _ in photos)


def test_a_folder_of_tars_with_sidecars_is_webdataset(photo_tree: Path, tmp_path: Path) -> None:
    """img2dataset's layout: 00000.tar beside 00000.parquet and 00000_stats.json, plus a classes
    file and a README. The tars are the data; the rest is left alone (was: 'no images found ...
    classes.txt: not inside a class folder'). Bare class ids are a warning naming --class-names."""
    photos = _photos(photo_tree)
    shards = tmp_path / "shards"
    shards.mkdir()
    for n, chunk in enumerate((photos[:22], photos[22:])):
        samples = [{"__key__": f"{n}{i:04d}", ext: data, "cls": label} for i, (data, label, ext) in enumerate(chunk)]
        _write(shards / f"{n:05d}.tar", samples)
        (shards / f"{n:05d}.parquet").write_bytes(b"PAR1 metadata written by img2dataset PAR1")
        (shards / f"{n:05d}_stats.json").write_text(json.dumps({"count": len(chunk)}))
    (shards / "classes.txt").write_text("astronaut\nchelsea\ncoffee\nrocket\n")
    (shards / "README.md").write_text("downloaded with img2dataset\n")
    with pytest.warns(UserWarning, match=r"class ids 0\.\.3 without names.*--class-names"):
        result = convert(str(shards), str(tmp_path / "out"), ConvertOptions(split="train=1"), workers=1, progress=False)
    assert result.manifest.data["source"]["kind"] == "webdataset"
    expected = Counter((hashlib.sha256(d).hexdigest(), label) for d, label, _ in photos)
    assert _converted(tmp_path / "out") == {"train": expected}
    from shardfeed.write.sources.webdataset import WebDatasetSource

    source = WebDatasetSource(str(shards), class_names=str(shards / "classes.txt"))
    named = convert(source, str(tmp_path / "named"), ConvertOptions(split="train=1"), workers=1, progress=False)
    assert named.manifest.labels == ["astronaut", "chelsea", "coffee", "rocket"]


def test_a_local_tar_is_read_in_place_byte_identical_to_staging(
    photo_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uncompressed local tar's images are read from their spans in the tar: nothing is
    staged on disk, and the shards are byte for byte those the staged route (compressed and
    remote tars) writes for the same tar, with the keys and classes written."""
    from shardfeed.write.sources import tar_members

    photos = _photos(photo_tree)
    samples = [{"__key__": f"k{i:04d}", ext: data, "cls": label} for i, (data, label, ext) in enumerate(photos)]
    (tmp_path / "src").mkdir()
    _write(tmp_path / "src" / "data.tar", samples)
    staged = tmp_path / "cache" / "shardfeed" / "staged"
    options = ConvertOptions(shards=3, seed=7)
    convert(str(tmp_path / "src"), str(tmp_path / "in_place"), options, workers=2, progress=False)
    assert not staged.exists(), "an uncompressed local tar was staged"
    monkeypatch.setattr(tar_members, "readable_in_place", lambda tar: False)
    convert(str(tmp_path / "src"), str(tmp_path / "staged"), options, workers=2, progress=False)
    assert staged.exists(), "the staged route was not taken"
    in_place, via_staging = shard_bytes(tmp_path / "in_place"), shard_bytes(tmp_path / "staged")
    assert sum(name.startswith(("train-", "validation-")) for name in in_place) == 6 and in_place == via_staging
    expected = Counter((hashlib.sha256(d).hexdigest(), label) for d, label, _ in photos)
    assert sum(_converted(tmp_path / "in_place").values(), Counter()) == expected


@pytest.mark.slow
def test_gzipped_tars_are_staged_in_worker_processes_byte_identical(photo_tree: Path, tmp_path: Path) -> None:
    """Gzipped tars are inflated and staged by worker processes, each into a file of its own in
    the staging folder, each image's span there holding its bytes; the shards are byte for byte
    those of staging the tars one after another in the converting process."""
    photos = _photos(photo_tree)
    (tmp_path / "src").mkdir()
    for t in range(3):
        samples = [
            {"__key__": f"k{i:04d}", ext: data, "cls": label}
            for i, (data, label, ext) in enumerate(photos)
            if i % 3 == t
        ]
        _write(tmp_path / "src" / f"data-{t:06d}.tar.gz", samples)
    source = "shardfeed.write.sources.webdataset.WebDatasetSource"
    listed = {
        route: discovered_and_converted(source, tmp_path / "src", tmp_path / route, route, tmp_path / f"cache-{route}")
        for route in ("workers", "here")
    }
    assert not listed["workers"]["tf"]
    assert listed["workers"]["files"] == ["images-00000.bin", "images-00001.bin", "images-00002.bin", "listing.json"]
    assert listed["here"]["files"] == ["images.bin", "listing.json"]
    by_key = {
        f"all/data-{i % 3:06d}.tar.gz/k{i:04d}.{e}": hashlib.sha256(d).hexdigest() for i, (d, _, e) in enumerate(photos)
    }
    assert listed["workers"]["held"] == by_key and listed["here"]["held"] == by_key
    assert shard_bytes(tmp_path / "workers") == shard_bytes(tmp_path / "here")
    assert not list((tmp_path / "cache-workers" / "shardfeed" / "staged").iterdir())  # removed once converted
    expected = Counter((hashlib.sha256(d).hexdigest(), label) for d, label, _ in photos)
    assert sum(_converted(tmp_path / "workers").values(), Counter()) == expected


def test_a_tar_cut_inside_an_image_read_in_place_is_one_error(photo_tree: Path, tmp_path: Path) -> None:
    """Seeking over the images finds no cut by itself: a tar that ends inside its last image is
    refused at listing, naming it, as the streamed read refuses it."""
    from shardfeed.errors import SourceError

    photos = _photos(photo_tree)[:3]
    samples = [{"__key__": f"k{i}", "cls": label, ext: data} for i, (data, label, ext) in enumerate(photos)]
    _write(tmp_path / "data.tar", samples)
    whole = (tmp_path / "data.tar").read_bytes()
    last_image = whole.rindex(photos[-1][0][:64])
    (tmp_path / "cut.tar").write_bytes(whole[: last_image + 100])
    with pytest.raises(SourceError, match=r"cut.tar is cut short or damaged after member 'k2\.\w+'"):
        convert(str(tmp_path / "cut.tar"), str(tmp_path / "out"), workers=1, progress=False)
    # several tars are listed in worker processes (forked: a fresh `convert` without TensorFlow
    # loaded): the error comes back whole, as its one line
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "a.tar").write_bytes(whole)
    (tmp_path / "both" / "b.tar").write_bytes(whole[: last_image + 100])
    cli = [sys.executable, "-m", "shardfeed", "convert", str(tmp_path / "both"), str(tmp_path / "out2")]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.search(r"b.tar is cut short or damaged after member 'k2\.\w+'", done.stderr.splitlines()[-1])
    split_tars = tmp_path / "good"
    split_tars.mkdir()
    for name in ("a.tar", "b.tar"):
        (split_tars / name).write_bytes(whole)
    done = subprocess.run(
        [*cli[:4], str(split_tars), str(tmp_path / "out3")], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    from shardfeed.tools import info

    assert info(str(tmp_path / "out3"))["records"] == 6


def test_an_append_reads_again_only_the_images_of_a_tar_written_since(photo_tree: Path, tmp_path: Path) -> None:
    """Images read in place are listed with their tar's modification time: an append that finds
    a new tar reads none of the converted images again, and after one tar is touched it reads
    that tar's images again (same bytes: none changed)."""

    photos = _photos(photo_tree)
    (tmp_path / "src").mkdir()
    for n, chunk in enumerate((photos[:20], photos[20:40], photos[40:])):
        samples = [{"__key__": f"{n}{i:04d}", ext: data, "cls": label} for i, (data, label, ext) in enumerate(chunk)]
        _write(tmp_path / f"data-{n}.tar", samples)
    for n in range(2):
        os.replace(tmp_path / f"data-{n}.tar", tmp_path / "src" / f"data-{n}.tar")
    options = ConvertOptions(shards=1, split_rule="hash", append=True)
    convert(str(tmp_path / "src"), str(tmp_path / "out"), options, workers=1, progress=False)
    os.replace(tmp_path / "data-2.tar", tmp_path / "src" / "data-2.tar")
    grown = convert(str(tmp_path / "src"), str(tmp_path / "out"), options, workers=1, progress=False).appended
    assert grown is not None and (grown.known, grown.reread, sum(grown.added.values())) == (40, 0, len(photos) - 40)
    first = tmp_path / "src" / "data-0.tar"
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))
    touched = convert(str(tmp_path / "src"), str(tmp_path / "out"), options, workers=1, progress=False).appended
    assert touched is not None and (touched.reread, touched.changed, touched.added) == (20, [], {})
