"""Near-duplicates: the perceptual hash, the grouping index, and what a conversion reports, on real
photos with near-copies made at test time (bench/corpus.py)."""

from __future__ import annotations

import io
import itertools
import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import killed_after_two_shards, photos
from PIL import Image
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from bench.corpus import build_near_duplicate_corpus
from shardfeed import ConvertOptions, OptionError, convert
from shardfeed.write import merge, near_duplicates, perceptual_hash
from shardfeed.write.images import ImageOptions, prepare_file_image


@pytest.fixture(scope="module")
def near_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("near") / "photos"
    return root, build_near_duplicate_corpus(str(root), copies=2)


def test_the_hash_is_pinned() -> None:
    """Our definition, bit for bit (a change here is a new `perceptual_hash.NAME`): the whole
    frame's half is shardfeed-phash-v2's hash, the window's half follows. Two hashes are as far
    apart as the closest of whole vs whole and whole vs window, either way."""
    assert perceptual_hash.of_image(Image.fromarray(photos()["astronaut"])) == "d2924c4d32bdddc8d2b2cc4d32bbd548"
    assert perceptual_hash.of_image(Image.new("L", (300, 200), 128)) is None  # flat: no hash
    a, b, c = "f" * 16, "0" * 16, "f" * 8 + "0" * 8  # a, b: 64 bits apart; c: 32 from each
    assert perceptual_hash.distance(a + b, "f" * 15 + "e" + c) == 1  # whole vs whole
    assert perceptual_hash.distance(a + b, "0" * 15 + "1" + c) == 1  # one's window vs the other's whole
    assert perceptual_hash.distance(c + a, a + b) == 0  # and the other way
    assert perceptual_hash.distance(a + b, c + b) == 32  # windows alike, wholes not: as far as the wholes


def test_a_photo_cropped_a_few_percent_a_side_is_found_by_the_window_half() -> None:
    """Real photos (the accuracy corpus' 108 bases: crops of 17 photos and textures), each saved
    as a JPEG and again cropped the same share from all four sides: within the default radius
    for nearly all of them at 1-4% a side. The whole frames alone (the earlier hash) miss many
    of the 3% crops, so the window half is what finds them."""
    from bench.corpus import _bases, _near_photos

    def hashed(image: Image.Image) -> str:
        data = io.BytesIO()
        image.save(data, "JPEG", quality=90)
        found = perceptual_hash.of_source(
            prepare_file_image(data.getvalue(), "a.jpg", ImageOptions(), phash=True).hash_source
        )
        assert found is not None
        return found

    bases = [Image.fromarray(np.ascontiguousarray(p)) for p in _bases(_near_photos(), 0.25)]
    originals = [hashed(b) for b in bases]
    radius = near_duplicates.DEFAULT_RADIUS
    for share in (0.01, 0.02, 0.03, 0.04):
        found, whole = 0, 0
        for base, original in zip(bases, originals, strict=True):
            w, h = base.size
            dx, dy = round(w * share), round(h * share)
            cropped = hashed(base.crop((dx, dy, w - dx, h - dy)))
            found += perceptual_hash.distance(original, cropped) <= radius
            whole += (perceptual_hash.halves(original)[0] ^ perceptual_hash.halves(cropped)[0]).bit_count() <= radius
        assert found >= 0.95 * len(bases), (share, found, len(bases))
        if share == 0.03:
            assert whole <= 0.7 * len(bases), whole
    across = [perceptual_hash.distance(a, b) for a, b in itertools.combinations(originals, 2)]
    assert min(across) > 2 * radius  # different photos (neighbouring crops of one included) stay far apart


def test_a_large_image_is_hashed_at_once_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """What waits for a batch's hashes stays small: a gray image over KEPT_PIXELS (after the
    reduction: a long thin one) is hashed when it is seen, to the same hash."""
    thin = np.asarray(Image.fromarray(photos()["astronaut"]).convert("L").resize((9000, 40)))
    found = perceptual_hash.source(thin)
    assert found is not None and found.done and found.gray.size == 0 and found.hash
    monkeypatch.setattr(perceptual_hash, "KEPT_PIXELS", thin.size)
    kept = perceptual_hash.source(thin)
    assert kept is not None and not kept.done and perceptual_hash.of_sources([kept]) == [found.hash]


def test_a_batch_hashes_each_image_as_alone() -> None:
    """Hashes made together (`of_sources`, the medians and bits for the whole batch at once)
    equal each made alone, whatever the batch holds: flat images (no hash), large ones hashed
    when seen, and images of many sizes."""
    gray = np.asarray(Image.fromarray(photos()["astronaut"]).convert("L"))
    images = [gray[: 40 + 7 * i, : 300 - 11 * i] for i in range(20)]
    images += [np.full((50, 60), 7, np.uint8), np.asarray(Image.fromarray(gray).resize((9000, 40)))]
    sources = [perceptual_hash.source(im) for im in images]
    assert all(s is not None for s in sources) and sources[-1] is not None and sources[-1].done
    together = perceptual_hash.of_sources([s for s in sources if s is not None])
    alone = [perceptual_hash.of_gray(im) for im in images]
    assert together == alone and alone[-2] is None and all(alone[:-2]) and len(set(alone[:-2])) > 10
    assert perceptual_hash.of_sources([]) == []


def test_a_scaled_decode_hashes_like_the_full_image(tmp_path: Path) -> None:
    """The conversion hashes a JPEG from its 1/8-scale decode, whose last pixels cover part
    blocks (257 x 329 px: 33 x 42 pixels, the last covering 1 px of 8); the hash places them
    where they are, so it equals the full-size image's (10 bits off if every pixel counted as 8
    px). Images under 16 px a side get none."""
    pixels = photos()["astronaut"][:257, :329]
    data = io.BytesIO()
    Image.fromarray(pixels).save(data, "JPEG", quality=95)
    prepared = prepare_file_image(data.getvalue(), "a.jpg", ImageOptions(), phash=True)
    scaled = perceptual_hash.of_source(prepared.hash_source)
    full = perceptual_hash.of_image(Image.open(data))
    assert scaled and full and perceptual_hash.distance(scaled, full) <= 1
    assert perceptual_hash.of_image(Image.fromarray(pixels[:15])) is None


def test_a_basis_is_the_same_made_alone_or_with_its_siblings() -> None:
    """A cache miss makes the bases of every length that decodes to as many pixels (8 at 1/8
    scale); each is what it would be made alone, so a hash never depends on which image came
    first (same bytes whatever the worker count)."""
    for decoded, factor in [(38, 1), (150, 2), (7, 1)]:
        step = perceptual_hash._decode_step(decoded, decoded * 8)
        lengths = list(perceptual_hash._decoding_alike(decoded, step))
        assert len(lengths) == 8 and all(-(-n // 8) == decoded for n in lengths)
        for zoom in (0.0, perceptual_hash.ZOOM):
            together = perceptual_hash._windowed_cosines(lengths, step * factor, -(-decoded // factor), zoom)
            for n, basis in zip(lengths, together, strict=True):
                alone = perceptual_hash._windowed_cosines([n], step * factor, -(-decoded // factor), zoom)[0]
                assert np.array_equal(basis, alone)
                perceptual_hash._bases.clear()
                half = slice(0, 8) if zoom == 0 else slice(8, 16)
                assert np.array_equal(perceptual_hash._axis(decoded, n, factor)[half], basis)


def test_the_window_basis_is_the_whole_basis_of_the_cropped_side() -> None:
    """The window half of a 200 px side (ZOOM = 3%: pixels 6..193) is the whole-frame basis of
    that side cropped to those 188 pixels, placed there, and nothing outside; at 7/8 scale (a
    pixel of 8/7 px) the window's edge pixels count for the part inside."""
    assert perceptual_hash.ZOOM == 0.03
    window = perceptual_hash._windowed_cosines([200], 1.0, 200, perceptual_hash.ZOOM)[0]
    cropped = perceptual_hash._windowed_cosines([188], 1.0, 188)[0]
    assert np.allclose(window[:, 6:194], cropped, atol=1e-6) and not window[:, :6].any() and not window[:, 194:].any()
    scaled = perceptual_hash._windowed_cosines([200], 8 / 7, 175, perceptual_hash.ZOOM)[0]
    # pixel 5 covers [5.71, 6.86): 0.86 px inside; its basis value is the cosine at that part's middle
    centre = ((6 + 6 * 8 / 7) / 2 - 6) / 188
    dc_weight = 0.86 / 188 * (1 - perceptual_hash.ALPHA + perceptual_hash.ALPHA * np.sin(np.pi * centre))
    assert np.isclose(scaled[0, 5], dc_weight, rtol=0.01) and not scaled[:, :5].any()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("threaded_from", "chunk", "together_below"),
    [
        (near_duplicates.THREADED_FROM, near_duplicates.CHUNK_PAIRS, near_duplicates.PROBED_TOGETHER_BELOW),
        (1, near_duplicates.CHUNK_PAIRS, 0),
        (near_duplicates.THREADED_FROM, 5, near_duplicates.PROBED_TOGETHER_BELOW),
        (1, 5, 0),
    ],
    ids=["one-thread", "threads-flip-by-flip", "small-chunks", "small-chunks-flip-by-flip"],
)
def test_close_pairs_finds_exactly_what_all_pairs_would(
    threaded_from: int, chunk: int, together_below: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one thread (as under THREADED_FROM hashes) and on several (as above it), with a block's
    flips probed together (as under PROBED_TOGETHER_BELOW) or one by one, and with the candidates
    checked a few at a time. Half the hashes share their top 16 bits (long runs, as the real
    hashes' constant DC bit makes), the rest are spread out."""
    monkeypatch.setattr(near_duplicates, "THREADED_FROM", threaded_from)
    monkeypatch.setattr(near_duplicates, "CHUNK_PAIRS", chunk)
    monkeypatch.setattr(near_duplicates, "PROBED_TOGETHER_BELOW", together_below)
    rng = np.random.default_rng(1)
    hashes = rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2)
    hashes[:1500] = (hashes[:1500] & np.uint64(2**48 - 1)) | np.uint64(0xA5C3 << 48)
    for a, b in rng.choice(3000, (300, 2), replace=False):
        value = int(hashes[a])
        for bit in rng.choice(64, int(rng.integers(0, 9)), replace=False):
            value ^= 1 << int(bit)
        hashes[b] = np.uint64(value)
    for k, at in enumerate(rng.choice(np.arange(300, 3000), (64, 2), replace=False)):
        # 7 bits apart, found only by flipping bit k % 16 of block k // 16: the other blocks differ in 2
        value = int(hashes[at[0]]) ^ (1 << k)
        for block in {0, 1, 2, 3} - {k // 16}:
            value ^= 0b101 << (16 * block + 4)
        hashes[at[1]] = np.uint64(value)
    everything = np.bitwise_count(hashes[:, None] ^ hashes[None, :])
    for radius in (0, 3, 4, 7):
        i, j, d = near_duplicates.close_pairs(hashes, radius)
        want_i, want_j = np.nonzero(np.triu(everything <= radius, 1))
        assert list(zip(i.tolist(), j.tolist(), strict=True)) == list(
            zip(want_i.tolist(), want_j.tolist(), strict=True)
        )
        assert (d == everything[i, j]).all() and (d <= radius).all()
    far = np.array([0, 2**64 - 1, 0xFFFFFFFF, 0xFFFFFFFF << 32], np.uint64)  # >= 32 bits apart
    assert all(len(a) == 0 for a in near_duplicates.close_pairs(far, 7))
    assert all(len(a) == 0 for a in near_duplicates.close_pairs(far[:1], 7))
    with pytest.raises(OptionError):
        near_duplicates.close_pairs(hashes, 8)


def test_two_halves_pair_images_whole_to_whole_or_whole_to_window() -> None:
    """Rows of (whole, window) halves: an image pairs with another when their wholes, or one's
    whole and the other's window, are within the radius; never for their windows alone, nor
    with itself. `close_pairs` and `link` find what all pairs of images would."""
    rng = np.random.default_rng(4)
    rows = rng.integers(0, 2**63, (2000, 2), dtype=np.uint64) * np.uint64(2)

    def near(value: int, bits: int) -> np.uint64:
        for bit in rng.choice(64, bits, replace=False):
            value ^= 1 << int(bit)
        return np.uint64(value)

    for a, b in rng.choice(2000, (400, 2), replace=False):
        kind = int(rng.integers(0, 4))  # whole-whole, whole-window, window-whole, window-window
        rows[b, kind & 1] = near(int(rows[a, kind >> 1]), int(rng.integers(0, 8)))
    for k in rng.choice(2000, 50, replace=False):
        rows[k, 1] = near(int(rows[k, 0]), 2)  # an image whose window is near its own whole
    whole, window = rows[:, 0], rows[:, 1]
    bits = lambda x, y: np.bitwise_count(x[:, None] ^ y[None, :])  # noqa: E731
    every = np.minimum(bits(whole, whole), np.minimum(bits(whole, window), bits(window, whole)))
    for radius in (0, 3, 6):
        i, j, d = near_duplicates.close_pairs(rows, radius)
        want_i, want_j = np.nonzero(np.triu(every <= radius, 1))
        assert (i.tolist(), j.tolist()) == (want_i.tolist(), want_j.tolist())
        assert (d == every[i, j]).all()
    windows_only = np.triu((bits(window, window) <= 6) & (every > 6), 1)
    assert windows_only.sum() >= 50  # there were pairs whose windows alone are close: none was found
    _, component = connected_components(csr_matrix(np.triu(every <= 6, 1)), directed=False)
    want = sorted(g for g in (np.flatnonzero(component == c).tolist() for c in np.unique(component)) if len(g) > 1)
    assert near_duplicates.link(rows, 6).groups() == want


def _clustered_hashes(rng: np.random.Generator) -> np.ndarray:
    """2,000 spread-out hashes, 300 copies of one (a placeholder image), a dense cluster of 400
    distinct hashes within 3 bits of one centre (frames of a still camera), and chains of edits."""
    hashes = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    hashes[2000:2300] = hashes[0]
    centre = int(hashes[1])
    for k in range(2300, 2700):
        value = centre
        for bit in rng.choice(64, 3, replace=False):
            value ^= 1 << int(bit)
        hashes[k] = np.uint64(value)
    for k in range(2700, 3000):
        value = int(hashes[k - 300])
        for bit in rng.choice(64, int(rng.integers(1, 7)), replace=False):
            value ^= 1 << int(bit)
        hashes[k] = np.uint64(value)
    return rng.permutation(hashes)


@pytest.mark.parametrize(("kept", "chunk"), [(near_duplicates.KEPT_PAIRS, near_duplicates.CHUNK_PAIRS), (500, 300)])
def test_link_groups_as_all_pairs_would_in_bounded_memory(
    kept: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The groups are the connected components of all pairs within the radius (scipy's, over the
    full distance matrix), also when the pairs are joined a few hundred at a time and only a few
    are kept; the largest distance of each hash is that of all its pairs."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    monkeypatch.setattr(near_duplicates, "KEPT_PAIRS", kept)
    monkeypatch.setattr(near_duplicates, "CHUNK_PAIRS", chunk)
    hashes = _clustered_hashes(np.random.default_rng(2))
    distances = np.bitwise_count(hashes[:, None] ^ hashes[None, :])
    close = (distances <= 6) & ~np.eye(len(hashes), dtype=bool)
    _, component = connected_components(csr_matrix(close), directed=False)
    want = sorted(g.tolist() for c in np.unique(component) if len(g := np.flatnonzero(component == c)) > 1)
    links = near_duplicates.link(hashes, 6)
    assert links.groups() == want
    assert (links.farthest == np.where(close, distances, 0).max(axis=1)).all()
    i, j, d = links.pairs
    assert (i < j).all() and (d == distances[i, j]).all() and (d <= 6).all()
    assert (links.group[i] == links.group[j]).all()
    if kept < near_duplicates.KEPT_PAIRS:  # beyond `kept`, at most one more pair a hash
        assert len(i) <= kept + len(hashes)


def test_many_copies_of_one_image_group_in_bounded_memory() -> None:
    """5,000 copies of one image among 20,000 (12.5 M pairs, 5 GB when each pair was kept): one
    group, its first PAIRS_SHOWN pairs by name, in a few MB."""
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
    hashes[10_000:15_000] = hashes[7]
    windows = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
    windows[10_000:15_000] = windows[7]
    records = [
        (f"img{k:05d}.jpg", f"{int(h):016x}{int(w):016x}", "train" if k % 5 else "validation")
        for k, (h, w) in enumerate(zip(hashes, windows, strict=True))
    ]
    tracemalloc.start()
    groups = near_duplicates.groups_in(lambda: iter(records), 6)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MB"
    (group,) = groups
    assert len(group["files"]) == 5001 and group["leak"] and group["max_distance"] == 0
    assert group["pairs"][:2] == [["img00007.jpg", "img10000.jpg", 0], ["img00007.jpg", "img10001.jpg", 0]]
    assert len(group["pairs"]) == near_duplicates.PAIRS_SHOWN


@pytest.mark.slow
def test_a_conversion_groups_near_copies_and_flags_leaks(
    near_corpus: tuple[Path, dict[str, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near-copies (re-encoded, resized, cropped <= 3% a side, PNG, brighter) of real photos,
    beside crops of the same photos: at the default radius the groups find >= 95% of the true
    pairs and no false one; a group spanning splits is a leak; the manifest counts them."""
    root, truth = near_corpus
    result = convert(str(root), str(tmp_path / "out"), ConvertOptions(shards=2), workers=2, progress=False)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    groups = report["near_duplicates"]
    found = {pair for g in groups for pair in itertools.combinations(sorted(g["files"]), 2)}
    true = {(a, b) for a, b in itertools.combinations(sorted(truth), 2) if truth[a] == truth[b]}
    assert len(found & true) >= 0.95 * len(true)
    assert found <= true  # precision 1.0 here
    splits = {}
    for name in ("train", "validation"):
        splits.update(dict.fromkeys(_keys(tmp_path / "out", name), name))
    for g in groups:
        assert g["splits"] == sorted({splits[f] for f in g["files"]})
        assert g["leak"] == (len(g["splits"]) > 1)
        assert all(0 <= d <= g["max_distance"] <= near_duplicates.DEFAULT_RADIUS for _, _, d in g["pairs"])
    near = result.manifest.data["near_duplicates"]
    assert near == {
        "hash": perceptual_hash.NAME,
        "radius": near_duplicates.DEFAULT_RADIUS,
        "groups": len(groups),
        "images": sum(len(g["files"]) for g in groups),
        "leaks": sum(g["leak"] for g in groups),
    }
    assert near["leaks"] > 0 and f"{near['groups']} near-duplicate groups" in result.summary()
    # one worker hashes 32 images at a time, two workers a shard's at a time: the same groups;
    # and the same when the partial manifests are read again for the names, as past RECORDS_KEPT
    monkeypatch.setattr(merge, "RECORDS_KEPT", 0)
    convert(str(root), str(tmp_path / "one"), ConvertOptions(shards=2), workers=1, progress=False)
    assert json.loads((tmp_path / "one" / "report.json").read_text()) == report
    from shardfeed.tools.dataset_report import dataset_report

    page = Path(dataset_report(str(tmp_path / "out"))).read_text()
    assert f"Near-duplicate groups ({near['leaks']} spanning splits): {near['groups']}" in page
    leak = next(g for g in groups if g["leak"])  # leaks come first, each file named under its image
    assert all(f"<figcaption>{f}</figcaption>" in page for f in leak["files"]) and "LEAK: train, validation" in page


def _keys(out: Path, split: str) -> list[str]:
    from shardfeed.format import schema
    from shardfeed.read.indexed import IndexedRecords

    records = IndexedRecords(str(out), split=split)
    return [records.example(i)[schema.FILENAME].decode() for i in range(len(records))]


def test_append_groups_new_near_copies_with_converted_images(photo_tree: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(photo_tree, source)
    out = tmp_path / "out"
    options = ConvertOptions(shards=1, split_rule="hash")
    first = convert(str(source), str(out), options, workers=1, progress=False)
    assert first.manifest.data["near_duplicates"]["groups"] == 0
    original = sorted(source.rglob("*.jpg"))[0]
    copy = original.with_name("copy-" + original.stem + ".png")
    Image.open(original).save(copy)
    second = convert(str(source), str(out), ConvertOptions(shards=1, split_rule="hash", append=True), workers=1)
    report = json.loads((out / "report.json").read_text())
    rel = lambda p: str(p.relative_to(source))  # noqa: E731
    assert [g["files"] for g in report["near_duplicates"]] == [sorted([rel(original), rel(copy)])]
    assert "1 near-duplicate groups join new and converted images" in second.summary()


def test_append_never_compares_hashes_of_another_version(photo_tree: Path, tmp_path: Path) -> None:
    """A folder whose images were hashed by another version of the hash (its manifest names it):
    appended images are compared with each other, not with those, and the summary says so; each
    generation keeps its own hash name, so a later append still compares the new ones."""
    source = tmp_path / "src"
    shutil.copytree(photo_tree, source)
    out = tmp_path / "out"
    convert(str(source), str(out), ConvertOptions(shards=1, split_rule="hash"), workers=1, progress=False)
    data = json.loads((out / "manifest.json").read_text())
    data["near_duplicates"]["hash"] = "shardfeed-phash-v1"  # as an earlier shardfeed wrote it
    (out / "manifest.json").write_text(json.dumps(data))
    original = sorted(source.rglob("*.jpg"))[0]
    appended = ConvertOptions(shards=1, split_rule="hash", append=True)
    for n in (1, 2):
        Image.open(original).save(original.with_name(f"copy{n}-{original.stem}.png"))
        result = convert(str(source), str(out), appended, workers=1)
        groups = [g["files"] for g in _report(out)["near_duplicates"]]
        assert "converted images with shardfeed-phash-v1 hashes were not compared" in result.summary()
    copies = sorted(str(p.relative_to(source)) for p in source.rglob("copy*"))
    assert groups == [copies]  # the two copies, not the original
    history = json.loads((out / "manifest.json").read_text())["generations"]
    assert [g["hash"] for g in history] == ["shardfeed-phash-v1", perceptual_hash.NAME, perceptual_hash.NAME]


def test_near_radius_off_and_out_of_range(photo_tree: Path, tmp_path: Path) -> None:
    result = convert(str(photo_tree), str(tmp_path / "off"), ConvertOptions(shards=1, near_radius=None), workers=1)
    assert "near_duplicates" not in result.manifest.data
    assert "near_duplicates" not in json.loads((tmp_path / "off" / "report.json").read_text())
    with pytest.raises(OptionError, match=r"near_radius must be 0\.\.7"):
        ConvertOptions(near_radius=8)
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(photo_tree), str(tmp_path / "x"), "--near-radius", "many"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--near-radius" in done.stderr and "Traceback" not in done.stderr


def _shards(out: Path) -> dict[str, bytes]:
    """The shards and index files (manifest and report name their folder)."""
    from conftest import shard_bytes

    return {k: v for k, v in shard_bytes(out).items() if k.startswith(("train", "validation", "index/"))}


def _report(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_split_groups_keep_every_group_in_one_split_at_the_fractions(
    near_corpus: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    """Near-copies of one photo never straddle train and validation; sizes and class counts stay
    within a group's size of the fractions; the same bytes with 1 or 2 workers."""
    root, truth = near_corpus
    options = ConvertOptions(shards=3, split_groups="near")
    a = convert(str(root), str(tmp_path / "a"), options, workers=2, progress=False)
    convert(str(root), str(tmp_path / "b"), options, workers=1, progress=False)
    assert a.num_written == len(truth)
    splits = {key: name for name in ("train", "validation") for key in _keys(tmp_path / "a", name)}
    by_base: dict[int, set[str]] = {}
    for key, base in truth.items():
        by_base.setdefault(base, set()).add(splits[key])
    spanning = [base for base, where in by_base.items() if len(where) > 1]
    assert len(spanning) <= 0.05 * len(by_base)  # copies the hash did not group (recall 0.95+) may straddle
    grouped = [set(g["files"]) for g in _report(tmp_path / "a")["near_duplicates"]]
    for base in spanning:  # ... only those
        assert not any({k for k, b in truth.items() if b == base} <= g for g in grouped)
    near = a.manifest.data["near_duplicates"]
    assert near["leaks"] == 0 and near["kept_together"]["groups"] == near["groups"]
    validation = a.manifest.split("validation").num_records
    assert abs(validation - round(0.2 * len(truth))) <= 5  # the largest group has 3 images
    assert sum(abs(v) for v in near["kept_together"]["drift"].values()) == 2 * abs(validation - round(0.2 * len(truth)))
    assert a.manifest.data["settings"]["split_groups"] == "near" and a.manifest.data["settings"]["near_radius"] == 6
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    plain = convert(str(root), str(tmp_path / "plain"), ConvertOptions(shards=3), workers=2, progress=False)
    assert plain.manifest.data["near_duplicates"]["leaks"] > 10  # what split_groups prevented


def test_dedupe_near_keeps_the_first_image_of_each_group(
    near_corpus: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    root, truth = near_corpus
    result = convert(str(root), str(tmp_path / "out"), ConvertOptions(shards=2, dedupe="near"), workers=2)
    report = _report(tmp_path / "out")
    dropped = {d["file"]: d["duplicate_of"] for d in report["dropped_duplicates"]}
    kept = set(_keys(tmp_path / "out", "train")) | set(_keys(tmp_path / "out", "validation"))
    assert kept.isdisjoint(dropped) and kept | set(dropped) == set(truth)
    assert all(truth[f] == truth[k] and k < f and k in kept for f, k in dropped.items())  # no false drop
    assert len(kept) <= len(set(truth.values())) + 10  # about one image per photo
    assert result.manifest.data["num_dropped_duplicates"] == len(dropped)
    assert result.manifest.data["near_duplicates"]["groups"] == 0
    assert result.manifest.data["settings"]["dedupe"] == "near"


def test_split_groups_refused_where_it_cannot_act(photo_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="append"):
        ConvertOptions(split_groups="near", append=True, split_rule="hash")
    with pytest.raises(OptionError, match="near_radius"):
        ConvertOptions(split_groups="near", near_radius=None)
    presplit = tmp_path / "presplit"
    for split in ("train", "validation"):
        shutil.copytree(photo_tree, presplit / split)
    from shardfeed.errors import ConvertError

    with pytest.raises(ConvertError, match="already split"):
        convert(str(presplit), str(tmp_path / "out"), ConvertOptions(split_groups="near"), workers=1)


@pytest.mark.slow
def test_info_and_verify_show_the_counts(near_corpus: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    root, _ = near_corpus
    out = tmp_path / "out"
    convert(str(root), str(out), ConvertOptions(shards=2), workers=2, progress=False)
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    info = subprocess.run(
        [sys.executable, "-m", "shardfeed", "info", str(out)], capture_output=True, text=True, env=env
    )
    check = subprocess.run(
        [sys.executable, "-m", "shardfeed", "verify", str(out), "-q"], capture_output=True, text=True, env=env
    )
    near = json.loads((out / "manifest.json").read_text())["near_duplicates"]
    assert f"near-duplicates (within 6 bits): {near['groups']} groups" in info.stdout, info.stdout + info.stderr
    assert f"near-duplicates: {near['groups']} groups of {near['images']} images, {near['leaks']} across" in (
        check.stdout + check.stderr
    )


KILLED = """import sys
from shardfeed import ConvertOptions, convert
options = ConvertOptions(shards=24, split_groups='near', dedupe='near')
convert(sys.argv[1], sys.argv[2], options, workers=2, progress=False)
"""


def test_split_groups_resume_after_kill_to_the_same_bytes(
    near_corpus: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    root, _ = near_corpus
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run([sys.executable, "-c", KILLED, str(root), str(whole)], check=True, timeout=300)
    if not killed_after_two_shards([sys.executable, "-c", KILLED, str(root), str(killed)], killed):
        pytest.skip("the conversion finished before the kill")
    subprocess.run([sys.executable, "-c", KILLED, str(root), str(killed)], check=True, timeout=300)
    assert _shards(killed) == _shards(whole)


def _conflicting_tree(photo_tree: Path, src: Path) -> Path:
    """The photo tree plus an exact copy of coffee/000 filed under rocket, a resized chelsea/001
    filed under astronaut (two label conflicts) and a same-label copy of rocket/002."""
    shutil.copytree(photo_tree, src)
    shutil.copy(src / "coffee" / "000.jpg", src / "rocket" / "copy-of-coffee.jpg")
    with Image.open(src / "chelsea" / "001.jpg") as im:
        im.resize((im.width * 3 // 4, im.height * 3 // 4)).save(src / "astronaut" / "smaller-chelsea.jpg", quality=80)
    shutil.copy(src / "rocket" / "002.jpg", src / "rocket" / "same-label-copy.jpg")
    return src


def test_the_same_photo_under_two_labels_is_a_label_conflict_and_dedupe_picks_no_label(
    photo_tree: Path, tmp_path: Path
) -> None:
    """An exact copy and a resized copy of two photos, each filed under another class: both are
    label conflicts, listed first (exact before near) in report.json, said in the summary and
    drawn in report.html; --dedupe near drops neither copy (which label would it keep?) but
    still drops a same-label copy."""
    from shardfeed.cli.report_cmd import write_dataset_report

    src = _conflicting_tree(photo_tree, tmp_path / "src")
    for dedupe, out in ((None, tmp_path / "plain"), ("near", tmp_path / "deduped")):
        options = ConvertOptions(split="train=1", dedupe=dedupe) if dedupe else ConvertOptions(split="train=1")
        result = convert(str(src), str(out), options, workers=1, progress=False)
        report = json.loads((out / "report.json").read_text())
        conflicts = report["label_conflicts"]
        assert [c["kind"] for c in conflicts] == ["exact", "near"], conflicts
        assert conflicts[0]["files"] == ["coffee/000.jpg", "rocket/copy-of-coffee.jpg"]
        assert conflicts[0]["labels"] == ["coffee", "rocket"]
        assert sorted(conflicts[1]["labels"]) == ["astronaut", "chelsea"]
        assert "2 groups of the same image carry different labels" in result.summary()
        html = Path(write_dataset_report(str(out))).read_text()
        assert "Label conflicts (the same image under different labels): 2" in html
    assert "--dedupe picks no label" in result.summary()
    dropped = {d["file"] for d in report["dropped_duplicates"]}
    assert dropped == {"rocket/same-label-copy.jpg"}, dropped


@pytest.mark.parametrize("rule", ["drop", "first"])
def test_a_label_conflict_rule_drops_the_copies_it_names_and_says_so(
    photo_tree: Path, tmp_path: Path, rule: str
) -> None:
    """--label-conflicts drop|first: the rule a user chose, never a silent pick. An exact copy of
    coffee/000 filed under rocket and a resized chelsea/001 filed under astronaut: 'drop' leaves
    out all four images, 'first' the two copies whose label differs from the first key's (sorted:
    astronaut/… before chelsea/…, coffee/… before rocket/…). A same-label copy stays (no --dedupe)."""
    src = _conflicting_tree(photo_tree, tmp_path / "src")
    total = sum(1 for p in src.rglob("*") if p.is_file())
    out = tmp_path / "out"
    result = convert(
        str(src), str(out), ConvertOptions(split="train=1", label_conflicts=rule), workers=1, progress=False
    )
    report = json.loads((out / "report.json").read_text())
    dropped = {d["file"]: d for d in report["dropped_duplicates"]}
    conflicting = {"coffee/000.jpg", "rocket/copy-of-coffee.jpg", "chelsea/001.jpg", "astronaut/smaller-chelsea.jpg"}
    expected = conflicting if rule == "drop" else {"rocket/copy-of-coffee.jpg", "chelsea/001.jpg"}
    assert set(dropped) == expected
    assert dropped["rocket/copy-of-coffee.jpg"]["label_conflict"] == ["rocket", "coffee"]
    assert report["label_conflicts"] == []  # none is left in the shards
    stored = set(_keys(out, "train"))
    assert stored.isdisjoint(expected) and len(stored) == total - len(expected)
    assert "rocket/same-label-copy.jpg" in stored
    assert f"label conflicts: {len(expected)} copies of an image labelled otherwise were dropped" in result.summary()
    assert result.manifest.data["settings"]["label_conflicts"] == rule
