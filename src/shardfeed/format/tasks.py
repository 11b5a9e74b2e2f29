"""What each task's records are: one frozen `TaskSpec` per task, and `TASKS`, the registry.

A task is what a folder's records hold beside the image (the manifest's `task`; absent:
classification). Its facts live here once, for every stage to ask instead of comparing names:

    classification   image/class/label: one class id (and its name), ids from 0
    multi_label      image/class/label: a list of ids (and of names), ids from 0
    segmentation     image/segmentation/class/encoded: a PNG of class ids, the image's size
    detection        image/object/*: boxes, their class ids from 1 (0: the background, as
                     Model Garden and the OD API number them) and label_map.pbtxt beside

A new task is a new `TaskSpec` here (its features, its target, its label base), then its reader
and objective (docs/architecture.md, "adding a task"). `tests/test_tasks.py` counts the modules
that still compare task names, and fails when one more does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shardfeed.errors import ManifestError
from shardfeed.format import schema
from shardfeed.format.annotations import stored_objects_problem
from shardfeed.format.schema import CLASSIFICATION, DETECTION, MULTI_LABEL, SEGMENTATION

Target = Literal["id", "ids", "mask", "objects"]  # TaskSpec.target
DEFAULT_TASK = CLASSIFICATION  # a manifest without `task` holds it


@dataclass(frozen=True)
class TaskSpec:
    """One task's data facts.

    Attributes:
        name: the manifest's `task` ('detection').
        target: what an image's label is: 'id' (one class), 'ids' (several), 'mask' (a class
            per pixel), 'objects' (boxes with a class each).
        features: record key -> type of a labelled record beside the image's own keys.
        label_base: the first class id `convert` writes where `--label-offset` is not given.
        label_map: whether `convert` writes the OD API's label_map.pbtxt beside labels.txt.
        list_features: the features holding one value per label or object (TFDS Sequences).
        text_key: the feature naming the classes of a record's labels (image/class/text; a
            detection record's image/object/class/text), None where there is none.
        balance: how `ReadOptions(balance='class')` samples it: 'class' by each image's one class,
            'objects' by repeat factors of its objects' classes (LVIS'); None: not at all.
        mask_feature: the feature holding a PNG of class ids a pixel (segmentation), or None.
    """

    name: str
    target: Target
    features: Mapping[str, str]
    label_base: int = 0
    label_map: bool = False
    list_features: frozenset[str] = frozenset()
    text_key: str | None = schema.TEXT
    balance: Literal["class", "objects"] | None = None
    mask_feature: str | None = None

    @property
    def one_label(self) -> bool:
        """Whether each image has one class id in image/class/label (a renamed label key, a
        `--schema` preset, class-balanced sampling by it and a per-image label apply)."""
        return self.target == "id"

    @property
    def objects(self) -> bool:
        """Whether each image holds objects: boxes with a class each (COCO's sizes, instance
        counts, boxes drawn)."""
        return self.target == "objects"

    def record_problem(self, features: Mapping[str, list[Any]], classes: int, offset: int) -> str | None:
        """What is wrong with a stored record's labels beyond one class id (`verify`), or None:
        a multi-label record's ids not in 0..K-1, a detection record's objects
        (`annotations.stored_objects_problem`). One class id and a mask's pixels are checked by
        `verify` itself (the label map; the mask decoded)."""
        if self.target == "ids":
            ids = [int(v) - offset for v in features.get(schema.LABEL, [])]
            if not ids or not all(0 <= i < classes for i in ids):
                return f"labels {ids} are not ids in 0..{classes - 1}"
        if self.objects:
            return stored_objects_problem(features, classes, offset)
        return None

    def feature_types(self, labelled: bool, keys: schema.Schema | None = None) -> dict[str, str]:
        """The manifest's `features` entry: record key -> type (the image and label under
        `keys`' names where a preset renames them; an unlabeled folder's image only)."""
        if not self.one_label:
            return {**schema.IMAGE_TYPES, **self.features}
        types = {**schema.IMAGE_TYPES, **(self.features if labelled else {})}
        if keys is None or keys.is_ours:
            return types
        renamed = {schema.ENCODED: keys.image_key, schema.LABEL: keys.label_key or schema.LABEL}
        return dict(sorted((renamed.get(k, k), t) for k, t in types.items()))


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(CLASSIFICATION, "id", schema.LABEL_TYPES, balance="class"),
        TaskSpec(
            MULTI_LABEL,
            "ids",
            {schema.LABEL: "int64", schema.TEXT: "bytes"},
            list_features=frozenset({schema.LABEL, schema.TEXT}),
        ),
        TaskSpec(SEGMENTATION, "mask", schema.SEGMENTATION_TYPES, text_key=None, mask_feature=schema.SEGMENTATION_MASK),
        TaskSpec(
            DETECTION,
            "objects",
            schema.OBJECT_TYPES,
            label_base=1,
            label_map=True,
            list_features=frozenset({*schema.OBJECT_TYPES, *schema.MASK_TYPES} - {schema.SOURCE_ID}),
            text_key=schema.OBJECT_TEXT,
            balance="objects",
        ),
    )
}


def task_of(name: str | None) -> TaskSpec:
    """The spec of the task `name` (None: classification, as a manifest without `task` is).

    Raises:
        ManifestError: a task this version does not know.
    """
    spec = TASKS.get(name or DEFAULT_TASK)
    if spec is None:
        raise ManifestError(f"task {name!r} is not one this shardfeed knows ({', '.join(TASKS)})")
    return spec
