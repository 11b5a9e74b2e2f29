"""What a conversion would read, without writing anything: `convert --dry-run`.

The source is listed as `convert` lists it (its layout recognised, its annotation files parsed and
checked for shape, every refused file with its reason) and summarised: the layout, the task, the
classes, the images per split (the layout's own splits, or "to be split" by --split), the
objects listed for detection, and what was skipped. Images are not opened: a dry run of a
folder costs its listing (tars and Parquet are staged into the cache as `convert` stages them;
the output folder is not touched). Datumaro's `detect-format` is the anchor.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from shardfeed.write.items import Discovery
from shardfeed.write.sources import Source, listed
from shardfeed.write.sources.layouts import Recognised


@dataclasses.dataclass(frozen=True)
class Survey:
    """A source's listing, summarised (see the module docstring)."""

    kind: str
    task: str
    class_names: list[str] | None
    images: dict[str, int]  # split -> images ('' : not split yet: --split decides)
    objects: int | None  # detection: objects listed (before each is checked against its image)
    skipped: list[tuple[str, str]]
    evidence: tuple[str, ...] = ()  # what showed the layout (layouts.py), where a folder's layout was recognised

    def summary(self) -> str:
        """The lines `convert --dry-run` prints."""
        classes = "none" if self.class_names is None else f"{len(self.class_names)} ({_shown(self.class_names)})"
        splits = ", ".join(f"{s or 'to be split (--split)'}: {n:,}" for s, n in sorted(self.images.items()))
        lines = [
            f"layout: {self.kind} ({self.task})" + (f", seen: {', '.join(self.evidence)}" if self.evidence else ""),
            f"classes: {classes}",
            f"images: {sum(self.images.values()):,} ({splits or 'none'})",
        ]
        if self.objects is not None:
            lines.append(f"objects listed: {self.objects:,}")
        lines.append(
            f"skipped: {len(self.skipped):,}"
            + (f" (first: {self.skipped[0][0]}: {self.skipped[0][1]})" if self.skipped else "")
        )
        return "\n".join(lines) + "\nnothing written (--dry-run)"


def survey(source: Source, recognised: Recognised | None = None) -> Survey:
    """The survey of `source` (a source object: `resolve_source` makes one from a path), with the
    evidence `recognised` (layouts.recognise) saw for its layout.

    Raises:
        SourceError: what `convert` would refuse the source for (not a layout, a bad annotations
            file, a folder that only resembles one).
    """
    found: Discovery = listed(source)
    images = Counter(item.split or "" for item in found.items)
    objects = (
        sum(len(i.objects.classes) for i in found.items if i.objects is not None)
        if any(i.objects is not None for i in found.items)
        else None
    )
    evidence = recognised.evidence if recognised is not None else ()
    return Survey(found.kind, found.task, found.class_names, dict(images), objects, list(found.skipped), evidence)


def _shown(names: list[str], most: int = 8) -> str:
    """Class names for one line: the first `most`, then how many more."""
    return ", ".join(names[:most]) + (f", ... {len(names) - most} more" if len(names) > most else "")
