"""What a folder that no annotated layout matches in full looks like, so it is refused rather
than converted as class folders.

A YOLO export whose class names are missing, Roboflow's `train/images` + `train/labels`, LabelImg's
`images/` + `annotations/`, a segmentation folder whose masks are not at their images' paths: the class-folder reader
took each for classes named `images`, `labels`, `annotations`, `masks`, and reported every label
file as "not an image", exit 0. `refusal` says which layout the folder resembles and what it
lacks; the folder reader raises it before writing anything.
"""

from __future__ import annotations

from shardfeed.format import fileio

# folder names annotated layouts use, never a class of images (lower case)
ANNOTATION_FOLDERS = frozenset(
    {"images", "labels", "masks", "annotations", "jpegimages", "imagesets", "obj_train_data"}
)
ANNOTATION_SUFFIXES = (".txt", ".xml", ".json")


def refusal(root: str, class_names: list[str], files: list[str]) -> str | None:
    """Why the folder `root`, listed as `files` with `class_names` as its class folders, is not a
    class-per-folder tree of images, or None when it may be one: a class folder named as an
    annotated layout names its folders, or most of its files are annotation files."""
    named = sorted({n for n in class_names if n.lower() in ANNOTATION_FOLDERS})
    annotation_files = sum(f.lower().endswith(ANNOTATION_SUFFIXES) for f in files)
    if not named and not (annotation_files >= 10 and annotation_files * 2 >= len(files)):
        return None
    why = (
        f"its class folders would be {named}"
        if named
        else f"{annotation_files:,} of its {len(files):,} files are .txt, .xml or .json annotation files"
    )
    return (
        f"{root} is not a folder of class folders: {why}. It looks like {_resembled(root, named)}; "
        "put it in that layout (docs/convert.md lists each), or convert its images with --labels-from none"
    )


def _resembled(root: str, named: list[str]) -> str:
    """The annotated layout a folder resembles, and what it lacks, in words."""
    top = {n.lower() for n in fileio.listdir(root)} if fileio.isdir(root) else set()
    lower = {n.lower() for n in named}
    if "data.yaml" in top or {"obj.names", "obj.data"} & top:
        return (
            "a YOLO export (Ultralytics' or Roboflow's data.yaml with train/images and train/labels, or Darknet's "
            "obj.names and obj.data): shardfeed reads YOLO as images/ and labels/ (a split per first-level "
            "folder below them) with data.yaml or classes.txt at the top"
        )
    if {"images", "labels"} <= lower or {"images", "labels"} <= top:
        return "a YOLO folder (images/ and labels/) without its class names: add data.yaml (names:) or classes.txt"
    if {"images", "masks"} <= lower or {"images", "masks"} <= top:
        return (
            "a segmentation folder (images/ and masks/) whose masks are not at their images' paths: "
            "images/<path>.<ext> needs masks/<path>.png"
        )
    if {"images", "annotations"} <= lower or {"images", "annotations"} <= top:
        return (
            "LabelImg's layout (images/ and annotations/*.xml) or a COCO root: VOC XMLs are read from Annotations/ "
            "beside JPEGImages/, COCO from annotations/instances_<split>.json beside <split>/"
        )
    if lower & {"jpegimages", "annotations", "imagesets"}:
        return (
            "a Pascal VOC folder, which needs both Annotations/ and JPEGImages/ (LabelImg's: annotations/ and images/)"
        )
    return f"an annotated dataset (folders named {named or 'as none of the layouts read'})"
