"""What each task's records hold beside the image, in every reader: one `Targets` a task
(targets/base.py), `TARGETS` their registry, keyed by the task's name as format/tasks.py's
`TASKS` is. `load`, `grain_dataset` and `IndexedRecords` ask it instead of comparing task names.

    classification   targets/classification.py: one class id
    multi_label      targets/multi_label.py: a k-hot vector
    segmentation     targets/segmentation.py: a mask, cut and flipped with its image
    detection        targets/detection.py: boxes and their classes, placed with their image

Each module holds its target's tf.data placement (`load`), its NumPy placement (`grain_dataset`)
and its raw form (`IndexedRecords`) side by side, over read/geometry.py.
"""

from __future__ import annotations

from shardfeed.format.tasks import TaskSpec, task_of
from shardfeed.read.geometry import View
from shardfeed.read.targets.base import Placing, Targets
from shardfeed.read.targets.classification import ClassificationTargets
from shardfeed.read.targets.detection import DetectionTargets
from shardfeed.read.targets.multi_label import MultiLabelTargets
from shardfeed.read.targets.segmentation import SegmentationTargets

__all__ = ["TARGETS", "Placing", "Targets", "View", "targets_of"]

TARGETS: dict[str, Targets] = {
    t.task: t for t in (ClassificationTargets(), MultiLabelTargets(), SegmentationTargets(), DetectionTargets())
}


def targets_of(task: TaskSpec | str | None) -> Targets:
    """The targets of `task` (a spec, a name, or None: one class id, as a folder without a
    manifest's `task` holds).

    Raises:
        ManifestError: a task this version does not know.
    """
    return TARGETS[(task if isinstance(task, TaskSpec) else task_of(task)).name]
