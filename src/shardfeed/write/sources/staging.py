"""Images that live inside container files (Parquet, Arrow, tar), extracted once into local files
that the conversion reads each image back from by its span, or, where the container keeps each
image's bytes as they are (an uncompressed tar, an Arrow stream, Parquet with uncompressed PLAIN
image pages), read in place from their spans (`in_place_discovery`).

Converting shuffles records across shards, so images are read in a seeded random order; read
straight from a compressed Parquet row group or a compressed tar, each image would cost a whole
row group or a seek from the tar's start. Instead the containers are streamed once, in order (one
row group or tar member in memory at a time), and every image is appended to a file, read back
later from its span there (a file per image cost 4,000 file creations for 4,000 images, 0.4-2.6 s
of a 3.8 s conversion here). Local containers are streamed by worker processes, several at once
(a tar, or a run of a Parquet file's row groups, each into a file of its own: `Writer.note`);
otherwise one process appends to images.bin (`Writer.put`):

    $XDG_CACHE_HOME/shardfeed/staged/<id>/images.bin   id: a hash of the containers' paths, sizes
                                                       and modification times
    .../<id>/images-00000.bin, ...                     what each worker's task staged
    .../<id>/listing.json                              what was found: keys, labels, splits, skips,
                                                       each staged image's span

An extraction is written under `<id>.partial-<pid>` and renamed when complete, so a killed one is
never taken for whole; a re-run (a resume after a kill, or a finished conversion run again)
reuses a complete one. The conversion removes it when it has finished (`Staged.remove`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio, layout
from shardfeed.format.annotations import SourceObjects
from shardfeed.format.folder_lock import process_alive
from shardfeed.format.schema import CLASSIFICATION
from shardfeed.format.tasks import task_of
from shardfeed.write.items import Discovery, Item, file_item

LISTING = "listing.json"
IMAGES = "images.bin"


@dataclass
class Extracted:
    """What an extraction found: each image's (key, label, split), the rows or members it could
    not use with the reason, the class names (index = label id) and whether splits came with it."""

    images: list[tuple[str, int, str | None]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    class_names: list[str] | None = None
    presplit: bool = False
    task: str = CLASSIFICATION
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # detection: key -> its SourceObjects' fields
    # key -> (container, offset, size): read in place from the container, or (staged) from the
    # staging folder's images file (the container then named relative to the folder)
    spans: dict[str, tuple[str, int, int]] = field(default_factory=dict)


class Staged:
    """The staging folder of one set of containers (see the module docstring)."""

    def __init__(self, containers: list[str]) -> None:
        identity = hashlib.sha256()
        for path in containers:
            size, mtime = fileio.size_and_mtime(path)
            identity.update(f"{fileio.absolute(path)}\0{size}\0{mtime}\n".encode())
        self.folder = os.path.join(layout.user_cache("staged"), identity.hexdigest()[:24])

    def extracted(self, extract: Callable[[Writer], Extracted]) -> Extracted:
        """The listing of a complete extraction, made now by `extract` unless one is here. A
        complete one stays until the conversion finishes (a re-run after a failure re-uses it);
        one that fails part-way is removed at once."""
        listing = os.path.join(self.folder, LISTING)
        if os.path.exists(listing):
            with open(listing) as f:
                data = json.load(f)
            return Extracted(
                [tuple(i) for i in data["images"]],
                [tuple(s) for s in data["skipped"]],
                data["class_names"],
                data["presplit"],
                data.get("task", CLASSIFICATION),
                data.get("objects", {}),
                {key: tuple(span) for key, span in data.get("spans", {}).items()},
            )
        self._remove_dead_partials()
        partial = f"{self.folder}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with Writer(partial) as writer:
                found = extract(writer)
            found.spans = writer.spans
            with open(os.path.join(partial, LISTING), "w") as f:
                json.dump(asdict(found), f)
        except BaseException:  # a failed extraction starts over next time: nothing of it is kept
            shutil.rmtree(partial, ignore_errors=True)
            raise
        shutil.rmtree(self.folder, ignore_errors=True)
        os.replace(partial, self.folder)
        return found

    def discovery(self, kind: str, root: str, found: Extracted) -> Discovery:
        """What a source found, as the conversion takes it: appended images read from their
        spans in this folder's images file (an earlier version's staging, a file per key, as
        files below it)."""
        if found.spans or not found.images:
            spans = {key: (os.path.join(self.folder, name), at, size) for key, (name, at, size) in found.spans.items()}
            return in_place_discovery(kind, root, dataclasses.replace(found, spans=spans), base=self.folder)
        items = [file_item(self.folder, key, label, split) for key, label, split in found.images]
        if task_of(found.task).objects:
            items = [dataclasses.replace(i, objects=SourceObjects.of_json(found.objects[i.key])) for i in items]
        return Discovery(kind, root, items, self.folder, found.class_names, found.skipped, found.presplit, found.task)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _remove_dead_partials(self) -> None:
        """Extractions left half-done by killed processes."""
        parent, name = os.path.split(self.folder)
        if not os.path.isdir(parent):
            return
        for entry in os.listdir(parent):
            pid = entry.removeprefix(name + ".partial-")
            if pid != entry and pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def part_images(index: int) -> str:
    """The images file a worker process's staging task `index` writes in the staging folder."""
    return f"images-{index:05d}.bin"


class Writer:
    """Appends extracted images to a staging folder's images file (`images`: IMAGES, or a
    worker's task's `part_images`), noting each one's span under its key (`spans`: key -> (the
    file's name in the folder, offset, size))."""

    def __init__(self, folder: str, images: str = IMAGES) -> None:
        self.folder = folder
        self.images = images
        os.makedirs(folder, exist_ok=True)
        self.spans: dict[str, tuple[str, int, int]] = {}
        self._images: BinaryIO | None = None  # opened by the first `append`

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._images is not None:
            self._images.close()

    def put(self, key: str, data: bytes) -> None:
        _check_key(key)
        self.spans[key] = self.append(data)

    def append(self, data: bytes) -> tuple[str, int, int]:
        """Appends an image to the images file: its span there (the file's name, offset, size)."""
        if self._images is None:
            self._images = open(os.path.join(self.folder, self.images), "wb")  # noqa: SIM115 (closed by __exit__)
        span = (self.images, self._images.tell(), len(data))
        self._images.write(data)
        return span

    def note(self, key: str, span: tuple[str, int, int]) -> None:
        """Lists an image another process staged in a file of this folder: (the file's name,
        offset, size)."""
        _check_key(key)
        self.spans[key] = span

    def remove(self, key: str) -> None:
        """Takes back what `put` or `note` staged under `key` (its bytes stay in the file, unread)."""
        del self.spans[key]


def _check_key(key: str) -> None:
    """Keys come from data (tar members, table rows): one that could not name a file inside the
    staging folder is a bug in its source, refused here as the last line (staged images are no
    longer files of their own, but the keys name records and reports all the same)."""
    refusal = confinement.entry_refusal(key)
    if refusal:
        raise SourceError(f"a staging key from the data was refused: {refusal}")


def in_place_discovery(kind: str, root: str, found: Extracted, base: str | None = None) -> Discovery:
    """What a source found whose images are read from their spans in files (`found.spans`): the
    containers themselves, or a staging folder's images file (`base`, that folder). An image's
    modification time is its file's: an append reads again the images of a container written
    since (staged ones always: each staging is a new file)."""
    mtimes = {container: fileio.size_and_mtime(container)[1] for container in {c for c, _, _ in found.spans.values()}}
    items = []
    for key, label, split in found.images:
        span = found.spans[key]
        objects = SourceObjects.of_json(found.objects[key]) if task_of(found.task).objects else None
        items.append(Item(key, label, split, span[2], mtime_ns=mtimes[span[0]], objects=objects, span=span))
    return Discovery(kind, root, items, base or root, found.class_names, found.skipped, found.presplit, found.task)
