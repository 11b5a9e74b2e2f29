"""The notes a conversion's summary (and `info`) adds from a manifest: the label base written,
records other readers cannot decode, near-duplicate groups."""

from __future__ import annotations

from collections import Counter
from typing import Any

from shardfeed.format import layout, manifest, schema
from shardfeed.format.tasks import task_of


def label_base_lines(m: manifest.Manifest) -> list[str]:
    """The label base written, said once: readers disagree on it (docs/interop.md has the table),
    and a reader with the other base shifts every label without an error."""
    spec = task_of(m.header.task)
    if spec.mask_feature is not None:
        return [
            f"  masks: {spec.mask_feature} holds class ids 0..{len(m.labels or []) - 1} per pixel (255: "
            "ignored), as Model Garden's segmentation decoder reads them"
        ]
    if spec.objects:
        first, boxes = m.label_offset, schema.BOX_XMIN.rsplit("/", 1)[0]
        ids = f"{schema.OBJECT_LABEL} holds class ids {first}..{first + len(m.labels or []) - 1}"
        if first == 0:
            return [
                f"  objects: {ids} (--label-offset 0): Model Garden and the OD API take 0 for the background and "
                "never learn the first class; no label_map.pbtxt written. load and train read them as they are"
            ]
        return [
            f"  objects: {ids} (0: background) with {layout.LABEL_MAP}, boxes {boxes}/* normalised, as Model "
            f"Garden's and the OD API's decoders read them; load, grain_dataset and train give models 0..K-1"
        ]
    stored = m.stored_label_range()
    if stored is None:
        return []
    if m.label_offset == 0:
        advice = "0-based, as Keras, TFDS and the Model Garden read them; for readers that expect 1..K "
        advice += "(Inception's build_image_data readers, keras_imagenet) convert with --label-offset 1"
    else:
        advice = f"class id + {m.label_offset}; shardfeed's readers subtract it (the manifest says so)"
    return [f"  labels: {m.keys.label_key or schema.LABEL} holds {stored[0]}..{stored[1]} ({advice})"]


def annotation_lines(data: dict[str, Any]) -> list[str]:
    """How many objects were skipped or clipped (report.json lists each skip with its reason)."""
    skipped, clipped = data.get("num_skipped_annotations", 0), data.get("num_clipped_boxes", 0)
    if not (skipped or clipped):
        return []
    return [f"  objects: {skipped:,} annotations skipped, {clipped:,} boxes clipped to their image (report.json)"]


def non_jpeg_note(formats: dict[str, int]) -> str | None:
    """A line for records not stored as JPEG, which JPEG-only readers (Model Garden's parser with
    its default decode_jpeg_only=True) cannot decode; None when all are JPEG."""
    others = {name: n for name, n in formats.items() if name != "JPEG"}
    if not others:
        return None
    listed = ", ".join(f"{n:,} {name}" for name, n in sorted(others.items()))
    return (
        f"{sum(others.values()):,} records are not JPEG ({listed}): readers that decode only JPEG cannot read "
        "them; convert with --format jpeg for those"
    )


def label_conflict_lines(data: dict[str, Any], dedupe: object) -> list[str]:
    """The warning for duplicate groups whose images carry different labels, or none; and what
    a `label_conflicts` rule dropped."""
    lines = []
    resolved = data.get("num_dropped_label_conflicts", 0)
    if resolved:
        rule = data.get("settings", {}).get("label_conflicts")
        lines.append(
            f"  label conflicts: {resolved} copies of an image labelled otherwise were dropped (--label-conflicts "
            f"{rule}; each with both labels in report.json `dropped_duplicates`)"
        )
    conflicts = data.get("num_label_conflicts", 0)
    if conflicts:
        kept = " --dedupe picks no label: every copy of these was kept (--label-conflicts drop|first choose);"
        lines.append(
            f"  warning: {conflicts} groups of the same image carry different labels (label conflicts, listed first "
            f"in report.json `label_conflicts` and report.html);{kept if dedupe else ''} correct their labels or "
            "remove the copies"
        )
    return lines


def near_summary(data: dict[str, Any]) -> str:
    """', N near-duplicate groups (K across splits)' from a manifest, or '' (not looked for)."""
    near = data.get("near_duplicates")
    if not near:
        return ""
    leaks = f", {near['leaks']} across splits" if near["leaks"] else ""
    together = near.get("kept_together")
    if together:
        drift = ", ".join(f"{k} {v:+d}" for k, v in together["drift"].items()) or "none"
        leaks += f"; each group kept in one split ({together['groups']} groups, split sizes off by: {drift})"
    return f", {near['groups']} near-duplicate groups of {near['images']} images{leaks}"


def nothing_written(discovery: Any, results: list[Any]) -> str:
    """Why a conversion wrote no image: its inputs' skip reasons, the commonest first."""
    skipped = list(discovery.skipped) + [s for r in results for s in r.skipped]
    reasons = Counter(why.split(":")[0] for _, why in skipped)
    listed = "; ".join(f"{n} {why}" for why, n in reasons.most_common(3))
    example = f" (e.g. {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
    return (
        f"no image could be converted from {discovery.root}: all {len(skipped)} inputs were skipped ({listed})"
        f"{example}; nothing was written as a dataset"
    )


def re_encoded(data: dict[str, Any], written: int, for_tensorflow: int) -> str:
    """How many images were re-encoded and why: every one, by the settings (resize, crop,
    format), or only those TensorFlow could not read as they were ("0 converted" read as if
    nothing had been written when the settings had re-encoded them all)."""
    image = data.get("settings", {}).get("image", {})
    words = [f"--{k.replace('_', '-')} {image[k]}" for k in ("resize", "max_size", "center_crop") if image.get(k)]
    if image.get("image_format", "keep") != "keep":
        words.append(f"--format {image['image_format']}")
    if words:
        return f"{written} re-encoded ({', '.join(words)})"
    return f"{for_tensorflow} re-encoded for TensorFlow"
