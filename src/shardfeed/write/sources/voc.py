"""Pascal VOC object detection as a source: one XML file of objects per image.

    root/Annotations/<name>.xml     <annotation><filename>, <object>s each with <name>,
                                    <bndbox> (xmin, ymin, xmax, ymax: 1-based pixel indices,
                                    both ends inside the box), <difficult>, <truncated>
    root/JPEGImages/<filename>      the images (<filename>; where it is absent or names no file,
                                    <name>.jpg, .jpeg or .png, as torchvision and mmdet read VOC)
    root/ImageSets/Main/<split>.txt optional: the names in each split (train, val, test; VOC2007's
                                    trainval.txt is train where train.txt and val.txt are not
                                    there); with them, an image in none of the lists is reported,
                                    not converted, and a listed image without an XML (VOC2012's
                                    test images) is converted as an image without objects
    (LabelImg's Pascal VOC output as its users keep it: root/annotations/ and root/images/, or
    each XML beside its image, split folders at the first level: voc_layout.py)
    root/classes.txt                optional: the class names, line i naming class id i; without
                                    it, the names the objects use, sorted (VOC's 20 classes then
                                    get TFDS' voc ids)

A box's pixel indices become the edges of the pixels it covers: xmin - 1 and ymin - 1 to xmax
and ymax (a box of VOC pixels 1..10 is 10 pixels wide: 0 to 10). `difficult` and `truncated`
are kept per object (`image/object/difficult`, `image/object/truncated`, 0/1), as the OD API's
VOC converter keeps `difficult`. `image/source_id` is a number made from the image's key
(`annotations.key_number`: VOC's names, 2007_000027, are not numbers). An XML that cannot be read, an
object without a usable name or box, or a name classes.txt lacks is reported with the reason; an
image that two XMLs name (by <filename>) is converted from neither: each XML is reported. An XML
or image reached through a link that leaves the folder is reported, not read, unless
`outside_files` (`--outside-files`).
An image in the images folder that no XML names or is named for is reported as having no
annotation file (an image without objects has an XML without <object>s, as LabelImg saves one).
An XML with a DOCTYPE is refused, in any encoding (defusedxml, after expat has decoded it): entity
declarations are not expanded from downloaded data.
"""

from __future__ import annotations

import dataclasses
import posixpath
import warnings
import xml.etree.ElementTree as ElementTree

import defusedxml
import defusedxml.ElementTree as defused

from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio
from shardfeed.format.annotations import SourceObjects, key_number
from shardfeed.format.manifest import IMAGE_SUFFIXES
from shardfeed.format.schema import DETECTION, object_attribute
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, Item, file_item, linked_out, read_class_names
from shardfeed.write.sources.segmentation import CLASSES_FILE
from shardfeed.write.sources.voc_layout import (
    ANNOTATIONS_DIR,
    BESIDE,
    IMAGES_DIR,
    SPLITS_DIR,
    SplitLists,
    looks_like_voc,
    split_lists,
    voc_folders,
)

IMAGE_EXTS = (".jpg", ".jpeg", ".png")  # JPEGImages/<id><ext>, where an XML's <filename> is wrong or absent
ATTRIBUTES = ("difficult", "truncated")
MAX_XML_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class _Parsed:
    """One XML file's image and objects (boxes as pixel edges), and the objects it could not use."""

    image: str
    names: list[str]
    boxes: list[tuple[float, float, float, float]]
    flags: dict[str, list[int]]
    numbers: list[int]
    refused: list[tuple[int, str]]


class VocSource:
    """A Pascal VOC folder (module docstring)."""

    kind = "voc"

    def __init__(self, root: str, *, outside_files: bool = False) -> None:
        self.root = root
        self.outside_files = outside_files  # read files that links place outside the folder
        self._outside = linked_out(root, outside_files)
        self.annotations_dir, self.images_dir = voc_folders(root) or (ANNOTATIONS_DIR, IMAGES_DIR)
        self._by_folder = False  # XMLs beside their images, each first-level folder a split (discover)

    def discover(self) -> Discovery:
        if not looks_like_voc(self.root):
            raise SourceError(
                f"{self.root!r} is not a Pascal VOC folder: it needs Annotations/ and JPEGImages/ (or LabelImg's "
                "annotations/ and images/, or its XMLs beside their images)"
            )
        parsed, stems, skipped = self._parsed()
        if self.annotations_dir == BESIDE:
            tops = {rel.split("/")[0] for rel in parsed if "/" in rel}
            self._by_folder = bool(tops) and tops <= SPLIT_FOLDER_NAMES and all("/" in rel for rel in parsed)
        given = fileio.exists(fileio.join(self.root, CLASSES_FILE))
        names = (
            read_class_names(fileio.join(self.root, CLASSES_FILE), self.root)
            if given
            else sorted({n for p in parsed.values() for n in p.names})
        )
        splits = split_lists(self.root) if self.annotations_dir != BESIDE else None
        items = self._annotated(parsed, names, splits, skipped)
        if splits is not None:
            items += self._unannotated(splits, stems, names, skipped)
        skipped += self._unused(items, parsed, stems, skipped)
        flags = tuple(object_attribute(a) for a in ATTRIBUTES)
        presplit = splits is not None or self._by_folder
        return Discovery(self.kind, self.root, items, self.root, names, skipped, presplit, DETECTION, flags)

    def _parsed(self) -> tuple[dict[str, _Parsed], set[str], list[tuple[str, str]]]:
        """Each usable XML's image and objects (by its path below Annotations/), the names of
        every XML file there (used or not: an image whose XML is refused is never taken for one
        without objects), and what was skipped. An XML whose <filename> does not exist names
        JPEGImages/<its own name>.jpg instead where that exists, as torchvision and mmdet read VOC
        (a warning says how many)."""
        files, refused = fileio.walk_files(fileio.join(self.root, self.annotations_dir))
        skipped = [(posixpath.join(self.annotations_dir, k), why) for k, why in refused]
        parsed: dict[str, _Parsed] = {}
        renamed: list[str] = []
        for rel in sorted(files):
            where = posixpath.join(self.annotations_dir, rel)
            if not rel.lower().endswith(".xml"):
                if self.annotations_dir != BESIDE:  # beside: the images, accounted for by _unused
                    skipped.append((where, "not an .xml annotation file"))
            elif isinstance(result := self._parse(where), str):
                skipped.append((where, result))
            else:
                own = self._image_of(self._name(rel))
                if self.annotations_dir == BESIDE:  # LabelImg's <filename>: the image's name in the XML's folder
                    result = dataclasses.replace(result, image=posixpath.join(posixpath.dirname(rel), result.image))
                if not self._exists(result.image) and own is not None:
                    renamed.append(f"{where} names {result.image!r}")
                    result = dataclasses.replace(result, image=own)
                parsed[rel] = result
        if renamed:
            warnings.warn(
                f"{len(renamed)} VOC annotation files name a <filename> that is not in {self.images_dir or '.'}/ "
                f"(first: {renamed[0]}); each was paired with the .jpg of its own name instead, as torchvision "
                "and mmdet read VOC",
                stacklevel=2,
            )
        stems = {self._name(rel) for rel in files if rel.lower().endswith(".xml")}
        return parsed, stems, skipped

    def _annotated(
        self,
        parsed: dict[str, _Parsed],
        names: list[str],
        splits: SplitLists | None,
        skipped: list[tuple[str, str]],
    ) -> list[Item]:
        """The items of the parsed XMLs, each in its split (from the lists); what cannot be used
        (an image two XMLs name, one in none of the lists, a missing image, an unknown class)
        added to `skipped`."""
        naming: dict[str, list[str]] = {}
        for rel, found in parsed.items():
            naming.setdefault(found.image, []).append(posixpath.join(self.annotations_dir, rel))
        twice = {image: xmls for image, xmls in naming.items() if len(xmls) > 1}
        skipped += [
            (
                posixpath.join(self.images_dir, image),
                f"named by {xmls}: one image, two sets of annotations; not converted",
            )
            for image, xmls in sorted(twice.items())
        ]
        items: list[Item] = []
        for rel, found in parsed.items():
            where = posixpath.join(self.annotations_dir, rel)
            if found.image in twice:  # which XML's objects are the image's cannot be told
                image = posixpath.join(self.images_dir, found.image)
                skipped.append((where, f"names {image}, as another annotation file does"))
                continue
            skipped += [(f"{where}: object {i}", why) for i, why in found.refused]
            split = splits.of.get(self._name(rel)) if splits is not None else self._folder_split(rel)
            if splits is not None and split is None:
                skipped.append((where, f"in none of {SPLITS_DIR}'s lists ({', '.join(splits.lists)}): not converted"))
                continue
            key = posixpath.join(self.images_dir, found.image)
            if not self._exists(found.image):
                skipped.append((where, f"its image {key} does not exist"))
                continue
            if refusal := self._outside(key):
                skipped.append((key, refusal))
                continue
            items.append(dataclasses.replace(file_item(self.root, key, -1, split), objects=_objects(found, names, key)))
            skipped += [
                (f"{where}: object {i}", f"class {n!r} is not in {CLASSES_FILE}")
                for i, n in zip(found.numbers, found.names, strict=True)
                if n not in names
            ]
        return items

    def _unannotated(
        self, splits: SplitLists, stems: set[str], names: list[str], skipped: list[tuple[str, str]]
    ) -> list[Item]:
        """The images a split list names that have no XML at all (VOC2012's test images): kept, as
        images without objects, in their split; a listed name with neither XML nor image is
        added to `skipped`."""
        items: list[Item] = []
        for name, split in sorted(splits.of.items()):
            if name in stems:
                continue
            image = self._image_of(name)
            if image is None:
                skipped.append(
                    (
                        f"{SPLITS_DIR}/{splits.list_naming(name)}.txt: {name}",
                        f"listed, but neither {self.annotations_dir}/{name}.xml nor {self.images_dir}/{name}.jpg "
                        "exists",
                    )
                )
                continue
            key = posixpath.join(self.images_dir, image)
            if refusal := self._outside(key):
                skipped.append((key, refusal))
                continue
            none = _Parsed(image, [], [], {a: [] for a in ATTRIBUTES}, [], [])
            items.append(dataclasses.replace(file_item(self.root, key, -1, split), objects=_objects(none, names, key)))
        return items

    def _name(self, rel: str) -> str:
        """The image name an XML at `rel` (below the annotations folder) is for: VOC's id (its
        file name), or beside its image, the path without the extension."""
        stem = posixpath.splitext(rel)[0]
        return stem if self.annotations_dir == BESIDE else posixpath.basename(stem)

    def _folder_split(self, rel: str) -> str | None:
        """XMLs beside their images in split folders (`_by_folder`): the one `rel` is in; else
        None (split by --split)."""
        return rel.split("/")[0] if self._by_folder and "/" in rel else None

    def _unused(
        self, items: list[Item], parsed: dict[str, _Parsed], stems: set[str], skipped: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """The images in the images folder that no item is, no XML names or is named for (its
        report says why), and no report names: each reported as an image without an annotation
        file (an image without objects has an XML without <object>s, as LabelImg saves one), so
        every image is accounted for."""
        images, refused = fileio.walk_files(fileio.join(self.root, self.images_dir))
        taken = {item.key for item in items} | {file for file, _ in skipped}
        taken |= {posixpath.join(self.images_dir, found.image) for found in parsed.values()}
        unused = []
        for rel in images:
            key = posixpath.join(self.images_dir, rel)
            if key in taken or self._name(rel) in stems or not rel.lower().endswith(IMAGE_SUFFIXES):
                continue
            xml = posixpath.join(self.annotations_dir, f"{self._name(rel)}.xml")
            unused.append((key, f"no annotation file ({xml} does not exist): not converted"))
        if self.images_dir != BESIDE:
            unused += [(posixpath.join(self.images_dir, k), why) for k, why in refused]
        return unused

    def _exists(self, image: str) -> bool:
        """Whether JPEGImages/`image` exists."""
        return fileio.exists(fileio.join(self.root, self.images_dir, image))

    def _image_of(self, name: str) -> str | None:
        """The file below JPEGImages/ that VOC's id `name` names (name.jpg, .jpeg or .png), or None."""
        return next((f"{name}{ext}" for ext in IMAGE_EXTS if self._exists(f"{name}{ext}")), None)

    def _parse(self, where: str) -> _Parsed | str:
        """One annotation file's image name and objects, or why it cannot be used."""
        if refusal := self._outside(where):
            return refusal
        try:
            data = fileio.read_regular(fileio.join(self.root, where), MAX_XML_BYTES)
        except fileio.UnusableFileError as e:
            return str(e)
        try:  # expat decodes first (UTF-16 too), then defusedxml refuses any DOCTYPE or entity
            root = defused.fromstring(data, forbid_dtd=True)
        except (defusedxml.DTDForbidden, defusedxml.EntitiesForbidden, defusedxml.ExternalReferenceForbidden):
            return "has a DOCTYPE: entity declarations are not expanded from downloaded data"
        except ElementTree.ParseError as e:
            return f"not readable XML: {e}"
        stem = posixpath.splitext(posixpath.basename(where))[0]
        image = (root.findtext("filename") or "").strip() or f"{stem}.jpg"
        if refusal := confinement.entry_refusal(image):  # a downloaded file names only its own folder's files
            return f"<filename> {image!r}: {refusal}"
        found = _Parsed(confinement.normalised_entry(image), [], [], {a: [] for a in ATTRIBUTES}, [], [])
        for number, element in enumerate(root.iter("object")):
            name = (element.findtext("name") or "").strip()
            box = _box(element)
            if not name or confinement.text_refusal(name):
                found.refused.append((number, f"<name> {name!r} is not a class name"))
            elif box is None:
                found.refused.append((number, "<bndbox> does not hold four numbers xmin, ymin, xmax, ymax"))
            else:
                found.names.append(name)
                found.boxes.append(box)
                found.numbers.append(number)
                for attribute in ATTRIBUTES:
                    found.flags[attribute].append(int((element.findtext(attribute) or "0").strip() in ("1", "true")))
        return found


def _box(element: ElementTree.Element) -> tuple[float, float, float, float] | None:
    """An object's <bndbox> as pixel edges (xmin - 1, ymin - 1, xmax, ymax), or None."""
    bndbox = element.find("bndbox")
    if bndbox is None:
        return None
    try:
        xmin, ymin, xmax, ymax = (float(bndbox.findtext(k) or "") for k in ("xmin", "ymin", "xmax", "ymax"))
    except ValueError:
        return None
    return (xmin - 1, ymin - 1, xmax, ymax)


def _objects(found: _Parsed, names: list[str], key: str) -> SourceObjects:
    """An image's objects whose names are classes (the others are reported by the caller)."""
    ids = {name: i for i, name in enumerate(names)}
    kept = [i for i, name in enumerate(found.names) if name in ids]
    return SourceObjects(
        boxes=tuple(found.boxes[i] for i in kept),
        classes=tuple(ids[found.names[i]] for i in kept),
        is_crowd=tuple(False for _ in kept),
        areas=tuple(None for _ in kept),
        ids=tuple(found.numbers[i] for i in kept),
        source_id=key_number(key),
        attributes=tuple((a, tuple(found.flags[a][i] for i in kept)) for a in ATTRIBUTES),
    )
