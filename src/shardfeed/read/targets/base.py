"""`Targets`: what a task's records hold beside the image, and how it follows its image in every
reader, written side by side for each task (the modules of this package): what `load` parses and
places in its tf.data graph, what `IndexedRecords` gives raw, and what `grain_dataset` places and
batches in NumPy, over one geometry (read/geometry.py). `TARGETS` (targets/__init__.py) is their
registry, keyed by the task's name as format/tasks.py's `TASKS` is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardfeed.read.geometry import View
from shardfeed.read.options import DecodeOptions

if TYPE_CHECKING:
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess

TfTargets = Callable[[dict[str, Any], Any], tuple[Any, ...]]  # (parsed features, seed pair) -> targets


@dataclass(frozen=True)
class Placing:
    """How `grain_dataset` places a batch's targets: `load`'s decode options, the least share of
    an object's area a crop keeps (`Augment.min_visible`; 0 without a random crop), and whether
    crowd regions are left out (training, `DecodeOptions.crowd_targets` off)."""

    decode: DecodeOptions
    min_visible: float = 0.0
    drop_crowd: bool = False


class Targets:
    """One task's targets in every reader (module docstring). The class attributes are facts
    the pipelines ask; the base's methods are a target that does not move with its image."""

    task: ClassVar[str]
    exact: ClassVar[bool] = False  # placed on the window at full resolution (no DCT scaling, no batch decode)
    whole_image: ClassVar[bool] = False  # evaluation reads the whole image, not its centre crop
    padded: ClassVar[bool] = False  # a different count per image: batches padded with -1
    stored_size: ClassVar[bool] = False  # placed with the stored image's size, parsed even for JPEGs
    images_only: ClassVar[bool] = True  # decoder='dali' (images and one class id) can read it

    def features(self, schema: Schema) -> dict[str, Any]:
        """What `load` parses of a record for its targets: key -> tf.io feature."""
        raise NotImplementedError

    def tf_targets(self, schema: Schema, options: Preprocess) -> TfTargets | None:
        """A function (a record's parsed features, its seed pair) -> its targets, placed as
        `options` places the image, in `load`'s graph; None: the records hold none (unlabeled)."""
        raise NotImplementedError

    def raw(self, example: dict[str, Any], offset: int, classes: int) -> Any:
        """A parsed record's target as `IndexedRecords` gives it, before any crop (`offset`: the
        folder's label offset; `classes`: how many it has)."""
        raise NotImplementedError

    def placed(self, target: Any, view: View, placing: Placing) -> Any:
        """A record's raw target as `view` shows its image (`grain_dataset`)."""
        return target

    def batched(self, targets: list[Any], placing: Placing) -> Any:
        """A batch's placed targets as arrays of one shape (`grain_dataset`)."""
        return np.stack(targets)
