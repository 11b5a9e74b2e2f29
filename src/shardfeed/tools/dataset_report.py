"""`shardfeed report OUT`: one self-contained HTML page about a converted folder.

Splits and per-class counts (with the imbalance stated), sample thumbnails per class with their
file names, image-size and stored-size distributions, every skipped / re-encoded / duplicate /
leaking input with its reason (and a thumbnail where the source file still decodes), and the
settings. Work is bounded whatever the dataset's size: thumbnails and size statistics come from a
random sample read through the index files, and problem lists are cut at `MAX_ROWS` (report.json
keeps them all).
"""

from __future__ import annotations

import io
import json
import os
from collections import defaultdict
from typing import Any

from shardfeed.format import confinement, fileio, image_limits, layout, manifest, schema
from shardfeed.format.tasks import task_of
from shardfeed.read.sampling import sample_examples
from shardfeed.tools import html_page as h
from shardfeed.tools.preview import annotated

DEFAULT_LIMIT = image_limits.DEFAULT_MAX_PIXELS  # for folders converted before the limit existed

SAMPLE = 600  # records read for thumbnails and size statistics
PER_CLASS = 4  # thumbnails per class
MAX_CLASSES_SHOWN = 40  # classes with thumbnails (the largest); counts cover all
MAX_ROWS = 300  # rows per problem table
MAX_PROBLEM_THUMBNAILS = 60


def dataset_report(path: str, output: str | None = None, *, seed: int = 0, extra: str = "") -> str:
    """Writes the report (default PATH/report.html) and returns its path; `extra` is more HTML
    (e.g. the shuffle-quality section, which needs TensorFlow) appended before the settings."""
    m = manifest.read(path)
    report = json.loads(fileio.read_bytes(fileio.join(path, layout.REPORT)))
    sample = _sample(m, seed)
    sections = [
        _overview(m),
        _class_counts(m),
        _objects(m),
        _samples(m, sample),
        _sizes(sample),
        _problems(report, m.source["path"], m.settings.get("image", {}).get("max_pixels", DEFAULT_LIMIT)),
        _generations(m.generations, report.get("changed", [])),
        extra,
        h.section("Settings", h.table(["setting", "value"], _settings_rows(m.settings))),
    ]
    output = output or fileio.join(path, layout.REPORT_PAGE)
    fileio.write_text_atomic(output, h.page(f"shardfeed report: {path}", [s for s in sections if s]))
    return output


def _generations(generations: list[dict[str, Any]] | None, changed: list[dict[str, str]]) -> str:
    """The history of `convert --append` and the source files whose bytes changed since."""
    if not generations:
        return ""
    rows = [
        [
            f"g{g['generation']:04d}",
            h.esc(g.get("time") or "unknown"),
            ", ".join(f"{h.esc(name)} {n:,}" for name, n in g["records"].items()),
            f"{g['source']['num_inputs']:,}",
            f"{g.get('skipped', 0):,}",
            f"{g.get('changed', 0):,}",
        ]
        for g in generations
    ]
    table = h.table(["generation", "time (UTC)", "records added", "inputs", "skipped", "changed"], rows, (3, 4, 5))
    parts = [table]
    if changed:
        note = "changed in the source since converted (their records keep the bytes converted):"
        parts.append(f"<p>{len(changed)} files {h.esc(note)}</p>")
        parts.append(h.table(["file"], [[h.esc(c["file"])] for c in changed[:100]]))
    return h.section("Generations", *parts)


def _sample(m: manifest.Manifest, seed: int) -> list[dict[str, Any]]:
    """Parsed examples picked at random across splits, in proportion to their size."""
    total = sum(m.split(s).num_records for s in m.split_names) or 1
    out = []
    for name in m.split_names:
        count = max(1, round(SAMPLE * m.split(name).num_records / total))
        for example in sample_examples(m, name, count, seed):
            example["split"] = name
            out.append(example)
    return out


def _overview(m: manifest.Manifest) -> str:
    rows = []
    for name in m.split_names:
        info = m.split(name)
        rows.append([h.esc(name), f"{info.num_records:,}", f"{len(info.shards):,}", f"{info.num_bytes / 1e6:,.1f}"])
    labels, source = m.labels, m.source
    facts = (
        f"{sum(m.split(n).num_records for n in m.split_names):,} records, "
        f"{len(labels) if labels else 'no'} classes, written by {m.created_by} from "
        f"{source['kind']} source {source['path']} ({source['num_inputs']:,} inputs)."
    )
    return h.section("Splits", f"<p>{h.esc(facts)}</p>", h.table(["split", "records", "shards", "MB"], rows, (1, 2, 3)))


def _class_counts(m: manifest.Manifest) -> str:
    if not m.labels:
        return h.section("Classes", '<p class="note">unlabeled data</p>')
    parts = []
    for name in m.split_names:
        counts = m.split(name).class_counts
        ordered = sorted(counts.items(), key=lambda kv: -kv[1])
        if not ordered:
            continue
        (most, high), (least, low) = ordered[0], ordered[-1]
        ratio = high / max(low, 1)
        verdict = "balanced" if ratio < 1.5 else ("imbalanced" if ratio < 10 else "strongly imbalanced")
        imbalance = f"{name}: most common {most} ({high:,}), least common {least} ({low:,}): {ratio:.1f}x, {verdict}"
        shown = ordered[:200]
        more = f'<p class="note">{len(ordered) - 200:,} more classes in manifest.json</p>' if len(ordered) > 200 else ""
        parts.append(
            f'<p class="imbalance">{h.esc(imbalance)}</p>'
            + h.bar_chart([k for k, _ in shown], [v for _, v in shown], unit=" images")
            + more
        )
    return h.section("Images per class", *parts)


def _objects(m: manifest.Manifest) -> str:
    """A detection folder's objects per class, by COCO size, and its images without any."""
    parts = []
    for name in m.split_names:
        objects = m.split(name).objects
        if objects is None:
            continue
        sizes = ", ".join(f"{k} {v:,}" for k, v in objects.fields()["box_sizes"].items())
        total = sum(objects.instances.values())
        facts = f"{name}: {total:,} objects ({sizes}); {objects.without_objects:,} images without any"
        ordered = sorted(objects.instances.items(), key=lambda kv: -kv[1])[:200]
        parts.append(
            f"<p>{h.esc(facts)}</p>" + h.bar_chart([k for k, _ in ordered], [v for _, v in ordered], unit=" objects")
        )
    return h.section("Objects per class", *parts) if parts else ""


def _samples(m: manifest.Manifest, sample: list[dict[str, Any]]) -> str:
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for example in sample:
        key = _class_of(example, m)
        if len(by_class[key]) < PER_CLASS:
            by_class[key].append(example)
    counts = {n: sum(m.split(s).class_counts.get(n, 0) for s in m.split_names) for n in by_class}
    shown = sorted(by_class, key=lambda n: (-counts.get(n, 0), n))[:MAX_CLASSES_SHOWN]
    parts = []
    for name in shown:
        tiles = [
            h.figure(  # with its boxes drawn or its mask tinted, as `show` draws it
                h.thumbnail(annotated(e, m).image),
                f"{e.get(schema.FILENAME, b'?').decode(errors='replace')} ({e['split']})",
            )
            for e in by_class[name]
        ]
        parts.append(f'<h3>{h.esc(name)}</h3><div class="grid">{"".join(tiles)}</div>')
    note = f"from a random sample of {len(sample):,} records read through the index files"
    if len(by_class) > len(shown):
        note += f"; the {len(shown)} largest of {len(by_class)} sampled classes shown"
    return h.section("Samples", f'<p class="note">{h.esc(note)}</p>', *parts)


def _class_of(example: dict[str, Any], m: manifest.Manifest) -> str:
    if m.labels and task_of(m.header.task).objects:  # its first object's class
        labels = example.get(schema.OBJECT_LABEL, [])
        ids: list[int] = labels if isinstance(labels, list) else [labels]
        return m.labels[int(ids[0]) - m.label_offset] if ids else "(no objects)"
    if m.labels and schema.LABEL in example:
        return schema.class_text(example, m.labels, m.label_offset)
    return "(unlabeled)"


def _sizes(sample: list[dict[str, Any]]) -> str:
    heights = [int(e.get(schema.HEIGHT, 0)) for e in sample]
    widths = [int(e.get(schema.WIDTH, 0)) for e in sample]
    stored = [len(e[schema.ENCODED]) / 1024 for e in sample]
    return h.section(
        "Image sizes (sample)",
        "<p>height (px)</p>" + h.histogram(heights, unit=" px"),
        "<p>width (px)</p>" + h.histogram(widths, unit=" px"),
        "<p>stored size (KB)</p>" + h.histogram(stored, unit=" KB"),
    )


def _problems(report: dict[str, Any], source: str, max_pixels: int | None) -> str:
    thumbs = [0]

    def thumb(key: str) -> str:
        if thumbs[0] >= MAX_PROBLEM_THUMBNAILS or fileio.is_remote(source):
            return ""
        # report.json may be edited: draw only files inside the source (names checked, links resolved)
        if confinement.entry_refusal(key) or not confinement.inside(source, os.path.join(source, key)):
            return '<span class="note">outside the source folder, not drawn</span>'
        thumbs[0] += 1
        try:  # the file may be hostile: read and decode it under the conversion's limits
            from PIL import Image

            data = fileio.read_regular(os.path.join(source, key), image_limits.max_file_bytes(max_pixels))
            if image_limits.refusal(data, max_pixels):
                return '<span class="note">too large to draw</span>'
            with Image.open(io.BytesIO(data)) as im:
                return h.thumbnail(im)
        except Exception:  # an unreadable input is exactly what this table lists
            return '<span class="note">does not decode</span>'

    tables = [_conflict_table(report.get("label_conflicts", []), thumb)]
    if "skipped_annotations" in report:  # objects were skipped (a folder of objects)
        rows = [(r["file"], f"annotation {r['annotation']}: {r['reason']}") for r in report["skipped_annotations"]]
        tables.append(_problem_table("Annotations skipped (their images are stored without them)", rows, thumb))
    for title, rows in (
        ("Skipped (not in any shard)", [(r["file"], r["reason"]) for r in report.get("skipped", [])]),
        ("Re-encoded on write", [(r["file"], r["reason"]) for r in report.get("converted", [])]),
        ("Kept with a warning", [(r["file"], r["warning"]) for r in report.get("warnings", [])]),
        (
            "Duplicates dropped",
            [(r["file"], f"copy of {r['duplicate_of']}") for r in report.get("dropped_duplicates", ())],
        ),
    ):
        tables.append(_problem_table(title, rows, thumb))
    groups = report.get("duplicates", [])
    rows = [(", ".join(g["files"]), "LEAK: copies in different splits" if g["leak"] else "same split") for g in groups]
    tables.append(_problem_table(f"Duplicate groups ({sum(1 for g in groups if g.get('leak'))} leaking)", rows, None))
    if "near_duplicates" in report:
        tables.append(_near_table(report["near_duplicates"], thumb))
    return h.section("Inputs not stored as they came", *tables)


def _conflict_table(conflicts: list[dict[str, Any]], thumb: Any) -> str:
    """Groups of one image under different labels, first of the problems: each copy drawn with
    its file name and the label it carries."""
    title = "Label conflicts (the same image under different labels)"
    if not conflicts:
        return f"<h3>{h.esc(title)}: none</h3>"
    body = [
        [
            " ".join(h.figure(thumb(f), f"{f}: {label}") for f, label in zip(c["files"], c["labels"], strict=True)),
            h.esc("exact copies" if c["kind"] == "exact" else "near-duplicates"),
        ]
        for c in conflicts[:MAX_ROWS]
    ]
    more = f'<p class="note">{len(conflicts) - MAX_ROWS:,} more in report.json</p>' if len(conflicts) > MAX_ROWS else ""
    return f'<h3 class="warn">{h.esc(title)}: {len(conflicts):,}</h3>' + h.table(["images", "kind"], body) + more


def _near_table(groups: list[dict[str, Any]], thumb: Any) -> str:
    """Near-duplicate groups, those spanning splits first: their images side by side, each with
    its file name, and the group's splits and largest distance."""
    title = f"Near-duplicate groups ({sum(1 for g in groups if g['leak'])} spanning splits)"
    if not groups:
        return f"<h3>{h.esc(title)}: none</h3>"
    shown = sorted(groups, key=lambda g: (not g["leak"], g["files"]))[:MAX_ROWS]
    body = [
        [
            " ".join(h.figure(thumb(f), f) for f in g["files"]),
            h.esc(("LEAK: " if g["leak"] else "") + ", ".join(g["splits"])),
            h.esc(f"{g['max_distance']} bits"),
        ]
        for g in shown
    ]
    more = f'<p class="note">{len(groups) - MAX_ROWS:,} more in report.json</p>' if len(groups) > MAX_ROWS else ""
    return f"<h3>{h.esc(title)}: {len(groups):,}</h3>" + h.table(["images", "splits", "largest distance"], body) + more


def _problem_table(title: str, rows: list[tuple[str, str]], thumb: Any) -> str:
    if not rows:
        return f"<h3>{h.esc(title)}: none</h3>"
    body = [[h.esc(f), h.esc(why), thumb(f) if thumb else ""] for f, why in rows[:MAX_ROWS]]
    header = ["input", "reason", "image"]
    if not any(row[2] for row in body):  # nothing drawn (a bucket's inputs, duplicate groups): no empty column
        header, body = header[:2], [row[:2] for row in body]
    more = f'<p class="note">{len(rows) - MAX_ROWS:,} more in report.json</p>' if len(rows) > MAX_ROWS else ""
    return f"<h3>{h.esc(title)}: {len(rows):,}</h3>" + h.table(header, body) + more


def _settings_rows(settings: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, value in settings.items():
        if isinstance(value, dict):
            rows += [[h.esc(f"{key}.{k}"), h.esc(v)] for k, v in value.items()]
        else:
            rows.append([h.esc(key), h.esc(value)])
    return rows
