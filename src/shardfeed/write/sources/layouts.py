"""Which layout a folder is in: the one place that recognises them, and says what it saw.

Each annotated or container layout has a test (its module's `looks_like_*`: what its reader
needs) and the files and folders that are its evidence (data.yaml, obj.names, classes.txt,
annotations/instances_*.json, _annotations.coco.json, ImageSets/Main, Annotations/ +
JPEGImages/, images/ + labels/, images/ + masks/, XMLs beside images, .tar shards, Parquet
files). Every layout whose test passes is a candidate; the one with the most evidence wins, the
order of `DETECTORS` deciding a tie (WebDataset before tables: img2dataset puts Parquet beside
its tars). A folder no layout takes is class folders (folders.py), unless it only resembles an
annotated layout (resemblance.py). `convert --dry-run` prints the layout and its evidence
(Datumaro's `detect-format` is the anchor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from shardfeed.format import fileio
from shardfeed.write.sources.coco_root import annotation_files, looks_like_coco_root
from shardfeed.write.sources.segmentation import looks_like_segmentation
from shardfeed.write.sources.tables import SAVE_TO_DISK_FILES, looks_like_table
from shardfeed.write.sources.voc_layout import BESIDE, SPLITS_DIR, looks_like_voc, voc_folders
from shardfeed.write.sources.webdataset import looks_like_webdataset
from shardfeed.write.sources.yolo import looks_like_yolo


@dataclasses.dataclass(frozen=True)
class Recognised:
    """A layout a folder is in, and the evidence seen for it (paths relative to the folder)."""

    layout: str  # its reader: 'webdataset', 'table', 'coco' (a COCO root), 'masks' (segmentation), 'voc', 'yolo'
    evidence: tuple[str, ...]


def _present(root: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `names` (files, or folders ending in '/') that exist in `root`."""
    return tuple(n for n in names if fileio.exists(fileio.join(root, n.rstrip("/"))))


def _suffixed(root: str, suffixes: tuple[str, ...], what: str) -> tuple[str, ...]:
    """'12 .tar files' where `root`'s top level holds files ending in `suffixes`; else ()."""
    count = sum(n.lower().endswith(suffixes) for n in fileio.listdir(root)) if fileio.isdir(root) else 0
    return (f"{count} {what}",) if count else ()


def _coco_root(root: str) -> tuple[str, ...]:
    files = [path[len(root.rstrip("/")) + 1 :].replace("\\", "/") for path, _, _ in annotation_files(root)]
    return tuple(files) + _present(root, ("images/",))


def _voc(root: str) -> tuple[str, ...]:
    folders = voc_folders(root)
    if folders == (BESIDE, BESIDE):
        return ("XMLs beside their images (LabelImg)", *_present(root, ("classes.txt",)))
    found = tuple(f"{name}/" for name in folders or ())
    return found + _present(root, (f"{SPLITS_DIR}/", "classes.txt"))


def _yolo(root: str) -> tuple[str, ...]:
    names = ("data.yaml", "classes.txt", "obj.names", "obj.data", "images/", "labels/")
    exported = tuple(
        f"{split}/{kind}/"
        for split in (fileio.listdir(root) if fileio.isdir(root) else [])
        for kind in ("images", "labels")
        if fileio.isdir(fileio.join(root, split, kind))
    )
    darknet = tuple(f"{n}/" for n in (fileio.listdir(root) if fileio.isdir(root) else []) if n.startswith("obj_"))
    return _present(root, names) + exported + darknet


DETECTORS: tuple[tuple[str, Callable[[str], bool], Callable[[str], tuple[str, ...]]], ...] = (
    ("webdataset", looks_like_webdataset, lambda r: _suffixed(r, (".tar", ".tar.gz", ".tgz"), ".tar shards")),
    (
        "table",
        looks_like_table,
        lambda r: _present(r, SAVE_TO_DISK_FILES) + _suffixed(r, (".parquet", ".arrow"), "tables"),
    ),
    ("coco", looks_like_coco_root, _coco_root),
    ("masks", looks_like_segmentation, lambda r: _present(r, ("images/", "masks/", "classes.txt"))),
    ("voc", looks_like_voc, _voc),
    ("yolo", looks_like_yolo, _yolo),
)


def candidates(path: str) -> list[Recognised]:
    """Every layout `path` passes the test of, the most evidence first (DETECTORS' order on a tie)."""
    found = [Recognised(name, evidence(path) or (path,)) for name, test, evidence in DETECTORS if test(path)]
    return sorted(found, key=lambda r: -len(r.evidence))


def recognise(path: str) -> Recognised | None:
    """The layout `path` is in (`candidates`' first), or None: class folders, or a file that
    another reader takes by its name (.csv, .npz, .json)."""
    found = candidates(path)
    return found[0] if found else None
