"""info: what a converted folder (or other TFRecords) holds, with class counts and image stats."""

from __future__ import annotations

import io
import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardfeed.errors import OptionError, SourceError
from shardfeed.format import manifest, schema, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.format.schema import FOREIGN_KEY_NAMES, ForeignKeys
from shardfeed.format.tasks import task_of
from shardfeed.read import shardset as reader
from shardfeed.read.sampling import sample_examples
from shardfeed.write.notes import non_jpeg_note

HISTOGRAM_WIDTH = 40
CLASS_LINES = 20  # more classes than this: a summary instead of a line per class (format_info)
EXTREMES = 10  # the smallest and largest classes a summary names


def info(
    path: str | Sequence[str],
    *,
    sample: int = 1000,
    seed: int = 0,
    foreign: ForeignKeys | None = None,
    **old_keys: Any,
) -> dict[str, Any]:
    """A JSON-ready description of a dataset.

    For a converted folder: splits, shards, records, bytes, class counts, image size/format
    stats from up to `sample` records per split (picked at random through the index files, so
    nothing else is read), and the settings it was written with. For other TFRecords: files,
    record counts, the feature names and types of the first record, and label counts if
    `foreign` names a label key (less its label offset), with a note when they look 1-based.
    (`image_key=`, `label_key=`, `label_offset=` are the deprecated way to pass `foreign`.)

    Raises:
        OptionError: another keyword, or the keys passed both ways.
    """
    unknown = sorted(set(old_keys) - set(FOREIGN_KEY_NAMES))
    if unknown:
        raise OptionError(f"info() got unexpected keyword arguments {unknown}")
    keys = ForeignKeys.merged(foreign, "info", stacklevel=3, **old_keys) or ForeignKeys()
    if reader.is_converted_folder(path):
        return _ours(str(path), sample, seed)
    return _foreign(path, keys.image_key, keys.label_key, keys.label_offset or 0)


def _ours(path: str, sample: int, seed: int) -> dict[str, Any]:
    m = manifest.read(path)
    splits = {}
    for name in m.split_names:
        split = m.split(name)
        splits[name] = {
            "records": split.num_records,
            "bytes": split.num_bytes,
            "shards": len(split.shards),
            "class_counts": split.class_counts,
            "images": _image_stats(m, name, sample, seed),
        }
        if split.objects is not None:  # detection: objects per class and per COCO size
            splits[name]["objects"] = split.objects.fields()
    data, counts = m.data, m.counts
    return {
        "path": path,
        "kind": "shardfeed",
        "task": m.header.task,
        "labels": m.labels,
        "label_offset": m.label_offset,
        "num_classes": len(m.labels) if m.labels is not None else 0,
        "splits": splits,
        "records": sum(s["records"] for s in splits.values()),
        "bytes": sum(s["bytes"] for s in splits.values()),
        "settings": m.settings,
        "source": m.source,
        "schema": data.get("schema"),
        "label_range": data.get("label_range"),
        "conversions": m.conversions,
        "skipped": counts.skipped,
        "duplicate_groups": counts.duplicates,
        "dropped_duplicates": counts.dropped_duplicates,
        "near_duplicates": m.near_duplicates,
        "image_formats": data.get("image_formats"),
        "created_by": m.created_by,
        "generations": m.generations,
    }


def _image_stats(m: manifest.Manifest, split: str, sample: int, seed: int) -> dict[str, Any]:
    """Height/width/format/channel stats over a random sample of records, read by index offset."""
    heights, widths, formats, channels = [], [], Counter[str](), Counter[int]()
    together: Counter[str] = Counter()  # multi-label: pairs of classes on one image
    coverage: Counter[int] = Counter()  # segmentation: mask pixels per class id (255: ignored)
    mask_feature = task_of(m.header.task).mask_feature
    for f in sample_examples(m, split, sample, seed):
        if mask_feature is not None:
            coverage.update(_mask_pixels(f[mask_feature]))
        heights.append(int(f.get(schema.HEIGHT, 0)))
        widths.append(int(f.get(schema.WIDTH, 0)))
        formats[f.get(schema.FORMAT, b"?").decode()] += 1
        channels[int(f.get(schema.CHANNELS, 0))] += 1
        names = f.get(schema.TEXT)
        if isinstance(names, list):
            together.update(" + ".join(pair) for pair in itertools.combinations(sorted(n.decode() for n in names), 2))
    if not heights:
        return {"sampled": 0}

    def stats(values: list[int]) -> dict[str, float]:
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    return {
        "sampled": len(heights),
        "height": stats(heights),
        "width": stats(widths),
        "formats": dict(formats),
        "channels": {str(k): v for k, v in sorted(channels.items())},
        **({"classes_together": dict(together.most_common(10))} if together else {}),
        **({"mask_coverage": _coverage(coverage, m.labels or [])} if coverage else {}),
    }


def _mask_pixels(png: bytes) -> dict[int, int]:
    """Pixels of each class id in a stored mask."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as mask:
        ids, counts = np.unique(np.asarray(mask), return_counts=True)
    return {int(i): int(n) for i, n in zip(ids, counts, strict=True)}


def _coverage(pixels: Counter[int], names: list[str]) -> dict[str, float]:
    """Each class's share of the sampled masks' pixels (and 'ignored' for 255), largest first."""
    total = sum(pixels.values())
    named = {(names[i] if i < len(names) else "ignored" if i == 255 else str(i)): n for i, n in pixels.items()}
    return {k: round(n / total, 4) for k, n in sorted(named.items(), key=lambda kv: -kv[1])}


def _foreign(
    path: str | Sequence[str], image_key: str | None, label_key: str | None, label_offset: int
) -> dict[str, Any]:
    shards = reader.from_files(path)
    first = next((f for f, n in zip(shards.files, shards.counts, strict=True) if n), None)
    features: dict[str, str] = {}
    if first is not None:
        record = parse_example(next(iter(tfrecord.read_records(first, compression=shards.compression))))
        features = {k: _kind(v) for k, v in sorted(record.items())}
    labels: Counter[int] = Counter()
    if label_key:
        if label_key not in features:
            raise SourceError(f"feature {label_key!r} not in the records; they have {sorted(features)}")
        for file in shards.files:
            for blob in tfrecord.read_records(file, compression=shards.compression):
                labels.update(parse_example(blob).get(label_key, []))
    note = None
    if labels and label_offset == 0 and min(labels) >= 1:
        note = (
            f"labels run {min(labels)}..{max(labels)} and none is 0: if they are 1-based (Inception's "
            "build_image_data.py, keras_imagenet), read them with label_offset=1 (--label-offset 1)"
        )
    return {
        "label_note": note,
        "path": path if isinstance(path, str) else list(path),
        "kind": "tfrecord",
        "files": [{"file": f, "records": n} for f, n in zip(shards.files, shards.counts, strict=True)],
        "records": shards.num_records,
        "features": features,
        "image_key": image_key,
        "class_counts": {str(k - label_offset): v for k, v in sorted(labels.items())} if label_key else None,
        "label_offset": label_offset,
    }


def _kind(values: list[Any]) -> str:
    if not values:
        return "empty"
    kind = schema.type_name(values[0])
    return kind if len(values) == 1 else f"{kind}[{len(values)}]"


def format_info(data: dict[str, Any], *, all_classes: bool = False) -> str:
    """The text `shardfeed info` prints: counts, a table of splits, a class histogram per split,
    settings and what was left out (`--json` gives the same data for machines)."""
    lines = [f"{data['path']}"]
    if data["kind"] != "shardfeed":
        lines.append(f"  {_plural(len(data['files']), 'TFRecord file')}, {_plural(data['records'], 'record')}")
        lines += [f"  feature {k}: {t}" for k, t in data["features"].items()]
        if data.get("class_counts"):
            lines += _histogram(data["class_counts"], all_classes)
        if data.get("label_note"):
            lines.append(f"  note: {data['label_note']}")
        return "\n".join(lines)
    lines.append(
        f"  {_plural(data['records'], 'record')}, {data['bytes'] / 1e6:,.1f} MB, "
        f"{_plural(data['num_classes'], 'class', 'classes')} (written by {data['created_by']})"
    )
    width = max(len("split"), *(len(name) for name in data["splits"]))
    lines.append(f"  {'split':<{width}}  {'records':>10}  {'shards':>6}  {'MB':>9}")
    for name, split in data["splits"].items():
        lines.append(
            f"  {name:<{width}}  {split['records']:>10,}  {split['shards']:>6,}  {split['bytes'] / 1e6:>9,.1f}"
        )
    for name, split in data["splits"].items():
        lines += _split_details(name, split, all_classes)
    settings = data["settings"]
    shown = {k: v for k, v in settings.items() if k not in ("image", "adopt")}
    if settings.get("split_rule") == "hash":
        shown.pop("stratify", None)  # the hash rule splits each image by its key alone: nothing to stratify
    lines.append("  settings: " + ", ".join(f"{k}={_setting(v)}" for k, v in shown.items()))
    if "image" in settings:
        lines.append("  image settings: " + ", ".join(f"{k}={_setting(v)}" for k, v in settings["image"].items()))
    lines += _label_lines(data)
    if data["conversions"]:
        lines.append("  converted on write: " + ", ".join(f"{k} {v:,}" for k, v in data["conversions"].items()))
    lines.append(
        f"  skipped inputs: {data['skipped']:,}; duplicate groups: {data['duplicate_groups']:,}; "
        f"duplicates dropped: {data.get('dropped_duplicates', 0):,}"
    )
    if near := data.get("near_duplicates"):
        lines.append(
            f"  near-duplicates (within {near['radius']} bits): {near['groups']:,} groups of {near['images']:,} "
            f"images, {near['leaks']:,} across splits" + ("; each kept in one split" if "kept_together" in near else "")
        )
    note = non_jpeg_note(data.get("image_formats") or {})
    if note:
        lines.append(f"  note: {note}")
    lines += generation_lines(data.get("generations"))
    return "\n".join(lines)


def generation_lines(generations: list[dict[str, Any]] | None) -> list[str]:
    """The history of `convert --append`, a line a generation (nothing for a folder written once)."""
    if not generations:
        return []
    lines = [f"  generations: {len(generations)} (convert --append)"]
    for g in generations:
        records = ", ".join(f"{name} {n:,}" for name, n in g["records"].items())
        changed = f", {g['changed']} changed in the source" if g.get("changed") else ""
        lines.append(
            f"    g{g['generation']:04d}  {g.get('time') or 'time unknown'}  {sum(g['records'].values()):,} records "
            f"({records}) from {g['source']['num_inputs']:,} inputs, {g.get('skipped', 0)} skipped{changed}"
        )
    return lines


def _label_lines(data: dict[str, Any]) -> list[str]:
    """Where the records came from when another program wrote them, and the label base."""
    lines = []
    source, keys = data["source"], data.get("schema") or {}
    if source.get("kind") == "adopted":
        lines.append(
            f"  adopted from {_setting(source['path'])}: image in {keys.get('image_key')!r}, "
            f"label in {keys.get('label_key')!r}"
        )
    spec = task_of(data.get("task"))
    if spec.mask_feature is not None:
        lines.append(f"  task: {spec.name}, masks of class ids 0..{len(data['labels'] or []) - 1} (255: ignored)")
    elif data["labels"] is not None:
        offset = data["label_offset"]
        stored = data.get("label_range") or [offset, offset + len(data["labels"]) - 1]
        lines.append(
            f"  labels: stored {stored[0]}..{stored[1]}, label_offset {offset}: "
            f"`load` gives {stored[0] - offset}..{stored[1] - offset}"
        )
    return lines


def _class_summary(counts: dict[str, int]) -> list[str]:
    """Many classes in a few lines (ImageNet's 1,000 would be a line each)."""
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    values = [c for _, c in ranked]
    low, high = values[0], values[-1]
    ratio = f"{high / low:.1f}x" if low else "some classes empty"
    quartiles = statistics.quantiles(values, n=4)

    def named(items: list[tuple[str, int]]) -> str:
        return ", ".join(f"{name} {count:,}" for name, count in items)

    return [
        f"  {len(counts):,} classes: images per class min {low:,}, quartiles {quartiles[0]:g} / "
        f"{quartiles[1]:g} / {quartiles[2]:g}, max {high:,} (largest / smallest {ratio})",
        f"  smallest: {named(ranked[:EXTREMES])}",
        f"  largest: {named(ranked[::-1][:EXTREMES])}",
        "  (every class: --all-classes, or --json)",
    ]


def _split_details(name: str, split: dict[str, Any], all_classes: bool = False) -> list[str]:
    """A split's sampled image sizes and formats, and its class histogram."""
    lines = []
    images = split["images"]
    if images.get("sampled"):
        h, w = images["height"], images["width"]
        formats = ", ".join(f"{k} {v:,}" for k, v in images["formats"].items())
        lines.append(
            f"  {name} (sample of {images['sampled']:,}): height {h['min']}-{h['max']} px (median {h['median']:g}), "
            f"width {w['min']}-{w['max']} px (median {w['median']:g}); {formats}"
        )
    if split["class_counts"]:
        lines += ["  " + line for line in _histogram(split["class_counts"], all_classes)]
    if objects := split.get("objects"):
        total = sum(objects["instance_counts"].values())
        sizes = ", ".join(f"{k} {v:,}" for k, v in objects["box_sizes"].items())
        per_image = total / split["records"] if split["records"] else 0.0
        most = objects.get("max_objects_per_image")
        per_image_text = f"{per_image:.2f} per image" + (f", at most {most:,}" if most is not None else "")
        lines.append(
            f"  {name} objects: {total:,} ({per_image_text}; {sizes}), "
            f"{_plural(objects['images_without_objects'], 'image')} without any; per class:"
        )
        lines += ["  " + line for line in _histogram(objects["instance_counts"], all_classes)]
    if coverage := images.get("mask_coverage"):
        lines.append("  mask pixels per class (sample): " + ", ".join(f"{k} {v:.1%}" for k, v in coverage.items()))
    if together := images.get("classes_together"):
        lines.append("  classes on one image (sample): " + ", ".join(f"{k} {v:,}" for k, v in together.items()))
    return lines


def _setting(value: Any) -> str:
    """A setting as typed on the command line: {'train': 0.8, ...} as train=0.8,..."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
    return str(value)


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def _histogram(counts: dict[str, int], all_classes: bool = False) -> list[str]:
    """A line per class with a bar, or beyond CLASS_LINES classes (unless `all_classes`) a
    summary: the count distribution and the EXTREMES smallest and largest classes."""
    if not counts:
        return []
    if len(counts) > CLASS_LINES and not all_classes:
        return _class_summary(counts)
    top = max(counts.values())
    width = max(len(k) for k in counts)
    return [
        f"  {name:<{width}} {count:>8} {'#' * max(1, round(HISTOGRAM_WIDTH * count / top))}"
        for name, count in counts.items()
    ]
