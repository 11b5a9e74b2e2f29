"""How well mixed the batches of a real pipeline are, next to an ideal uniform shuffle.

Buffer shuffling over shards is a local shuffle: on class-sorted data a small buffer yields
batches from two or three classes. This runs the actual `load` pipeline with the given settings,
takes the labels of its first batches, and reports classes per batch, label entropy per batch and
the longest run of one label, with the same statistics for uniformly shuffled batches of the same
labels (simulated), so a bad shuffle shows before it costs accuracy.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from typing import Any

import numpy as np

from shardfeed.errors import SourceError
from shardfeed.format import manifest
from shardfeed.read.options import BATCH_SIZE, ReadOptions


def batch_stats(batches: list[list[int]]) -> dict[str, float]:
    """Mean distinct classes per batch, mean label entropy per batch (bits), longest same-label run."""
    classes = [len(set(b)) for b in batches]
    entropies = []
    for b in batches:
        counts = np.array(list(Counter(b).values()), float)
        p = counts / counts.sum()
        entropies.append(float(-(p * np.log2(p)).sum()))
    stream = [label for b in batches for label in b]
    longest = run = 1 if stream else 0
    for previous, label in itertools.pairwise(stream):
        run = run + 1 if previous == label else 1
        longest = max(longest, run)
    return {
        "classes_per_batch": float(np.mean(classes)),
        "label_entropy_bits": float(np.mean(entropies)),
        "longest_same_label_run": float(longest),
    }


def ideal_stats(
    class_counts: dict[str, int], batch_size: int, batches: int, trials: int = 20, seed: int = 0
) -> dict[str, float]:
    """`batch_stats` averaged over uniformly random orders of the same labels."""
    labels = np.array([i for i, n in enumerate(class_counts.values()) for _ in range(n)])
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(trials):
        order = rng.permutation(labels)[: batch_size * batches]
        runs.append(batch_stats([order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]))
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def shuffle_report(
    path: str,
    *,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    batches: int = 20,
    seed: int | None = 0,
    read: ReadOptions | None = None,
) -> dict[str, Any]:
    """Runs the training pipeline as configured and compares its batches with an ideal shuffle.

    Args:
        read: the read settings to judge (shuffle, shuffle_buffer, ...); batches are always whole.
    """
    from shardfeed.read.dataset import load

    read = read or ReadOptions()
    m = manifest.read(path)
    if m.labels is None:
        raise SourceError(f"{path} is unlabeled: there is no label mix to report")
    info = m.split(split)
    batches = max(1, min(batches, info.num_records // batch_size))
    ds = load(
        path,
        split=split,
        batch_size=batch_size,
        image_size=8,
        training=True,
        seed=seed,
        augment=False,
        read=dataclasses.replace(read, drop_remainder=True),
    )
    seen = [y.numpy().tolist() for _, y in ds.take(batches)]
    pipeline = batch_stats(seen)
    ideal = ideal_stats(info.class_counts, batch_size, len(seen))
    return {
        "split": split,
        "batch_size": batch_size,
        "batches": len(seen),
        "classes": len(m.labels),
        "settings": _settings(read),
        "pipeline": pipeline,
        "ideal": ideal,
        "mix_ratio": pipeline["classes_per_batch"] / ideal["classes_per_batch"] if ideal["classes_per_batch"] else 1.0,
    }


def format_report(report: dict[str, Any]) -> str:
    p, i = report["pipeline"], report["ideal"]
    lines = [
        f"shuffle quality, first {report['batches']} batches of {report['batch_size']} "
        f"({report['classes']} classes), settings {report['settings'] or 'default'}:",
        f"  {'':28}{'pipeline':>10}{'ideal':>10}",
    ]
    for key, name in (
        ("classes_per_batch", "classes per batch"),
        ("label_entropy_bits", "label entropy (bits)"),
        ("longest_same_label_run", "longest same-label run"),
    ):
        lines.append(f"  {name:<28}{p[key]:>10.2f}{i[key]:>10.2f}")
    verdict = "good" if report["mix_ratio"] >= 0.9 else "POOR: batches are far less mixed than a uniform shuffle"
    lines.append(
        f"  mix: {report['mix_ratio']:.2f} of ideal ({verdict}; try shuffle='global' or a larger buffer)"
        if report["mix_ratio"] < 0.9
        else f"  mix: {report['mix_ratio']:.2f} of ideal ({verdict})"
    )
    return "\n".join(lines)


def _settings(read: ReadOptions) -> dict[str, Any]:
    """The shuffle in force and every read setting that differs from its default."""
    changed = {f.name: getattr(read, f.name) for f in dataclasses.fields(read) if getattr(read, f.name) != f.default}
    return {**changed, "shuffle": read.order}
