"""Where a Pascal VOC dataset keeps its files: which folders hold the XMLs and the images, and
ImageSets/Main's split lists. The XMLs themselves are read by voc.py.

Three layouts:

    root/Annotations/*.xml + root/JPEGImages/      VOC's own (the devkit's)
    root/annotations/*.xml + root/images/          LabelImg's output as its users lay it out
    root/**/<name>.xml beside root/**/<name>.jpg   LabelImg's default: each XML saved beside its
                                                   image; a first level of split folders
                                                   (train/, val/, ...) gives the splits
"""

from __future__ import annotations

import posixpath
from typing import NamedTuple

from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio
from shardfeed.format.manifest import IMAGE_SUFFIXES
from shardfeed.write.items import read_text_inside

ANNOTATIONS_DIR, IMAGES_DIR, SPLITS_DIR = "Annotations", "JPEGImages", "ImageSets/Main"
SPLIT_LISTS = ("train", "val", "trainval", "test")  # ImageSets/Main/<name>.txt (trainval: see split_lists)
BESIDE = ""  # the folder of the XMLs and of the images, where each XML is beside its image (the root)

# (annotations, images) folders: VOC's own, and LabelImg's Pascal VOC output as its users lay it out
LAYOUTS = ((ANNOTATIONS_DIR, IMAGES_DIR), ("annotations", "images"))


def voc_folders(path: str) -> tuple[str, str] | None:
    """The (annotations, images) folder names of a VOC folder at `path` (LAYOUTS; both BESIDE
    where its XMLs lie beside their images), or None."""
    found = next((pair for pair in LAYOUTS if all(fileio.isdir(fileio.join(path, name)) for name in pair)), None)
    if found is None and xmls_beside_images(path):
        return (BESIDE, BESIDE)
    return found


def looks_like_voc(path: str) -> bool:
    """A folder with Annotations/ and JPEGImages/, LabelImg's annotations/ and images/, or XMLs
    beside their images."""
    return voc_folders(path) is not None


def xmls_beside_images(path: str) -> bool:
    """Whether most .xml files below `path` (and at least one) lie beside an image of their
    name: LabelImg's default way of saving them. Class folders of photos have no .xml files."""
    if not fileio.isdir(path):
        return False
    files, _ = fileio.walk_files(path)
    stems = {posixpath.splitext(f)[0] for f in files if f.lower().endswith(IMAGE_SUFFIXES)}
    xmls = [posixpath.splitext(f)[0] for f in files if f.lower().endswith(".xml")]
    paired = sum(stem in stems for stem in xmls)
    return paired > 0 and paired * 2 >= len(xmls)


class SplitLists(NamedTuple):
    """ImageSets/Main's lists as read: image name -> split, and the lists read (in SPLIT_LISTS order)."""

    of: dict[str, str]
    lists: tuple[str, ...]

    def list_naming(self, name: str) -> str:
        """The list that put `name` in its split: trainval.txt for train where that was read."""
        split = self.of[name]
        return "trainval" if split == "train" and "trainval" in self.lists else split


def split_lists(root: str) -> SplitLists | None:
    """Image name -> split from ImageSets/Main's lists, or None without them: train.txt,
    val.txt and test.txt make the splits train, val and test; trainval.txt (their union, as
    VOC2007's trainval tar ships it beside test.txt) makes train where there is no train.txt
    or val.txt, and is left unread where there is.

    Raises:
        SourceError: a name listed in two of the lists read.
    """
    folder = fileio.join(root, SPLITS_DIR)
    lists = {s: fileio.join(folder, f"{s}.txt") for s in SPLIT_LISTS}
    present = {s: path for s, path in lists.items() if fileio.exists(path)}
    if "train" in present or "val" in present:
        present.pop("trainval", None)
    if not present:
        return None
    splits = SplitLists({}, tuple(present))
    for listed, path in present.items():
        split = "train" if listed == "trainval" else listed
        for line in read_text_inside(root, path, confinement.MAX_LIST_BYTES, "a split list").splitlines():
            if not (name := line.split()[0] if line.split() else ""):
                continue
            if splits.of.setdefault(name, split) != split:
                raise SourceError(
                    f"{path}: {name} is listed in {splits.list_naming(name)}.txt too; an image is in one split"
                )
    return splits
