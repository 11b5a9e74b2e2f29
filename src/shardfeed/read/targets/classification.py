"""Classification's target: one class id an image, which no crop or flip moves.

load             int64 [B]: the stored label less the folder's label offset (or, with a
                 mixture's `label_names`, the index of the record's class name in them: -1
                 for a name not there)
IndexedRecords   int: the same id (-1 for an unlabeled record)
grain_dataset    int32 [B]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardfeed.format.schema import CLASSIFICATION, LABEL, TEXT
from shardfeed.lazy import tensorflow
from shardfeed.read.targets.base import Placing, Targets, TfTargets

if TYPE_CHECKING:
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess


class ClassificationTargets(Targets):
    """One class id an image (module docstring)."""

    task: ClassVar[str] = CLASSIFICATION

    def features(self, schema: Schema) -> dict[str, Any]:
        tf = tensorflow()
        if schema.label_names:
            return {TEXT: tf.io.FixedLenFeature([], tf.string, default_value="")}
        if schema.label_key:
            return {schema.label_key: tf.io.FixedLenFeature([], tf.int64)}
        return {}

    def tf_targets(self, schema: Schema, options: Preprocess) -> TfTargets | None:
        if schema.label_names:
            by_name = _name_table(schema.label_names)  # built once, here
            return lambda parsed, seed: (by_name.lookup(parsed[TEXT]),)
        key, offset = schema.label_key, schema.label_offset
        if key is None:
            return None
        return lambda parsed, seed: (parsed[key] - offset,)

    def raw(self, example: dict[str, Any], offset: int, classes: int) -> Any:
        label = example.get(LABEL)
        return -1 if label is None else int(label) - offset

    def batched(self, targets: list[Any], placing: Placing) -> Any:
        return np.asarray(targets, np.int32)


def _name_table(names: tuple[str, ...]) -> Any:
    """Class name -> id in `names` (-1 for a name not there: a record of no class of the map)."""
    tf = tensorflow()
    keys, ids = tf.constant(list(names)), tf.range(len(names), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), default_value=-1)
