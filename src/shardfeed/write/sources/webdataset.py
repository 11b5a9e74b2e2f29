"""WebDataset tar shards as a source: a .tar, a folder of them, or a brace pattern
(`data-{000000..000009}.tar`).

Samples are grouped by key as WebDataset groups them: a member's key is its path up to the
first '.' of its base name, its extension the rest (`0001.jpg`, `0001.cls` -> key `0001`).
Consecutive members with one key make a sample. The image is the first extension present of
`image_exts` (default jpg;png;jpeg;webp), the label the `label_ext` member (default cls: an
integer as text); with `label_field`, a field of the sample's `.json` instead (an integer, or a
name: names then become the classes, sorted). Class names come from `class_names` (a list, or a
file with one per line, in id order) when given, else from the ids. Tars whose names or folders start with a
split name (`train-000000.tar`, `val/000000.tar`) keep their splits.

Local uncompressed tars are read in place: listing reads each tar's member headers and labels
(seeking over the images), and each image is read later from its byte span in the tar, with no
copy on disk. Compressed tars and tars in a bucket are streamed once (one member in memory at a
time) and their images staged into files of one staging folder (write/sources/staging.py), local
ones several at once in worker processes (write/sources/tar_members.py). A sample without an image or a
label is reported with its tar and members.
"""

from __future__ import annotations

import json
import logging
import re
import warnings

from shardfeed.errors import SourceError
from shardfeed.format import fileio, image_limits, manifest, storage
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, sorted_labels
from shardfeed.write.sources import tar_members
from shardfeed.write.sources.staging import Extracted, Staged, Writer, in_place_discovery

log = logging.getLogger("shardfeed")
DEFAULT_IMAGE_EXTS = "jpg;png;jpeg;webp"
DEFAULT_LABEL_EXT = "cls"
_SPLIT_PREFIX = re.compile(r"^(?P<split>[A-Za-z]+)[-_.]")


TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz")


def _tars_and_sidecars(folder: str) -> tuple[list[str], list[str]]:
    """A folder's tar files and its other files (relative paths, sorted)."""
    files = sorted(fileio.walk_files(folder)[0])
    tars = [f for f in files if f.lower().endswith(TAR_SUFFIXES)]
    return tars, [f for f in files if not f.lower().endswith(TAR_SUFFIXES)]


def looks_like_webdataset(path: str) -> bool:
    """A .tar file or brace pattern, or a folder holding .tar shards and no images: files beside
    the tars (img2dataset's `00000.parquet` and `00000_stats.json`, a `classes.txt`, a README)
    are sidecars, not data."""
    lower = path.lower()
    if lower.endswith(TAR_SUFFIXES):
        return True
    if not fileio.isdir(path):
        return False
    tars, others = _tars_and_sidecars(path)
    return bool(tars) and not any(f.lower().endswith(manifest.IMAGE_SUFFIXES) for f in others)


def expand(pattern: str) -> list[str]:
    """The tar files a path names: a brace pattern expanded (braceexpand, as WebDataset does), a
    folder's .tar files (its other files left alone, and said so), or the file itself."""
    if "{" in pattern:
        try:
            from braceexpand import braceexpand
        except ImportError as e:
            raise SourceError("brace patterns need braceexpand: pip install 'shardfeed[webdataset]'") from e
        return list(braceexpand(pattern))
    if fileio.isdir(pattern):
        tars, others = _tars_and_sidecars(pattern)
        log.info(
            "source: WebDataset, %d tar files in %s%s",
            len(tars),
            storage.redact(pattern),
            f" (beside them, not read: {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})" if others else "",
        )
        return [fileio.join(pattern, rel) for rel in tars]
    return [pattern]


class WebDatasetSource:
    """WebDataset tar shards (see the module docstring)."""

    kind = "webdataset"

    def __init__(
        self,
        path: str,
        *,
        image_exts: str = DEFAULT_IMAGE_EXTS,
        label_ext: str = DEFAULT_LABEL_EXT,
        label_field: str | None = None,
        class_names: str | list[str] | None = None,
    ) -> None:
        self.path = path.rstrip("/")
        self.image_exts = [e.strip().lower() for e in image_exts.split(";") if e.strip()]
        self.label_ext = label_ext.lower()
        self.label_field = label_field
        self.names_file = class_names
        self.staged: Staged | None = None

    def discover(self) -> Discovery:
        tars = expand(self.path)
        missing = [t for t in tars if not fileio.exists(t)]
        if missing:
            raise SourceError(f"{len(missing)} tar shards do not exist, e.g. {storage.redact(missing[0])}")
        if all(tar_members.readable_in_place(t) for t in tars):
            try:
                found = self._extract(tars, None)
            except tar_members.NeedsStaging:  # a sparse image member: its bytes are not one span
                pass
            else:
                return in_place_discovery(self.kind, self.path, found)
        self.staged = Staged(tars)
        found = self.staged.extracted(lambda writer: self._extract(tars, writer))
        return self.staged.discovery(self.kind, self.path, found)

    def finished(self) -> None:
        if self.staged is not None:
            self.staged.remove()

    def _split_of(self, tar: str) -> str | None:
        """The split a tar's name or folder names (train-000000.tar, val/000000.tar), else None."""
        rel = tar.removeprefix(self.path).lstrip("/") if fileio.isdir(self.path) else tar.rsplit("/", 1)[-1]
        first = rel.split("/")[0] if "/" in rel else ""
        if first.lower() in SPLIT_FOLDER_NAMES:
            return first
        prefix = _SPLIT_PREFIX.match(rel.rsplit("/", 1)[-1])
        return prefix["split"] if prefix and prefix["split"].lower() in SPLIT_FOLDER_NAMES else None

    def _extract(self, tars: list[str], writer: Writer | None) -> Extracted:
        """Lists the tars' samples: images staged by `writer`, or (None) their spans noted."""
        splits = [self._split_of(t) for t in tars]
        found = Extracted(presplit=all(s is not None for s in splits))
        staged: dict[str, tuple[str, int | None]] = {}  # staged key -> (where, its image index if staged)
        raw_labels: dict[int, object] = {}  # image index -> raw label, resolved once names are known
        wanted = {*self.image_exts, self.label_ext, "json"}
        max_bytes = image_limits.max_file_bytes(image_limits.DEFAULT_MAX_PIXELS)
        in_place = frozenset(self.image_exts) if writer is None else frozenset()
        local = not any(fileio.is_remote(t) for t in tars)  # bucket tars: streamed here (not tried in forks)
        stage_in = writer.folder if writer is not None and local else None
        listed = tar_members.listings(tars, wanted, max_bytes, in_place, stage_in, frozenset(self.image_exts))
        for tar, split, samples in zip(tars, splits, listed, strict=True):
            name = tar.rsplit("/", 1)[-1]
            for sample in samples:
                where, key = f"{name}:{sample.key}", f"{split or 'all'}/{name}/{sample.key}"
                if key in staged:  # the same key twice in a tar: which label goes with which bytes?
                    earlier, index = staged[key]
                    repeated = "key repeated in the tar: its samples are never merged, none is converted"
                    if index is not None:
                        if writer is not None:
                            writer.remove(found.images[index][0])
                        found.spans.pop(found.images[index][0], None)
                        raw_labels.pop(index)
                        found.skipped.append((earlier, repeated))
                        staged[key] = (earlier, None)
                    found.skipped.append((where, repeated))
                    continue
                staged[key] = (where, self._stage(sample, where, key, split, writer, found, raw_labels))
        found.class_names = self._class_names(list(raw_labels.values()))
        ids = {n: i for i, n in enumerate(found.class_names)}
        found.images = [
            (key, raw if isinstance(raw, int) else ids[str(raw)], split)
            for index, (key, _, split) in enumerate(found.images)
            if (raw := raw_labels.get(index)) is not None
        ]
        return found

    def _stage(
        self,
        sample: tar_members.Sample,
        where: str,
        key: str,
        split: str | None,
        writer: Writer | None,
        found: Extracted,
        raw_labels: dict[int, object],
    ) -> int | None:
        """Stages the sample's image (or, without a writer, notes its span) and returns its index
        in `found.images`, or None when the sample is reported instead (a refused member, no
        image, no label)."""
        if sample.problem:
            found.skipped.append((where, sample.problem))
            return None
        image_ext = next((e for e in self.image_exts if e in sample.members or e in sample.spans), None)
        raw = self._label(sample.members, where, found)
        listed = ", ".join(sorted(n.rpartition("/")[2].split(".", 1)[1] for n in sample.names))
        if image_ext is None:
            found.skipped.append((where, f"no image member ({listed})"))
            return None
        if raw is None:
            if not any(r == where for r, _ in found.skipped):
                found.skipped.append((where, f"no .{self.label_ext} label ({listed})"))
            return None
        if writer is None:
            found.spans[f"{key}.{image_ext}"] = sample.spans[image_ext]
        elif image_ext in sample.spans:  # staged by a worker process, in a file of its own
            writer.note(f"{key}.{image_ext}", sample.spans[image_ext])
        else:
            writer.put(f"{key}.{image_ext}", sample.members[image_ext])
        raw_labels[len(found.images)] = raw
        found.images.append((f"{key}.{image_ext}", -1, split))
        return len(found.images) - 1

    def _label(self, members: dict[str, bytes], where: str, found: Extracted) -> object | None:
        """The sample's raw label (int or name), or None (reported) when it has none."""
        if self.label_field is None:
            text = members.get(self.label_ext)
            if text is None:
                return None
            try:
                return int(text.decode().strip())
            except ValueError:
                found.skipped.append((where, f".{self.label_ext} holds {text[:40]!r}, not an integer class id"))
                return None
        raw = members.get("json")
        try:
            value = json.loads(raw)[self.label_field] if raw is not None else None
        except (ValueError, KeyError, TypeError):
            value = None
        if value is None:
            found.skipped.append((where, f"no {self.label_field!r} field in its .json"))
        return value

    def _class_names(self, raw: list[object]) -> list[str]:
        """Names in id order: from the names file, else the ids or label names found."""
        if self.names_file is not None:
            names = (
                self.names_file
                if isinstance(self.names_file, list)
                else [n.strip() for n in fileio.read_bytes(self.names_file).decode().splitlines() if n.strip()]
            )
            bad = sorted({str(r) for r in raw if not (isinstance(r, int) and 0 <= r < len(names))})
            if bad:
                raise SourceError(f"labels {bad[:5]} are not ids of the {len(names)} names in {self.names_file}")
            return names
        if all(isinstance(r, int) for r in raw):
            count = max((r for r in raw if isinstance(r, int)), default=-1) + 1
            if count:
                warnings.warn(
                    f"the tars' labels are class ids 0..{count - 1} without names: the classes are named "
                    f"'0'..'{count - 1}'; --class-names (a list, or a file with one name per line) names them",
                    stacklevel=2,
                )
            return [str(i) for i in range(count)]
        return sorted_labels({str(r) for r in raw})
