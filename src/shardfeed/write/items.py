"""What a source finds: `Item`s (one per input image) and a `Discovery` (items, classes, skips)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.format.annotations import SourceObjects
from shardfeed.format.confinement import MAX_LIST_BYTES, link_refusal, read_inside, split_refusal, text_refusal
from shardfeed.format.schema import CLASSIFICATION

# Top-level folder (or file name prefix) names that mark an already split layout.
SPLIT_FOLDER_NAMES = frozenset({"train", "training", "validation", "valid", "val", "test", "testing", "eval", "dev"})


@dataclass(frozen=True, slots=True)
class Item:
    """One input image (slotted and path-free: a 1.3M-image source keeps 1.3M of these).

    Attributes:
        key: stable, unique id: the path relative to the source's base folder, '/'-separated
            (for arrays 'file.npz:key[index]'). Stored as image/filename; seeds the ordering.
        label: class id, or -1 for unlabeled data.
        split: the split a pre-split layout put it in, else None.
        size: bytes on disk (for arrays, raw pixel bytes), used to plan shard counts.
        array_key: for array items, the array name inside the file and the row index.
        mtime_ns: the file's modification time when listed (0: not known, or an array item);
            with `size`, how an append tells an unchanged input without reading it.
        mask_key: for a segmentation source, its mask file below the same base (a PNG of class
            ids, the image's size); None otherwise.
        labels: for a multi-label source, the image's class ids (sorted, at least one; `label`
            is then -1); empty otherwise.
        objects: for a detection source, the image's annotations as listed (checked when the
            image is encoded); None otherwise.
        span: for an image read in place from inside a container file (a member of an
            uncompressed tar): (the container's path, the byte offset of the image, its size);
            None otherwise.
    """

    key: str
    label: int
    split: str | None
    size: int
    array_key: tuple[str, int] | None = None
    mtime_ns: int = 0
    mask_key: str | None = None
    labels: tuple[int, ...] = ()
    objects: SourceObjects | None = None
    span: tuple[str, int, int] | None = None


@dataclass
class Discovery:
    """What a source found."""

    kind: str
    root: str
    items: list[Item]
    base: str  # what item keys are relative to: a folder, or the array file
    class_names: list[str] | None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    presplit: bool = False
    task: str = CLASSIFICATION  # what the records hold beyond the image: TASKS
    object_features: tuple[tuple[str, str], ...] = ()  # per-object keys a detection source adds: (key, type)

    def with_safe_names(self) -> Discovery:
        """This discovery with every item whose split name comes from the data and could not be
        a file name's part (`confinement.split_refusal`: '../../x/pwnsplit' wrote a shard outside
        the output folder) moved to the skipped inputs, with the reason.

        Raises:
            SourceError: a class name holds a line break or control character: labels.txt and
                TFDS' label file hold one name a line (TFDS read 6 names for 5 classes).
        """
        for name in self.class_names or []:
            refusal = text_refusal(name)
            if refusal:
                raise SourceError(f"{self.root}: {refusal}; rename that class (labels.txt holds one name a line)")
        refused = {s: r for s in {i.split for i in self.items if i.split is not None} if (r := split_refusal(s))}
        if not refused:
            return self
        kept = [i for i in self.items if i.split not in refused]
        skipped = self.skipped + [
            (i.key, f"{refused[i.split]}: not converted") for i in self.items if i.split in refused
        ]
        return dataclasses.replace(self, items=kept, skipped=skipped)

    def fingerprint(self) -> str:
        """A hash of every item's key, size, label and split: equal inputs, equal fingerprint."""
        digest = hashlib.sha256()
        for item in self.items:
            digest.update(f"{item.key}\0{item.size}\0{item.label}\0{item.split}\n".encode())
            if item.mask_key is not None:
                digest.update(f"mask\0{item.mask_key}\n".encode())
            if item.labels:
                digest.update(f"labels\0{item.labels}\n".encode())
            if item.objects is not None:
                digest.update(f"objects\0{item.objects}\n".encode())
        for path, reason in self.skipped:
            digest.update(f"skip\0{path}\0{reason}\n".encode())
        return digest.hexdigest()


def annotation_digest(item: Item, mask: bytes | None = None) -> str | None:
    """A short hash of what an item's record holds beyond its image (its objects, its labels,
    or its mask file's bytes `mask`); None for one class id. `convert --append` compares it to
    tell annotations that changed under an unchanged image."""
    if item.objects is not None:
        text = repr(item.objects).encode()  # source_id included: from the key (or COCO's id), stable
    elif item.labels:
        text = repr(item.labels).encode()
    elif mask is not None:
        text = mask
    else:
        return None
    return hashlib.sha256(text).hexdigest()[:32]


def locate(base: str, item: Item) -> str:
    """Where an item's bytes are: its file below `base`, for array items the array file, for an
    image inside a container the container."""
    if item.span is not None:
        return item.span[0]
    return base if item.array_key is not None else fileio.join(base, item.key)


def sorted_labels(names: set[str]) -> list[str]:
    """Class names in id order: numeric when all are integers, else lexicographic."""
    if names and all(re.fullmatch(r"-?\d+", n) for n in names):
        return sorted(names, key=int)
    return sorted(names)


def read_class_names(path: str, root: str) -> list[str]:
    """The class names of a text file of one name a line (line i names class id i; blank lines
    and a BOM ignored): classes.txt of segmentation, VOC and YOLO folders, read as a file of the
    dataset in `root` (`confinement.read_inside`: inside it, a regular file, size-capped).

    Raises:
        SourceError: unreadable, outside `root`, not a regular file, too large, not UTF-8,
            empty, a name twice, or a name with a control character.
    """
    names = [line.strip() for line in read_text_inside(root, path, MAX_LIST_BYTES, "a class list").splitlines()]
    names = [name for name in names if name]
    if not names:
        raise SourceError(f"{path} names no class (one name a line: line i is class id i)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SourceError(f"{path} names {twice} twice; each class once, in id order")
    for name in names:
        if refusal := text_refusal(name):
            raise SourceError(f"{path}: {refusal}")
    return names


def read_text_inside(root: str, path: str, max_bytes: int, what: str) -> str:
    """The UTF-8 text (a BOM dropped) of a file the dataset in `root` names for its own use
    (`confinement.read_inside`); `what` names it in the size message.

    Raises:
        SourceError: the file and why it cannot be read.
    """
    try:
        return read_inside(root, path, max_bytes, f"{what} needs").decode("utf-8-sig")
    except fileio.UnusableFileError as e:
        raise SourceError(f"{path}: not read: {e}") from None
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SourceError(f"{path}: cannot be read: {e}") from None


def split_in_name(path: str) -> str | None:
    """The split an annotation file's name says it holds, as COCO names them
    (`instances_val2017.json`, `person_keypoints_train2017.json`: 'val', 'train'), else the split
    its folder is (Roboflow's `valid/_annotations.coco.json`: 'valid'), else None. A split is one
    of SPLIT_FOLDER_NAMES, ending the name's stem after '_' or '-' (its digits dropped) or naming
    the whole folder."""
    parts = path.replace("\\", "/").rstrip("/").split("/")
    found = re.search(r"(?:^|[_-])([A-Za-z]+)\d*$", parts[-1].split(".")[0])
    if found and found.group(1).lower() in SPLIT_FOLDER_NAMES:
        return found.group(1).lower()
    folder = parts[-2].lower() if len(parts) > 1 else ""
    return folder if folder in SPLIT_FOLDER_NAMES else None


def linked_out(root: str, outside_files: bool) -> Callable[[str], str | None]:
    """A check for the files a VOC, YOLO, segmentation or COCO dataset in `root` names (by a key
    relative to it: images, XMLs, label files, masks): the reason one may not be read, or None.
    A key whose path leads outside `root` through a link is refused unless `outside_files`
    (`--outside-files`); `root` itself may be a link (it is resolved once, here)."""
    if outside_files or fileio.is_remote(root):
        return lambda key: None
    real_root = os.path.realpath(root)
    return lambda key: link_refusal(real_root, fileio.join(root, key))


def file_item(base: str, key: str, label: int, split: str | None, objects: SourceObjects | None = None) -> Item:
    """The item of the file `key` below `base`, with its size and modification time as listed
    (0 and 0 when it cannot be stat'ed: reading it then says why), and its objects if any."""
    try:
        size, mtime_ns = fileio.size_and_mtime(fileio.join(base, key))
    except OSError:
        size, mtime_ns = 0, 0
    return Item(key, label, split, size, mtime_ns=mtime_ns, objects=objects)
