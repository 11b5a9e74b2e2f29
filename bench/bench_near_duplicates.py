"""Near-duplicates: recall and precision of the groups per radius on real photos, imagededup's
PHash beside ours when it is installed, the conversion's cost with hashing on vs off, and the
grouping index at ImageNet size.

    .venv/bin/python bench/bench_near_duplicates.py [--copies 2] [--rounds 5] [--scale 1300000] [--json F]

Accuracy: bench/corpus.py `build_near_duplicate_corpus`: crops of 17 real photos and textures
(up to 320 px, neighbours overlapping by at most 25%: alike but different images), each saved as
a JPEG and with `--copies` near-copies (JPEG quality 50-95, resized to 50-90%, cropped 0-3% per
side, re-saved as PNG, brightness +-10%). Each image is hashed as the conversion hashes it
(`images.prepare_file_image`); the groups at each radius are the connected components of the
pairs within it; a pair of images counts as found when both are in one group. Recall: true pairs
(same base) found; precision: found pairs that are true.

Cost: `shardfeed convert` of 2,000 real-photo JPEGs (bench/corpus.py) by the code before hashing
(`--baseline-src`, e.g. `git archive 41ae642 src | tar -x -C /tmp/before`, then
`--baseline-src /tmp/before/src`), with `--near-radius off` (no hash made, nothing grouped) and with
the default, each in a fresh process, rounds interleaved; wall and CPU seconds (of the children);
`--no-report`: the HTML report's near-duplicate table decodes at most 60 thumbnails, a fixed
cost of ~0.1 s whatever the dataset's size, left out of the per-image comparison. The same for
`--distinct` JPEGs of the same sizes with no near-copies among them (`build_distinct_corpus`:
the crop corpus has a fifth or more near-duplicates, whose grouping and report cost more) and
`--large` phone-size photos (bench/corpus.py `build_large_corpus`, 3-12 MP).

Even crops: the seed-0 bases each cropped 1%, 2% and 3% on all four sides, recall within the
default radius (the hash's weak spot: the corpus draws each side's crop from 0-3%).

Scale: `near_duplicates.close_pairs` over N random 64-bit hashes with 1,000 planted pairs at
1..radius bits, at radius 3 and the default: seconds, peak memory (tracemalloc) and pairs found.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus, build_distinct_corpus, build_large_corpus, build_near_duplicate_corpus
from bench.report import emit
from shardfeed.write import near_duplicates, perceptual_hash
from shardfeed.write.images import ImageOptions, prepare_file_image


def _scores(names: list[str], truth: dict[str, int], distances: np.ndarray, radius: int) -> dict[str, float]:
    """Pairwise recall and precision of the groups (components of the pairs within `radius`)."""
    _, component = connected_components(csr_matrix(np.triu(distances <= radius, 1)), directed=False)
    found = {(a, b) for a, b in itertools.combinations(range(len(names)), 2) if component[a] == component[b]}
    true = {(a, b) for a, b in itertools.combinations(range(len(names)), 2) if truth[names[a]] == truth[names[b]]}
    hits = len(found & true)
    return {
        "radius": radius,
        "recall": hits / len(true),
        "precision": hits / len(found) if found else 1.0,
        "pairs_found": len(found),
        "true_pairs": len(true),
    }


def _accuracy_over_seeds(root: Path, copies: int, seeds: list[int]) -> dict[str, Any]:
    """`_accuracy` on one corpus per seed (other edits of the same bases), and the mean recall
    and precision per radius: one corpus's 1,080 pairs move recall by +-0.01 between seeds."""
    runs = {seed: _accuracy(root / f"seed{seed}", copies, seed) for seed in seeds}
    out: dict[str, Any] = {"seeds": runs}
    for method in ("shardfeed", "imagededup"):
        if all(isinstance(run[method], list) for run in runs.values()):
            rows = zip(*(run[method] for run in runs.values()), strict=True)
            out[f"{method}_mean"] = [
                {
                    "radius": row[0]["radius"],
                    "recall": statistics.mean(r["recall"] for r in row),
                    "precision": statistics.mean(r["precision"] for r in row),
                    "recall_min": min(r["recall"] for r in row),
                }
                for row in rows
            ]
    return out


def _accuracy(root: Path, copies: int, seed: int) -> dict[str, Any]:
    shutil.rmtree(root, ignore_errors=True)
    truth = build_near_duplicate_corpus(str(root), copies=copies, seed=seed)
    names = sorted(truth)
    ours, flat = [], []
    for name in names:
        prepared = prepare_file_image((root / name).read_bytes(), name, ImageOptions(), phash=True)
        phash = perceptual_hash.of_source(prepared.hash_source)
        ours.append(phash)
        flat.append(phash is None)
    distances = _all_distances(perceptual_hash.as_array(ours))
    distances[np.array(flat)] = 99
    distances[:, np.array(flat)] = 99
    wholes = _all_distances(perceptual_hash.as_array(ours), halves=False)
    wholes[np.array(flat)] = 99
    wholes[:, np.array(flat)] = 99
    out: dict[str, Any] = {
        "images": len(names),
        "bases": len(set(truth.values())),
        "no_hash": int(sum(flat)),
        "shardfeed": [_scores(names, truth, distances, r) for r in range(near_duplicates.MAX_RADIUS + 1)],
        "shardfeed_whole_only": [_scores(names, truth, wholes, r) for r in (4, 6)],
        "edit_distances": _edit_distances(names, truth, distances),
    }
    try:
        from imagededup.methods import PHash
    except ImportError:
        out["imagededup"] = "not installed"
        return out
    encoder = PHash(verbose=False)
    theirs = [int(encoder.encode_image(image_file=str(root / name)), 16) for name in names]
    hashes = np.array(theirs, dtype=np.uint64)
    distances = np.bitwise_count(hashes[:, None] ^ hashes[None, :]).astype(np.int64)
    out["imagededup"] = [_scores(names, truth, distances, r) for r in (*range(8), 10, 12)]
    return out


def _all_distances(rows: np.ndarray, halves: bool = True) -> np.ndarray:
    """Every pair's distance (`perceptual_hash.distance`; `halves=False`: the whole frames only,
    as shardfeed-phash-v2 compared them)."""
    i, j = np.indices((len(rows), len(rows)))
    return near_duplicates.distances(rows if halves else rows[:, :1], i.ravel(), j.ravel()).reshape(i.shape)


def _edit_distances(names: list[str], truth: dict[str, int], distances: np.ndarray) -> dict[str, Any]:
    """Bits between each copy and its base per edit (mean, max, copies over the default radius),
    and between different bases (min, pairs under 10 bits)."""
    index = {n: k for k, n in enumerate(names)}
    base_of = {truth[n]: index[n] for n in names if "-0-base." in n}
    by_edit: dict[str, list[int]] = {}
    for n in names:
        if "-0-base." not in n:
            edit = n.rsplit("-", 1)[1].split(".")[0]
            by_edit.setdefault(edit, []).append(int(distances[index[n], base_of[truth[n]]]))
    across = [int(distances[a, b]) for a, b in itertools.combinations(base_of.values(), 2)]
    radius = near_duplicates.DEFAULT_RADIUS
    return {
        "copy_to_base": {
            edit: {
                "copies": len(d),
                "mean": float(np.mean(d)),
                "max": max(d),
                "over_radius": sum(x > radius for x in d),
            }
            for edit, d in sorted(by_edit.items())
        },
        "different_bases_min": min(across),
        "different_bases_under_10": sum(1 for a in across if a < 10),
    }


def _convert_cost(work: Path, source: str, rounds: int, baseline_src: str | None) -> dict[str, Any]:
    """Fresh-process conversions of `source`, rounds interleaved (order rotated each round):
    'before' (the code before hashing, from `baseline_src`), 'off' (no hashing), 'default'."""
    names = (["before"] if baseline_src else []) + ["off", "default"]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            out = work / f"out-{name}"
            shutil.rmtree(out, ignore_errors=True)
            flags = ["--near-radius", "off"] if name == "off" else []
            cmd = [sys.executable, "-m", "shardfeed", "convert", source, str(out), "--shards", "16", "-q", *flags]
            cmd.append("--no-report")  # report.html's thumbnails are a fixed cost (at most 60), measured apart
            env = {**os.environ, "PYTHONPATH": baseline_src} if name == "before" and baseline_src else None
            before = os.times()
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env)
            wall, after = time.perf_counter() - start, os.times()
            cpu = after.children_user + after.children_system - before.children_user - before.children_system
            runs[name].append((wall, cpu))
            print(f"round {r}: {name} {wall:.2f}s", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {
        name: {
            "wall_best": min(w for w, _ in rs),
            "wall_median": statistics.median(w for w, _ in rs),
            "cpu_median": statistics.median(c for _, c in rs),
            "runs": rs,
        }
        for name, rs in runs.items()
    }
    reference = "before" if baseline_src else "off"
    for name in names:
        summary[name]["wall_paired_vs_" + reference] = statistics.median(
            a[0] / b[0] for a, b in zip(runs[name], runs[reference], strict=True)
        )  # each round's ratio (the two ran side by side), the median over rounds
        summary[name]["wall_median_vs_" + reference] = summary[name]["wall_median"] / summary[reference]["wall_median"]
        summary[name]["cpu_median_vs_" + reference] = summary[name]["cpu_median"] / summary[reference]["cpu_median"]
    return summary


def _scale(n: int, radius: int, seed: int = 0, halves: int = 2) -> dict[str, Any]:
    """`near_duplicates.link` over n random images' hashes (`halves` 64-bit halves each: 1 is
    shardfeed-phash-v2's one), 1,000 pairs planted 1..radius bits apart (whole vs whole)."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**63, (n, halves), dtype=np.uint64) * np.uint64(2)
    hashes += rng.integers(0, 2, (n, halves)).astype(np.uint64)
    planted = rng.choice(n, 2000, replace=False)
    for a, b in zip(planted[:1000], planted[1000:], strict=True):
        value = int(hashes[a, 0])
        for bit in rng.choice(64, int(rng.integers(1, radius + 1)), replace=False):
            value ^= 1 << int(bit)
        hashes[b, 0] = np.uint64(value)
    tracemalloc.start()
    start = time.perf_counter()
    links = near_duplicates.link(hashes, radius)  # what a conversion runs (the pairs and the groups)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    groups = links.groups()
    return {
        "hashes": n,
        "halves": halves,
        "radius": radius,
        "seconds": seconds,
        "peak_bytes": peak,
        "pairs": len(links.pairs[0]),
        "groups": len(groups),
    }


def _even_crops(fractions: tuple[float, ...] = (0.01, 0.02, 0.03, 0.04, 0.05)) -> dict[str, Any]:
    """Recall for copies cropped the same fraction on all four sides (the corpus draws each side
    from 0-3%, so few copies lose the full 3% everywhere): each of the seed-0 corpus' bases and
    its crop, both JPEG q90, hashed as the conversion hashes; the share within the default radius."""
    import io

    import numpy as np
    from PIL import Image

    from bench.corpus import _bases, _near_photos

    def hashed(image: Image.Image) -> str | None:
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        prepared = prepare_file_image(buffer.getvalue(), "x.jpg", ImageOptions(), phash=True)
        return perceptual_hash.of_source(prepared.hash_source)

    out: dict[str, Any] = {}
    bases = [Image.fromarray(np.ascontiguousarray(p)) for p in _bases(_near_photos(), 0.25)]
    for f in fractions:
        gaps: list[tuple[int, int]] = []  # (distance, whole frames only)
        for base in bases:
            w, h = base.size
            pair = hashed(base), hashed(base.crop((round(w * f), round(h * f), w - round(w * f), h - round(h * f))))
            if pair[0] is not None and pair[1] is not None:
                wholes = perceptual_hash.halves(pair[0])[0] ^ perceptual_hash.halves(pair[1])[0]
                gaps.append((perceptual_hash.distance(pair[0], pair[1]), wholes.bit_count()))
        found = sum(1 for g, _ in gaps if g <= near_duplicates.DEFAULT_RADIUS)
        whole = sum(1 for _, g in gaps if g <= near_duplicates.DEFAULT_RADIUS)
        out[f"{f:.0%}"] = {
            "pairs": len(gaps),
            "recall": found / len(gaps),
            "median_bits": statistics.median(g for g, _ in gaps),
            "recall_whole_only": whole / len(gaps),
            "median_bits_whole_only": statistics.median(g for _, g in gaps),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one accuracy corpus per seed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--distinct", type=int, default=2000, help="mosaic JPEGs, no near-copies (0: no such run)")
    parser.add_argument("--large", type=int, default=200, help="phone-size photos for a third cost run (0: none)")
    parser.add_argument("--scale", type=int, default=1_300_000)
    parser.add_argument("--work", default="/tmp/bench_near")
    parser.add_argument("--skip", nargs="*", default=[], choices=["accuracy", "even_crops", "cost", "scale"])
    parser.add_argument("--baseline-src", help="a src/ folder of the code before hashing ('before' runs)")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"bench": "near_duplicates"}
    if "accuracy" not in args.skip:
        result["accuracy"] = _accuracy_over_seeds(work / "near", args.copies, args.seeds)
    if "even_crops" not in args.skip:
        result["even_crops"] = _even_crops()
    if "cost" not in args.skip:
        small = build_corpus(str(work / "corpus"), args.images)
        result["convert_cost"] = _convert_cost(work, small, args.rounds, args.baseline_src)
        if args.distinct:
            distinct = build_distinct_corpus(str(work / "distinct"), args.distinct)
            result["convert_cost_distinct"] = _convert_cost(work, distinct, args.rounds, args.baseline_src)
        if args.large:
            large = build_large_corpus(str(work / "large"), args.large)
            result["convert_cost_large"] = _convert_cost(work, large, args.rounds, args.baseline_src)
    if "scale" not in args.skip:
        result["scale"] = [_scale(args.scale, r, halves=h) for h in (1, 2) for r in (3, near_duplicates.DEFAULT_RADIUS)]
    emit(result, args.json)


if __name__ == "__main__":
    main()
