"""convert --append: a folder grows by generations of shards, in real processes on real photos.
Old shards keep their bytes, an image keeps its split, a killed append resumes to the bytes of an
uninterrupted one, the union of generations is read once per epoch (also by TFDS)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, convert, load
from shardfeed.errors import ConvertError, OptionError
from shardfeed.read.options import ReadOptions
from shardfeed.write.items import Item
from shardfeed.write.splits import assign_by_hash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.corpus import build_corpus

FLAGS = ["--split-rule", "hash", "--format", "png", "--shards", "4", "--workers", "2", "-q", "--no-report"]


def _convert(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [sys.executable, "-m", "shardfeed", "convert", str(source), str(out), *FLAGS, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def _grow(source: Path, pool: list[Path], count: int) -> None:
    """Moves the next `count` images of `pool` into `source` (same class folder, same name, same
    modification time: two sources grown alike list alike, as one source does)."""
    for path in pool[:count]:
        target = source / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    del pool[:count]


def _hashes(out: Path) -> dict[str, str]:
    """SHA-256 of every shard and index file (not the manifest or reports, which hold times)."""
    files = [p for p in out.iterdir() if "-of-" in p.name] + list((out / "index").iterdir())
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _inputs(out: Path) -> dict[str, str]:
    """key -> split over every generation's inputs list."""
    rows = [
        r
        for p in sorted((out / "index").glob("inputs-g*.json.gz"))
        for r in json.loads(gzip.decompress(p.read_bytes()))
    ]
    return {key: split for key, _, split, *_ in rows}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = Path(build_corpus(str(tmp_path_factory.mktemp("append") / "all"), 360, classes=4))
    return sorted(root.rglob("*.jpg"), key=lambda p: hashlib.sha256(p.name.encode()).digest())


def _three_generations(corpus: list[Path], work: Path, kill_third: bool) -> tuple[Path, Path, dict[str, str]]:
    """Source and folder after a conversion, an append, and a third step (killed and resumed
    when asked); the shard hashes after the second step."""
    pool, source, out = list(corpus), work / "src", work / "out"
    _grow(source, pool, 120)
    assert _convert(source, out).returncode == 0
    _grow(source, pool, 60)
    before = _hashes(out)
    done = _convert(source, out, "--append")
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(_hashes(out)[name] == digest for name, digest in before.items()), "an old shard changed"
    second = _hashes(out)
    _grow(source, pool, 180)
    if kill_third:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        cmd = [sys.executable, "-m", "shardfeed", "convert", str(source), str(out), *FLAGS, "--append"]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        parts, deadline = out / ".shardfeed" / "parts", time.monotonic() + 120
        while time.monotonic() < deadline and len(list(parts.glob("*.json")) if parts.is_dir() else []) < 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert len(json.loads((out / "manifest.json").read_text())["generations"]) == 2, "killed too late"
        time.sleep(1)
    done = _convert(source, out, "--append")
    assert done.returncode == 0, done.stderr[-2000:]
    return source, out, second


@pytest.mark.slow
def test_append_twice_then_kill_and_resume_a_third(corpus: list[Path], tmp_path: Path) -> None:
    _, reference, _ = _three_generations(corpus, tmp_path / "reference", kill_third=False)
    source, out, second = _three_generations(corpus, tmp_path / "killed", kill_third=True)
    hashes = _hashes(out)
    assert hashes == _hashes(reference)  # the resumed third generation is byte-identical
    assert all(hashes[name] == digest for name, digest in second.items())  # and left the others alone
    m = json.loads((out / "manifest.json").read_text())
    assert [sum(g["records"].values()) for g in m["generations"]] == [120, 60, 180]
    assert sum(s["num_records"] for s in m["splits"].values()) == 360
    assert any(s["file"].startswith("train-g0002-") for s in m["splits"]["train"]["shards"])
    info = subprocess.run([sys.executable, "-m", "shardfeed", "info", str(out)], capture_output=True, text=True)
    assert "generations: 3 (convert --append)" in info.stdout and "g0002" in info.stdout

    # an image's split is the one a conversion of the whole source from scratch gives it
    whole = tmp_path / "whole"
    assert _convert(source, whole).returncode == 0
    assert _inputs(whole) == _inputs(out)

    # every record of every generation read once per epoch, in the global order
    keys = _inputs(out)
    read = ReadOptions(shuffle="global", with_filenames=True, drop_remainder=False)
    seen = [
        f.decode()
        for _, _, files in load(str(out), split="train", batch_size=50, image_size=32, seed=1, read=read)
        for f in files.numpy()
    ]
    assert sorted(seen) == sorted(k for k, s in keys.items() if s == "train")
    # resumed after 100 records on 3 workers, split evenly: the rest of the same order, each record once
    # (even='drop' leaves out the last (rest % 3) positions, so the workers take equal steps)
    rest = []
    for worker in range(3):
        share = ReadOptions(
            shuffle="global",
            with_filenames=True,
            drop_remainder=False,
            start_record=100,
            num_workers=3,
            even="drop",
            worker_index=worker,
        )
        batches = load(str(out), split="train", batch_size=50, image_size=32, seed=1, read=share)
        rest += [f.decode() for _, _, files in batches for f in files.numpy()]
    assert sorted(rest) == sorted(seen[100 : 100 + 3 * ((len(seen) - 100) // 3)])

    # TFDS reads each generation as a split of its own; their sum is the whole split
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(out))
    names = [n for n in builder.info.splits if n == "train" or n.startswith("train_g")]
    assert sorted(names) == ["train", "train_g0001", "train_g0002"]
    assert builder.info.splits["+".join(names)].num_examples == len(seen)


def test_append_refuses_what_would_move_splits_or_shift_labels(corpus: list[Path], tmp_path: Path) -> None:
    pool, source = list(corpus), tmp_path / "src"
    _grow(source, pool, 40)
    stratified = tmp_path / "stratified"
    convert(str(source), str(stratified), ConvertOptions(shards=1), workers=1, progress=False)
    _grow(source, pool, 10)
    with pytest.raises(ConvertError, match="split with the 'stratified' rule"):
        convert(str(source), str(stratified), ConvertOptions(shards=1, append=True), workers=1, progress=False)
    with pytest.raises(ConvertError, match=r"the input files differ\); .*append=True \(--append\)"):
        convert(str(source), str(stratified), ConvertOptions(shards=1), workers=1, progress=False)
    hashed = tmp_path / "hashed"
    options = ConvertOptions(shards=1, split_rule="hash")
    convert(str(source), str(hashed), options, workers=1, progress=False)
    with pytest.raises(ConvertError, match=r"other settings \(seed: 0 -> 1\)"):
        convert(str(source), str(hashed), ConvertOptions(shards=1, split_rule="hash", seed=1, append=True), workers=1)
    (source / "zebra").mkdir()
    shutil.copy(pool[0], source / "zebra" / "z.jpg")
    with pytest.raises(ConvertError, match=r"classes differ .*new: \['zebra'\]"):
        convert(str(source), str(hashed), ConvertOptions(shards=1, split_rule="hash", append=True), workers=1)
    with pytest.raises(OptionError, match="dedupe=True with append=True"):
        ConvertOptions(dedupe=True, append=True)


def test_changed_and_duplicate_images_are_reported_not_rewritten(corpus: list[Path], tmp_path: Path) -> None:
    pool, source, out = list(corpus), tmp_path / "src", tmp_path / "out"
    _grow(source, pool, 40)
    options = ConvertOptions(shards=1, split_rule="hash", append=True)
    convert(str(source), str(out), options, workers=1, progress=False)  # no folder yet: a conversion
    before = _hashes(out)
    changed = sorted(source.rglob("*.jpg"))[0]
    changed.write_bytes(sorted(source.rglob("*.jpg"))[1].read_bytes())  # new bytes under an old key
    copy = source / changed.parent.name / "copy-of-another.jpg"
    shutil.copy(sorted(source.rglob("*.jpg"))[2], copy)  # a new key holding converted bytes
    result = convert(str(source), str(out), options, workers=1, progress=False)
    assert result.appended is not None and result.appended.added and result.appended.known == 40
    assert all(_hashes(out)[name] == digest for name, digest in before.items())
    summary = result.summary()
    assert "1 converted images have changed bytes" in summary and "repeat the bytes of converted ones" in summary
    report = json.loads((out / "report.json").read_text())
    key = str(changed.relative_to(source))
    assert [c["file"] for c in report["changed"]] == [key]
    assert any(str(copy.relative_to(source)) in g["files"] for g in report["duplicates"])
    again = convert(str(source), str(out), options, workers=1, progress=False)
    assert again.appended is not None and not again.appended.added and "nothing new to append" in again.summary()


def test_known_inputs_are_read_again_only_when_their_listing_changed(corpus: list[Path], tmp_path: Path) -> None:
    """An append reads a converted input again only when its size or modification time differs
    from when it was converted (make's and rsync's test); checksum=True reads them all."""
    pool, source, out = list(corpus), tmp_path / "src", tmp_path / "out"
    _grow(source, pool, 40)
    options = ConvertOptions(shards=1, split_rule="hash", append=True)
    convert(str(source), str(out), options, workers=1, progress=False)
    rows = json.loads(gzip.decompress((out / "index" / "inputs-g0000.json.gz").read_bytes()))
    first = sorted(source.rglob("*.jpg"))[0]
    listed = {r[0]: r[3:5] for r in rows}[str(first.relative_to(source))]
    assert listed == [first.stat().st_size, first.stat().st_mtime_ns]

    unchanged = convert(str(source), str(out), options, workers=1, progress=False).appended
    assert unchanged is not None and (unchanged.known, unchanged.reread, unchanged.changed) == (40, 0, [])
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))  # touched, same bytes
    touched = convert(str(source), str(out), options, workers=1, progress=False)
    assert touched.appended is not None and (touched.appended.reread, touched.appended.changed) == (1, [])
    assert "39 converted images unchanged by size and modification time, 1 read again" in touched.summary()

    # other bytes of the same size under a restored time pass the listing test: only checksum finds them
    second = sorted(source.rglob("*.jpg"))[1]
    stat, data = second.stat(), bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    second.write_bytes(bytes(data))
    os.utime(second, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    quick = convert(str(source), str(out), options, workers=1, progress=False).appended
    assert quick is not None and quick.changed == []
    thorough = convert(str(source), str(out), dataclasses.replace(options, checksum=True), workers=1, progress=False)
    assert thorough.appended is not None and thorough.appended.reread == 40
    assert [c["file"] for c in thorough.appended.changed] == [str(second.relative_to(source))]
    with pytest.raises(OptionError, match=r"checksum=True \(--checksum\) only applies with append=True"):
        ConvertOptions(checksum=True)


def test_the_hash_rule_keeps_each_split_as_the_set_grows() -> None:
    items = [Item(f"c/{i}.jpg", i % 3, None, 1) for i in range(3000)]
    fractions = {"train": 0.8, "validation": 0.2}
    small = assign_by_hash(items[:1000], fractions, seed=0)
    large = assign_by_hash(items, fractions, seed=0)
    where = {i.key: name for name, members in large.items() for i in members}
    assert all(where[i.key] == name for name, members in small.items() for i in members)
    assert 0.77 < len(large["train"]) / 3000 < 0.83  # 3,000 draws at p=0.8: sd 0.007
    other = assign_by_hash(items, fractions, seed=1)
    assert {i.key for i in other["train"]} != {i.key for i in large["train"]}


@pytest.mark.slow
def test_the_one_time_fix_for_a_stratified_folder_works_as_written(corpus: list[Path], tmp_path: Path) -> None:
    """A folder converted with the default rule: --append refuses once, naming two commands; run
    as written (in real processes) they make the folder appendable and append, without repeating
    --split-rule hash or --shards on the append."""
    import shlex

    pool, source, out = list(corpus), tmp_path / "src", tmp_path / "out"
    _grow(source, pool, 30)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, timeout=300)

    assert cli("convert", str(source), str(out), "--shards", "2", "-q").returncode == 0
    _grow(source, pool, 5)
    refused = cli("convert", str(source), str(out), "--append")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    commands = [c for c in refused.stderr.split("`")[1::2] if c.startswith("shardfeed convert")]
    assert len(commands) == 2, refused.stderr
    first = cli(*shlex.split(commands[0])[1:])
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "manifest.json").read_text())["settings"]["split_rule"] == "hash"
    _grow(source, pool, 5)
    appended = cli(*shlex.split(commands[1])[1:])
    assert appended.returncode == 0 and "Appended generation 1" in appended.stdout, appended.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert sum(s["num_records"] for s in m["splits"].values()) == 40
    assert m["settings"]["shards"] == 2  # the folder's own settings, not the defaults


def test_info_and_report_agree_on_skipped_inputs_after_appends(corpus: list[Path], tmp_path: Path) -> None:
    """A broken file seen by the conversion and again by each append is one skipped input in
    report.json, the manifest and `info`; info does not show 'stratify' for the hash rule."""
    from shardfeed.tools.dataset_info import format_info, info

    pool, source, out = list(corpus), tmp_path / "src", tmp_path / "out"
    _grow(source, pool, 20)
    broken = next(source.iterdir()) / "broken.jpg"
    broken.write_bytes(b"not an image")
    convert(str(source), str(out), ConvertOptions(shards=1, split_rule="hash"), workers=1, progress=False)
    for _ in range(2):
        _grow(source, pool, 5)
        convert(str(source), str(out), ConvertOptions(append=True), workers=1, progress=False)
    report = json.loads((out / "report.json").read_text())
    assert [e["file"] for e in report["skipped"]] == [str(broken.relative_to(source))]
    assert json.loads((out / "manifest.json").read_text())["num_skipped"] == 1
    facts = info(str(out))
    assert facts["skipped"] == 1
    text = format_info(facts)
    assert "skipped inputs: 1;" in text and "split_rule=hash" in text and "stratify" not in text


def test_copies_dropped_as_label_conflicts_stay_dropped_when_the_folder_grows(tmp_path: Path) -> None:
    """A photo under two labels, dropped by `label_conflicts='drop'` (both copies): an append
    adds only the new photo, not the dropped copies back under both labels (it did: they are in
    no generation's inputs list); report.json still lists them."""
    from conftest import photos
    from PIL import Image

    source, out = tmp_path / "photos", tmp_path / "out"
    pictures = list(photos().values())
    for c, name in enumerate(("cat", "dog")):
        (source / name).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(pictures[c][96 * i : 96 * i + 96, :128]).save(source / name / f"{i}.jpg")
    shutil.copy(source / "cat" / "1.jpg", source / "dog" / "copy.jpg")
    options = ConvertOptions(shards=1, split_rule="hash", label_conflicts="drop")
    first = convert(str(source), str(out), options, workers=1, progress=False)
    assert first.num_written == 7  # 9 inputs, the photo and its copy dropped
    Image.fromarray(pictures[2][:96, :128]).save(source / "cat" / "new.jpg")
    grown = convert(str(source), str(out), dataclasses.replace(options, append=True), workers=1, progress=False)
    assert grown.num_written == 8 and grown.appended is not None and sum(grown.appended.added.values()) == 1
    report = json.loads((out / "report.json").read_text())
    assert {e["file"] for e in report["dropped_duplicates"]} == {"cat/1.jpg", "dog/copy.jpg"}
